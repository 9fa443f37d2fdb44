// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_sample.c - samples: the host records the exact instruction at
 * which a sampling event's period runs out into this CPU's sample ring
 * (struct pvperf_sample_buf) and raises the overflow interrupt; its
 * handler delivers the records with perf_event_overflow(), the sample's ip
 * being the recorded one.  "Buffered" events (no callchain, no register or
 * stack dumps, not frequency mode) get an interrupt only when the ring
 * reaches its watermark, like PEBS; the ring is also drained when an event
 * is deleted (context switch) or read, and at a task switch, so records
 * are attributed to the task that ran.
 *
 * perf_event_overflow() is not exported in 6.1: the module finds its
 * address with a kprobe (register_kprobe resolves the name in C; reading
 * /proc/kallsyms from the guest's /init cost 1.3 s of boot under TCG), or
 * takes it as the parameter overflow_addr; the in-tree build calls it
 * directly.
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/atomic.h>
#include <linux/cpumask.h>
#include <linux/errno.h>
#include <linux/ftrace.h>
#include <linux/gfp.h>
#include <linux/kernel.h>
#include <linux/kprobes.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <linux/sched/task_stack.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/tracepoint.h>

#include "pvperf.h"
#include "pvperf_arch.h"

/*
 * Sample rings: PVPERF_RING_ORDER pages per CPU, registered with the host
 * by SAMPLE_BUF on that CPU.  Buffered events raise the overflow interrupt
 * at half full.  128 KiB: 455 records of ABI v5's 288 bytes (64 KiB held
 * 409 of v4's 160).
 */
#define PVPERF_RING_ORDER	5
#define PVPERF_RING_BYTES	(PAGE_SIZE << PVPERF_RING_ORDER)
#define PVPERF_RING_CAPACITY	((PVPERF_RING_BYTES - \
				  sizeof(struct pvperf_sample_buf)) / \
				 sizeof(struct pvperf_sample))

DEFINE_PER_CPU(struct pvperf_cpu, pvperf_cpu);

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

static struct tracepoint *pvperf_tp_sched_switch;

/* The overflow interrupt is the doorbell device's (pvperf_doorbell.c). */
static bool pvperf_doorbell;

/* kernel/events/core.c's MAX_INTERRUPTS (private to it): a throttled event. */
#define PVPERF_THROTTLED (~0ULL)

bool pvperf_can_sample(void)
{
	return pvperf_overflow != NULL;
}

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

/*
 * The registers a sample is reported with.  With PVPERF_SAMPLE_REGS, the
 * host's: those of the overflowing instruction (just before it ran), so
 * ip, sp and the frame pointer describe one state and -g, --call-graph
 * dwarf, -I and --user-regs start from it.  Without, those of the moment
 * the overflow interrupt landed if it interrupted the same mode, else the
 * task's user registers for a user sample; for a kernel ip these are not
 * that instruction's registers, which the architecture marks so that
 * perf's kernel unwinder walks the current stack instead of trusting them.
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
	pvperf_arch_sample_regs(out, rec, exact);
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
	pvperf_arch_sample_callchain(event, &data, &regs);
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
 * Deliver every record in this CPU's ring.  Runs in the overflow
 * interrupt's handler (irq_regs = where it landed) and from del()/read()
 * with IRQs off (irq_regs NULL); `draining` keeps an overflow interrupt
 * that arrives as an NMI, or a read() that perf_event_overflow() makes
 * for PERF_SAMPLE_READ, from nesting into a drain: the records it would
 * have taken are left for the next one.
 */
unsigned int pvperf_drain(struct pt_regs *irq_regs)
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
 * A host-time tick (PVPERF_OP_TICK): the host's timer on this vCPU's CPU
 * time ran out and raised this interrupt; tell it where the interrupt
 * landed (and, in the kernel, where the task's user code was), so that
 * the samples it falls due for carry that context, as the kernel's own
 * cpu-clock event takes the interrupted registers.  The host writes them
 * into the ring, which the caller drains next.
 */
static void pvperf_tick(struct pt_regs *regs)
{
	bool user = regs && user_mode(regs);
	u64 user_ip = 0;

	if (user)
		user_ip = instruction_pointer(regs);
	else if (current->mm && !(current->flags & PF_KTHREAD))
		user_ip = instruction_pointer(task_pt_regs(current));
	pvperf_op3(PVPERF_OP_TICK, regs ? instruction_pointer(regs) : 0,
		   user ? PVPERF_MODE_USER : PVPERF_MODE_KERNEL, user_ip);
}

/*
 * The overflow interrupt's handler (pvperf_arch.h).  The host may raise it
 * at every vCPU at once (an NMI injected over QMP reaches them all) and
 * counts each one in every ring's ->nmis before it raises it, so this CPU
 * claims exactly that many (and any interrupt that found records): none is
 * left to the architecture's "unknown reason" path, and an interrupt that
 * is not the host's stays unclaimed.
 */
static bool pvperf_overflow_interrupt(struct pt_regs *regs)
{
	struct pvperf_cpu *pc = this_cpu_ptr(&pvperf_cpu);
	bool ours = false;
	u32 ticks;

	if (!pc->ring)
		return false;
	if (READ_ONCE(pc->ring->nmis) != pc->interrupts_claimed) {
		pc->interrupts_claimed++;
		ours = true;
	}
	ticks = READ_ONCE(pc->ring->ticks);
	if (ticks != pc->ticks_seen) {
		pc->ticks_seen = ticks;
		pvperf_tick(regs);
		ours = true;
	}
	if (pvperf_drain(regs))
		ours = true;
	return ours;
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
/*
 * The address of a kernel function by name: a kprobe resolves it.  Where
 * a function's first bytes are its ftrace patch site and kprobes cannot
 * share it (riscv: no KPROBES_ON_FTRACE), a probe there is refused with
 * -EINVAL; the one right after the site, MCOUNT_INSN_SIZE on, is not.
 */
static unsigned long pvperf_lookup_function(const char *name)
{
	struct kprobe kp = { .symbol_name = name };
	unsigned long addr;
	int err = register_kprobe(&kp);

#if defined(CONFIG_DYNAMIC_FTRACE) && !defined(CONFIG_KPROBES_ON_FTRACE)
	if (err == -EINVAL) {
		kp = (struct kprobe){ .symbol_name = name,
				      .offset = MCOUNT_INSN_SIZE };
		err = register_kprobe(&kp);
	}
#endif
	if (err < 0)
		return 0;
	addr = (unsigned long)kp.addr - kp.offset;
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
	pvperf_drain_pending();
}

/*
 * The records this CPU's ring holds, delivered now if any (IRQs off).
 * The probe above runs before any hypercall of the switch, so a record
 * the host had not written yet misses it: one the service still had in
 * its queue, or one the plugin held until the instruction was known to
 * have retired (a load that might fault).  Both are written before the
 * host answers this vCPU's next hypercall; perf core's swap of cloned
 * contexts makes one, pmu_disable() (PMU_DISABLE), with prev still
 * current, and pvperf_pmu_disable() drains again after it.  Without that
 * second drain (2026-11-28, PVPERF_SERVICE_WRITES=1, load 4 to 5), the
 * two qs of `perf record -- sh -c "./qs & ./qs; wait"` at smp 1 took
 * each other's samples, each an IP of the other process and so
 * `[unknown]` in this one's maps: on 6.12 2 to 5 of ~8,960 in 3 runs of
 * 4, on 6.1 49 to 1,172 (13 %) in each of 6; with it, none in 6 runs on
 * each kernel.  The service's lag grows with the host's load:
 * test_multiprocess's 5.4 % `[unknown]` on 6.12 at load 8 to 11, seen
 * while the service still wrote every record, fits this.
 */
void pvperf_drain_pending(void)
{
	struct pvperf_sample_buf *ring = this_cpu_read(pvperf_cpu.ring);

	if (ring && READ_ONCE(ring->head) != READ_ONCE(ring->tail))
		pvperf_drain(NULL);
}

/* Not exported to modules: find it by name. */
static void pvperf_find_sched_switch(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_switch"))
		pvperf_tp_sched_switch = tp;
}

/* Without it only samples of cloned contexts can go astray: warn only. */
static void pvperf_switch_probe_register(void)
{
	for_each_kernel_tracepoint(pvperf_find_sched_switch, NULL);
	if (!pvperf_tp_sched_switch ||
	    tracepoint_probe_register(pvperf_tp_sched_switch,
				      pvperf_switch_probe, NULL)) {
		pr_warn("no sched_switch probe: samples of inherited events may be reported for the next task\n");
		pvperf_tp_sched_switch = NULL;
	}
}

static void pvperf_switch_probe_unregister(void)
{
	if (!pvperf_tp_sched_switch)
		return;
	tracepoint_probe_unregister(pvperf_tp_sched_switch,
				    pvperf_switch_probe, NULL);
	/* No probe may still be draining a ring after this. */
	tracepoint_synchronize_unregister();
}

/* Rings, the overflow interrupt and the task-switch drain, in that order. */
int pvperf_samples_init(void)
{
	int err;

	pvperf_find_overflow();
	err = pvperf_rings_init();
	if (err)
		return err;
	/* The host's doorbell device if it gave one, else the architecture's
	 * own interrupt (x86: an NMI raised over QMP). */
	pvperf_doorbell = pvperf_doorbell_register(pvperf_overflow_interrupt);
	err = pvperf_doorbell ? 0 :
		pvperf_arch_overflow_irq_register(pvperf_overflow_interrupt);
	if (err == -EOPNOTSUPP) {
		/* Counting still works: only sampling events are refused. */
		pvperf_overflow = NULL;
	} else if (err) {
		pvperf_rings_exit();
		return err;
	}
	pvperf_switch_probe_register();
	return 0;
}

void pvperf_samples_exit(void)
{
	pvperf_switch_probe_unregister();
	if (pvperf_doorbell)
		pvperf_doorbell_unregister();
	else
		pvperf_arch_overflow_irq_unregister();
	pvperf_rings_exit();
}
