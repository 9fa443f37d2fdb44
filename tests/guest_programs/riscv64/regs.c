/*
 * regs N: ../regs.c for riscv64 guests.  a3-a7, s2-s11 and t3-t6 (x13-x31)
 * are set to 0x100 + their number, then a loop of eight instructions runs N times,
 * six of which set a2 (x12) to their own number (li a2, 1..6; addi a0;
 * bnez).  A sample taken at `li a2, k` with the registers of that
 * instruction (just before it ran) must show x12 == k - 1 (k == 1: 6, or
 * 0 on the first iteration); at addi and bnez, x12 == 6; x13-x31 always
 * their values; a0 (x10) the iterations left.  tests/vm/test_sampling_foreign.py
 * reads the loop's addresses with nm (regs_loop, regs_end).  Built with
 * -march=rv64g (no compressed forms): every instruction is 4 bytes.
 */
#include "freestanding.h"

FREESTANDING_START

#include "../regs_main.h"

REGS_MAIN("a0",
	  "li a3, 0x10d\n\tli a4, 0x10e\n\t"
	  "li a5, 0x10f\n\tli a6, 0x110\n\t"
	  "li a7, 0x111\n\tli s2, 0x112\n\t"
	  "li s3, 0x113\n\tli s4, 0x114\n\t"
	  "li s5, 0x115\n\tli s6, 0x116\n\t"
	  "li s7, 0x117\n\tli s8, 0x118\n\t"
	  "li s9, 0x119\n\tli s10, 0x11a\n\t"
	  "li s11, 0x11b\n\tli t3, 0x11c\n\t"
	  "li t4, 0x11d\n\tli t5, 0x11e\n\t"
	  "li t6, 0x11f\n\t"
	  "li a2, 0\n"
	  ".globl regs_loop\nregs_loop:\n"
	  "1: li a2, 1\n\tli a2, 2\n\t"
	  "li a2, 3\n\tli a2, 4\n\t"
	  "li a2, 5\n\tli a2, 6\n\t"
	  "addi %0, %0, -1\n\tbnez %0, 1b\n"
	  ".globl regs_end\nregs_end:",
	  "a2", "a3", "a4", "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6",
	  "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6")
