/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * counters.c - the counter store (counters.h): each vCPU's event
 * counters, the inline counters' bias, the bits sampling armed on them, and the snapshot of
 * every counter that hypercalls and checkpoints carry.
 */
#include <string.h>

#include "core.h"
#include "counters.h"

struct counters_vcpu ctr_store[COUNTERS_MAX_VCPUS];
static counters_grew_fn grew;

bool counters_init(unsigned n_vcpus)
{
	return n_vcpus <= COUNTERS_MAX_VCPUS;
}

void counters_set_hook(counters_grew_fn fn)
{
	grew = fn;
}

void __attribute__((noinline, cold))
counters_grew(uint64_t bits, bool kernel, struct event_at at)
{
	if (grew)
		grew(bits, kernel, at);
}

uint64_t counters_event(unsigned vcpu, unsigned c)
{
	uint64_t n = ctr_store[vcpu].ev[c - PVPERF_NR_INLINE_COUNTERS];

	/* Conditional branches are counted where they run, by generated
	 * code (models_tb.c), on the scoreboard. */
	if (c == PVPERF_CTR_MODEL(PVPERF_M_COND, PVPERF_MODE_KERNEL) ||
	    c == PVPERF_CTR_MODEL(PVPERF_M_COND, PVPERF_MODE_USER))
		n += score_of(vcpu)->cond[c - PVPERF_CTR_MODEL(PVPERF_M_COND, 0)];
	return n;
}

void counters_snapshot(unsigned vcpu, uint64_t *out)
{
	counters_inline(vcpu, out);
	for (unsigned c = PVPERF_NR_INLINE_COUNTERS; c < PVPERF_NR_COUNTERS; c++)
		out[c] = counters_event(vcpu, c);
}

void counters_arm(unsigned vcpu, uint64_t bits, bool cycles)
{
	ctr_store[vcpu].armed = bits & ~CTR_INLINE_BITS;
	ctr_store[vcpu].armed_cycles = cycles;
}

/* The inline counts become the bias of the scoreboard's; the event
 * counts are kept here, the scoreboard's conditional branches zeroed. */
void counters_restore(unsigned vcpu, const uint64_t *counts)
{
	struct pvperf_score *s = score_of(vcpu);

	for (unsigned i = 0; i < PVPERF_NR_INLINE_COUNTERS; i++)
		ctr_store[vcpu].bias[i] = counts[i] - s->ctr[i];
	memcpy(ctr_store[vcpu].ev, counts + PVPERF_NR_INLINE_COUNTERS,
	       sizeof(ctr_store[vcpu].ev));
	s->cond[0] = s->cond[1] = 0;
}
