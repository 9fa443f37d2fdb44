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
 * Sampling (ABI v2): the host records the exact instruction at which a
 * sampling event's period runs out into this CPU's sample ring (struct
 * pvperf_sample_buf) and injects an NMI; the NMI handler delivers the
 * records with perf_event_overflow(), the sample's ip being the recorded
 * one.  "Buffered" events (no callchain, no register or stack dumps, not
 * frequency mode) get an NMI only when the ring reaches its watermark,
 * like PEBS; the ring is also drained when an event is deleted (context
 * switch) or read, so records are attributed to the task that ran.
 * perf_event_overflow() is not exported in 6.1: the module finds its
 * address with a kprobe (register_kprobe resolves the name in C; reading
 * /proc/kallsyms from the guest's /init cost 1.3 s of boot under TCG), or
 * takes it as the parameter overflow_addr; the in-tree build calls it
 * directly.
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
#include <linux/kprobes.h>
#include <linux/kernel.h>
#include <linux/gfp.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>
#include <linux/slab.h>
#include <linux/tracepoint.h>
#include <linux/workqueue.h>
#include <asm/apic.h>
#include <asm/nmi.h>
#include <asm/page.h>
#include <asm/ptrace.h>
#include <asm/segment.h>
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
	u32 lost_reported;		/* gpe.lost told to perf so far */
	u64 programmed_period;		/* last period the host was given */
};

/* pvperf_event.id of an event without a host side (never a valid id). */
#define PVPERF_ID_DETACHED	U32_MAX

static bool pvperf_detached(const struct pvperf_event *pe)
{
	return pe->id == PVPERF_ID_DETACHED;
}

/*
 * Sample rings: PVPERF_RING_ORDER pages per CPU, registered with the host
 * by SAMPLE_BUF on that CPU.  Buffered events raise the NMI at half full.
 */
#define PVPERF_RING_ORDER	4
/* Smallest period programmed for a frequency-mode event (see sync). */
#define PVPERF_FREQ_MIN_PERIOD	10000
#define PVPERF_RING_BYTES	(PAGE_SIZE << PVPERF_RING_ORDER)
#define PVPERF_RING_CAPACITY	((PVPERF_RING_BYTES - \
				  sizeof(struct pvperf_sample_buf)) / \
				 sizeof(struct pvperf_sample))

struct pvperf_cpu {
	struct pvperf_sample_buf *ring;	/* written at init/exit only */
	/*
	 * Events added on this CPU, to find a record's event by id.  Written
	 * by add()/del() (IRQs off), read by the NMI handler: WRITE_ONCE /
	 * READ_ONCE, and del() drains before it clears its entry.
	 */
	struct perf_event *active[PVPERF_COUNTERS_PER_CPU];
	u32 nmi_claimed;	/* NMIs claimed: compared with ring->nmis */
	bool draining;		/* a drain runs on this CPU (no nesting) */
};

static DEFINE_PER_CPU(struct pvperf_cpu, pvperf_cpu);

typedef int (*pvperf_overflow_fn)(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs);

/* perf_event_overflow(), or NULL: then sampling events are refused. */
static pvperf_overflow_fn pvperf_overflow;

/* perf_log_lost_samples() (not exported either), or NULL: then say it. */
typedef void (*pvperf_log_lost_fn)(struct perf_event *event, u64 lost);
static pvperf_log_lost_fn pvperf_log_lost;

#ifdef MODULE
/* Optional override; by default the address is looked up (see below). */
static unsigned long overflow_addr;
module_param(overflow_addr, ulong, 0400);
MODULE_PARM_DESC(overflow_addr,
		 "address of perf_event_overflow (not exported in 6.1); 0: look it up");
#endif

static bool buffered = true;
module_param(buffered, bool, 0644);
MODULE_PARM_DESC(buffered,
		 "let events without callchains buffer samples (NMI at the watermark)");

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
static struct tracepoint *pvperf_tp_sched_switch;

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
static noinline s64 pvperf_hypercall(u32 op, u64 arg0, u64 arg1, u64 arg2)
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
	hc->args[2] = arg2;
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
static int pvperf_op3(u32 op, u64 arg0, u64 arg1, u64 arg2)
{
	s64 ret = pvperf_hypercall(op, arg0, arg1, arg2);

	if (ret == 0 || (ret < 0 && ret >= -MAX_ERRNO))
		return ret;
	pr_warn_ratelimited("host returned %lld for op %u (arg %#llx)\n",
			    ret, op, arg0);
	return -EIO;
}

static int pvperf_op(u32 op, u64 arg0)
{
	return pvperf_op3(op, arg0, 0, 0);
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
		if (WARN_ON_ONCE(!IS_ALIGNED((unsigned long)hc, PVPERF_HCALL_ALIGN)))
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
static struct pvperf_event *pvperf_host_open(const struct perf_event_attr *attr,
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
static struct pvperf_event *pvperf_detached_event(int why)
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
static int pvperf_event_op(struct pvperf_event *pe, u32 op)
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

static void pvperf_event_destroy(struct perf_event *event)
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

	if (is_sampling_event(event) && !pvperf_overflow) {
		pr_debug("sampling needs perf_event_overflow, which was not found\n");
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

/* Fold what the host counted since the last fold into event->count. */
static void pvperf_event_update(struct perf_event *event)
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
static void pvperf_sync_period(struct perf_event *event, bool rearm)
{
	struct pvperf_event *pe = event->pmu_private;
	struct hw_perf_event *hwc = &event->hw;
	u64 period = min_t(u64, hwc->sample_period, PVPERF_MAX_PERIOD);
	int err;

	/*
	 * Frequency mode starts at period 1 and relies on a fast interrupt
	 * to grow it; our NMI takes a QMP round trip (~1 ms), so start
	 * where a few thousand samples a second are likely.  last_period
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

static unsigned int pvperf_drain(struct pt_regs *irq_regs);

/* kernel/events/core.c's MAX_INTERRUPTS (private to it): a throttled event. */
#define PVPERF_THROTTLED (~0ULL)

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
	if (is_sampling_event(event))
		pvperf_sync_period(event, false);

	/*
	 * Count before ENABLE (and DISABLE before uncounting in stop()), so
	 * the fault probe covers every instant the host may be counting.
	 */
	atomic_inc(&pvperf_nr_started);
	err = pvperf_event_op(pe, PVPERF_OP_ENABLE);
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
 * Samples: the per-CPU ring and the NMI handler
 */

static struct perf_event *pvperf_active_event(struct pvperf_cpu *pc, u32 id)
{
	int i;

	for (i = 0; i < PVPERF_COUNTERS_PER_CPU; i++) {
		struct perf_event *event = READ_ONCE(pc->active[i]);
		struct pvperf_event *pe = event ? event->pmu_private : NULL;

		if (pe && pe->id == id)
			return event;
	}
	return NULL;
}

/* The general-purpose registers the host recorded (PVPERF_SAMPLE_REGS). */
static void pvperf_copy_gprs(struct pt_regs *out, const struct pvperf_sample *rec)
{
	out->ax = rec->regs[PVPERF_REG_AX];
	out->bx = rec->regs[PVPERF_REG_BX];
	out->cx = rec->regs[PVPERF_REG_CX];
	out->dx = rec->regs[PVPERF_REG_DX];
	out->si = rec->regs[PVPERF_REG_SI];
	out->di = rec->regs[PVPERF_REG_DI];
	out->bp = rec->regs[PVPERF_REG_BP];
	out->sp = rec->regs[PVPERF_REG_SP];
	out->r8 = rec->regs[PVPERF_REG_R8 + 0];
	out->r9 = rec->regs[PVPERF_REG_R8 + 1];
	out->r10 = rec->regs[PVPERF_REG_R8 + 2];
	out->r11 = rec->regs[PVPERF_REG_R8 + 3];
	out->r12 = rec->regs[PVPERF_REG_R8 + 4];
	out->r13 = rec->regs[PVPERF_REG_R8 + 5];
	out->r14 = rec->regs[PVPERF_REG_R8 + 6];
	out->r15 = rec->regs[PVPERF_REG_R8 + 7];
}

/*
 * The registers a sample is reported with.  With PVPERF_SAMPLE_REGS, the
 * host's: those of the overflowing instruction (just before it ran), so
 * ip, sp and bp describe one state and -g, --call-graph dwarf, -I and
 * --user-regs start from it (eflags is not recorded: only IF and the
 * fixed bit are set).  Without, those of the moment the NMI landed if it
 * interrupted the same mode, else the task's user registers for a user
 * sample; for a kernel ip these are not that instruction's registers, so
 * X86_EFLAGS_FIXED is cleared and perf_callchain_kernel() unwinds the
 * current stack from regs->sp instead of trusting them (perf_hw_regs()).
 */
static void pvperf_sample_regs(struct pt_regs *out,
			       const struct pvperf_sample *rec,
			       struct pt_regs *irq_regs)
{
	bool user = rec->mode == PVPERF_MODE_USER;
	bool exact = rec->flags & PVPERF_SAMPLE_REGS;

	if (exact)
		memset(out, 0, sizeof(*out));
	else if (irq_regs && !!user_mode(irq_regs) == user)
		*out = *irq_regs;
	else if (user && current->mm)
		*out = *task_pt_regs(current);
	else
		memset(out, 0, sizeof(*out));
	if (exact) {
		pvperf_copy_gprs(out, rec);
		out->flags = X86_EFLAGS_FIXED | X86_EFLAGS_IF;
	}
	out->ip = rec->ip;
	if (user) {
		out->cs = __USER_CS;
		out->ss = __USER_DS;
	} else {
		out->cs = __KERNEL_CS;
		out->ss = __KERNEL_DS;
		if (!exact)
			out->flags &= ~X86_EFLAGS_FIXED;
	}
}

static void pvperf_deliver(struct pvperf_cpu *pc, const struct pvperf_sample *rec,
			   struct pt_regs *irq_regs)
{
	struct perf_event *event = pvperf_active_event(pc, rec->event_id);
	struct hw_perf_event *hwc;
	struct perf_sample_data data;
	struct pt_regs regs;

	if (!event)
		return;		/* deleted meanwhile: the record is dropped */
	hwc = &event->hw;
	/*
	 * Throttled by an earlier record of this drain: perf core stopped
	 * the event until its next tick, where it restarts only events whose
	 * ->interrupts is still MAX_INTERRUPTS.  Another overflow would
	 * increment that to 0 and the event would stay stopped for good
	 * (every later sample lost).  Hardware raises no overflow while
	 * stopped, so the records the ring still holds for it are dropped.
	 */
	if (hwc->interrupts == PVPERF_THROTTLED)
		return;
	pvperf_sample_regs(&regs, rec, irq_regs);
	perf_sample_data_init(&data, rec->data_addr,
			      rec->period ? rec->period : hwc->last_period);
	/* 1: throttled; perf core restarts the event from its tick. */
	if (pvperf_overflow(event, &data, &regs)) {
		if (!(hwc->state & PERF_HES_STOPPED))
			pvperf_event_stop(event, 0);
		return;
	}
	if (event->attr.freq && !(hwc->state & PERF_HES_STOPPED))
		pvperf_sync_period(event, true);	/* one-shot: re-arm */
}

/*
 * Samples the host could not record (the ring full) are counted per event
 * in gpe.lost; perf hears of them as PERF_RECORD_LOST_SAMPLES, which
 * `perf report --stats` and perf record's summary show, as for a PEBS
 * record the hardware dropped.
 */
static void pvperf_report_lost(struct pvperf_cpu *pc)
{
	int i;

	for (i = 0; i < PVPERF_COUNTERS_PER_CPU; i++) {
		struct perf_event *event = READ_ONCE(pc->active[i]);
		struct pvperf_event *pe = event ? event->pmu_private : NULL;
		u32 lost;

		if (!pe)
			continue;
		lost = READ_ONCE(pe->gpe.lost) - pe->lost_reported;
		if (!lost)
			continue;
		pe->lost_reported += lost;
		if (pvperf_log_lost)
			pvperf_log_lost(event, lost);
		else
			pr_warn_ratelimited("event %u: %u samples lost\n",
					    pe->id, lost);
	}
}

/*
 * Deliver every record in this CPU's ring.  Runs in the NMI handler
 * (irq_regs = where the NMI landed) and from del()/read() with IRQs off
 * (irq_regs NULL); `draining` keeps an NMI, or a read() that
 * perf_event_overflow() makes for PERF_SAMPLE_READ, from nesting into a
 * drain: the records it would have taken are left for the next one.
 */
static unsigned int pvperf_drain(struct pt_regs *irq_regs)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	struct pvperf_sample_buf *ring = pc->ring;
	unsigned int n = 0;
	u32 head, tail;

	if (!ring || pc->draining)
		return 0;
	pc->draining = true;
	barrier();
	head = smp_load_acquire(&ring->head);
	tail = READ_ONCE(ring->tail);
	if (head - tail > PVPERF_RING_CAPACITY) {
		pr_warn_ratelimited("sample ring head %u tail %u: dropping\n",
				    head, tail);
		tail = head;
	}
	while (tail != head) {
		struct pvperf_sample rec = ring->rec[tail % PVPERF_RING_CAPACITY];

		tail++;
		pvperf_deliver(pc, &rec, irq_regs);
		n++;
	}
	smp_store_release(&ring->tail, tail);
	pvperf_report_lost(pc);
	barrier();
	pc->draining = false;
	return n;
}

/*
 * QMP inject-nmi raises an NMI on every vCPU.  The host counts each one
 * in every ring's ->nmis before injecting it, so this CPU claims exactly
 * that many (and any NMI that found records), and never leaves one to
 * the "NMI received for unknown reason" path; foreign NMIs stay NMI_DONE.
 */
static int pvperf_nmi_handler(unsigned int cmd, struct pt_regs *regs)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	bool ours = false;

	if (!pc->ring)
		return NMI_DONE;
	if (READ_ONCE(pc->ring->nmis) != pc->nmi_claimed) {
		pc->nmi_claimed++;
		ours = true;
	}
	if (pvperf_drain(regs))
		ours = true;
	return ours ? NMI_HANDLED : NMI_DONE;
}

/* on_each_cpu(): (un)register this CPU's ring with the host. */
static void pvperf_ring_register_cpu(void *info)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	atomic_t *failed = info;
	int err;

	err = pvperf_op3(PVPERF_OP_SAMPLE_BUF, __pa(pc->ring),
			 PVPERF_RING_BYTES, PVPERF_RING_CAPACITY / 2);
	if (err) {
		pr_warn("cpu %d: SAMPLE_BUF failed: %d\n", smp_processor_id(), err);
		atomic_inc(failed);
	}
}

static void pvperf_ring_unregister_cpu(void *info)
{
	pvperf_op3(PVPERF_OP_SAMPLE_BUF, 0, 0, 0);
}

static void pvperf_rings_free(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		struct pvperf_cpu *pc = per_cpu_ptr(&pvperf_cpu, cpu);

		if (pc->ring)
			free_pages((unsigned long)pc->ring, PVPERF_RING_ORDER);
		pc->ring = NULL;
	}
}

/*
 * FIXME: CPU hotplug.  Rings are registered on the CPUs online at load;
 * a CPU onlined later has none and its samples are lost (counted by the
 * host).
 */
static int pvperf_rings_init(void)
{
	atomic_t failed = ATOMIC_INIT(0);
	int cpu;

	for_each_possible_cpu(cpu) {
		struct page *page = alloc_pages_node(cpu_to_node(cpu),
						     GFP_KERNEL | __GFP_ZERO,
						     PVPERF_RING_ORDER);

		if (!page) {
			pvperf_rings_free();
			return -ENOMEM;
		}
		per_cpu_ptr(&pvperf_cpu, cpu)->ring = page_address(page);
	}
	on_each_cpu(pvperf_ring_register_cpu, &failed, 1);
	if (atomic_read(&failed)) {
		on_each_cpu(pvperf_ring_unregister_cpu, NULL, 1);
		pvperf_rings_free();
		return -EIO;
	}
	return 0;
}

static void pvperf_rings_exit(void)
{
	on_each_cpu(pvperf_ring_unregister_cpu, NULL, 1);
	pvperf_rings_free();
}

#ifdef MODULE
/* The address of a kernel function by name: a kprobe resolves it. */
static unsigned long pvperf_lookup_function(const char *name)
{
	struct kprobe kp = { .symbol_name = name };
	unsigned long addr;

	if (register_kprobe(&kp) < 0)
		return 0;
	addr = (unsigned long)kp.addr;
	unregister_kprobe(&kp);
	return addr;
}
#endif

static void pvperf_find_overflow(void)
{
#ifdef MODULE
	if (!overflow_addr)
		overflow_addr = pvperf_lookup_function("perf_event_overflow");
	pvperf_overflow = (pvperf_overflow_fn)overflow_addr;
	pvperf_log_lost = (pvperf_log_lost_fn)
		pvperf_lookup_function("perf_log_lost_samples");
#else
	pvperf_overflow = perf_event_overflow;
	pvperf_log_lost = perf_log_lost_samples;
#endif
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
 * events/: exactly the events the host counts, as its event table
 * (pyhost/pmu/events.py) spells them: PVPERF_OP_EVENTS answers a line
 * name=event=0x..[,umask=0x..] per event.  Built at init, before
 * perf_pmu_register() creates the sysfs files; the driver keeps no event
 * table of its own, so a model added on the host shows in `perf list`.
 */
static char *pvperf_events_text;		/* the host's answer, kept */
static struct perf_pmu_events_attr *pvperf_events_ea;
static struct attribute **pvperf_events_attrs;

static struct attribute_group pvperf_events_group = {
	.name = "events",
};

/* The host is trusted, but a sysfs name is checked all the same. */
static bool pvperf_event_line_ok(const char *name, const char *val)
{
	static const char name_chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
	static const char val_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789=,";

	return *name && name[strspn(name, name_chars)] == '\0' &&
	       *val && val[strspn(val, val_chars)] == '\0';
}

static void pvperf_events_free(void)
{
	kfree(pvperf_events_attrs);
	kfree(pvperf_events_ea);
	kfree(pvperf_events_text);
	pvperf_events_attrs = NULL;
	pvperf_events_ea = NULL;
	pvperf_events_text = NULL;
}

static int pvperf_events_init(void)
{
	char *text, *line, *end;
	unsigned int n = 0, i = 0;
	s64 len;

	/* kmalloc memory is physically contiguous: one gpa range. */
	text = kzalloc(PVPERF_EVENTS_BUF_MAX, GFP_KERNEL);
	if (!text)
		return -ENOMEM;
	pvperf_events_text = text;
	len = pvperf_hypercall(PVPERF_OP_EVENTS, virt_to_phys(text),
			       PVPERF_EVENTS_BUF_MAX, 0);
	if (len <= 0 || len >= PVPERF_EVENTS_BUF_MAX) {
		pr_warn("host event list unusable (ret=%lld), not registering\n",
			len);
		pvperf_events_free();
		return len < 0 ? (int)len : -EIO;
	}
	text[len] = '\0';
	for (line = text; (end = strchr(line, '\n')); line = end + 1)
		n++;
	pvperf_events_ea = kcalloc(n, sizeof(*pvperf_events_ea), GFP_KERNEL);
	pvperf_events_attrs = kcalloc(n + 1, sizeof(*pvperf_events_attrs),
				      GFP_KERNEL);
	if (!pvperf_events_ea || !pvperf_events_attrs) {
		pvperf_events_free();
		return -ENOMEM;
	}
	for (line = text; (end = strchr(line, '\n')); line = end + 1) {
		struct perf_pmu_events_attr *ea = &pvperf_events_ea[i];
		char *eq;

		*end = '\0';
		eq = strchr(line, '=');
		if (eq)
			*eq = '\0';
		if (!eq || !pvperf_event_line_ok(line, eq + 1)) {
			pr_warn("host event line \"%s\" ignored\n", line);
			continue;
		}
		sysfs_attr_init(&ea->attr.attr);
		ea->attr.attr.name = line;
		ea->attr.attr.mode = 0444;
		ea->attr.show = perf_event_sysfs_show;
		ea->event_str = eq + 1;
		pvperf_events_attrs[i++] = &ea->attr.attr;
	}
	pvperf_events_group.attrs = pvperf_events_attrs;
	return 0;
}

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
			 user_mode(regs) ? PVPERF_MODE_USER : PVPERF_MODE_KERNEL, 0);
}

/*
 * Samples leave with the task that ran them.  A record in the ring is
 * delivered with `current`'s pid and maps; one still there when its task
 * is switched out would go out as the next task's (a buffered ring waits
 * for its watermark).  Most switches schedule our events out, and del()
 * drains the ring; but between two tasks whose contexts are clones of one
 * parent (inherited events: perf record -- sh -c "a & b") perf core swaps
 * the contexts and leaves the events running, like x86's large PEBS,
 * which drains in its sched_task hook.  sched_switch fires in __schedule
 * before perf's sched-out, IRQs off, with prev still current: drain here.
 */
static void pvperf_switch_probe(void *data, bool preempt,
				struct task_struct *prev,
				struct task_struct *next,
				unsigned int prev_state)
{
	struct pvperf_sample_buf *ring = this_cpu_read(pvperf_cpu.ring);

	if (ring && READ_ONCE(ring->head) != READ_ONCE(ring->tail))
		pvperf_drain(NULL);
}

/* Not exported to modules: find them by name. */
static void pvperf_find_tracepoint(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "page_fault_user"))
		pvperf_tp_fault_user = tp;
	else if (!strcmp(tp->name, "page_fault_kernel"))
		pvperf_tp_fault_kernel = tp;
	else if (!strcmp(tp->name, "sched_switch"))
		pvperf_tp_sched_switch = tp;
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
		return err;
	}
	/* Without it only samples of cloned contexts can go astray. */
	if (!pvperf_tp_sched_switch ||
	    tracepoint_probe_register(pvperf_tp_sched_switch,
				      pvperf_switch_probe, NULL)) {
		pr_warn("no sched_switch probe: samples of inherited events may be reported for the next task\n");
		pvperf_tp_sched_switch = NULL;
	}
	return 0;
}

static void pvperf_fault_probes_unregister(void)
{
	if (pvperf_tp_sched_switch)
		tracepoint_probe_unregister(pvperf_tp_sched_switch,
					    pvperf_switch_probe, NULL);
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

/*
 * QMP inject-nmi raises LINT1 of every local APIC (QEMU: x86_nmi ->
 * apic_deliver_nmi), but Linux programs LINT1 as NMI on the boot CPU only
 * and masks it on the others (setup_local_APIC).  A sample on another CPU
 * would then wait for that CPU's next exit or read to be drained, and its
 * callchain would be walked from the wrong frame.  So while the driver is
 * loaded every CPU takes LINT1 as an NMI; the handler claims exactly the
 * NMIs the host announced in each CPU's ring (nmis), so no CPU sees one
 * "for unknown reason".  Runs on each CPU (on_each_cpu, IRQs off).
 */
static DEFINE_PER_CPU(u32, pvperf_saved_lvt1);

static void pvperf_lint1_nmi(void *unused)
{
	this_cpu_write(pvperf_saved_lvt1, apic_read(APIC_LVT1));
	apic_write(APIC_LVT1, APIC_DM_NMI);
}

static void pvperf_lint1_restore(void *unused)
{
	apic_write(APIC_LVT1, this_cpu_read(pvperf_saved_lvt1));
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
	pvperf_find_overflow();
	err = pvperf_rings_init();
	if (err)
		goto free_events;
	err = register_nmi_handler(NMI_LOCAL, pvperf_nmi_handler, 0, "pvperf");
	if (err)
		goto free_rings;
	on_each_cpu(pvperf_lint1_nmi, NULL, 1);
	err = pvperf_fault_probes_register();
	if (err)
		goto restore_lint1;
	err = perf_pmu_register(&pvperf_pmu, "cpu", PERF_TYPE_RAW);
	if (err) {
		pr_err("cannot register PMU \"cpu\" as type %d: %d\n",
		       PERF_TYPE_RAW, err);
		goto unregister_probes;
	}
	if (pvperf_overflow)
		pr_info("PMU \"cpu\" registered, %d counters per CPU, sampling with exact IPs\n",
			PVPERF_COUNTERS_PER_CPU);
	else
		pr_info("PMU \"cpu\" registered, %d counters per CPU, counting only (perf_event_overflow not found)\n",
			PVPERF_COUNTERS_PER_CPU);
	return 0;

unregister_probes:
	pvperf_fault_probes_unregister();
restore_lint1:
	on_each_cpu(pvperf_lint1_restore, NULL, 1);
	unregister_nmi_handler(NMI_LOCAL, "pvperf");
free_rings:
	pvperf_rings_exit();
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
	cancel_delayed_work_sync(&pvperf_linger_work);
	pvperf_fault_probes_unregister();
	on_each_cpu(pvperf_lint1_restore, NULL, 1);
	unregister_nmi_handler(NMI_LOCAL, "pvperf");
	pvperf_rings_exit();
	pvperf_events_free();
	pvperf_hcall_blocks_free();
	ida_destroy(&pvperf_ida);
}

module_init(pvperf_init);
module_exit(pvperf_exit);

MODULE_DESCRIPTION("pvperf: paravirtual PMU for x86_64 guests under QEMU TCG");
MODULE_LICENSE("GPL");
