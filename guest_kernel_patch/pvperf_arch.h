/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pvperf_arch.h - what a guest architecture provides to the pvperf driver.
 *
 * The driver's generic files reach the architecture only through these
 * functions.  Each architecture implements all of them in one file named
 * after it (pvperf_<arch>.c), which Kbuild picks by the kernel's CONFIG_
 * symbol.  That file calls nothing in the generic files: what it must call
 * back (the overflow interrupt's handler, the page-fault report) it is
 * handed at registration.  So it holds no generic logic, and the hypercall
 * test module (hctest/) links it for the marker store alone.
 */
#ifndef PVPERF_ARCH_H
#define PVPERF_ARCH_H

#include <linux/ptrace.h>
#include <linux/types.h>

#include "pvperf_abi.h"

/*
 * Execute the marker store into the hypercall block at @block: the
 * instruction the TCG plugin recognises at translation time (the
 * architecture's PVPERF_<ARCH>_MARKER_INSN* in pvperf_abi.h).  The vCPU
 * continues only once the host has written ->ret.  The caller fills the
 * block before, reads ->ret after and keeps IRQs off around it.  @block
 * may be anywhere (the fuzz test misplaces it on purpose; the host refuses
 * such a block).
 */
void pvperf_arch_marker(void *block);

/*
 * Complete @regs, the registers a sample @rec is reported with.  On entry
 * @regs holds what the generic code chose: zeros when @exact (the host
 * recorded the registers of the overflowing instruction,
 * PVPERF_SAMPLE_REGS), else the registers the overflow interrupt found or
 * the task's user registers when they are of the sample's mode, else
 * zeros.  Sets the instruction pointer to @rec->ip and the mode to
 * @rec->mode (what user_mode() reads), and with @exact the registers from
 * @rec->regs (the ABI's order for this architecture).  For a kernel sample
 * without @exact, @regs are not that instruction's: mark them so that
 * perf's kernel unwinder starts from the current stack.
 */
void pvperf_arch_sample_regs(struct pt_regs *regs,
			     const struct pvperf_sample *rec, bool exact);

struct perf_event;
struct perf_sample_data;

/*
 * The callchain of a sample of @event reported with @regs (completed by
 * pvperf_arch_sample_regs()), just before perf_event_overflow().  Where
 * the kernel's own user-stack walk would miss frames that these registers
 * and the stack describe, the architecture fills @data's callchain itself
 * (perf core then takes it as it is); elsewhere it leaves @data alone and
 * perf core walks as it does for any PMU.
 */
void pvperf_arch_sample_callchain(struct perf_event *event,
				  struct perf_sample_data *data,
				  struct pt_regs *regs);

/*
 * The overflow interrupt: the host raises it at the vCPU after it wrote
 * sample records, or announced one in ring->nmis.  The architecture
 * routes it to @handler on the CPU it arrived at, with the interrupted
 * registers; @handler returns true if the interrupt was the host's, which
 * the architecture then treats as handled.  Register/unregister run in
 * process context at module init and exit.  Register returns -EOPNOTSUPP
 * when the architecture has no overflow interrupt (yet): the driver then
 * counts but refuses sampling events; unregister is still called.
 */
typedef bool (*pvperf_overflow_handler_fn)(struct pt_regs *regs);

int pvperf_arch_overflow_irq_register(pvperf_overflow_handler_fn handler);
void pvperf_arch_overflow_irq_unregister(void);

/*
 * Page faults: the TCG plugin counts a faulting instruction once before the
 * fault and again when it runs after the handler.  The architecture hooks
 * its fault path and calls @report with the faulting instruction's address
 * and mode, for every fault of an instruction that TCG counted (not for a
 * fetch that faulted), before IRQs are enabled in the handler, so that no
 * ENABLE or DISABLE comes between the fault and its report.  Fails if it
 * cannot hook every such fault: counts would not be exact.  Unregister
 * returns once no @report call can still be running.
 */
typedef void (*pvperf_fault_report_fn)(unsigned long ip, bool user);

int pvperf_arch_fault_hook_register(pvperf_fault_report_fn report);
void pvperf_arch_fault_hook_unregister(void);

#endif /* PVPERF_ARCH_H */
