/*
 * calltree N: an ordinary -O2 C program (libc, dynamically linked) with a
 * known call tree, for comparing callchain shares with callgrind's
 * inclusive costs (tests/vm/test_callgraph.py):
 *
 *     main -> work_a -> work_b
 *     main -> work_c
 *
 * The leaves do the work: work_b about 3N loop iterations per call,
 * work_a N of its own after calling work_b, work_c 2N.  noipa keeps gcc
 * from inlining, cloning or turning a call into a jump, so the tree in
 * the binary is the tree in the source.  Built twice: calltree (gcc, no
 * frame pointers, unwind tables only: perf --call-graph dwarf) and
 * calltree-fp (clang, frame pointers in every function: perf -g).  gcc 12
 * sets up no frame in a leaf that needs no stack even with
 * -mno-omit-leaf-frame-pointer; a frame walk from work_b then starts at
 * work_a's frame and skips work_a (on hardware too).
 */
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 20

#ifdef __clang__
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

NOIPA unsigned long work_b(unsigned long n)
{
	unsigned long x = n;

	for (unsigned long i = 0; i < 3 * n; i++)
		x = (x ^ i) * 0x9e3779b1UL + (x >> 7);
	return x;
}

NOIPA unsigned long work_a(unsigned long n)
{
	unsigned long x = work_b(n);

	for (unsigned long i = 0; i < n; i++)
		x = x * 31 + i;
	return x + 1;
}

NOIPA unsigned long work_c(unsigned long n)
{
	unsigned long x = 1;

	for (unsigned long i = 0; i < 2 * n; i++)
		x += (x << 3) ^ i;
	return x;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000;
	unsigned long sum = 0;

	for (int r = 0; r < ROUNDS; r++) {
		sum += work_a(n);
		sum += work_c(n);
	}
	printf("%lu\n", sum & 0xff);
	return 0;
}
