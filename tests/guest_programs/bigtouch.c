/*
 * bigtouch MIB PASSES: map MIB MiB of fresh anonymous memory and store
 * into every 4 KiB page (touch), then PASSES times read every page's
 * first word back (sum); it prints "bigtouch: touched" between the two
 * (a checkpoint's trigger).  In a guest whose RAM goes beyond 4 GiB, a few
 * GiB of it fill the guest's upper gigabytes: its page tables, its
 * pages and the kernel's buffers land there (tests/vm/test_bigmem.py).
 *
 * The user instruction count is a + MIB * (b + PASSES * c): linear in
 * MIB for a given PASSES (the loops run 256 turns per MiB), so valgrind's
 * counts at small sizes with as many digits give any size's.
 */
#include "freestanding.h"

FREESTANDING_START

#define WORDS_PER_PAGE (4096 / sizeof(u64))
#ifdef __x86_64__
#define SYS_write 1
#else
#define SYS_write 64		/* asm-generic/unistd.h */
#endif

__attribute__((noinline)) static void touch(volatile u64 *p, u64 pages)
{
	for (u64 i = 0; i < pages; i++)
		p[i * WORDS_PER_PAGE] = i;
}

__attribute__((noinline)) static u64 sum(volatile u64 *p, u64 pages)
{
	u64 s = 0;

	for (u64 i = 0; i < pages; i++)
		s += p[i * WORDS_PER_PAGE];
	return s;
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 mib = arg_u64(sp, 1, 16), passes = arg_u64(sp, 2, 1);
	u64 pages = mib * 256, s = 0;
	/* mmap(NULL, mib MiB, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS) */
	long base = sys6(SYS_mmap, 0, (long)(mib << 20), 3, 0x22, -1, 0);

	if (base < 0)
		sys_exit(1);
	touch((volatile u64 *)base, pages);
	sys3(SYS_write, 1, (long)"bigtouch: touched\n", 18);
	for (u64 k = 0; k < passes; k++)
		s += sum((volatile u64 *)base, pages);
	/* pages (pages - 1) / 2 per pass: the program checks its own reads */
	sys_exit(s == passes * (pages * (pages - 1) / 2) ? 0 : 2);
}
