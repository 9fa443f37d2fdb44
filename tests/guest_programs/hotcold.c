/*
 * hotcold N: main calls hot() and cold() N times; hot() retires exactly
 * four times the instructions of cold().  Built with frame pointers so
 * perf record -g can walk from them to main.  The reference shares come
 * from valgrind (callgrind/cachegrind per function), never from this
 * comment: the compiler decides the exact instruction streams.
 */
#include "freestanding.h"

FREESTANDING_START

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

__attribute__((noinline)) void hot(u64 *acc)
{
	u64 n = 1600;

	tick(acc);
	asm volatile("1: add %1, %0\n\tdec %1\n\tjnz 1b"
		     : "+r"(*acc), "+r"(n));
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), acc = 0;

	for (u64 i = 0; i < n; i++) {
		hot(&acc);
		cold(&acc);
	}
	sys_exit(acc == 42);
}
