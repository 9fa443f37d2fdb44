/*
 * hotcold N: ../hotcold.c for riscv64 guests, with instruction counts
 * known by construction: hot() and cold() are written in assembly, one
 * li, a 3-instruction loop (add, addi, bnez) run 1600 and 400 times, and
 * ret: hot() retires 1 + 3 * 1600 + 1 = 4802 instructions a call, cold()
 * 1 + 3 * 400 + 1 = 1202, so hot/(hot+cold) = 4802/6004, as on arm64
 * (tests/vm/test_profile.py).  Both loops have the same shape, so the
 * host time QEMU spends in each is in the same proportion.
 */
#include "freestanding.h"

FREESTANDING_START

#define LOOP_FN(name, trips)					\
	asm(".text\n\t.globl " #name "\n\t.type " #name ", %function\n" \
	    #name ":\n\t"					\
	    "li a1, " #trips "\n"				\
	    "1:\tadd a0, a0, a1\n\t"				\
	    "addi a1, a1, -1\n\t"				\
	    "bnez a1, 1b\n\t"					\
	    "ret\n\t"						\
	    ".size " #name ", . - " #name "\n");

#include "../hotcold_loops.h"
