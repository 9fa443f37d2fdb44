// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_pmu.c - paravirtual PMU for x86_64 guests under QEMU TCG.
 *
 * TCG emulates no hardware PMU, so Linux 6.1 says "PMU not available due to
 * virtualization, using software events only" and registers no "cpu" PMU.
 * This driver registers one, under that name and with type PERF_TYPE_RAW,
 * so stock perf routes every PERF_TYPE_HARDWARE, HW_CACHE and RAW event to
 * it.  Each perf event becomes an event on the pvperf host (a QEMU TCG
 * plugin plus a host service) through the hypercalls of pvperf_abi.h, which
 * follow the 2010 KVM paravirtual perf interface: OPEN, ENABLE, DISABLE,
 * READ, CLOSE, and the host writes the count into guest memory.  Beyond the
 * seed, PMU_DISABLE/PMU_ENABLE freeze and thaw a vCPU's events (x86's
 * global control) and FAULT keeps counts exact across page faults.
 *
 * The host decides which events it can count: OPEN returns -ENOENT for the
 * ones it cannot, and that goes back to perf unchanged (perf falls back to
 * another event only on ENOENT, ENXIO and ENODEV).
 *
 * Counting only, for now: sampling needs the host's NMI and
 * perf_event_overflow(), see the FIXME in pvperf_event_init().
 *
 * The same file is the out-of-tree module (guest_kernel_patch/ in pvperf)
 * and arch/x86/events/pvperf/pvperf_pmu.c in the in-tree patch, which
 * guest_kernel_patch/make-patch.sh generates from it.
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/atomic.h>
#include <linux/cpumask.h>
#include <linux/errno.h>
#include <linux/hardirq.h>
#include <linux/idr.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>
#include <linux/slab.h>
#include <linux/tracepoint.h>
#include <asm/page.h>
#include <asm/ptrace.h>
#include <asm/trap_pf.h>

#include <asm/pvperf_abi.h>

/*
 * Counters each CPU may have started at once.  The host counts in software
 * and has no such limit; declaring one keeps perf's scheduling honest (add()
 * fails with -EAGAIN and perf multiplexes) and the host's per-guest work
 * bounded.
 */
#define PVPERF_COUNTERS_PER_CPU		8

/*
 * Hypercall blocks per CPU: one for task and IRQ context, one for NMI
 * context.  local_irq_save() keeps a hypercall from being interrupted by
 * another one on the same CPU, but not by an NMI, and an NMI handler may
 * issue its own (a page fault in an NMI reaches pvperf_fault_probe();
 * sampling will read and stop events from the overflow NMI).  NMIs do not
 * nest, so two blocks suffice.
 */
#define PVPERF_HCALL_CTX_TASK		0
#define PVPERF_HCALL_CTX_NMI		1
#define PVPERF_HCALL_NR_CTX		2

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
};

/*
 * The blocks of each CPU; written once at init, read in pvperf_hypercall().
 * Not DEFINE_PER_CPU_READ_MOSTLY: the module loader (6.1) relocates only
 * .data..percpu, a module's .data..percpu..read_mostly is not per-CPU at all.
 */
static DEFINE_PER_CPU(struct pvperf_hcall *, pvperf_hcall_blocks);

/*
 * Counters in use on each CPU (added, not yet deleted).  Only touched by
 * add() and del(), which perf calls on that CPU with IRQs disabled.
 */
static DEFINE_PER_CPU(unsigned int, pvperf_nr_added);

/*
 * Events started (ENABLEd on the host) on any CPU.  Lets the page-fault
 * probe return at once when nothing counts; inc/dec in start()/stop(),
 * read from the fault path on every CPU, hence atomic.
 */
static atomic_t pvperf_nr_started = ATOMIC_INIT(0);

/* Event ids, unique per guest as the ABI asks. */
static DEFINE_IDA(pvperf_ida);

static struct tracepoint *pvperf_tp_fault_user;
static struct tracepoint *pvperf_tp_fault_kernel;

/* ----------------------------------------------------------------------
 * Transport
 */

/*
 * Issue one hypercall on the current CPU and return the host's ->ret.
 *
 * The only place that executes the doorbell store: noinline keeps it one
 * instruction in the module text, which tests/test_driver_build.py checks.
 * The store must be exactly "movl $PVPERF_DOORBELL_MAGIC, (%rax)" (c7 00 50
 * 56 50 46), the pattern the TCG plugin matches at translation time; the
 * "memory" clobber orders the block's fields before it and the read of
 * ->ret, which the host writes before the vCPU continues, after it.
 * Without a host the store is just a store and ->ret stays -ENOSYS.
 */
static noinline s64 pvperf_hypercall(u32 op, u64 arg0, u64 arg1)
{
	struct pvperf_hcall *hc;
	unsigned long flags;
	s64 ret;

	local_irq_save(flags);
	hc = this_cpu_read(pvperf_hcall_blocks) +
	     (in_nmi() ? PVPERF_HCALL_CTX_NMI : PVPERF_HCALL_CTX_TASK);
	hc->nr = PVPERF_HC_PERF_OP;
	hc->op = op;
	hc->args[0] = arg0;
	hc->args[1] = arg1;
	hc->args[2] = 0;
	hc->ret = -ENOSYS;	/* the ABI's "no host" value */
	asm volatile("movl %[magic], (%[block])"
		     : /* no outputs: the host writes hc->ret */
		     : [block] "a" (hc), [magic] "i" (PVPERF_DOORBELL_MAGIC)
		     : "memory");
	ret = READ_ONCE(hc->ret);
	local_irq_restore(flags);
	return ret;
}

/*
 * An operation whose result is 0 or a negative errno.  The host's value is
 * not trusted to be either: anything else becomes -EIO.
 */
static int pvperf_op(u32 op, u64 arg0)
{
	s64 ret = pvperf_hypercall(op, arg0, 0);

	if (ret == 0 || (ret < 0 && ret >= -MAX_ERRNO))
		return ret;
	pr_warn_ratelimited("host returned %lld for op %u (arg %#llx)\n",
			    ret, op, arg0);
	return -EIO;
}

static int pvperf_hcall_blocks_alloc(void)
{
	struct pvperf_hcall *hc;
	int cpu;

	for_each_possible_cpu(cpu) {
		/* 128 bytes: kmalloc aligns power-of-two sizes naturally. */
		hc = kzalloc_node(PVPERF_HCALL_NR_CTX * sizeof(*hc), GFP_KERNEL,
				  cpu_to_node(cpu));
		if (!hc)
			return -ENOMEM;	/* the caller frees what was made */
		per_cpu(pvperf_hcall_blocks, cpu) = hc;
		if (WARN_ON_ONCE(!IS_ALIGNED((unsigned long)hc, 64)))
			return -EINVAL;
	}
	return 0;
}

static void pvperf_hcall_blocks_free(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		kfree(per_cpu(pvperf_hcall_blocks, cpu));
		per_cpu(pvperf_hcall_blocks, cpu) = NULL;
	}
}

/* ----------------------------------------------------------------------
 * Host events
 */

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
	return flags;
}

static void pvperf_fill_open(struct pvperf_event *pe,
			     const struct perf_event_attr *attr)
{
	pe->attr.type = attr->type;
	pe->attr.config = attr->config;
	pe->attr.sample_period = attr->sample_period;
	pe->attr.sample_type = attr->sample_type;
	pe->attr.read_format = attr->read_format;
	pe->attr.flags = pvperf_attr_flags(attr);

	pe->param.attr_addr = __pa(&pe->attr);
	pe->param.guest_event_addr = __pa(&pe->gpe);
	pe->param.id = pe->id;
}

/* Allocate an id and the shared memory, and OPEN the host event. */
static struct pvperf_event *pvperf_host_open(const struct perf_event_attr *attr)
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
	pvperf_fill_open(pe, attr);

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

static void pvperf_event_destroy(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	int err;

	event->pmu_private = NULL;
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
}

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

	/*
	 * FIXME: sampling.  The host will count the period down, record the
	 * exact overflowing IP and inject an NMI; the handler then needs
	 * perf_event_overflow(), which 6.1 does not export to modules (the
	 * in-tree form can call it; the module must be handed its address).
	 */
	if (is_sampling_event(event)) {
		pr_debug("sampling is not supported yet\n");
		return -EOPNOTSUPP;
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

	pe = pvperf_host_open(attr);
	if (IS_ERR(pe))
		return PTR_ERR(pe);

	event->pmu_private = pe;
	event->destroy = pvperf_event_destroy;
	hwc->idx = -1;		/* no rdpmc: perf_event_idx_default() */
	hwc->state = PERF_HES_STOPPED | PERF_HES_UPTODATE;
	local64_set(&hwc->prev_count, 0);	/* a new host event counts from 0 */
	return 0;
}

/* Fold what the host counted since the last fold into event->count. */
static void pvperf_event_update(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	u64 now = READ_ONCE(pe->gpe.count);
	u64 prev = local64_xchg(&event->hw.prev_count, now);

	local64_add(now - prev, &event->count);
}

static void pvperf_event_start(struct perf_event *event, int flags)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	int err;

	if (WARN_ON_ONCE(!(hwc->state & PERF_HES_STOPPED)))
		return;
	if (flags & PERF_EF_RELOAD)
		WARN_ON_ONCE(!(hwc->state & PERF_HES_UPTODATE));
	hwc->state = 0;

	/*
	 * Count before ENABLE (and DISABLE before uncounting in stop()), so
	 * the fault probe covers every instant the host may be counting.
	 */
	atomic_inc(&pvperf_nr_started);
	err = pvperf_op(PVPERF_OP_ENABLE, pe->id);
	if (err)
		pr_warn_ratelimited("ENABLE of event %u failed: %d\n", pe->id, err);
}

static void pvperf_event_stop(struct perf_event *event, int flags)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	int err;

	if (!(hwc->state & PERF_HES_STOPPED)) {
		/* The host syncs pe->gpe.count on DISABLE. */
		err = pvperf_op(PVPERF_OP_DISABLE, pe->id);
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

static int pvperf_event_add(struct perf_event *event, int flags)
{
	/* perf calls add() and del() on this CPU with IRQs disabled. */
	if (__this_cpu_read(pvperf_nr_added) >= PVPERF_COUNTERS_PER_CPU)
		return -EAGAIN;
	__this_cpu_inc(pvperf_nr_added);

	event->hw.state = PERF_HES_STOPPED | PERF_HES_UPTODATE;
	if (flags & PERF_EF_START)
		pvperf_event_start(event, PERF_EF_RELOAD);
	return 0;
}

static void pvperf_event_del(struct perf_event *event, int flags)
{
	pvperf_event_stop(event, PERF_EF_UPDATE);
	__this_cpu_dec(pvperf_nr_added);
}

static void pvperf_event_read(struct perf_event *event)
{
	struct pvperf_event *pe = event->pmu_private;
	int err;

	if (!(event->hw.state & PERF_HES_STOPPED)) {
		/* The host syncs pe->gpe.count on READ. */
		err = pvperf_op(PVPERF_OP_READ, pe->id);
		if (err)
			pr_warn_ratelimited("READ of event %u failed: %d\n",
					    pe->id, err);
	}
	pvperf_event_update(event);
}

/*
 * Freeze and thaw every event of this vCPU at one instruction, as x86 does
 * with PERF_GLOBAL_CTRL, so that the members of a group start, stop and
 * are read at the same instruction and perf stat's ratios are consistent.
 *
 * Two callers nest: perf core's pmu_disable/pmu_enable (nested by core's
 * pmu_disable_count) and the group transactions below, which core's
 * default stubs would not freeze for PERF_PMU_TXN_READ.  The per-CPU depth
 * issues one PMU_DISABLE on the way in and one PMU_ENABLE on the way out.
 * All run on this CPU with IRQs disabled; this_cpu_*_return() is also
 * safe against an NMI on x86.
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

static void pvperf_pmu_disable(struct pmu *pmu)
{
	pvperf_freeze();
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

/* ----------------------------------------------------------------------
 * sysfs: format/ and events/, so that stock perf can name the events
 */

PMU_FORMAT_ATTR(event, "config:0-7");
PMU_FORMAT_ATTR(umask, "config:8-15");

static struct attribute *pvperf_format_attrs[] = {
	&format_attr_event.attr,
	&format_attr_umask.attr,
	NULL,
};

static const struct attribute_group pvperf_format_group = {
	.name = "format",
	.attrs = pvperf_format_attrs,
};

/*
 * The x86 architectural encodings (Intel SDM vol. 3, "Architectural
 * Performance Monitoring"); the host maps them to what it counts.
 */
PMU_EVENT_ATTR_STRING(cpu-cycles, pvperf_ev_cpu_cycles, "event=0x3c");
PMU_EVENT_ATTR_STRING(instructions, pvperf_ev_instructions, "event=0xc0");
PMU_EVENT_ATTR_STRING(branch-instructions, pvperf_ev_branch_instructions,
		      "event=0xc4");
PMU_EVENT_ATTR_STRING(branch-misses, pvperf_ev_branch_misses, "event=0xc5");
PMU_EVENT_ATTR_STRING(bus-cycles, pvperf_ev_bus_cycles,
		      "event=0x3c,umask=0x01");
PMU_EVENT_ATTR_STRING(ref-cycles, pvperf_ev_ref_cycles,
		      "event=0x00,umask=0x03");

static struct attribute *pvperf_events_attrs[] = {
	&pvperf_ev_cpu_cycles.attr.attr,
	&pvperf_ev_instructions.attr.attr,
	&pvperf_ev_branch_instructions.attr.attr,
	&pvperf_ev_branch_misses.attr.attr,
	&pvperf_ev_bus_cycles.attr.attr,
	&pvperf_ev_ref_cycles.attr.attr,
	NULL,
};

static const struct attribute_group pvperf_events_group = {
	.name = "events",
	.attrs = pvperf_events_attrs,
};

static const struct attribute_group *pvperf_attr_groups[] = {
	&pvperf_format_group,
	&pvperf_events_group,
	NULL,
};

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
 * Exact counts across page faults
 *
 * The plugin counts the faulting instruction once before the fault, and
 * again when it runs after the handler: FAULT makes the host take one back.
 * The exceptions:page_fault_{user,kernel} tracepoints fire in
 * handle_page_fault() (arch/x86/mm/fault.c) before IRQs are enabled, so no
 * ENABLE or DISABLE can slip between the fault and its FAULT.
 */

static void pvperf_fault_probe(void *data, unsigned long address,
			       struct pt_regs *regs, unsigned long error_code)
{
	if (!atomic_read(&pvperf_nr_started))
		return;
	/* An instruction fetch faulted: TCG counted nothing. */
	if (error_code & X86_PF_INSTR)
		return;
	/* Nothing to do about a failure here: the count stays one high. */
	pvperf_hypercall(PVPERF_OP_FAULT, regs->ip,
			 user_mode(regs) ? PVPERF_MODE_USER : PVPERF_MODE_KERNEL);
}

/* Not exported to modules: find them by name. */
static void pvperf_find_tracepoint(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "page_fault_user"))
		pvperf_tp_fault_user = tp;
	else if (!strcmp(tp->name, "page_fault_kernel"))
		pvperf_tp_fault_kernel = tp;
}

static int pvperf_fault_probes_register(void)
{
	int err;

	for_each_kernel_tracepoint(pvperf_find_tracepoint, NULL);
	if (!pvperf_tp_fault_user || !pvperf_tp_fault_kernel) {
		pr_err("tracepoints exceptions:page_fault_{user,kernel} not found: counts would not be exact\n");
		return -ENODEV;
	}

	err = tracepoint_probe_register(pvperf_tp_fault_user,
					pvperf_fault_probe, NULL);
	if (err)
		return err;
	err = tracepoint_probe_register(pvperf_tp_fault_kernel,
					pvperf_fault_probe, NULL);
	if (err) {
		tracepoint_probe_unregister(pvperf_tp_fault_user,
					    pvperf_fault_probe, NULL);
		tracepoint_synchronize_unregister();
	}
	return err;
}

static void pvperf_fault_probes_unregister(void)
{
	tracepoint_probe_unregister(pvperf_tp_fault_kernel,
				    pvperf_fault_probe, NULL);
	tracepoint_probe_unregister(pvperf_tp_fault_user,
				    pvperf_fault_probe, NULL);
	/* No probe may still be running, on the hcall blocks, after this. */
	tracepoint_synchronize_unregister();
}

/* ----------------------------------------------------------------------
 * Module init and exit
 */

static int pvperf_probe_host(void)
{
	s64 ret = pvperf_hypercall(PVPERF_OP_PROBE, 0, 0);

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
	err = pvperf_fault_probes_register();
	if (err)
		goto free_blocks;
	err = perf_pmu_register(&pvperf_pmu, "cpu", PERF_TYPE_RAW);
	if (err) {
		pr_err("cannot register PMU \"cpu\" as type %d: %d\n",
		       PERF_TYPE_RAW, err);
		goto unregister_probes;
	}
	pr_info("PMU \"cpu\" registered, %d counters per CPU, counting only\n",
		PVPERF_COUNTERS_PER_CPU);
	return 0;

unregister_probes:
	pvperf_fault_probes_unregister();
free_blocks:
	pvperf_hcall_blocks_free();
	return err;
}

static void __exit pvperf_exit(void)
{
	/* No event is left: each holds a reference on this module. */
	perf_pmu_unregister(&pvperf_pmu);
	pvperf_fault_probes_unregister();
	pvperf_hcall_blocks_free();
	ida_destroy(&pvperf_ida);
}

module_init(pvperf_init);
module_exit(pvperf_exit);

MODULE_DESCRIPTION("pvperf: paravirtual PMU for x86_64 guests under QEMU TCG");
MODULE_LICENSE("GPL");
