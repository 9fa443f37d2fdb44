/*
 * freestanding.h - a tiny runtime for the guest test programs: no libc, so
 * the instruction stream is the same on the host (valgrind), under TCG
 * and anywhere else (libc picks code paths by CPUID, which differs).
 */
#ifndef FREESTANDING_H
#define FREESTANDING_H

typedef unsigned long u64;

#define SYS_mmap 9

static inline long sys3(long nr, long a, long b, long c)
{
	long ret;
	asm volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c)
		     : "rcx", "r11", "memory");
	return ret;
}

static inline long sys6(long nr, long a, long b, long c, long d, long e,
			long f)
{
	long ret;
	register long r10 asm("r10") = d;
	register long r8 asm("r8") = e;
	register long r9 asm("r9") = f;
	asm volatile("syscall" : "=a"(ret)
		     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
		       "r"(r9) : "rcx", "r11", "memory");
	return ret;
}

static inline __attribute__((noreturn)) void sys_exit(long code)
{
	for (;;)
		sys3(60, code, 0, 0);
}

/* _start: pass the initial stack pointer (argc, argv...) to main_sp(). */
#define FREESTANDING_START					\
	asm(".globl _start\n_start:\n\t"			\
	    "mov %rsp, %rdi\n\t"				\
	    "and $-16, %rsp\n\t"				\
	    "call main_sp\n\t"					\
	    "ud2\n");

#include "freestanding_args.h"

#endif
