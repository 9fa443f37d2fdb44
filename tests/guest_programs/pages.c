/*
 * pages N: map N fresh anonymous pages and write one byte to each, so the
 * guest takes N page faults whose faulting store re-executes afterwards.
 * valgrind sees none of that: its count is the architectural one.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), i;
	/* mmap(NULL, n*4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS) */
	long base = sys6(SYS_mmap, 0, (long)(n * 4096), 3, 0x22, -1, 0);
	volatile char *p = (volatile char *)base;

	if (base < 0)
		sys_exit(1);
	for (i = 0; i < n; i++)
		p[i * 4096] = 1;
	sys_exit(0);
}
