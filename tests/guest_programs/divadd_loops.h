/*
 * divadd_loops.h - divide() and add(): the same loop of five instructions
 * run 1000 times, the one with `div` (which TCG's x86_64 front end
 * implements through a helper call, helper_divq_EAX), the other with
 * `add` (inline host code).  Shared by divadd.c and helperphases.c.
 */
#ifndef DIVADD_LOOPS_H
#define DIVADD_LOOPS_H

#define LOOP(op)							\
	asm volatile("1: mov %[a], %%rax\n\t"				\
		     "xor %%edx, %%edx\n\t"				\
		     op "\n\t"						\
		     "dec %[n]\n\t"					\
		     "jnz 1b"						\
		     : [n] "+r"(n)					\
		     : [a] "r"(a), [d] "r"(d)				\
		     : "rax", "rdx", "cc")

__attribute__((noinline)) void divide(u64 a, u64 d)
{
	u64 n = 1000;

	LOOP("div %[d]");
}

__attribute__((noinline)) void add(u64 a, u64 d)
{
	u64 n = 1000;

	LOOP("add %[d], %%rax");
}

#endif
