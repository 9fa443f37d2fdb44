// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_aarch64.c - the arm64 side of the pvperf driver (pvperf_arch.h):
 * the marker store, struct pt_regs of a sample, the overflow interrupt
 * (none but the doorbell device's) and the page-fault hook through the
 * software page-fault event.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cpu.h>
#include <linux/err.h>
#include <linux/kernel.h>
#include <linux/perf_event.h>
#include <linux/percpu.h>
#include <asm/ptrace.h>

#include "pvperf_arch.h"

/* ----------------------------------------------------------------------
 * The marker store
 */

/*
 * The only place that executes the marker store: noinline keeps it one
 * instruction in the module text and puts a return right after it, so no
 * two hypercalls share a translation block.  The store must be exactly
 * "stur w16, [x17]" (PVPERF_AARCH64_MARKER_INSN), the word the TCG plugin
 * matches: the compiler would pick the scaled "str" for an offset of 0, so
 * the mnemonic and both registers are spelled out.  The "memory" clobber
 * keeps the compiler from moving accesses to the block across it.
 */
noinline void pvperf_arch_marker(void *block)
{
	register u32 magic asm("w16") = PVPERF_MARKER_MAGIC;
	register void *blk asm("x17") = block;

	asm volatile("stur %w[magic], [%[block]]"
		     : /* no outputs: the host writes the block's ->ret */
		     : [block] "r" (blk), [magic] "r" (magic)
		     : "memory");
}

/* ----------------------------------------------------------------------
 * Sample registers
 */

/*
 * The ABI's slots for arm64 (pvperf_abi.h): x0-x30, then sp, the order of
 * struct pt_regs' regs[] and perf's arm64 register numbers.  pstate is
 * not recorded (the mode is set below).
 */
static void pvperf_copy_gprs(struct pt_regs *out, const struct pvperf_sample *rec)
{
	int i;

	for (i = 0; i <= PVPERF_AARCH64_REG_LR; i++)
		out->regs[i] = rec->regs[PVPERF_AARCH64_REG_X0 + i];
	out->sp = rec->regs[PVPERF_AARCH64_REG_SP];
}

/*
 * The mode lives in pstate (what user_mode() reads).  A kernel sample's
 * registers that are not its instruction's keep no frame pointer: perf's
 * arm64 kernel unwinder then has nothing stale to follow.
 */
void pvperf_arch_sample_regs(struct pt_regs *regs,
			     const struct pvperf_sample *rec, bool exact)
{
	if (exact)
		pvperf_copy_gprs(regs, rec);
	regs->pc = rec->ip;
	regs->pstate &= ~PSR_MODE_MASK;
	if (rec->mode == PVPERF_MODE_USER) {
		regs->pstate |= PSR_MODE_EL0t;
	} else {
		regs->pstate |= PSR_MODE_EL1h;
		if (!exact)
			regs->regs[29] = 0;
	}
}

/*
 * perf core's user callchain walks arm64's frame records from x29 and
 * reads no lr: nothing to add.
 */
void pvperf_arch_sample_callchain(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs)
{
}

/* ----------------------------------------------------------------------
 * The overflow interrupt: the doorbell device, or none
 *
 * virt has no NMI and Debian's kernel no pseudo-NMI; the overflow
 * interrupt is the ivshmem-doorbell's MSI-X vector (pvperf_doorbell.c,
 * through virt's GICv2m), which the generic code binds before it asks
 * here.  Asked here, there is no such device: -EOPNOTSUPP tells the
 * generic code to refuse sampling events, so perf record fails at once
 * instead of waiting for samples.
 */

int pvperf_arch_overflow_irq_register(pvperf_overflow_handler_fn handler)
{
	pr_info("no doorbell device (ivshmem-doorbell, PCI 1af4:1110): arm64 has no other overflow interrupt; counting only, sampling events are refused\n");
	return -EOPNOTSUPP;
}

void pvperf_arch_overflow_irq_unregister(void)
{
}

/* ----------------------------------------------------------------------
 * Page faults
 *
 * arm64 has no exceptions:page_fault_* tracepoints, and its fault path is
 * not kprobe-able.  do_page_fault() does count every fault it handles as
 * the software event PERF_COUNT_SW_PAGE_FAULTS, with the faulting
 * context's registers: a kernel counter on it with period 1 on every CPU
 * calls its overflow handler with the faulting instruction's pc and mode.
 * The handler runs in the fault's own context, before the fault is
 * resolved, so the report comes before the instruction runs again.  (The
 * arm64 entry code has already unmasked IRQs at that point; a preempting
 * ENABLE or DISABLE on this CPU would come between fault and report.)
 */

static DEFINE_PER_CPU(struct perf_event *, pvperf_fault_event);
static pvperf_fault_report_fn pvperf_fault_report;

/*
 * An instruction abort reports the fetched address, which is the pc: TCG
 * counted nothing for it.  A data access to the very word at pc cannot
 * fault (the page was just fetched from), so the test is exact enough.
 */
static void pvperf_fault_overflow(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs)
{
	if (data->addr == instruction_pointer(regs))
		return;
	pvperf_fault_report(instruction_pointer(regs), user_mode(regs));
}

static struct perf_event_attr pvperf_fault_attr = {
	.type = PERF_TYPE_SOFTWARE,
	.size = sizeof(struct perf_event_attr),
	.config = PERF_COUNT_SW_PAGE_FAULTS,
	.sample_period = 1,
	.sample_type = PERF_SAMPLE_ADDR,
	.pinned = 1,
};

static void pvperf_fault_events_release(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		struct perf_event *event = per_cpu(pvperf_fault_event, cpu);

		if (event)
			perf_event_release_kernel(event);
		per_cpu(pvperf_fault_event, cpu) = NULL;
	}
}

/*
 * One counter per online CPU; CPUs are not expected to come and go while
 * the driver is loaded (the launcher boots them all), so hotplug is not
 * followed.
 */
int pvperf_arch_fault_hook_register(pvperf_fault_report_fn report)
{
	int cpu;

	pvperf_fault_report = report;
	cpus_read_lock();
	for_each_online_cpu(cpu) {
		struct perf_event *event;

		event = perf_event_create_kernel_counter(&pvperf_fault_attr,
							 cpu, NULL,
							 pvperf_fault_overflow,
							 NULL);
		if (IS_ERR(event)) {
			cpus_read_unlock();
			pr_err("page-fault counter on CPU %d: %ld: counts would not be exact\n",
			       cpu, PTR_ERR(event));
			pvperf_fault_events_release();
			return PTR_ERR(event);
		}
		per_cpu(pvperf_fault_event, cpu) = event;
	}
	cpus_read_unlock();
	return 0;
}

/*
 * perf_event_release_kernel() removes the counter from its CPU with an IPI
 * and waits: no overflow handler can still be running afterwards.
 */
void pvperf_arch_fault_hook_unregister(void)
{
	pvperf_fault_events_release();
}
