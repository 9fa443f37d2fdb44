// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_x86_64.c - the x86_64 side of the pvperf driver (pvperf_arch.h):
 * the marker store, struct pt_regs of a sample, the overflow interrupt
 * as an NMI, and the page-fault tracepoints.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kernel.h>
#include <linux/percpu.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/tracepoint.h>
#include <asm/apic.h>
#include <asm/nmi.h>
#include <asm/ptrace.h>
#include <asm/segment.h>
#include <asm/trap_pf.h>

#include "pvperf_arch.h"

/* ----------------------------------------------------------------------
 * The marker store
 */

/*
 * The only place that executes the marker store: noinline keeps it one
 * instruction in the module text, which tests/vm/test_driver_build.py checks,
 * and puts a return right after it, so no two hypercalls share a
 * translation block.  The store must be exactly "movl
 * $PVPERF_MARKER_MAGIC, (%rax)" (c7 00 50 56 50 46), the pattern the TCG
 * plugin matches; the "memory" clobber keeps the compiler from moving
 * accesses to the block across it.
 */
noinline void pvperf_arch_marker(void *block)
{
	asm volatile("movl %[magic], (%[block])"
		     : /* no outputs: the host writes the block's ->ret */
		     : [block] "a" (block), [magic] "i" (PVPERF_MARKER_MAGIC)
		     : "memory");
}

/* ----------------------------------------------------------------------
 * Sample registers
 */

/* The general-purpose registers the host recorded (PVPERF_SAMPLE_REGS). */
static void pvperf_copy_gprs(struct pt_regs *out, const struct pvperf_sample *rec)
{
	out->ax = rec->regs[PVPERF_X86_64_REG_AX];
	out->bx = rec->regs[PVPERF_X86_64_REG_BX];
	out->cx = rec->regs[PVPERF_X86_64_REG_CX];
	out->dx = rec->regs[PVPERF_X86_64_REG_DX];
	out->si = rec->regs[PVPERF_X86_64_REG_SI];
	out->di = rec->regs[PVPERF_X86_64_REG_DI];
	out->bp = rec->regs[PVPERF_X86_64_REG_BP];
	out->sp = rec->regs[PVPERF_X86_64_REG_SP];
	out->r8 = rec->regs[PVPERF_X86_64_REG_R8 + 0];
	out->r9 = rec->regs[PVPERF_X86_64_REG_R8 + 1];
	out->r10 = rec->regs[PVPERF_X86_64_REG_R8 + 2];
	out->r11 = rec->regs[PVPERF_X86_64_REG_R8 + 3];
	out->r12 = rec->regs[PVPERF_X86_64_REG_R8 + 4];
	out->r13 = rec->regs[PVPERF_X86_64_REG_R8 + 5];
	out->r14 = rec->regs[PVPERF_X86_64_REG_R8 + 6];
	out->r15 = rec->regs[PVPERF_X86_64_REG_R8 + 7];
}

/*
 * eflags is not recorded (TCG computes the arithmetic flags lazily): only
 * IF and the fixed bit are set.  The mode is the code segment's.  A kernel
 * sample's registers that are not its instruction's get X86_EFLAGS_FIXED
 * cleared: perf_hw_regs() then has perf_callchain_kernel() unwind the
 * current stack from regs->sp instead of trusting them.
 */
void pvperf_arch_sample_regs(struct pt_regs *regs,
			     const struct pvperf_sample *rec, bool exact)
{
	if (exact) {
		pvperf_copy_gprs(regs, rec);
		regs->flags = X86_EFLAGS_FIXED | X86_EFLAGS_IF;
	}
	regs->ip = rec->ip;
	if (rec->mode == PVPERF_MODE_USER) {
		regs->cs = __USER_CS;
		regs->ss = __USER_DS;
	} else {
		regs->cs = __KERNEL_CS;
		regs->ss = __KERNEL_DS;
		if (!exact)
			regs->flags &= ~X86_EFLAGS_FIXED;
	}
}

/*
 * perf core's user callchain walks x86's frames from rbp and reads
 * the return address from the stack: nothing to add.
 */
void pvperf_arch_sample_callchain(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs)
{
}

/* ----------------------------------------------------------------------
 * The overflow interrupt: an NMI
 */

static pvperf_overflow_handler_fn pvperf_overflow_handler;

static int pvperf_nmi_handler(unsigned int cmd, struct pt_regs *regs)
{
	return pvperf_overflow_handler(regs) ? NMI_HANDLED : NMI_DONE;
}

/*
 * QMP inject-nmi raises LINT1 of every local APIC (QEMU: x86_nmi ->
 * apic_deliver_nmi), but Linux programs LINT1 as NMI on the boot CPU only
 * and masks it on the others (setup_local_APIC).  A sample on another CPU
 * would then wait for that CPU's next exit or read to be drained, and its
 * callchain would be walked from the wrong frame.  So while the driver is
 * loaded every CPU takes LINT1 as an NMI; the handler claims exactly the
 * NMIs the host announced, so no CPU sees one "for unknown reason".  Runs
 * on each CPU (on_each_cpu, IRQs off).
 */
static DEFINE_PER_CPU(u32, pvperf_saved_lvt1);

/*
 * apic->read and apic->write, not apic_read() and apic_write(): those are
 * static calls since Linux 6.6, whose keys are not exported to modules;
 * the exported `apic` holds the same functions (6.1's apic_read() is
 * apic->read()).
 */

static void pvperf_lint1_nmi(void *unused)
{
	this_cpu_write(pvperf_saved_lvt1, apic->read(APIC_LVT1));
	apic->write(APIC_LVT1, APIC_DM_NMI);
}

static void pvperf_lint1_restore(void *unused)
{
	apic->write(APIC_LVT1, this_cpu_read(pvperf_saved_lvt1));
}

int pvperf_arch_overflow_irq_register(pvperf_overflow_handler_fn handler)
{
	int err;

	pvperf_overflow_handler = handler;
	err = register_nmi_handler(NMI_LOCAL, pvperf_nmi_handler, 0, "pvperf");
	if (err)
		return err;
	on_each_cpu(pvperf_lint1_nmi, NULL, 1);
	return 0;
}

void pvperf_arch_overflow_irq_unregister(void)
{
	on_each_cpu(pvperf_lint1_restore, NULL, 1);
	unregister_nmi_handler(NMI_LOCAL, "pvperf");
}

/* ----------------------------------------------------------------------
 * Page faults
 *
 * The exceptions:page_fault_{user,kernel} tracepoints fire in
 * handle_page_fault() (arch/x86/mm/fault.c) before IRQs are enabled, so no
 * ENABLE or DISABLE can slip between the fault and its report.
 */

static struct tracepoint *pvperf_tp_fault_user;
static struct tracepoint *pvperf_tp_fault_kernel;
static pvperf_fault_report_fn pvperf_fault_report;

static void pvperf_fault_probe(void *data, unsigned long address,
			       struct pt_regs *regs, unsigned long error_code)
{
	/* An instruction fetch faulted: TCG counted nothing. */
	if (error_code & X86_PF_INSTR)
		return;
	pvperf_fault_report(regs->ip, user_mode(regs));
}

/* Not exported to modules: find them by name. */
static void pvperf_find_fault_tracepoint(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "page_fault_user"))
		pvperf_tp_fault_user = tp;
	else if (!strcmp(tp->name, "page_fault_kernel"))
		pvperf_tp_fault_kernel = tp;
}

int pvperf_arch_fault_hook_register(pvperf_fault_report_fn report)
{
	int err;

	for_each_kernel_tracepoint(pvperf_find_fault_tracepoint, NULL);
	if (!pvperf_tp_fault_user || !pvperf_tp_fault_kernel) {
		pr_err("tracepoints exceptions:page_fault_{user,kernel} not found: counts would not be exact\n");
		return -ENODEV;
	}
	pvperf_fault_report = report;
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
	return 0;
}

void pvperf_arch_fault_hook_unregister(void)
{
	tracepoint_probe_unregister(pvperf_tp_fault_kernel,
				    pvperf_fault_probe, NULL);
	tracepoint_probe_unregister(pvperf_tp_fault_user,
				    pvperf_fault_probe, NULL);
	/* No probe may still be running, on the hcall blocks, after this. */
	tracepoint_synchronize_unregister();
}
