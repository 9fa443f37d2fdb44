/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bpred.c - the branch predictor model (bpred.h), as cachegrind's
 * (--branch-sim=yes), so that branch-misses can be checked against it:
 *
 * conditional: 2^14 two-bit saturating counters, all starting at 0
 *   (strongly not-taken).  The index is the last 7 outcomes of
 *   conditional branches (global history, newest in bit 0) above the
 *   low 7 bits of the branch's address.  Predicted taken when the counter
 *   is 2 or 3; the counter then moves one step towards the outcome.
 * indirect: 512 entries indexed by the low 9 address bits, each the
 *   target last seen there; a different target is a misprediction.
 *   Returns are not predicted (a return stack almost never misses).
 *
 * A weak predictor by today's standards; its point is comparability.
 * One per vCPU: the global history is that vCPU's branch stream.
 */
#include <string.h>

#include "bpred.h"

void bpred_init(struct bpred *p)
{
	memset(p, 0, sizeof(*p));
}

bool bpred_cond(struct bpred *p, uint64_t pc, bool taken)
{
	const uint64_t hist_mask = (1u << BPRED_HIST_BITS) - 1;
	const uint64_t addr_mask = (1u << BPRED_ADDR_BITS) - 1;
	uint8_t *ctr = &p->counter[(p->history & hist_mask) << BPRED_ADDR_BITS |
				   (pc & addr_mask)];
	bool mispredicted = (*ctr >= 2) != taken;

	p->history = p->history << 1 | taken;
	if (taken && *ctr < 3)
		(*ctr)++;
	else if (!taken && *ctr > 0)
		(*ctr)--;
	return mispredicted;
}

bool bpred_indirect(struct bpred *p, uint64_t pc, uint64_t target)
{
	uint64_t *slot = &p->btb[pc & ((1u << BPRED_BTB_BITS) - 1)];
	bool mispredicted = *slot != target;

	*slot = target;
	return mispredicted;
}
