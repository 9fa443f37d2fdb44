/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * model_config.c - the models' options (model_config.h): cache geometries
 * as cachegrind spells them (I1=, D1=, LL=SIZE,ASSOC,LINE), TLBs
 * (iTLB=, dTLB=ENTRIES,ASSOC,PAGE), the timing model's penalties
 * (penalty_l1=, penalty_ll=, penalty_tlb=, penalty_br=CYCLES) and
 * compat=on|off.  Defaults documented in docs/events.md: a common desktop
 * core.
 */
#include <glib.h>
#include <stdlib.h>
#include <string.h>
#include <qemu-plugin.h>

#include "core.h"
#include "model_config.h"

/*
 * The timing model: an instruction costs one cycle (the instruction
 * counter), and each of these events adds its penalty to the stall
 * counter (PVPERF_M_STALL); cycles = instructions + stall.  An L1 miss
 * that also misses the LL pays both.
 */
struct model_config mcfg = {
	.i1 = { 32768, 8, 64 },
	.d1 = { 32768, 8, 64 },
	.ll = { 8388608, 16, 64 },
	.itlb = { 128 * 4096, 8, 4096 },	/* 128 entries of 4 KiB */
	.dtlb = { 64 * 4096, 4, 4096 },		/* 64 entries of 4 KiB */
	.penalty = {
		[PVPERF_M_I1_MISS] = 10, [PVPERF_M_D1_READ_MISS] = 10,
		[PVPERF_M_D1_WRITE_MISS] = 10,
		[PVPERF_M_LL_IMISS] = 200, [PVPERF_M_LL_READ_MISS] = 200,
		[PVPERF_M_LL_WRITE_MISS] = 200,
		[PVPERF_M_DTLB_READ_MISS] = 30, [PVPERF_M_DTLB_WRITE_MISS] = 30,
		[PVPERF_M_ITLB_MISS] = 30,
		[PVPERF_M_COND_MISS] = 15, [PVPERF_M_IND_MISS] = 15,
	},
};

/* A cache's geometry (tlb: a TLB's, as the cache of pages it is). */
static int parse_geom(const char *key, const char *val, struct cache_geom *g,
		      bool tlb)
{
	const char *err = tlb ? tlb_geom_parse(val, g) : cache_geom_parse(val, g);

	if (!err && !tlb && g->line > GUEST_PAGE_SIZE)
		err = "line size above the page size (4096)";
	if (err) {
		pvperf_log("option %s=%s: %s\n", key, val, err);
		return -1;
	}
	return 1;
}

static int parse_penalty(const char *key, const char *val)
{
	static const struct {
		const char *key;
		unsigned n;		/* model counters it sets */
		unsigned ctr[3];
	} what[] = {
		{ "penalty_l1", 3, { PVPERF_M_I1_MISS, PVPERF_M_D1_READ_MISS,
				     PVPERF_M_D1_WRITE_MISS } },
		{ "penalty_ll", 3, { PVPERF_M_LL_IMISS, PVPERF_M_LL_READ_MISS,
				     PVPERF_M_LL_WRITE_MISS } },
		{ "penalty_tlb", 3, { PVPERF_M_DTLB_READ_MISS,
				      PVPERF_M_DTLB_WRITE_MISS,
				      PVPERF_M_ITLB_MISS } },
		{ "penalty_br", 2, { PVPERF_M_COND_MISS, PVPERF_M_IND_MISS } },
	};
	char *end;
	unsigned long v;

	for (size_t i = 0; i < G_N_ELEMENTS(what); i++) {
		if (strcmp(key, what[i].key))
			continue;
		v = strtoul(val, &end, 10);
		if (!*val || *end || v > 100000) {
			pvperf_log("option %s=%s: cycles 0..100000\n", key, val);
			return -1;
		}
		for (unsigned j = 0; j < what[i].n; j++)
			mcfg.penalty[what[i].ctr[j]] = v;
		return 1;
	}
	return 0;
}

int model_config_option(const char *key, const char *val)
{
	if (!strncmp(key, "penalty_", 8))
		return parse_penalty(key, val) ?: -1;
	if (!strcmp(key, "iTLB"))
		return parse_geom(key, val, &mcfg.itlb, true);
	if (!strcmp(key, "dTLB"))
		return parse_geom(key, val, &mcfg.dtlb, true);
	if (!strcmp(key, "I1"))
		return parse_geom(key, val, &mcfg.i1, false);
	if (!strcmp(key, "D1"))
		return parse_geom(key, val, &mcfg.d1, false);
	if (!strcmp(key, "LL"))
		return parse_geom(key, val, &mcfg.ll, false);
	if (!strcmp(key, "compat"))
		return qemu_plugin_bool_parse(key, val, &mcfg.compat) ? 1 : -1;
	return 0;
}
