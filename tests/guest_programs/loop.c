/*
 * loop N: a counted loop with exactly two instructions and one branch per
 * iteration (dec; jnz).  Growing N by k adds exactly 2k instructions and k
 * branches: the analytic reference for the counting tests.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	if (n)
		asm volatile("1: dec %0\n\tjnz 1b" : "+r"(n));
	sys_exit(0);
}
