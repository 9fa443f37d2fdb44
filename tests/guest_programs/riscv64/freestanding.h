/*
 * riscv64/freestanding.h - the tiny runtime of ../freestanding.h for
 * riscv64 guests (Linux riscv64 syscall ABI: number in a7, arguments in
 * a0-a5, ecall, result in a0): no libc, so the instruction stream is
 * exactly the program's own.
 */
#ifndef FREESTANDING_H
#define FREESTANDING_H

#define FS_NR "a7"
#define FS_A0 "a0"
#define FS_A1 "a1"
#define FS_A2 "a2"
#define FS_A3 "a3"
#define FS_A4 "a4"
#define FS_A5 "a5"
#define FS_TRAP "ecall"
#include "../freestanding_generic.h"

/* _start: pass the initial stack pointer (argc, argv...) to main_sp();
 * the kernel leaves sp 16-byte aligned.  No gp: the programs are linked
 * with -mno-relax, so nothing is addressed relative to it. */
#define FREESTANDING_START					\
	asm(".globl _start\n_start:\n\t"			\
	    "mv a0, sp\n\t"					\
	    "call main_sp\n\t"					\
	    "unimp\n");

#endif
