// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_hcall.c - the hypercall transport: one block per CPU and context,
 * filled here, handed to the architecture's marker store (pvperf_arch.h).
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/errno.h>
#include <linux/hardirq.h>
#include <linux/kernel.h>
#include <linux/percpu.h>
#include <linux/slab.h>
#include <linux/topology.h>

#include "pvperf.h"
#include "pvperf_arch.h"

/*
 * Hypercall blocks per CPU: one for task and IRQ context, one for NMI
 * context.  local_irq_save() keeps a hypercall from being interrupted by
 * another one on the same CPU, but not by an NMI, and an NMI handler may
 * issue its own (a page fault in an NMI reaches the fault report; an
 * overflow interrupt that arrives as an NMI reads and stops events).  NMIs
 * do not nest, so two blocks suffice.
 */
#define PVPERF_HCALL_CTX_TASK		0
#define PVPERF_HCALL_CTX_NMI		1
#define PVPERF_HCALL_NR_CTX		2

/*
 * The blocks of each CPU; written once at init, read in pvperf_hypercall().
 * Not DEFINE_PER_CPU_READ_MOSTLY: the module loader (6.1) relocates only
 * .data..percpu, a module's .data..percpu..read_mostly is not per-CPU at all.
 */
static DEFINE_PER_CPU(struct pvperf_hcall *, pvperf_hcall_blocks);

/*
 * Issue one hypercall on the current CPU and return the host's ->ret.
 * Without a host the marker store is just a store and ->ret stays -ENOSYS.
 * The marker store is out of line, so the compiler has written the block
 * before it and reads ->ret, which the host writes before the vCPU
 * continues, after it.
 */
s64 pvperf_hypercall(u32 op, u64 arg0, u64 arg1, u64 arg2)
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
	pvperf_arch_marker(hc);
	ret = READ_ONCE(hc->ret);
	local_irq_restore(flags);
	return ret;
}

/*
 * An operation whose result is 0 or a negative errno.  The host's value is
 * not trusted to be either: anything else becomes -EIO.
 */
int pvperf_op3(u32 op, u64 arg0, u64 arg1, u64 arg2)
{
	s64 ret = pvperf_hypercall(op, arg0, arg1, arg2);

	if (ret == 0 || (ret < 0 && ret >= -MAX_ERRNO))
		return ret;
	pr_warn_ratelimited("host returned %lld for op %u (arg %#llx)\n",
			    ret, op, arg0);
	return -EIO;
}

int pvperf_op(u32 op, u64 arg0)
{
	return pvperf_op3(op, arg0, 0, 0);
}

int pvperf_hcall_blocks_alloc(void)
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

void pvperf_hcall_blocks_free(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		kfree(per_cpu(pvperf_hcall_blocks, cpu));
		per_cpu(pvperf_hcall_blocks, cpu) = NULL;
	}
}
