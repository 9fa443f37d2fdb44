/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models.h - the microarchitectural models the PMU's model events count:
 * L1I, L1D and a shared last-level cache (cachesim.c) and a branch
 * predictor (bpred.c), fed by instruction, memory and branch callbacks
 * while an open event needs them (INSTRUMENT_CACHE, INSTRUMENT_BPRED).
 */
#ifndef PVPERF_MODELS_H
#define PVPERF_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

#include "pvperf_proto.h"
#include "sample.h"

void models_init(unsigned n_vcpus);
/* vcpu_init: the vCPU's fast-path entries (before any of its code runs). */
void models_vcpu_init(unsigned vcpu);

/* tb_trans (count.c, after classification): instrument the TB. */
void models_tb(struct qemu_plugin_tb *tb, const uint8_t *cls, size_t n,
	       bool kernel);

/* The models' counters of a vCPU, PVPERF_NR_MODEL_COUNTERS pairs
 * (pvperf_proto.h order); its own thread or an exclusive section. */
void models_count(unsigned vcpu, uint64_t *out);

/* A hypercall's reply on the vCPU's thread, after sample_arm:
 * PVPERF_REPLY_MODELS_*, and which model counters slots are armed on. */
void models_reply(unsigned vcpu, const struct pvperf_proto_reply *reply);

/* PVPERF_OP_FAULT: the instruction at ip page-faulted and will run again. */
void models_fault(unsigned vcpu, uint64_t ip);

/* A flush or an instrumentation switch (exclusive section): forget
 * pending branches, whose sites live in the arena the flush frees. */
void models_flush(void);

/* The models' count of raw model counter idx (2 * m + !kernel), for
 * sample.c (its model_counter_fn). */
uint64_t models_counter(unsigned vcpu, unsigned idx);

/* Model counter m (PVPERF_M_*) of vcpu grew by n in the half given, at
 * `at` (emu.c's counters: the slots armed on it see it). */
void models_add(unsigned vcpu, unsigned m, uint64_t n, bool kernel,
		struct event_at at);

/* The same without a place: no slot overflows here. */
void models_add_quiet(unsigned vcpu, unsigned m, uint64_t n, bool kernel);

/* Checkpoints (state.c): the model counters (PVPERF_NR_MODEL_COUNTERS
 * pairs) and what a reply asked, after sample.c armed its slots. */
void models_restore(unsigned vcpu, const uint64_t *counters,
		    const struct pvperf_proto_reply *reply);

#endif /* PVPERF_MODELS_H */
