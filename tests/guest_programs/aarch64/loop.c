/*
 * loop N [STATUS]: ../loop.c for arm64 guests: a counted loop with
 * exactly two instructions and one branch per iteration (subs; b.ne),
 * then exit with STATUS (default 0), so that a test sees the guest
 * program's own status come back.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	if (n)
		asm volatile("1: subs %0, %0, #1\n\tb.ne 1b" : "+r"(n) : : "cc");
	sys_exit((long)arg_u64(sp, 2, 0));
}
