/*
 * tb_replica - what pvperf's inline ops cost in riscv64 hotcold's loop
 * block, timed natively on the host (blocks.S): the block as plain TCG
 * makes it, with the counting add (perf stat), with the add and the
 * countdown check (perf record, armed), with a store of a constant
 * instead of the add, and with the check alone.  No guest, no QEMU: the
 * same host instructions in the same order, so the differences are the
 * host CPU's, free of the translation, the guest and the host's other
 * load (the thread's CPU time, best of 7).
 *
 *   gcc -O2 -no-pie -o build/tb_replica bench/tb_replica/tb_replica.c \
 *       bench/tb_replica/blocks.S && build/tb_replica [ITERATIONS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void block_fn(void *env, long iterations);
extern block_fn blk_plain, blk_count, blk_armed, blk_store, blk_check;

/* the scoreboard entry (blocks.S reads it by its absolute address) */
uint64_t score[16] __attribute__((aligned(128)));
static char env[0x2000] __attribute__((aligned(64)));

static double thread_seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		block_fn *fn;
	} v[] = {
		{ "plain", blk_plain },
		{ "count", blk_count },
		{ "armed", blk_armed },
		{ "store", blk_store },
		{ "check", blk_check },
	};
	enum { N = sizeof(v) / sizeof(v[0]) };
	long n = argc > 1 ? atol(argv[1]) : 200000000;
	double best[N];

	for (int i = 0; i < N; i++)
		best[i] = 1e9;
	for (int round = 0; round < 7; round++)
		for (int i = 0; i < N; i++) {
			double t = thread_seconds();

			v[i].fn(env + 0x100, n);
			t = thread_seconds() - t;
			if (t < best[i])
				best[i] = t;
		}
	for (int i = 0; i < N; i++)
		printf("%-6s %.3f ns a block, %.2fx plain\n", v[i].name,
		       best[i] / n * 1e9, best[i] / best[0]);
	return 0;
}
