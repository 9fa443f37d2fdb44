/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * model_config.h - what the models are (geometries, timing penalties,
 * cachegrind compatibility), from the plugin's options; set at install,
 * read-only afterwards.
 */
#ifndef PVPERF_MODEL_CONFIG_H
#define PVPERF_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "cachesim.h"
#include "pvperf_proto.h"

struct model_config {
	struct cache_geom i1, d1, ll;	/* caches: SIZE,ASSOC,LINE */
	struct cache_geom itlb, dtlb;	/* TLBs: caches of pages */
	/* Timing model: cycles each model event (PVPERF_M_*) stalls. */
	uint32_t penalty[PVPERF_NR_MODEL_COUNTERS];
	bool compat;			/* cachegrind-compatible */
};

extern struct model_config mcfg;

/* 1: a model option, taken; 0: not a model option; -1: bad (logged). */
int model_config_option(const char *key, const char *val);

#endif /* PVPERF_MODEL_CONFIG_H */
