// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_riscv64.c - the riscv64 side of the pvperf driver (pvperf_arch.h):
 * the marker store, struct pt_regs of a sample, its user callchain, the
 * overflow interrupt (none but the doorbell device's) and the page-fault hook through a
 * kprobe on the fault handler's entry.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/build_bug.h>
#include <linux/ftrace.h>
#include <linux/kernel.h>
#include <linux/kprobes.h>
#include <linux/minmax.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <linux/stddef.h>
#include <linux/uaccess.h>
#include <asm/csr.h>
#include <asm/ptrace.h>
#include <asm/stacktrace.h>

#include "pvperf_arch.h"

/* ----------------------------------------------------------------------
 * The marker store
 */

/*
 * The only place that executes the marker store: noinline keeps it one
 * instruction in the module text and puts a return right after it, so no
 * two hypercalls share a translation block.  The store must be exactly
 * the 32-bit "sw a0, 0(a1)" (PVPERF_RISCV64_MARKER_INSN), the word the
 * TCG plugin matches: the kernel is built for RVC, and the assembler
 * would emit the 16-bit c.sw for it, so it is written under .option
 * norvc, and both registers are pinned.  The "memory" clobber keeps the
 * compiler from moving accesses to the block across it.
 */
noinline void pvperf_arch_marker(void *block)
{
	register u32 magic asm("a0") = PVPERF_MARKER_MAGIC;
	register void *blk asm("a1") = block;

	asm volatile(".option push\n\t"
		     ".option norvc\n\t"
		     "sw %[magic], 0(%[block])\n\t"
		     ".option pop"
		     : /* no outputs: the host writes the block's ->ret */
		     : [block] "r" (blk), [magic] "r" (magic)
		     : "memory");
}

/* ----------------------------------------------------------------------
 * Sample registers
 */

/*
 * The ABI's slots for riscv64 (pvperf_abi.h) are perf's riscv register
 * numbers: pc (0), then x1..x31 (1..31).  struct pt_regs has the same
 * order, epc first, then ra, sp, gp, tp, t0.. t6: slot i is the i-th
 * unsigned long of pt_regs.  status (the mode) is not recorded.
 */
static_assert(offsetof(struct pt_regs, epc) == 0);
static_assert(offsetof(struct pt_regs, ra) ==
	      PVPERF_RISCV64_REG_RA * sizeof(unsigned long));
static_assert(offsetof(struct pt_regs, sp) ==
	      PVPERF_RISCV64_REG_SP * sizeof(unsigned long));
static_assert(offsetof(struct pt_regs, s0) ==
	      PVPERF_RISCV64_REG_FP * sizeof(unsigned long));
static_assert(offsetof(struct pt_regs, t6) == 31 * sizeof(unsigned long));

static void pvperf_copy_gprs(struct pt_regs *out, const struct pvperf_sample *rec)
{
	unsigned long *gpr = (unsigned long *)out;
	int i;

	for (i = PVPERF_RISCV64_REG_RA; i <= 31; i++)
		gpr[i] = rec->regs[i];
}

/*
 * The mode lives in status.SPP (what user_mode() reads: the privilege the
 * trap came from).  A kernel sample's registers that are not its
 * instruction's keep no frame pointer: riscv's walk_stackframe() then
 * stops after the sample's pc instead of following a stale s0.
 */
void pvperf_arch_sample_regs(struct pt_regs *regs,
			     const struct pvperf_sample *rec, bool exact)
{
	if (exact)
		pvperf_copy_gprs(regs, rec);
	regs->epc = rec->ip;
	if (rec->mode == PVPERF_MODE_USER) {
		regs->status &= ~SR_SPP;
	} else {
		regs->status |= SR_SPP;
		if (!exact)
			regs->s0 = 0;
	}
}

/* ----------------------------------------------------------------------
 * User callchains
 *
 * riscv's perf_callchain_user() (arch_stack_walk_user() in 6.12's
 * arch/riscv/kernel/stacktrace.c) takes the sampled function's caller
 * from regs->ra, and from the frame record below s0 (struct stackframe,
 * {fp, ra} at s0 - 16) only the next frame pointer.  ra is caller-saved:
 * once a function has made a call, ra points back into that function, so
 * the walk names it twice and never names its caller.  calltree-fp's
 * work_a past its call of work_b, -g, 2026-11-29: main was missing from
 * the 15 % of the chains that had work_a's own loop at their top (main
 * in 84.37 % of 3,315 chains; in-guest cachegrind: 99.37 %).  The
 * same walk gives the same chains on hardware.
 *
 * The record's ra is the caller, except in a prologue before it is
 * stored or an epilogue after s0 is reloaded (the record is then the
 * caller's, and regs->ra the caller) and in a leaf that keeps no record
 * (s0 is the caller's).  Which case holds cannot be told without the
 * function's bounds, so this walk keeps both when they differ: regs->ra,
 * then the record's ra.  A chain may then name the sampled function
 * twice, as the kernel's does, but misses no frame that s0 and ra
 * describe.  gcc 12 saves only s0 in a leaf with a frame, in the slot at
 * s0 - 8 where ra would be: a stack address above s0 there is that frame
 * pointer, and the caller is regs->ra (calltree-gccfp: main in 30.11 % of
 * the chains with the kernel's walk, 45.19 % without this rule, 99.43 %
 * with it).  Later frames are the records'
 * alone; frame pointers must grow, as arm64's walk asks, and no return
 * address lies in page 0: in code built without frame pointers (libc's)
 * the walk ends instead of going on through garbage.
 */

/* Above s0 by less than this, a record's "ra" is gcc's saved s0. */
#define PVPERF_FRAME_SPAN	(8UL << 20)

struct pvperf_chain {
	u64 nr;
	u64 ip[1 + PERF_MAX_STACK_DEPTH];	/* PERF_CONTEXT_USER, frames */
};
static_assert(offsetof(struct pvperf_chain, ip) ==
	      offsetof(struct perf_callchain_entry, ip));

/* Used from pvperf_deliver() only, IRQs off: one sample at a time. */
static DEFINE_PER_CPU(struct pvperf_chain, pvperf_chain);

static bool pvperf_user_record(unsigned long fp, struct stackframe *rec)
{
	const void __user *p = (const void __user *)(fp - sizeof(*rec));

	if (fp & 7 || !access_ok(p, sizeof(*rec)))
		return false;
	return !__copy_from_user_inatomic(rec, p, sizeof(*rec));
}

/* False when the chain is full. */
static bool pvperf_chain_store(struct pvperf_chain *chain, u32 max, u64 ip)
{
	if (chain->nr >= max)
		return false;
	chain->ip[chain->nr++] = ip;
	return true;
}

static void pvperf_walk_user(struct pvperf_chain *chain, u32 max,
			     const struct pt_regs *regs)
{
	unsigned long fp = regs->s0;
	struct stackframe rec;

	if (!pvperf_chain_store(chain, max, regs->epc) ||
	    !pvperf_user_record(fp, &rec))
		return;
	if (rec.ra > fp && rec.ra - fp < PVPERF_FRAME_SPAN && !(rec.ra & 7)) {
		rec.fp = rec.ra;		/* gcc's leaf: s0 alone */
		rec.ra = regs->ra;
	} else if (rec.ra != regs->ra && regs->ra &&
		   !pvperf_chain_store(chain, max, regs->ra)) {
		return;
	}
	for (;;) {
		if (rec.ra < PAGE_SIZE ||
		    !pvperf_chain_store(chain, max, rec.ra) ||
		    rec.fp <= fp)
			return;
		fp = rec.fp;
		if (!pvperf_user_record(fp, &rec))
			return;
	}
}

/*
 * A user-mode sample's callchain, as perf core's get_perf_callchain()
 * lays it out: PERF_CONTEXT_USER, then at most sample_max_stack frames
 * (capped at PERF_MAX_STACK_DEPTH, the sysctl's default); stored as
 * perf_sample_save_callchain() stores perf core's.  Kernel-mode samples,
 * and the user part of their chains (from the task's trap frame), stay
 * perf core's, as do the chains it refuses: another task's.
 */
void pvperf_arch_sample_callchain(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs)
{
	struct pvperf_chain *chain = this_cpu_ptr(&pvperf_chain);
	u32 max = min_t(u32, event->attr.sample_max_stack,
			PERF_MAX_STACK_DEPTH);

	if (!(event->attr.sample_type & PERF_SAMPLE_CALLCHAIN) ||
	    event->attr.exclude_callchain_user || !user_mode(regs) ||
	    (event->ctx->task && event->ctx->task != current))
		return;
	chain->nr = 0;
	chain->ip[chain->nr++] = PERF_CONTEXT_USER;
	pagefault_disable();
	pvperf_walk_user(chain, 1 + max, regs);
	pagefault_enable();
	data->callchain = (struct perf_callchain_entry *)chain;
	data->dyn_size += (1 + chain->nr) * sizeof(u64);
	data->sample_flags |= PERF_SAMPLE_CALLCHAIN;
}

/* ----------------------------------------------------------------------
 * The overflow interrupt: the doorbell device, or none
 *
 * RISC-V has no NMI a supervisor can be sent; the overflow interrupt is
 * the ivshmem-doorbell's MSI-X vector (pvperf_doorbell.c), which on
 * virt,aia=aplic-imsic is written into the target hart's IMSIC: an
 * ordinary external interrupt.  The generic code binds it before it asks
 * here.  Asked here, there is no such device: -EOPNOTSUPP tells the
 * generic code to refuse sampling events, so perf record fails at once
 * instead of waiting for samples.
 */

int pvperf_arch_overflow_irq_register(pvperf_overflow_handler_fn handler)
{
	pr_info("no doorbell device (ivshmem-doorbell, PCI 1af4:1110): riscv64 has no other overflow interrupt; counting only, sampling events are refused\n");
	return -EOPNOTSUPP;
}

void pvperf_arch_overflow_irq_unregister(void)
{
}

/* ----------------------------------------------------------------------
 * Page faults
 *
 * riscv has no page-fault tracepoints.  Every page fault (cause 12, 13,
 * 15) goes from the noinstr do_page_fault() to handle_page_fault(regs)
 * (arch/riscv/mm/fault.c), which may be probed: a kprobe on its entry
 * sees the fault's registers as its first argument (a0), before the
 * handler enables IRQs, so no ENABLE or DISABLE comes between the fault
 * and its report (the contract pvperf_arch.h asks; arm64's software
 * event comes later).  Every fault is reported, including the kernel's
 * that end in an exception-table fixup: the faulting instruction did not
 * complete, as on x86, where the page_fault tracepoints fire as early.
 *
 * The one fault that skips handle_page_fault() is the entry code's
 * new_vmalloc check (a kernel access to a vmalloc page mapped since this
 * hart's last sfence.vma: entry.S returns to retry it).  Under TCG it
 * does not happen: QEMU's TLB caches no invalid translation, so a page
 * mapped before the access never faults.
 */

static pvperf_fault_report_fn pvperf_fault_report;

/*
 * An instruction page fault: the fetch faulted, TCG counted nothing.
 * (stval is not the test: a 4-byte instruction at a page's last 2 bytes
 * reports the next page.)
 */
static int pvperf_fault_pre(struct kprobe *p, struct pt_regs *kregs)
{
	const struct pt_regs *regs = (const struct pt_regs *)kregs->a0;

	if (regs->cause != EXC_INST_PAGE_FAULT)
		pvperf_fault_report(regs->epc, user_mode(regs));
	return 0;
}

static struct kprobe pvperf_fault_kprobe = {
	.symbol_name = "handle_page_fault",
	.pre_handler = pvperf_fault_pre,
};

/*
 * The function's first bytes are its ftrace patch site (the
 * -fpatchable-function-entry nops, MCOUNT_INSN_SIZE of them), and
 * without KPROBES_ON_FTRACE (Debian's riscv64 6.12 has none) a kprobe
 * there is refused with -EINVAL: the probe then goes on the first
 * instruction after the site, where a0 is still the argument (the site,
 * when traced, calls out and back with the argument registers kept).
 */
int pvperf_arch_fault_hook_register(pvperf_fault_report_fn report)
{
	int err;

	pvperf_fault_report = report;
	err = register_kprobe(&pvperf_fault_kprobe);
#if defined(CONFIG_DYNAMIC_FTRACE) && !defined(CONFIG_KPROBES_ON_FTRACE)
	if (err == -EINVAL) {
		pvperf_fault_kprobe.addr = NULL;
		pvperf_fault_kprobe.offset = MCOUNT_INSN_SIZE;
		err = register_kprobe(&pvperf_fault_kprobe);
	}
#endif
	if (err)
		pr_err("kprobe on handle_page_fault: %d: counts would not be exact\n",
		       err);
	return err;
}

/*
 * unregister_kprobe() waits for an RCU grace period (synchronize_rcu)
 * after it disarmed the probe: handlers run with preemption off, so none
 * can still be running afterwards.
 */
void pvperf_arch_fault_hook_unregister(void)
{
	unregister_kprobe(&pvperf_fault_kprobe);
}
