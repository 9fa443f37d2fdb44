/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bpred.h - the branch predictor model: conditional branches (taken or
 * not) and indirect branches (the target).  No QEMU dependency.
 */
#ifndef PVPERF_BPRED_H
#define PVPERF_BPRED_H

#include <stdbool.h>
#include <stdint.h>

enum bpred_kind {
	BPRED_CACHEGRIND,	/* --cachegrind-compat: cachegrind's own */
	BPRED_GSHARE,		/* the default: gshare, history-indexed BTB */
};

/* cachegrind's geometry */
#define BPRED_CG_HIST_BITS	7
#define BPRED_CG_ADDR_BITS	7
#define BPRED_CG_BTB_BITS	9
/* gshare's */
#define BPRED_GS_BITS		16
#define BPRED_GS_BTB_BITS	12

struct bpred {
	enum bpred_kind kind;
	uint64_t history;	/* outcomes of the last conditional branches */
	uint8_t counter[1 << BPRED_GS_BITS];	/* cachegrind: first 2^14 */
	uint64_t btb[1 << BPRED_GS_BTB_BITS];	/* cachegrind: first 512 */
};

void bpred_init(struct bpred *p, enum bpred_kind kind);
/* Predict, then learn the outcome; true if it was mispredicted. */
bool bpred_cond(struct bpred *p, uint64_t pc, bool taken);
bool bpred_indirect(struct bpred *p, uint64_t pc, uint64_t target);
/*
 * Whether pc's branch taken again would change nothing and be predicted:
 * every history bit the index uses is a taken outcome and the counter is
 * saturated taken (a loop branch in its steady state).  It stays so until
 * a branch is not taken (nothing else moves the history or lowers a
 * counter), which models.c's fast paths rely on.
 */
bool bpred_taken_is_steady(struct bpred *p, uint64_t pc);

#endif /* PVPERF_BPRED_H */
