/*
 * rand N: a dynamically linked arm64 program whose time goes into one
 * libc function: N calls of random_r(3) (exported by libc.so.6, so its
 * .dynsym names it) on a private state.  Every call takes the same path,
 * so two processes of it share their samples in random_r in proportion
 * to their N (tests/vm/test_profile.py: two processes of it map
 * libc at two ASLR addresses and must still give one row).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, acc = 0;
	static char state[128];
	struct random_data rd = { 0 };
	int32_t r;

	initstate_r(1, state, sizeof(state), &rd);
	for (long i = 0; i < n; i++) {
		random_r(&rd, &r);
		acc += r;
	}
	printf("%ld\n", acc & 1);
	return 0;
}
