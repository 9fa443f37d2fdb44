/*
 * forker N: fork; the child runs N iterations of a 2-instruction loop and
 * exits; the parent waits for it.  perf stat's inherited events must count
 * both processes: the reference is the sum of valgrind's Ir for both.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);
	long pid = sys3(57, 0, 0, 0);		/* fork */

	if (pid == 0) {
		if (n)
			asm volatile("1: dec %0\n\tjnz 1b" : "+r"(n));
		sys_exit(0);
	}
	if (pid < 0)
		sys_exit(1);
	sys6(61, pid, 0, 0, 0, 0, 0);		/* wait4(pid, NULL, 0, NULL) */
	sys_exit(0);
}
