/*
 * qs N: fill N ints from xorshift64* (seed 1; shifts 12/25/27, multiplier
 * 0x2545f4914f6cdd1d, as tests/hcfuzz.py), sort them with libc's qsort()
 * and a comparison function of this program, and print a checksum of the
 * sorted array: sum of a[i] * (i + 1) modulo 2^64.
 *
 * Unlike the freestanding programs this one is an ordinary dynamically
 * linked PIE: its instructions are split between the program (fill, cmp)
 * and libc.so.6 (qsort), the libc's text is mapped at a different address
 * in every process (ASLR), and two concurrent runs share the physical
 * pages of both (tests/vm/test_multiprocess.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t state = 1;

static uint64_t xorshift64star(void)
{
	state ^= state >> 12;
	state ^= state << 25;
	state ^= state >> 27;
	return state * 0x2545f4914f6cdd1dULL;
}

static int cmp(const void *pa, const void *pb)
{
	int a = *(const int *)pa, b = *(const int *)pb;

	return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	int *a = malloc(n * sizeof(*a));
	uint64_t sum = 0;

	if (n <= 0 || !a)
		return 2;
	for (long i = 0; i < n; i++)
		a[i] = (int)(xorshift64star() >> 32);
	qsort(a, n, sizeof(*a), cmp);
	for (long i = 0; i < n; i++) {
		if (i && a[i - 1] > a[i])
			return 1;
		sum += (uint64_t)(int64_t)a[i] * (uint64_t)(i + 1);
	}
	printf("qs %ld %llu\n", n, (unsigned long long)sum);
	free(a);
	return 0;
}
