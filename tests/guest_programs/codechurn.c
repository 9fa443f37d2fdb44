/*
 * codechurn N K: main calls hot() and cold() N times, like hotcold (hot()
 * retires four times the instructions of cold()), and every K-th round
 * also rewrites churn()'s code with its own bytes and calls it.  churn()
 * is 4096 straight-line blocks, each ending in a jmp, so each is a TCG
 * translation block of its own.  The rewrite makes QEMU invalidate them
 * (it watches writes to pages it translated), so every pass translates
 * them again: a few MiB of new host code per pass, which fills a small
 * code buffer (-accel tcg,tb-size=8) until QEMU flushes it, and hot() and
 * cold() get retranslated into space other code used before.  The
 * reference shares come from valgrind, never from this comment.
 */
#include "hotcold.h"

FREESTANDING_START

/* One symbol over all blocks (jmp 1f: to the next block's start).  Each
 * block's memory adds make QEMU emit a softmmu lookup per access: several
 * hundred bytes of host code per block, so the buffer fills with few
 * translations. */
asm(".text\n"
    ".globl churn\n"
    ".type churn, @function\n"
    "churn:\n"
    ".rept 4096\n\t"
    ".rept 6\n\t"
    "add %rdi, -8(%rsp)\n\t"
    ".endr\n\t"
    "jmp 1f\n"
    "1:\n"
    ".endr\n\t"
    "mov -8(%rsp), %rax\n\t"
    "ret\n"
    ".size churn, .-churn\n"
    "churn_end:\n");

u64 churn(u64 x);
extern char churn_end[];

#define PAGE 4096UL

/* Make churn()'s pages writable (a static executable: text is r-x). */
static void churn_writable(void)
{
	u64 lo = (u64)churn & ~(PAGE - 1);
	u64 hi = ((u64)churn_end + PAGE - 1) & ~(PAGE - 1);

	sys3(10, lo, hi - lo, 7);	/* mprotect rwx */
}

/* Write each of churn()'s pages with its own first byte: the code stays
 * the same, but QEMU drops the translations of those pages. */
static void churn_touch(void)
{
	for (u64 a = (u64)churn; a < (u64)churn_end; a += PAGE) {
		volatile char *p = (volatile char *)a;

		*p = *p;
	}
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), k = arg_u64(sp, 2, 100), acc = 0;

	churn_writable();
	for (u64 i = 0; i < n; i++) {
		hot(&acc);
		cold(&acc);
		if (i % k == k - 1) {
			churn_touch();
			acc += churn(i);
		}
	}
	sys_exit(acc == 42);
}
