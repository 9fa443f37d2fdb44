/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models_test.c - unit test of cachesim.c and bpred.c, natively: the
 * geometry checks cachegrind makes, LRU order, straddling accesses, and
 * the predictor's miss counts worked out by hand from its definition.
 * (The end-to-end check against cachegrind itself is tests/vm/test_models.py.)
 *
 *   make -C qemu_plugin check
 */
#include <stdio.h>
#include <string.h>

#include "bpred.h"
#include "cachesim.h"

static int fails, passes;

static void check(const char *what, long got, long want)
{
	if (got == want) {
		passes++;
		return;
	}
	fails++;
	printf("FAIL %s: got %ld, want %ld\n", what, got, want);
}

struct geom_case {
	const char *text;
	bool ok;
};

static void check_parse(const struct geom_case *cases, size_t n,
			const char *(*parse)(const char *, struct cache_geom *))
{
	struct cache_geom g;

	for (size_t i = 0; i < n; i++)
		check(cases[i].text, parse(cases[i].text, &g) == NULL,
		      cases[i].ok);
}

static void test_geometry(void)
{
	static const struct geom_case cases[] = {
		{ "32768,8,64", true },
		{ "12582912,12,64", true },	/* 12 MiB: 16384 sets */
		{ "65536,2,16", true },
		{ "32768,8,48", false },	/* line not a power of two */
		{ "32768,8,8", false },		/* line below 16 */
		{ "64,1,64", false },		/* size not above line */
		{ "1024,32,64", false },	/* more ways than lines */
		{ "3072,2,64", false },		/* 24 sets */
		{ "32768,8", false },
		{ "32768,8,64,1", false },
		{ "32k,8,64", false },
		{ "-32768,8,64", false },
		{ "", false },
	};
	check_parse(cases, sizeof(cases) / sizeof(cases[0]), cache_geom_parse);
}

/* TLBs: "ENTRIES,ASSOC,PAGE"; the cache they are is entries * page. */
static void test_tlb_geometry(void)
{
	static const struct geom_case cases[] = {
		{ "64,4,4096", true },
		{ "1536,12,4096", true },	/* 128 sets */
		{ "32,4,2097152", true },	/* 2 MiB pages */
		{ "64,4,2048", false },		/* page below 4 KiB */
		{ "64,4,6000", false },		/* page not a power of two */
		{ "2048,4,2097152", false },	/* 4 GiB of reach */
		{ "48,4,4096", false },		/* 12 sets */
		{ "64,128,4096", false },	/* more ways than entries */
		{ "0,4,4096", false },
		{ "64,4", false },
	};
	struct cache_geom g;
	struct cache t;

	check_parse(cases, sizeof(cases) / sizeof(cases[0]), tlb_geom_parse);
	/* 2 entries, 1 way, 4 KiB pages: a page-crossing access looks
	 * both pages up; one miss is one access missing. */
	tlb_geom_parse("2,1,4096", &g);
	check("tlb size", g.size, 8192);
	cache_init(&t, &g);
	check("tlb cold", cache_ref(&t, 0x1ffc, 8), 1);
	check("tlb both pages in", cache_ref(&t, 0x2000, 8), 0);
	check("tlb same page", cache_ref(&t, 0x1000, 4), 0);
	check("tlb conflict", cache_ref(&t, 0x3000, 4), 1);
	check("tlb evicted", cache_ref(&t, 0x1000, 4), 1);
	cache_destroy(&t);
}

static void test_lru(void)
{
	/* 2 sets of 2 ways, 16-byte lines: blocks 0, 2, 4 share set 0. */
	struct cache_geom g = { 64, 2, 16 };
	struct cache c;

	cache_init(&c, &g);
	check("cold 0", cache_ref(&c, 0x00, 4), 1);
	check("cold 2", cache_ref(&c, 0x20, 4), 1);
	check("hit 0", cache_ref(&c, 0x04, 4), 0);	/* 0 becomes MRU */
	check("cold 4 evicts 2", cache_ref(&c, 0x40, 4), 1);
	check("0 stayed", cache_ref(&c, 0x08, 4), 0);
	check("2 was evicted", cache_ref(&c, 0x20, 4), 1);
	check("other set cold", cache_ref(&c, 0x10, 4), 1);
	check("other set kept", cache_ref(&c, 0x10, 8), 0);
	/* Straddling 0x1c..0x23 (blocks 1 and 2): both present, a hit. */
	check("straddle hit", cache_ref(&c, 0x1c, 8), 0);
	/* 0x3c..0x43 (blocks 3, 4): 3 absent, so one miss, and both load. */
	check("straddle miss", cache_ref(&c, 0x3c, 8), 1);
	check("straddled line 3 now present", cache_ref(&c, 0x30, 4), 0);
	cache_destroy(&c);
}

static void test_direct_mapped(void)
{
	struct cache_geom g = { 1024, 1, 64 };	/* 16 sets */
	struct cache c;
	int misses = 0;

	cache_init(&c, &g);
	/* Two addresses 1 KiB apart conflict in every round: all miss. */
	for (int i = 0; i < 100; i++)
		misses += cache_ref(&c, 0x1000, 8) + cache_ref(&c, 0x1400, 8);
	check("direct-mapped conflicts", misses, 200);
	cache_destroy(&c);
}

static void test_bpred(void)
{
	struct bpred p;
	int miss = 0;

	/*
	 * Always taken, one branch: the history index differs for each of
	 * the first 7 branches (history 0, 1, 3, ... 63), each counter at 0
	 * predicts not-taken; from the 8th on history is 127 and its counter
	 * needs two takens (0 -> 1 -> 2) before it predicts taken: 9 misses.
	 */
	bpred_init(&p, BPRED_CACHEGRIND);
	for (int i = 0; i < 1000; i++)
		miss += bpred_cond(&p, 0x401000, true);
	check("always taken", miss, 9);
	/* Never taken: history stays 0 and counters start at 0: no miss. */
	bpred_init(&p, BPRED_CACHEGRIND);
	miss = 0;
	for (int i = 0; i < 1000; i++)
		miss += bpred_cond(&p, 0x401000, false);
	check("never taken", miss, 0);
	/* Indirect: the same target misses once, alternating ones always. */
	bpred_init(&p, BPRED_CACHEGRIND);
	miss = 0;
	for (int i = 0; i < 100; i++)
		miss += bpred_indirect(&p, 0x401000, 0x402000);
	check("same target", miss, 1);
	miss = 0;
	for (int i = 0; i < 100; i++)
		miss += bpred_indirect(&p, 0x401000, 0x403000 + (i & 1) * 0x10);
	check("alternating targets", miss, 100);
	/* 512 slots: pcs 512 apart share one. */
	bpred_init(&p, BPRED_CACHEGRIND);
	bpred_indirect(&p, 0x401000, 0x402000);
	check("aliased slot", bpred_indirect(&p, 0x401200, 0x402000), 0);
}

/* The default predictor (gshare): what cachegrind's cannot learn. */
static void test_gshare(void)
{
	struct bpred cg, gs;
	int miss_cg = 0, miss_gs = 0;

	/*
	 * Always taken: histories 0, 1, 3, ... 2^16 - 1 give 17 counters,
	 * each met first at 1 (weakly not-taken): 17 misses, then none.
	 */
	bpred_init(&gs, BPRED_GSHARE);
	for (int i = 0; i < 1000; i++)
		miss_gs += bpred_cond(&gs, 0x401000, true);
	check("gshare always taken", miss_gs, 17);
	/*
	 * A loop of 10 trips (9 taken, then not taken), 1,000 times.
	 * cachegrind's 7 outcomes of history cannot tell the exit from the
	 * 7th-9th trips: at least one miss per loop.  16 outcomes always
	 * contain the previous exit, so every position has its own counter:
	 * misses only while the 10 counters learn (2 each at most).
	 */
	bpred_init(&cg, BPRED_CACHEGRIND);
	bpred_init(&gs, BPRED_GSHARE);
	miss_cg = miss_gs = 0;
	for (int i = 0; i < 10000; i++) {
		miss_cg += bpred_cond(&cg, 0x401000, i % 10 != 9);
		miss_gs += bpred_cond(&gs, 0x401000, i % 10 != 9);
	}
	check("cachegrind loop of 10 misses each exit", miss_cg >= 1000, 1);
	check("gshare loop of 10 learnt", miss_gs <= 40, 1);
	/*
	 * An indirect call whose target follows the branch before it
	 * (alternating): cachegrind's last-target table misses every time;
	 * indexed by history, the first 12 calls see 12 different
	 * (growing) histories, the 13th the other steady one: 13 misses.
	 */
	bpred_init(&cg, BPRED_CACHEGRIND);
	bpred_init(&gs, BPRED_GSHARE);
	miss_cg = miss_gs = 0;
	for (int i = 0; i < 1000; i++) {
		uint64_t target = i & 1 ? 0x403000 : 0x404000;

		bpred_cond(&cg, 0x401000, i & 1);
		bpred_cond(&gs, 0x401000, i & 1);
		miss_cg += bpred_indirect(&cg, 0x402000, target);
		miss_gs += bpred_indirect(&gs, 0x402000, target);
	}
	check("cachegrind indirect by path", miss_cg, 1000);
	check("gshare indirect by path", miss_gs, 13);
}

/*
 * bpred_taken_is_steady, the fast paths' premise: whenever it says so, the
 * branch taken again is predicted and changes nothing (the index's history
 * bits, every counter); checked over random outcomes of a few branches.
 */
static void test_steady(enum bpred_kind kind, const char *name)
{
	static struct bpred p, before;
	static const uint64_t pcs[] = { 0x401000, 0x401010, 0x401080 };
	uint64_t lcg = 1, mask = kind == BPRED_CACHEGRIND ? 0x7f : 0xffff;
	int steady = 0, broken = 0;

	bpred_init(&p, kind);
	for (int i = 0; i < 200000; i++) {
		uint64_t pc = pcs[(lcg >> 33) % 3];
		bool taken = (lcg >> 40) % 16 != 0;	/* mostly taken */

		lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
		if (bpred_taken_is_steady(&p, pc)) {
			steady++;
			before = p;
			if (bpred_cond(&p, pc, true) ||
			    (p.history & mask) != (before.history & mask) ||
			    memcmp(p.counter, before.counter, sizeof(p.counter)))
				broken++;
			continue;
		}
		bpred_cond(&p, pc, taken);
	}
	check(name, broken, 0);
	check(name, steady > 1000, 1);	/* the premise is ever met */
	bpred_cond(&p, pcs[0], false);
	check(name, bpred_taken_is_steady(&p, pcs[0]), 0);
}

int main(void)
{
	test_geometry();
	test_tlb_geometry();
	test_lru();
	test_direct_mapped();
	test_bpred();
	test_gshare();
	test_steady(BPRED_CACHEGRIND, "steady (cachegrind)");
	test_steady(BPRED_GSHARE, "steady (gshare)");
	printf("%d passed, %d failed\n", passes, fails);
	return fails != 0;
}
