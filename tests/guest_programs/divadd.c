/*
 * divadd N: main calls divide() and add() N times each; both run the same
 * loop of five instructions 1000 times, the one with `div` (which TCG's
 * x86_64 front end implements through a helper call, helper_divq_EAX),
 * the other with `add` (inline host code).  Same guest instruction count,
 * so the translation table must show divide() costing more host time per
 * guest instruction.  The exact counts come from valgrind (callgrind
 * per function), never from this comment.
 */
#include "freestanding.h"
#include "freestanding_args.h"

FREESTANDING_START

#define LOOP(op)							\
	asm volatile("1: mov %[a], %%rax\n\t"				\
		     "xor %%edx, %%edx\n\t"				\
		     op "\n\t"						\
		     "dec %[n]\n\t"					\
		     "jnz 1b"						\
		     : [n] "+r"(n)					\
		     : [a] "r"(a), [d] "r"(d)				\
		     : "rax", "rdx", "cc")

__attribute__((noinline)) void divide(u64 a, u64 d)
{
	u64 n = 1000;

	LOOP("div %[d]");
}

__attribute__((noinline)) void add(u64 a, u64 d)
{
	u64 n = 1000;

	LOOP("add %[d], %%rax");
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	for (u64 i = 0; i < n; i++) {
		divide(1000000007 + i, 7);
		add(1000000007 + i, 7);
	}
	sys_exit(0);
}
