/* PROTOTYPE test program: dynamically linked libc program (qsort of a
 * PRNG-filled array); prints a checksum so the work cannot be elided. */
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	enum { COUNT = 20000 };
	static unsigned v[COUNT];
	unsigned s = 12345;
	for (int i = 0; i < COUNT; i++)
		v[i] = s = s * 1103515245u + 12345u;
	qsort(v, COUNT, sizeof v[0], cmp);
	unsigned long sum = 0;
	for (int i = 0; i < COUNT; i += 97)
		sum += v[i];
	printf("%lu\n", sum);
	return 0;
}
