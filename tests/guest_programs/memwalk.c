/*
 * memwalk MODE N: memory and branch patterns for the cache and
 * branch-predictor models, compared with cachegrind (tests/vm/test_models.py).
 *
 *   0 stream   read, then write, 4 MiB sequentially, N passes
 *   1 stride   read every 4160th byte (a page and a line) N times round
 *   2 chase    follow a random cyclic permutation of 2 MiB of pointers
 *   3 random   N * 64 K reads at LCG-chosen places in 4 MiB
 *   4 branchy  N * 64 K data-dependent branches on LCG bits
 *   5 indirect N * 64 K calls through a table, picked by LCG bits
 *   6 walk     N * 64 K reads, one per 64-byte line, round KIB KiB (the
 *              third argument, a power of two up to 4096): the same
 *              instructions whatever KIB, so only the misses differ
 *   7 trips    N * 64 K runs of an inner loop of T trips (the third
 *              argument): its branch is taken T - 1 times, then not; a
 *              pattern a predictor learns if its history reaches back T
 *
 * Freestanding and built without vectorisation or string instructions
 * (see the Makefile), so every access is an ordinary 1..8-byte load or
 * store that valgrind and QEMU both see once.
 */
#include "freestanding.h"

FREESTANDING_START

#define WORDS (1ul << 19)		/* 4 MiB of u64 */

static u64 buf[WORDS];
static u64 lcg = 12345;

static inline u64 next(void)
{
	lcg = lcg * 6364136223846793005ul + 1442695040888963407ul;
	return lcg >> 17;
}

static u64 stream(u64 n)
{
	u64 acc = 0;

	for (u64 p = 0; p < n; p++) {
		for (u64 i = 0; i < WORDS; i++)
			acc += buf[i];
		for (u64 i = 0; i < WORDS; i++)
			buf[i] = acc + i;
	}
	return acc;
}

static u64 stride(u64 n)
{
	const unsigned char *b = (const unsigned char *)buf;
	u64 acc = 0;

	for (u64 p = 0; p < n; p++)
		for (u64 off = 0; off < WORDS * 8; off += 4160)
			acc += b[off];
	return acc;
}

static u64 chase(u64 n)
{
	const u64 words = WORDS / 2;
	u64 i, at = 0;

	/* Sattolo's algorithm: one cycle through every slot. */
	for (i = 0; i < words; i++)
		buf[i] = i;
	for (i = words - 1; i > 0; i--) {
		u64 j = next() % i, t = buf[i];

		buf[i] = buf[j];
		buf[j] = t;
	}
	for (i = 0; i < n * words; i++)
		at = buf[at];
	return at;
}

static u64 random_reads(u64 n)
{
	u64 acc = 0;

	for (u64 i = 0; i < n * 65536; i++)
		acc += buf[next() % WORDS];
	return acc;
}

/* Conditional stores: the compiler cannot turn them into cmov. */
static u64 hits[4];

static u64 branchy(u64 n)
{
	for (u64 i = 0; i < n * 65536; i++) {
		u64 r = next();

		if (r & 1)
			hits[0]++;
		if ((r & 6) == 6)
			hits[1]++;
		if (r & 0x80)
			hits[2]++;
		if (i & 8)		/* a pattern a history predictor learns */
			hits[3]++;
	}
	return hits[0] + hits[1] + hits[2] + hits[3];
}

__attribute__((noinline)) static u64 f0(u64 x) { return x + 1; }
__attribute__((noinline)) static u64 f1(u64 x) { return x ^ 5; }
__attribute__((noinline)) static u64 f2(u64 x) { return x * 3; }
__attribute__((noinline)) static u64 f3(u64 x) { return x - 7; }

static u64 (*const table[4])(u64) = { f0, f1, f2, f3 };

static u64 indirect(u64 n)
{
	u64 acc = 0;

	for (u64 i = 0; i < n * 65536; i++)
		acc = table[next() & 3](acc);
	return acc;
}

static u64 trips(u64 n, u64 t)
{
	u64 acc = 0;

	/* t from the command line: the compiler cannot unroll the loop. */
	for (u64 i = 0; i < n << 16; i++)
		for (u64 j = 0; j < t; j++)
			acc += j ^ i;
	return acc;
}

static u64 walk(u64 n, u64 kib)
{
	const unsigned char *b = (const unsigned char *)buf;
	u64 mask = (kib << 10) - 1, acc = 0, off = 0;

	for (u64 i = 0; i < n << 16; i++) {
		acc += b[off];
		off = (off + 64) & mask;
	}
	return acc;
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 mode = arg_u64(sp, 1, 0), n = arg_u64(sp, 2, 1), r = 0;
	u64 kib = arg_u64(sp, 3, 16);

	switch (mode) {
	case 0: r = stream(n); break;
	case 1: r = stride(n); break;
	case 2: r = chase(n); break;
	case 3: r = random_reads(n); break;
	case 4: r = branchy(n); break;
	case 5: r = indirect(n); break;
	case 6: r = walk(n, kib > 4096 ? 4096 : kib); break;
	case 7: r = trips(n, kib); break;
	}
	sys_exit(r == 42);
}
