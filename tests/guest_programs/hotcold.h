/*
 * hotcold.h - hot() and cold(), the pair whose sample shares the profile
 * tests check against valgrind (hotcold.c, codechurn.c): hot() retires
 * exactly four times the instructions of cold().  Built with frame
 * pointers so perf record -g can walk from them to main.  Included by one
 * program each (the functions are global: nm and callgrind name them).
 */
#ifndef HOTCOLD_H
#define HOTCOLD_H

#include "freestanding.h"

/* Called once by each: makes hot() and cold() non-leaf, so GCC keeps
 * their frame pointer (it drops it in leaves even with
 * -fno-omit-frame-pointer) and the frame chain names their caller. */
__attribute__((noinline)) void tick(u64 *acc)
{
	asm volatile("" : : "r"(acc) : "memory");
}

__attribute__((noinline)) void cold(u64 *acc)
{
	u64 n = 400;

	tick(acc);
	asm volatile("1: add %1, %0\n\tdec %1\n\tjnz 1b"
		     : "+r"(*acc), "+r"(n));
}

/* hot()'s iterations: 4 x cold()'s; a build with -DHOT_LOOPS=3200 makes
 * hot() twice as long (tests/vm/test_profile_diff.py). */
#ifndef HOT_LOOPS
#define HOT_LOOPS 1600
#endif

__attribute__((noinline)) void hot(u64 *acc)
{
	u64 n = HOT_LOOPS;

	tick(acc);
	asm volatile("1: add %1, %0\n\tdec %1\n\tjnz 1b"
		     : "+r"(*acc), "+r"(n));
}

#endif
