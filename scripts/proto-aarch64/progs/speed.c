/* PROTOTYPE test program: the same C work for x86_64 and arm64 guests, to
 * compare plain TCG speed of the two targets on one x86_64 host.  Prints
 * the time of the work itself (CLOCK_MONOTONIC: without -icount the guest
 * clock follows the host's), so boot time does not enter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return (x > y) - (x < y);
}

static unsigned long work(void)
{
	enum { COUNT = 200000, SIEVE = 2000000 };
	static unsigned v[COUNT];
	static unsigned char composite[SIEVE];
	unsigned s = 12345, primes = 0;
	unsigned long sum = 0;

	for (int i = 0; i < COUNT; i++)
		v[i] = s = s * 1103515245u + 12345u;
	qsort(v, COUNT, sizeof v[0], cmp);
	for (int i = 0; i < COUNT; i += 97)
		sum += v[i];
	memset(composite, 0, sizeof(composite));
	for (unsigned i = 2; i < SIEVE; i++) {
		if (composite[i])
			continue;
		primes++;
		for (unsigned long j = (unsigned long)i * i; j < SIEVE; j += i)
			composite[j] = 1;
	}
	return sum + primes;
}

int main(void)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned long r = work();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("SPEED result %lu time %.3f s\n", r,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
