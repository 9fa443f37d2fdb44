/*
 * tight N: one loop of exactly five instructions (add, xor, inc, dec,
 * jnz) run N times: the precise-sampling test expects its samples spread
 * evenly over those five addresses.
 */
#include "freestanding.h"

FREESTANDING_START

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), a = 0, b = 0, c = 0;

	if (n)
		asm volatile(".globl tight_loop\ntight_loop:\n"
			     "1: add %1, %2\n\txor %2, %3\n\tinc %1\n\t"
			     "dec %0\n\tjnz 1b\n.globl tight_end\ntight_end:"
			     : "+r"(n), "+r"(a), "+r"(b), "+r"(c));
	sys_exit(0);
}
