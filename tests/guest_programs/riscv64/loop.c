/*
 * loop N [STATUS]: ../loop.c for riscv64 guests: a counted loop with
 * exactly two instructions and one branch per iteration (addi; bnez),
 * then exit with STATUS (default 0), so that a test sees the guest
 * program's own status come back.
 *
 * Built as the Makefile's riscv64 flags say (gcc 12.2), `loop N S`
 * retires 2N + 10d + 10e + 31 user instructions for a d-digit N > 0 and
 * an e-digit S (`loop N`: 2N + 10d + 24), counted by hand from its
 * disassembly: _start 3, argc test 3, each number's parse 8 + 10 per
 * digit, the loop's guard 1, the argc == 2 test 2, the jump to the exit
 * 1 (2 without S), the exit call 5 (ecall included).  valgrind 3.27.1
 * in the riscv64 guest (--vex-guest-chase=no) counts the same for N =
 * 1, 9, 10, 1000, 100000 and S = 5, 17; with chasing it counts 2 more
 * once N has two digits or more.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	if (n)
		asm volatile("1: addi %0, %0, -1\n\tbnez %0, 1b" : "+r"(n));
	sys_exit((long)arg_u64(sp, 2, 0));
}
