/*
 * aarch64/freestanding.h - the tiny runtime of ../freestanding.h for
 * arm64 guests (Linux arm64 syscall ABI: number in x8, arguments in
 * x0-x5, svc #0, result in x0): no libc, so the instruction stream is
 * exactly the program's own.
 */
#ifndef FREESTANDING_H
#define FREESTANDING_H

#define FS_NR "x8"
#define FS_A0 "x0"
#define FS_A1 "x1"
#define FS_A2 "x2"
#define FS_A3 "x3"
#define FS_A4 "x4"
#define FS_A5 "x5"
#define FS_TRAP "svc #0"
#include "../freestanding_generic.h"

/* _start: pass the initial stack pointer (argc, argv...) to main_sp();
 * the kernel leaves sp 16-byte aligned on arm64. */
#define FREESTANDING_START					\
	asm(".globl _start\n_start:\n\t"			\
	    "mov x0, sp\n\t"					\
	    "bl main_sp\n\t"					\
	    "udf #0\n");

#endif
