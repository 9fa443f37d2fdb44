/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * aarch64.c - pvperf-rmap.so on arm64 guests (QEMU's virt machine, Linux
 * with 4K pages and 48-bit virtual addresses).
 *
 * The address space: user addresses translate through TTBR0_EL1, the
 * kernel half (bit 55 set) through TTBR1_EL1, whose table never changes.
 * Linux 6.1 switches a CPU to another mm in cpu_do_switch_mm
 * (arch/arm64/mm/context.c): the new ASID into TTBR1_EL1 (TCR_EL1.A1 is
 * set, so the ASID lives there), then `msr ttbr0_el1, xN` with the mm's
 * table | CnP.  With CnP, check_and_switch_context first parks TTBR0_EL1
 * on reserved_pg_dir (cpu_set_reserved_ttbr0, the same instruction), and
 * idmap and EFI switches write it too; those are address spaces of no
 * task and stay unnamed.  So the page-table base (BADDR, bits 12..47 with
 * 4K-aligned tables: the ASID in 63..48 only with SW TTBR0 PAN, CnP in
 * bit 0) names a user address space, as CR3 does on x86_64; an ASID may
 * be reused by another mm after a rollover, a live mm's table may not.
 *
 * QEMU 10.0 exposes TTBR0_EL1 and SP_EL0 to plugins through its system
 * register gdb XML (org.qemu.gdb.arm.sys.regs, by those names): checked
 * on neoverse-n1 and max (images/aarch64/plugin-registers-neoverse-n1.txt).
 *
 * The task register is SP_EL0: at EL1 Linux keeps `current` there
 * (get_current()), and at the TTBR0 write of a context switch that is
 * still the task switched from.  Its rq->curr is the task switched to:
 * pyhost/arch/aarch64.py gives the path current->se.cfs_rq->rq->curr
 * (CONFIG_FAIR_GROUP_SCHED: a task's cfs_rq on its CPU points to that
 * CPU's rq), since Debian's arm64 kernel lists no data symbols in
 * kallsyms (no CONFIG_KALLSYMS_ALL), hence no `runqueues` to start from.
 */
#include <stdbool.h>

#include "arch.h"
#include "pvperf_abi.h"

/* x0..x30 in encoding order (Rt 31 is xzr in an msr: no register). */
static const char *const gpr_names[] = {
	"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7",
	"x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",
	"x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23",
	"x24", "x25", "x26", "x27", "x28", "x29", "x30",
};

/* MSR (register): 1101 0101 0001 o0 op1 CRn CRm op2 Rt; TTBR0_EL1 is
 * op0 3 (o0 1), op1 0, CRn 2, CRm 0, op2 0. */
#define MSR_TTBR0_EL1		0xd5182000u
#define MSR_RT_MASK		0x1fu

static uint32_t le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The Xt of `msr ttbr0_el1, xt` in code[0..len), or -1 (also for xzr). */
static int msr_ttbr0_gpr(const uint8_t *code, size_t len)
{
	uint32_t w;

	if (len != 4)
		return -1;
	w = le32(code);
	if ((w & ~MSR_RT_MASK) != MSR_TTBR0_EL1 || (w & MSR_RT_MASK) == 31)
		return -1;
	return w & MSR_RT_MASK;
}

const struct rmap_arch rmap_arch_aarch64 = {
	.target = "aarch64",
	.kernel_half_start = PVPERF_AARCH64_KERNEL_HALF_START,
	.n_gprs = sizeof(gpr_names) / sizeof(gpr_names[0]),
	.gpr_names = gpr_names,
	.aspace_reg = "TTBR0_EL1",
	.task_reg = "SP_EL0",
	/* BADDR of a 4K-aligned table with 48-bit physical addresses. */
	.aspace_mask = 0x0000fffffffff000ULL,
	.aspace_write_gpr = msr_ttbr0_gpr,
};
