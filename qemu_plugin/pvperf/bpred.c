/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bpred.c - the branch predictor models (bpred.h).  One per vCPU: the
 * global history is that vCPU's branch stream.  Returns are not predicted
 * by either (a return stack almost never misses).
 *
 * BPRED_CACHEGRIND, cachegrind's (--branch-sim=yes), so that branch-misses
 * can be checked against it:
 *   conditional: 2^14 two-bit saturating counters, all starting at 0
 *   (strongly not-taken).  The index is the last 7 outcomes of
 *   conditional branches (global history, newest in bit 0) above the low
 *   7 bits of the branch's address.  Predicted taken when the counter is
 *   2 or 3; the counter then moves one step towards the outcome.
 *   indirect: 512 entries indexed by the low 9 address bits, each the
 *   target last seen there; a different target is a misprediction.
 *   A weak predictor by today's standards; its point is comparability.
 *
 * BPRED_GSHARE, the default (McFarling 1993, "Combining branch
 * predictors"): 2^16 two-bit counters, starting weakly not-taken (1),
 * indexed by the branch address XOR the last 16 outcomes, so one branch
 * gets a counter per recent path and patterns up to 16 branches long
 * (all branches counted) are learnt; fewer aliases than cachegrind's 7+7
 * bits.  Indirect: a 4,096-entry target cache indexed by the address XOR
 * 12 bits of the same history (Chang, Hao and Patt 1997, "Target
 * prediction for indirect jumps"), so a call through a table whose index
 * follows from earlier branches is predicted per path, not just "same as
 * last time".  Still far simpler than a modern TAGE/ITTAGE.
 */
#include <string.h>

#include "bpred.h"

void bpred_init(struct bpred *p, enum bpred_kind kind)
{
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	if (kind == BPRED_GSHARE)
		memset(p->counter, 1, sizeof(p->counter));
}

/* The history bits the conditional index uses. */
static uint64_t history_mask(const struct bpred *p)
{
	return p->kind == BPRED_CACHEGRIND ? (1u << BPRED_CG_HIST_BITS) - 1
					   : (1u << BPRED_GS_BITS) - 1;
}

static uint8_t *cond_counter(struct bpred *p, uint64_t pc)
{
	uint64_t i;

	if (p->kind == BPRED_CACHEGRIND)
		i = (p->history & ((1u << BPRED_CG_HIST_BITS) - 1))
			<< BPRED_CG_ADDR_BITS |
		    (pc & ((1u << BPRED_CG_ADDR_BITS) - 1));
	else
		i = (pc ^ p->history) & ((1u << BPRED_GS_BITS) - 1);
	return &p->counter[i];
}

bool bpred_cond(struct bpred *p, uint64_t pc, bool taken)
{
	uint8_t *ctr = cond_counter(p, pc);
	bool mispredicted = (*ctr >= 2) != taken;

	p->history = p->history << 1 | taken;
	if (taken && *ctr < 3)
		(*ctr)++;
	else if (!taken && *ctr > 0)
		(*ctr)--;
	return mispredicted;
}

bool bpred_taken_is_steady(struct bpred *p, uint64_t pc)
{
	return (p->history & history_mask(p)) == history_mask(p) &&
	       *cond_counter(p, pc) == 3;
}

bool bpred_indirect(struct bpred *p, uint64_t pc, uint64_t target)
{
	uint64_t i = p->kind == BPRED_CACHEGRIND
		? pc & ((1u << BPRED_CG_BTB_BITS) - 1)
		: (pc ^ p->history) & ((1u << BPRED_GS_BTB_BITS) - 1);
	bool mispredicted = p->btb[i] != target;

	p->btb[i] = target;
	return mispredicted;
}
