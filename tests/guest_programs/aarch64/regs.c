/*
 * regs N: ../regs.c for arm64 guests.  x13-x28 are set to 0x100 + their
 * number, then a loop of eight instructions runs N times, six of which
 * set x12 to their own number (mov x12, #1..#6; subs x0; b.ne).  A
 * sample taken at `mov x12, #k` with the registers of that instruction
 * (just before it ran) must show x12 == k - 1 (k == 1: 6, or 0 on the
 * first iteration); at subs and b.ne, x12 == 6; x13-x28 always their
 * values; x0 the iterations left.  tests/vm/test_sampling_foreign.py
 * reads the loop's addresses with nm (regs_loop, regs_end).
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	register u64 n asm("x0") = arg_u64(sp, 1, 1000);

	if (n)
		asm volatile(
			     "mov x13, #0x10d\n\t"
			     "mov x14, #0x10e\n\t"
			     "mov x15, #0x10f\n\t"
			     "mov x16, #0x110\n\t"
			     "mov x17, #0x111\n\t"
			     "mov x18, #0x112\n\t"
			     "mov x19, #0x113\n\t"
			     "mov x20, #0x114\n\t"
			     "mov x21, #0x115\n\t"
			     "mov x22, #0x116\n\t"
			     "mov x23, #0x117\n\t"
			     "mov x24, #0x118\n\t"
			     "mov x25, #0x119\n\t"
			     "mov x26, #0x11a\n\t"
			     "mov x27, #0x11b\n\t"
			     "mov x28, #0x11c\n\t"
			     "mov x12, #0\n"
			     ".globl regs_loop\nregs_loop:\n"
			     "1: mov x12, #1\n\tmov x12, #2\n\t"
			     "mov x12, #3\n\tmov x12, #4\n\t"
			     "mov x12, #5\n\tmov x12, #6\n\t"
			     "subs %0, %0, #1\n\tb.ne 1b\n"
			     ".globl regs_end\nregs_end:"
			     : "+r"(n) : : "cc", "x12", "x13", "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28");
	sys_exit(0);
}
