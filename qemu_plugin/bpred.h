/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bpred.h - the branch predictor model: conditional branches (taken or
 * not) and indirect branches (the target).  No QEMU dependency.
 */
#ifndef PVPERF_BPRED_H
#define PVPERF_BPRED_H

#include <stdbool.h>
#include <stdint.h>

#define BPRED_HIST_BITS	7
#define BPRED_ADDR_BITS	7
#define BPRED_BTB_BITS	9

struct bpred {
	uint64_t history;	/* outcomes of the last conditional branches */
	uint8_t counter[1 << (BPRED_HIST_BITS + BPRED_ADDR_BITS)];
	uint64_t btb[1 << BPRED_BTB_BITS];	/* last target per slot */
};

void bpred_init(struct bpred *p);
/* Predict, then learn the outcome; true if it was mispredicted. */
bool bpred_cond(struct bpred *p, uint64_t pc, bool taken);
bool bpred_indirect(struct bpred *p, uint64_t pc, uint64_t target);

#endif /* PVPERF_BPRED_H */
