/*
 * aarch64/freestanding.h - the tiny runtime of ../freestanding.h for
 * arm64 guests (Linux arm64 syscall ABI: number in x8, arguments in
 * x0-x5, svc #0, result in x0): no libc, so the instruction stream is
 * exactly the program's own.
 */
#ifndef FREESTANDING_H
#define FREESTANDING_H

typedef unsigned long u64;

#define SYS_exit 93
#define SYS_mmap 222

static inline long sys3(long nr, long a, long b, long c)
{
	register long x8 asm("x8") = nr;
	register long x0 asm("x0") = a;
	register long x1 asm("x1") = b;
	register long x2 asm("x2") = c;

	asm volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2)
		     : "memory");
	return x0;
}

static inline long sys6(long nr, long a, long b, long c, long d, long e,
			long f)
{
	register long x8 asm("x8") = nr;
	register long x0 asm("x0") = a;
	register long x1 asm("x1") = b;
	register long x2 asm("x2") = c;
	register long x3 asm("x3") = d;
	register long x4 asm("x4") = e;
	register long x5 asm("x5") = f;

	asm volatile("svc #0" : "+r"(x0)
		     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
		     : "memory");
	return x0;
}

static inline __attribute__((noreturn)) void sys_exit(long code)
{
	for (;;)
		sys3(SYS_exit, code, 0, 0);
}

/* _start: pass the initial stack pointer (argc, argv...) to main_sp();
 * the kernel leaves sp 16-byte aligned on arm64. */
#define FREESTANDING_START					\
	asm(".globl _start\n_start:\n\t"			\
	    "mov x0, sp\n\t"					\
	    "bl main_sp\n\t"					\
	    "udf #0\n");

#include "../freestanding_args.h"

#endif
