/*
 * hotcold N: main calls hot() and cold() N times; hot() retires exactly
 * four times the instructions of cold().  Built with frame pointers so
 * perf record -g can walk from them to main.  The reference shares come
 * from valgrind (callgrind/cachegrind per function), never from this
 * comment: the compiler decides the exact instruction streams.
 */
#include "hotcold.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), acc = 0;

	for (u64 i = 0; i < n; i++) {
		hot(&acc);
		cold(&acc);
	}
	sys_exit(acc == 42);
}
