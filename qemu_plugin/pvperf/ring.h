/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ring.h - samples the plugin delivers itself: the record into the
 * vCPU's sample ring in guest RAM, the overflow interrupt on the vCPU's
 * doorbell; and the doorbell's wait, which link.c uses too.
 */
#ifndef PVPERF_RING_H
#define PVPERF_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "pvperf_proto.h"

/* A hypercall's reply: the ring to write from now on (gpa 0: none). */
void ring_take(unsigned vcpu, const struct pvperf_proto_ring *r);
bool ring_owned(unsigned vcpu);
/* On: records are written without raising an interrupt (this thread;
 * a TICK, whose guest handler drains the ring next). */
void ring_quiet(bool on);
/*
 * One sample of slot sl (m: its overflow message) into vcpu's ring, and
 * the interrupt when due; with wait, return only once it is raised (the
 * new one or the one outstanding).  Returns PVPERF_PROTO_WRITTEN or _LOST,
 * with _RANG.  Guest RAM is touched: call it inside link_enter().
 */
unsigned ring_deliver(unsigned vcpu, const struct pvperf_sample_slot *sl,
		      const struct pvperf_proto_overflow *m, bool wait);
/* Write the vCPU's doorbell (if write) and wait until QEMU took it. */
void ring_doorbell(struct pvperf_vcpu *v, bool write);
/* Verbose: how long a SYNC overflow held its vCPU (us), and the report. */
void ring_note_wait(struct pvperf_vcpu *v, int64_t us);
void ring_report(unsigned vcpu);

#endif /* PVPERF_RING_H */
