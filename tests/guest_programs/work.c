/*
 * work N: a CPU-bound mix for benchmarks: per iteration an LCG step, a
 * load and a store into a 8 KiB table, and one data-dependent branch.
 */
#include "freestanding.h"

FREESTANDING_START

static u64 table[1024];

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000000), x = 1, acc = 0, i;

	for (i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		table[(x >> 54) & 1023] += x;
		if (x & (1ULL << 40))
			acc ^= table[(x >> 20) & 1023];
	}
	sys_exit((int)(acc & 1));
}
