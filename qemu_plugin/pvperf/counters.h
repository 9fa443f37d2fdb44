/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * counters.h - every software counter of a vCPU in one store, below
 * sampling: the instructions and branches generated code adds on the
 * scoreboard (core.h), and the event counters callbacks add, the models'
 * (caches, TLBs, predictor, stall cycles) and the emulator's (emu.c)
 * alike, PVPERF_CTR_* order (pvperf_proto.h).  One add for an event
 * counter, which tells sampling (the hook sample_init registers) when a
 * slot is armed on it; one snapshot of all of them.
 */
#ifndef PVPERF_COUNTERS_H
#define PVPERF_COUNTERS_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

/* Raw counter bits (PVPERF_CTR_*): the inline counters; the
 * instruction counters of both halves. */
#define CTR_INLINE_BITS	((1ull << PVPERF_NR_INLINE_COUNTERS) - 1)
#define CTR_INSN_BITS	(1ull << PVPERF_CTR_INSN_KERNEL | \
			 1ull << PVPERF_CTR_INSN_USER)

/* Where and on what an event happened (an overflow's ip, addr);
 * regs: the callback may read registers (R_REGS). */
struct event_at {
	unsigned vcpu;
	uint64_t ip;
	uint64_t addr;
	bool regs;
};

/* A vCPU's counters, touched by its own thread (or an exclusive
 * section). */
struct counters_vcpu {
	/* The inline counters' bias: count = pvperf_score.ctr + bias (core.h);
	 * fault corrections (count.c) and the countdown's rebases (sample.c)
	 * move it. */
	uint64_t bias[PVPERF_NR_INLINE_COUNTERS];
	/* [c - PVPERF_NR_INLINE_COUNTERS] for raw counter c; the
	 * conditional branches are generated code's (pvperf_score.cond)
	 * plus what this holds (a checkpoint's). */
	uint64_t ev[2 * PVPERF_NR_MODEL_COUNTERS];
	/* The event counters (raw bits) a sampling slot is armed on, and
	 * whether one is on cycles (instructions and stall cycles: the
	 * timing model); sample.c sets them (counters_arm). */
	uint64_t armed;
	bool armed_cycles;
} __attribute__((aligned(64)));

/*
 * A fixed array, not an allocation: the models' memory callbacks add to
 * it on every guest access, and its address is then a constant of the
 * code (one load fewer than through a pointer).  QEMU 10.0's largest
 * machine (q35) has 4096 vCPUs; 256 bytes each, untouched pages of
 * vCPUs that do not exist cost nothing.
 */
#define COUNTERS_MAX_VCPUS 4096
extern struct counters_vcpu ctr_store[COUNTERS_MAX_VCPUS];

/* Sampling's side: counters in bits grew by an event at `at` in the
 * half given, and a slot is armed on one of them. */
typedef void (*counters_grew_fn)(uint64_t bits, bool kernel,
				 struct event_at at);

/* Install: false if there are more vCPUs than the store holds. */
bool counters_init(unsigned n_vcpus);
/* sample_init: who hears of armed counters' growth. */
void counters_set_hook(counters_grew_fn fn);

static inline struct counters_vcpu *counters_of(unsigned vcpu)
{
	return &ctr_store[vcpu];
}

/* The inline counters of vcpu now (PVPERF_NR_INLINE_COUNTERS; its own
 * thread, or an exclusive section). */
static inline void counters_inline(unsigned vcpu, uint64_t *out)
{
	const struct pvperf_score *s = score_of(vcpu);
	const uint64_t *bias = counters_of(vcpu)->bias;
	uint64_t packed = __atomic_load_n(&s->packed, __ATOMIC_RELAXED);

	for (unsigned i = 0; i < PVPERF_NR_INLINE_COUNTERS; i++)
		out[i] = s->ctr[i] + bias[i];
	out[PVPERF_CTR_INSN_USER] += packed >> PACK_SHIFT;
	out[PVPERF_CTR_BRANCH_USER] += packed & PACK_BRANCHES;
}

/* Move the packed counts (core.h) into the bias (the vCPU's own thread,
 * or an exclusive section); the counts stay what they are. */
static inline void counters_fold(unsigned vcpu)
{
	struct pvperf_score *s = score_of(vcpu);
	uint64_t *bias = counters_of(vcpu)->bias;

	bias[PVPERF_CTR_INSN_USER] += s->packed >> PACK_SHIFT;
	bias[PVPERF_CTR_BRANCH_USER] += s->packed & PACK_BRANCHES;
	s->packed = 0;
}

/* Tell sampling that counters in bits grew at `at` (a slot is armed on
 * one of them: the caller checked armed). */
void counters_grew(uint64_t bits, bool kernel, struct event_at at);

/*
 * Event counter m (PVPERF_M_*) of at.vcpu grew by n in the half given,
 * at `at`.  The place is passed by value, so that nothing is built unless
 * a slot is armed on the counter (the callers' fast paths stay short).
 */
static inline void counters_add(unsigned m, uint64_t n, bool kernel,
				struct event_at at)
{
	struct counters_vcpu *c = counters_of(at.vcpu);
	unsigned raw = PVPERF_CTR_MODEL(m, !kernel);

	c->ev[raw - PVPERF_NR_INLINE_COUNTERS] += n;
	if (__builtin_expect(c->armed & (1ull << raw), 0))
		counters_grew(1ull << raw, kernel, at);
}

/* The same without a place: no slot overflows here. */
static inline void counters_add_quiet(unsigned vcpu, unsigned m, uint64_t n,
				      bool kernel)
{
	counters_of(vcpu)->ev[2 * m + !kernel] += n;
}

/* Raw event counter c (>= PVPERF_NR_INLINE_COUNTERS) of vcpu now. */
uint64_t counters_event(unsigned vcpu, unsigned c);
/* Every counter of vcpu now (PVPERF_NR_COUNTERS; its own thread, or an
 * exclusive section). */
void counters_snapshot(unsigned vcpu, uint64_t *out);
/* A reply's slots: the event counters armed, and whether on cycles. */
void counters_arm(unsigned vcpu, uint64_t bits, bool cycles);
/* Checkpoints (state.c, vcpu_init): every counter of vcpu becomes
 * counts (PVPERF_NR_COUNTERS). */
void counters_restore(unsigned vcpu, const uint64_t *counts);

#endif /* PVPERF_COUNTERS_H */
