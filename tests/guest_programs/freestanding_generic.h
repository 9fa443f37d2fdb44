/*
 * freestanding_generic.h - the system calls of the freestanding programs
 * on architectures with Linux's generic syscall table
 * (asm-generic/unistd.h: arm64, riscv64).  The architecture's
 * freestanding.h names its registers and trap first: FS_NR (the number),
 * FS_A0..FS_A5 (arguments; the result comes back in FS_A0), FS_TRAP.
 */
#ifndef FREESTANDING_GENERIC_H
#define FREESTANDING_GENERIC_H

typedef unsigned long u64;

#define SYS_exit 93
#define SYS_mmap 222

static inline long sys3(long nr, long a, long b, long c)
{
	register long n asm(FS_NR) = nr;
	register long r0 asm(FS_A0) = a;
	register long r1 asm(FS_A1) = b;
	register long r2 asm(FS_A2) = c;

	asm volatile(FS_TRAP : "+r"(r0) : "r"(n), "r"(r1), "r"(r2)
		     : "memory");
	return r0;
}

static inline long sys6(long nr, long a, long b, long c, long d, long e,
			long f)
{
	register long n asm(FS_NR) = nr;
	register long r0 asm(FS_A0) = a;
	register long r1 asm(FS_A1) = b;
	register long r2 asm(FS_A2) = c;
	register long r3 asm(FS_A3) = d;
	register long r4 asm(FS_A4) = e;
	register long r5 asm(FS_A5) = f;

	asm volatile(FS_TRAP : "+r"(r0)
		     : "r"(n), "r"(r1), "r"(r2), "r"(r3), "r"(r4), "r"(r5)
		     : "memory");
	return r0;
}

static inline __attribute__((noreturn)) void sys_exit(long code)
{
	for (;;)
		sys3(SYS_exit, code, 0, 0);
}

#include "freestanding_args.h"

#endif
