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
#include "counters.h"

void models_init(unsigned n_vcpus);
/* vcpu_init: the vCPU's fast-path entries (before any of its code runs). */
void models_vcpu_init(unsigned vcpu);

/* tb_trans (count.c, after classification): instrument the TB. */
void models_tb(struct qemu_plugin_tb *tb, const uint8_t *cls, size_t n,
	       bool kernel);

/* A hypercall's reply (or a checkpoint's) on the vCPU's thread, after
 * sample_arm: PVPERF_REPLY_MODELS_*, and which counters slots are armed
 * on (counters.h), which the fast paths must not skip. */
void models_reply(unsigned vcpu, const struct pvperf_proto_reply *reply);

/* PVPERF_OP_FAULT: the instruction at ip page-faulted and will run again. */
void models_fault(unsigned vcpu, uint64_t ip);

/* A flush or an instrumentation switch (exclusive section): forget
 * pending branches, whose sites live in the arena the flush frees. */
void models_flush(void);


#endif /* PVPERF_MODELS_H */
