/*
 * divadd N: main calls divide() and add() N times each; both run the same
 * loop of five instructions 1000 times, the one with `div` (which TCG's
 * x86_64 front end implements through a helper call, helper_divq_EAX),
 * the other with `add` (inline host code).  Same guest instruction count,
 * so the translation table must show divide() costing more host time per
 * guest instruction.  The exact counts come from valgrind (callgrind
 * per function), never from this comment.
 */
#include "freestanding.h"
#include "freestanding_args.h"

FREESTANDING_START

#include "divadd_loops.h"

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	for (u64 i = 0; i < n; i++) {
		divide(1000000007 + i, 7);
		add(1000000007 + i, 7);
	}
	sys_exit(0);
}
