// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_event.c - host events: each perf event is an event on the pvperf
 * host, OPENed at event_init and CLOSEd at destroy, ENABLEd and DISABLEd
 * by start and stop; the host writes its count into guest memory.  Page
 * faults are reported here too, as long as any event counts.
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/atomic.h>
#include <linux/errno.h>
#include <linux/idr.h>
#include <linux/jiffies.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/perf_event.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "pvperf.h"

static bool buffered = true;
module_param(buffered, bool, 0644);
MODULE_PARM_DESC(buffered,
		 "let events without callchains buffer samples (interrupt at the watermark)");

/*
 * Events started (ENABLEd on the host) on any CPU.  Lets the page-fault
 * report return at once when nothing counts; inc/dec in start()/stop(),
 * read from the fault path on every CPU, hence atomic.
 */
static atomic_t pvperf_nr_started = ATOMIC_INIT(0);

/* Event ids, unique per guest as the ABI asks. */
static DEFINE_IDA(pvperf_ida);

/* Sample fields that need the registers or stack of the sampled moment. */
#define PVPERF_UNBUFFERED_SAMPLE_TYPE	(PERF_SAMPLE_CALLCHAIN | \
					 PERF_SAMPLE_REGS_USER | \
					 PERF_SAMPLE_STACK_USER | \
					 PERF_SAMPLE_REGS_INTR | \
					 PERF_SAMPLE_BRANCH_STACK)

static bool pvperf_buffered_ok(const struct perf_event_attr *attr)
{
	return READ_ONCE(buffered) && attr->sample_period && !attr->freq &&
	       !(attr->sample_type & PVPERF_UNBUFFERED_SAMPLE_TYPE);
}

static u64 pvperf_attr_flags(const struct perf_event_attr *attr)
{
	u64 flags = 0;

	if (attr->exclude_user)
		flags |= PVPERF_ATTR_EXCLUDE_USER;
	if (attr->exclude_kernel)
		flags |= PVPERF_ATTR_EXCLUDE_KERNEL;
	if (attr->exclude_hv)
		flags |= PVPERF_ATTR_EXCLUDE_HV;
	if (attr->exclude_idle)
		flags |= PVPERF_ATTR_EXCLUDE_IDLE;
	if (attr->freq)
		flags |= PVPERF_ATTR_FREQ;
	flags |= ((u64)attr->precise_ip << PVPERF_ATTR_PRECISE_SHIFT) &
		 PVPERF_ATTR_PRECISE_MASK;
	if (attr->exclude_guest)
		flags |= PVPERF_ATTR_EXCLUDE_GUEST;
	if (attr->exclude_host)
		flags |= PVPERF_ATTR_EXCLUDE_HOST;
	if (pvperf_buffered_ok(attr))
		flags |= PVPERF_ATTR_BUFFERED;
	return flags;
}

static void pvperf_fill_open(struct pvperf_event *pe,
			     const struct perf_event_attr *attr, u64 period)
{
	pe->attr.type = attr->type;
	pe->attr.config = attr->config;
	pe->attr.sample_period = period;	/* hwc's: 1 in freq mode */
	pe->programmed_period = period;
	pe->attr.sample_type = attr->sample_type;
	pe->attr.read_format = attr->read_format;
	pe->attr.flags = pvperf_attr_flags(attr);

	pe->param.attr_addr = __pa(&pe->attr);
	pe->param.guest_event_addr = __pa(&pe->gpe);
	pe->param.id = pe->id;
}

/* Allocate an id and the shared memory, and OPEN the host event. */
struct pvperf_event *pvperf_host_open(const struct perf_event_attr *attr,
				      u64 period)
{
	struct pvperf_event *pe;
	int id, err;

	/* Naturally aligned (kmalloc-128): no member straddles a page. */
	BUILD_BUG_ON(sizeof(*pe) > 128);
	BUILD_BUG_ON(offsetof(struct pvperf_event, gpe) % 8);

	pe = kzalloc(sizeof(*pe), GFP_KERNEL);
	if (!pe)
		return ERR_PTR(-ENOMEM);

	id = ida_alloc_max(&pvperf_ida, PVPERF_MAX_EVENT_ID - 1, GFP_KERNEL);
	if (id < 0) {
		pr_debug("no free event id: %d\n", id);
		err = -ENOSPC;
		goto free_pe;
	}
	pe->id = id;
	pvperf_fill_open(pe, attr, period);

	err = pvperf_op(PVPERF_OP_OPEN, __pa(&pe->param));
	if (err) {
		pr_debug("host refused event type=%u config=%#llx: %d\n",
			 attr->type, attr->config, err);
		goto free_id;
	}
	return pe;

free_id:
	ida_free(&pvperf_ida, id);
free_pe:
	kfree(pe);
	return ERR_PTR(err);
}

/*
 * An inherited event is created inside fork() (perf_event_init_task):
 * failing its event_init fails the fork.  When the host refuses or is gone,
 * the child gets an event without a host side that counts nothing, and the
 * user is told; the workload keeps running.
 */
struct pvperf_event *pvperf_detached_event(int why)
{
	struct pvperf_event *pe = kzalloc(sizeof(*pe), GFP_KERNEL);

	if (!pe)
		return ERR_PTR(-ENOMEM);
	pe->id = PVPERF_ID_DETACHED;
	pr_warn_ratelimited("host refused an inherited event (%d): that child is not counted\n",
			    why);
	return pe;
}

/* One per-event hypercall; a detached event has nothing to talk to. */
int pvperf_event_op(struct pvperf_event *pe, u32 op)
{
	return pvperf_detached(pe) ? 0 : pvperf_op(op, pe->id);
}

/*
 * PVPERF_COUNT_LINGER_MS after the last CLOSE the host still counts (a
 * mode switch retranslates all guest code); this PROBE lets it stop.  A
 * later CLOSE postpones it; a PROBE while events are open changes nothing.
 */
static void pvperf_linger_end(struct work_struct *work)
{
	pvperf_hypercall(PVPERF_OP_PROBE, 0, 0, 0);
}

static DECLARE_DELAYED_WORK(pvperf_linger_work, pvperf_linger_end);

void pvperf_event_destroy(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	int err;

	event->pmu_private = NULL;
	if (pvperf_detached(pe)) {
		kfree(pe);
		return;
	}
	err = pvperf_op(PVPERF_OP_CLOSE, pe->id);
	if (err) {
		/*
		 * The host may still hold the gpa of pe->gpe and the id: leak
		 * both rather than let it write into reused memory or alias a
		 * new event.
		 */
		pr_warn_ratelimited("CLOSE of event %u failed (%d), leaking it\n",
				    pe->id, err);
		return;
	}
	ida_free(&pvperf_ida, pe->id);
	kfree(pe);
	/* +100 ms: guest and host clocks need not agree to the tick. */
	mod_delayed_work(system_wq, &pvperf_linger_work,
			 msecs_to_jiffies(PVPERF_COUNT_LINGER_MS + 100));
}

/* Fold what the host counted since the last fold into event->count. */
void pvperf_event_update(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	u64 now = READ_ONCE(pe->gpe.count);
	u64 prev = local64_xchg(&event->hw.prev_count, now);

	local64_add(now - prev, &event->count);
}

/*
 * perf core changed hwc->sample_period (frequency mode: perf_adjust_period
 * on an overflow or a tick; PERF_EVENT_IOC_PERIOD): tell the host, which
 * restarts the countdown with it.  `rearm`: even if unchanged (a
 * frequency-mode event is one-shot on the host, see pvperf_abi.h).
 */
void pvperf_sync_period(struct perf_event *event, bool rearm)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	u64 period = min_t(u64, hwc->sample_period, PVPERF_MAX_PERIOD);
	int err;

	/*
	 * Frequency mode starts at period 1 and relies on a fast interrupt
	 * to grow it; our overflow interrupt takes a round trip through the
	 * host (~1 ms), so start where a few thousand samples a second are
	 * likely.  last_period
	 * then tells perf_adjust_period() what really elapsed.
	 */
	if (event->attr.freq)
		period = max_t(u64, period, PVPERF_FREQ_MIN_PERIOD);
	if ((!rearm && period == pe->programmed_period) || pvperf_detached(pe))
		return;
	err = pvperf_op3(PVPERF_OP_SET_PERIOD, pe->id, period, 0);
	if (err) {
		pr_warn_ratelimited("SET_PERIOD of event %u to %llu failed: %d\n",
				    pe->id, period, err);
		return;
	}
	pe->programmed_period = period;
	hwc->last_period = period;
}

void pvperf_event_start(struct perf_event *event, int flags)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	int err;

	if (WARN_ON_ONCE(!(hwc->state & PERF_HES_STOPPED)))
		return;
	if (flags & PERF_EF_RELOAD)
		WARN_ON_ONCE(!(hwc->state & PERF_HES_UPTODATE));
	hwc->state = 0;
	if (is_sampling_event(event))
		pvperf_sync_period(event, false);

	/*
	 * Count before ENABLE (and DISABLE before uncounting in stop()), so
	 * the fault report covers every instant the host may be counting.
	 */
	atomic_inc(&pvperf_nr_started);
	err = pvperf_event_op(pe, PVPERF_OP_ENABLE);
	if (err)
		pr_warn_ratelimited("ENABLE of event %u failed: %d\n", pe->id, err);
}

void pvperf_event_stop(struct perf_event *event, int flags)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	int err;

	if (!(hwc->state & PERF_HES_STOPPED)) {
		/* The host syncs pe->gpe.count on DISABLE. */
		err = pvperf_event_op(pe, PVPERF_OP_DISABLE);
		if (err)
			pr_warn_ratelimited("DISABLE of event %u failed: %d\n",
					    pe->id, err);
		atomic_dec(&pvperf_nr_started);
		hwc->state |= PERF_HES_STOPPED;
	}
	if ((flags & PERF_EF_UPDATE) && !(hwc->state & PERF_HES_UPTODATE)) {
		pvperf_event_update(event);
		hwc->state |= PERF_HES_UPTODATE;
	}
}

/*
 * A page fault at @ip: the plugin counted the faulting instruction once
 * before the fault and counts it again when it runs after the handler;
 * FAULT makes the host take one back.  Called by the architecture's fault
 * hook (pvperf_arch.h).
 */
void pvperf_report_fault(unsigned long ip, bool user)
{
	if (!atomic_read(&pvperf_nr_started))
		return;
	/* Nothing to do about a failure here: the count stays one high. */
	pvperf_hypercall(PVPERF_OP_FAULT, ip,
			 user ? PVPERF_MODE_USER : PVPERF_MODE_KERNEL, 0);
}

/* Module exit: no event is left, so no CLOSE can queue the PROBE again. */
void pvperf_linger_cancel(void)
{
	cancel_delayed_work_sync(&pvperf_linger_work);
}

void pvperf_ids_destroy(void)
{
	ida_destroy(&pvperf_ida);
}
