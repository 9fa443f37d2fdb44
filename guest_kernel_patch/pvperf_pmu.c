// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_pmu.c - paravirtual PMU for guests under QEMU TCG.
 *
 * TCG emulates no hardware PMU, so Linux 6.1 says "PMU not available due to
 * virtualization, using software events only" and registers no "cpu" PMU.
 * This driver registers one, under that name and with type PERF_TYPE_RAW,
 * so stock perf routes every PERF_TYPE_HARDWARE, HW_CACHE and RAW event to
 * it.  Each perf event becomes an event on the pvperf host (a QEMU TCG
 * plugin plus a host service) through the hypercalls of pvperf_abi.h, which
 * follow the 2010 KVM paravirtual perf interface: OPEN, ENABLE, DISABLE,
 * READ, CLOSE, and the host writes the count into guest memory.  On top of
 * those, PMU_DISABLE/PMU_ENABLE freeze and thaw a vCPU's events (a
 * hardware PMU's global control) and FAULT keeps counts exact across page
 * faults.
 *
 * The host decides which events it can count: OPEN returns -ENOENT for the
 * ones it cannot, and that goes back to perf unchanged (perf falls back to
 * another event only on ENOENT, ENXIO and ENODEV).
 *
 * This file is the struct pmu and module init and exit; pvperf.h lists the
 * others.  The same files are the out-of-tree module (guest_kernel_patch/
 * in pvperf) and arch/x86/events/pvperf/ in the in-tree patch, which
 * guest_kernel_patch/make-patch.sh generates from them.
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/errno.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>

#include "pvperf.h"
#include "pvperf_arch.h"

/*
 * Counters in use on each CPU (added, not yet deleted).  Only touched by
 * add() and del(), which perf calls on that CPU with IRQs disabled.
 */
static DEFINE_PER_CPU(unsigned int, pvperf_nr_added);

/* ----------------------------------------------------------------------
 * struct pmu callbacks
 */

/* Hardware events of @event's group on this PMU, @event included. */
static int pvperf_group_size(struct perf_event *event)
{
	struct perf_event *leader = event->group_leader;
	struct perf_event *sibling;
	int n = 1;

	if (leader == event)
		return n;
	/* perf_try_init_event() holds the leader's ctx->mutex for siblings. */
	if (leader->pmu == event->pmu)
		n++;
	for_each_sibling_event(sibling, leader) {
		if (sibling->pmu == event->pmu)
			n++;
	}
	return n;
}

static int pvperf_event_init(struct perf_event *event)
{
	struct perf_event_attr *attr = &event->attr;
	struct hw_perf_event *hwc = &event->hw;
	struct pvperf_event *pe;

	switch (attr->type) {
	case PERF_TYPE_HARDWARE:
	case PERF_TYPE_HW_CACHE:
	case PERF_TYPE_RAW:
		break;
	default:
		return -ENOENT;
	}

	if (is_sampling_event(event) && !pvperf_can_sample()) {
		pr_debug("sampling needs perf_event_overflow and an overflow interrupt, and one is missing\n");
		return -EOPNOTSUPP;
	}
	if (attr->precise_ip > 3) {
		pr_debug("precise_ip %u > 3\n", attr->precise_ip);
		return -EINVAL;
	}
	if (has_branch_stack(event)) {
		pr_debug("branch stack sampling is not supported\n");
		return -EOPNOTSUPP;
	}
	if (attr->config1 || attr->config2) {
		pr_debug("config1/config2 are not used and must be 0\n");
		return -EINVAL;
	}
	if (pvperf_group_size(event) > PVPERF_COUNTERS_PER_CPU) {
		pr_debug("group has more than %d events: never schedulable\n",
			 PVPERF_COUNTERS_PER_CPU);
		return -EINVAL;
	}

	pe = pvperf_host_open(attr, !is_sampling_event(event) ? 0 :
			      attr->freq ? max_t(u64, hwc->sample_period,
						 PVPERF_FREQ_MIN_PERIOD) :
			      hwc->sample_period);
	if (IS_ERR(pe) && event->parent)
		pe = pvperf_detached_event(PTR_ERR(pe));
	if (IS_ERR(pe))
		return PTR_ERR(pe);

	event->pmu_private = pe;
	event->destroy = pvperf_event_destroy;
	hwc->idx = -1;		/* no rdpmc: perf_event_idx_default() */
	hwc->last_period = pe->programmed_period ?: hwc->sample_period;
	hwc->state = PERF_HES_STOPPED | PERF_HES_UPTODATE;
	local64_set(&hwc->prev_count, 0);	/* a new host event counts from 0 */
	return 0;
}

static int pvperf_event_add(struct perf_event *event, int flags)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	int i;

	/* perf calls add() and del() on this CPU with IRQs disabled. */
	if (__this_cpu_read(pvperf_nr_added) >= PVPERF_COUNTERS_PER_CPU)
		return -EAGAIN;
	for (i = 0; i < PVPERF_COUNTERS_PER_CPU && pc->active[i]; i++)
		;
	if (WARN_ON_ONCE(i == PVPERF_COUNTERS_PER_CPU))
		return -EAGAIN;
	WRITE_ONCE(pc->active[i], event);
	__this_cpu_inc(pvperf_nr_added);

	event->hw.state = PERF_HES_STOPPED | PERF_HES_UPTODATE;
	if (flags & PERF_EF_START)
		pvperf_event_start(event, PERF_EF_RELOAD);
	return 0;
}

static void pvperf_event_del(struct perf_event *event, int flags)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	int i;

	pvperf_event_stop(event, PERF_EF_UPDATE);
	/*
	 * DISABLE went through the vCPU's one connection after every overflow
	 * the plugin sent before it, so the ring holds all of this event's
	 * records: deliver them while the task they belong to is current.
	 */
	if (is_sampling_event(event))
		pvperf_drain(NULL);
	for (i = 0; i < PVPERF_COUNTERS_PER_CPU; i++) {
		if (pc->active[i] == event)
			WRITE_ONCE(pc->active[i], NULL);
	}
	__this_cpu_dec(pvperf_nr_added);
}

static void pvperf_event_read(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	int err;

	if (!(event->hw.state & PERF_HES_STOPPED)) {
		/* The host syncs pe->gpe.count on READ. */
		err = pvperf_event_op(pe, PVPERF_OP_READ);
		if (err)
			pr_warn_ratelimited("READ of event %u failed: %d\n",
					    pe->id, err);
		if (is_sampling_event(event))
			pvperf_drain(NULL);
	}
	pvperf_event_update(event);
}

/*
 * Freeze and thaw every event of this vCPU at one instruction, as a
 * hardware PMU's global enable does, so that the members of a group start,
 * stop and are read at the same instruction and perf stat's ratios are
 * consistent.
 *
 * Two callers nest: perf core's pmu_disable/pmu_enable (nested by core's
 * pmu_disable_count) and the group transactions below, which core's
 * default stubs would not freeze for PERF_PMU_TXN_READ.  The per-CPU depth
 * issues one PMU_DISABLE on the way in and one PMU_ENABLE on the way out.
 * All run on this CPU with IRQs disabled; this_cpu_*_return() is one
 * read-modify-write of this CPU's depth, which no interrupt can split.
 */
static DEFINE_PER_CPU(unsigned int, pvperf_freeze_depth);

static void pvperf_freeze(void)
{
	int err;

	if (this_cpu_inc_return(pvperf_freeze_depth) != 1)
		return;
	err = pvperf_op(PVPERF_OP_PMU_DISABLE, 0);
	if (err)
		pr_warn_ratelimited("PMU_DISABLE failed: %d\n", err);
}

static void pvperf_thaw(void)
{
	int err;

	if (WARN_ON_ONCE(!this_cpu_read(pvperf_freeze_depth)))
		return;
	if (this_cpu_dec_return(pvperf_freeze_depth) != 0)
		return;
	err = pvperf_op(PVPERF_OP_PMU_ENABLE, 0);
	if (err)
		pr_warn_ratelimited("PMU_ENABLE failed: %d\n", err);
}

/*
 * PMU_DISABLE is answered after every record of the instructions before
 * it is in the ring; deliver them while their task is current (perf core
 * disables the PMU before it swaps two cloned contexts, when the sched
 * switch probe has drained too early: pvperf_drain_pending()).
 */
static void pvperf_pmu_disable(struct pmu *pmu)
{
	pvperf_freeze();
	pvperf_drain_pending();
}

static void pvperf_pmu_enable(struct pmu *pmu)
{
	pvperf_thaw();
}

/* PERF_PMU_TXN_ADD (group_sched_in) and PERF_PMU_TXN_READ (group read). */
static void pvperf_start_txn(struct pmu *pmu, unsigned int txn_flags)
{
	pvperf_freeze();
}

static int pvperf_commit_txn(struct pmu *pmu)
{
	pvperf_thaw();
	return 0;
}

static void pvperf_cancel_txn(struct pmu *pmu)
{
	pvperf_thaw();
}

/*
 * Linux 6.2 ("perf: Rewrite core context handling") dropped both the one
 * perf_hw_context PMU check and this flag: nothing to ask for there.
 */
#ifndef PERF_PMU_CAP_HETEROGENEOUS_CPUS
#define PERF_PMU_CAP_HETEROGENEOUS_CPUS 0
#endif

static struct pmu pvperf_pmu = {
	.module		= THIS_MODULE,
	/* A hardware PMU: perf_hw_context, the "cpu" PMU's context. */
	.task_ctx_nr	= perf_hw_context,
	/*
	 * perf_pmu_register() (6.1) allows one perf_hw_context PMU and never
	 * forgets one was registered: without this flag a reload of the
	 * module WARNs and demotes the PMU to perf_invalid_context.
	 */
	.capabilities	= PERF_PMU_CAP_HETEROGENEOUS_CPUS,
	.attr_groups	= pvperf_attr_groups,
	.pmu_enable	= pvperf_pmu_enable,
	.pmu_disable	= pvperf_pmu_disable,
	.start_txn	= pvperf_start_txn,
	.commit_txn	= pvperf_commit_txn,
	.cancel_txn	= pvperf_cancel_txn,
	.event_init	= pvperf_event_init,
	.add		= pvperf_event_add,
	.del		= pvperf_event_del,
	.start		= pvperf_event_start,
	.stop		= pvperf_event_stop,
	.read		= pvperf_event_read,
};

/* ----------------------------------------------------------------------
 * Module init and exit
 */

static int pvperf_probe_host(void)
{
	s64 ret = pvperf_hypercall(PVPERF_OP_PROBE, 0, 0, 0);

	if (ret == PVPERF_ABI_VERSION) {
		pr_info("paravirtual PMU host interface v%d found\n",
			PVPERF_ABI_VERSION);
		return 0;
	}
	if (ret > 0)
		pr_warn("paravirtual PMU host interface v%lld, want v%d, not registering\n",
			ret, PVPERF_ABI_VERSION);
	else
		pr_warn("no paravirtual PMU host interface (ret=%lld), not registering\n",
			ret);
	return -ENODEV;
}

static int __init pvperf_init(void)
{
	int err;

	err = pvperf_hcall_blocks_alloc();
	if (err)
		goto free_blocks;
	err = pvperf_probe_host();
	if (err)
		goto free_blocks;
	err = pvperf_events_init();
	if (err)
		goto free_blocks;
	err = pvperf_samples_init();
	if (err)
		goto free_events;
	err = pvperf_arch_fault_hook_register(pvperf_report_fault);
	if (err)
		goto exit_samples;
	err = perf_pmu_register(&pvperf_pmu, "cpu", PERF_TYPE_RAW);
	if (err) {
		pr_err("cannot register PMU \"cpu\" as type %d: %d\n",
		       PERF_TYPE_RAW, err);
		goto unhook_faults;
	}
	if (pvperf_can_sample())
		pr_info("PMU \"cpu\" registered, %d counters per CPU, sampling with exact IPs\n",
			PVPERF_COUNTERS_PER_CPU);
	else
		pr_info("PMU \"cpu\" registered, %d counters per CPU, counting only (no perf_event_overflow or no overflow interrupt: see above)\n",
			PVPERF_COUNTERS_PER_CPU);
	return 0;

unhook_faults:
	pvperf_arch_fault_hook_unregister();
exit_samples:
	pvperf_samples_exit();
free_events:
	pvperf_events_free();
free_blocks:
	pvperf_hcall_blocks_free();
	return err;
}

static void __exit pvperf_exit(void)
{
	/* No event is left: each holds a reference on this module. */
	perf_pmu_unregister(&pvperf_pmu);
	pvperf_linger_cancel();
	pvperf_arch_fault_hook_unregister();
	pvperf_samples_exit();
	pvperf_events_free();
	pvperf_hcall_blocks_free();
	pvperf_ids_destroy();
}

module_init(pvperf_init);
module_exit(pvperf_exit);

MODULE_DESCRIPTION("pvperf: paravirtual PMU for guests under QEMU TCG");
MODULE_LICENSE("GPL");
