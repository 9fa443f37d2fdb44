/*
 * rewrite N W: calls target() N times; with W = 1, before each call it
 * stores the round number into target()'s code (the immediate of its
 * `mov $imm, %eax`) and checks that the call returns it, so the new code
 * ran: QEMU must translate target() anew each round (it watches stores to
 * pages it translated and drops the blocks they overlap).  target() is
 * one block alone in its page.  Exits 0, or 3 if a call returned stale
 * code's value.  W = 0: the same calls, no store (translated once).
 */
#include "freestanding.h"

FREESTANDING_START

asm(".text\n"
    ".p2align 12\n"
    ".globl target\n"
    ".type target, @function\n"
    "target:\n\t"
    "movl $0, %eax\n\t"		/* b8 imm32: the immediate at target + 1 */
    "ret\n"
    ".size target, .-target\n"
    ".p2align 12\n");

unsigned target(void);

#define PAGE 4096UL

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), write = arg_u64(sp, 2, 1);
	volatile unsigned *imm = (volatile unsigned *)((char *)target + 1);
	unsigned (*volatile call)(void) = target;

	sys3(10, (u64)target & ~(PAGE - 1), PAGE, 7);	/* mprotect rwx */
	for (u64 i = 1; i <= n; i++) {
		if (write)
			*imm = (unsigned)i;
		if (call() != (write ? (unsigned)i : 0))
			sys_exit(3);
	}
	sys_exit(0);
}
