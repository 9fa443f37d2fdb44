/*
 * regs N: a loop of eight instructions run N times, six of which set r12
 * to their own number (mov $1..$6, %r12; dec; jnz).  A sample taken at
 * `mov $k, %r12` with the registers of that instruction (just before it
 * ran) must show r12 == k - 1 (k == 1: 6, or 0 on the first iteration);
 * at dec and jnz, r12 == 6.  tests/vm/test_sample_regs.py reads the loop's
 * addresses with nm (regs_loop, regs_end) and checks every sample.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	if (n)
		asm volatile("xor %%r12d, %%r12d\n\t"
			     ".globl regs_loop\nregs_loop:\n"
			     "1: mov $1, %%r12\n\tmov $2, %%r12\n\t"
			     "mov $3, %%r12\n\tmov $4, %%r12\n\t"
			     "mov $5, %%r12\n\tmov $6, %%r12\n\t"
			     "dec %0\n\tjnz 1b\n.globl regs_end\nregs_end:"
			     : "+r"(n) : : "r12");
	sys_exit(0);
}
