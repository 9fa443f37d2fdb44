/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pvperf.h - what the generic parts of the pvperf driver share.
 *
 * The driver is split by job, each file using only those below it:
 *
 *   pvperf_pmu.c     struct pmu: event_init, add, del, read, the group
 *                    freeze, module init and exit
 *   pvperf_sample.c  the per-CPU sample rings, their draining and the
 *                    overflow interrupt's handler
 *   pvperf_event.c   host events: OPEN, CLOSE, start, stop, periods, the
 *                    count, page-fault reports
 *   pvperf_sysfs.c   format/ and events/ for stock perf
 *   pvperf_hcall.c   the hypercall transport
 *   pvperf_doorbell.c  the overflow interrupt as an MSI-X vector of QEMU's
 *                    ivshmem-doorbell device, when the host gives one
 *   pvperf_arch.h    what the guest architecture provides, implemented by
 *                    one file per architecture (pvperf_<arch>.c)
 *
 * None of them names an architecture: registers, the marker store, the
 * overflow interrupt and the page-fault hook are behind pvperf_arch.h.
 */
#ifndef PVPERF_H
#define PVPERF_H

#include <linux/atomic.h>
#include <linux/perf_event.h>
#include <linux/types.h>

#include "pvperf_abi.h"

/*
 * Counters each CPU may have started at once.  The host counts in software
 * and has no such limit; declaring one keeps perf's scheduling honest (add()
 * fails with -EAGAIN and perf multiplexes) and the host's per-guest work
 * bounded.
 */
#define PVPERF_COUNTERS_PER_CPU		8

/* Smallest period programmed for a frequency-mode event (see sync). */
#define PVPERF_FREQ_MIN_PERIOD	10000

/* Per-event state, pointed to by event->pmu_private. */
struct pvperf_event {
	/*
	 * Written by the host (count synced on DISABLE and READ) for as long
	 * as the host event exists.  First member: kmalloc gives 8-byte
	 * alignment at least, as the ABI asks.
	 */
	struct pvperf_guest_perf_event gpe;
	/* Read by the host once, during OPEN. */
	struct pvperf_guest_perf_attr attr;
	struct pvperf_guest_perf_param param;
	u32 id;				/* event id, see pvperf_abi.h */
	u32 lost_reported;		/* gpe.lost told to perf so far */
	u64 programmed_period;		/* last period the host was given */
};

/* pvperf_event.id of an event without a host side (never a valid id). */
#define PVPERF_ID_DETACHED	U32_MAX

static inline bool pvperf_detached(const struct pvperf_event *pe)
{
	return pe->id == PVPERF_ID_DETACHED;
}

struct pvperf_cpu {
	struct pvperf_sample_buf *ring;	/* written at init/exit only */
	/*
	 * Events added on this CPU, to find a record's event by id.  Written
	 * by add()/del() (IRQs off), read by the overflow interrupt's
	 * handler: WRITE_ONCE / READ_ONCE, and del() drains before it clears
	 * its entry.
	 */
	struct perf_event *active[PVPERF_COUNTERS_PER_CPU];
	u32 interrupts_claimed;	/* compared with ring->nmis */
	u32 ticks_seen;		/* compared with ring->ticks */
	bool draining;		/* a drain runs on this CPU (no nesting) */
};

DECLARE_PER_CPU(struct pvperf_cpu, pvperf_cpu);

/* pvperf_hcall.c */
s64 pvperf_hypercall(u32 op, u64 arg0, u64 arg1, u64 arg2);
int pvperf_op3(u32 op, u64 arg0, u64 arg1, u64 arg2);
int pvperf_op(u32 op, u64 arg0);
int pvperf_hcall_blocks_alloc(void);
void pvperf_hcall_blocks_free(void);

/* pvperf_sysfs.c */
extern const struct attribute_group *pvperf_attr_groups[];
int pvperf_events_init(void);
void pvperf_events_free(void);

/* pvperf_event.c */
struct pvperf_event *pvperf_host_open(const struct perf_event_attr *attr,
				      u64 period);
struct pvperf_event *pvperf_detached_event(int why);
void pvperf_event_destroy(struct perf_event *event);
void pvperf_event_update(struct perf_event *event);
void pvperf_sync_period(struct perf_event *event, bool rearm);
void pvperf_event_start(struct perf_event *event, int flags);
void pvperf_event_stop(struct perf_event *event, int flags);
int pvperf_event_op(struct pvperf_event *pe, u32 op);
void pvperf_report_fault(unsigned long ip, bool user);
void pvperf_linger_cancel(void);
void pvperf_ids_destroy(void);

/* pvperf_sample.c */
bool pvperf_can_sample(void);
unsigned int pvperf_drain(struct pt_regs *irq_regs);
void pvperf_drain_pending(void);
int pvperf_samples_init(void);
void pvperf_samples_exit(void);

/* pvperf_doorbell.c (the handler's type: pvperf_arch.h) */
struct pt_regs;
bool pvperf_doorbell_register(bool (*handler)(struct pt_regs *regs));
void pvperf_doorbell_unregister(void);

#endif /* PVPERF_H */
