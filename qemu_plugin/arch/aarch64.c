/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * aarch64.c - the arm64 guest (arch.h): instruction classes, registers,
 * the marker, the page walk and the page-table write, on QEMU's virt
 * machine (Linux with 4K pages and 48-bit virtual addresses).
 *
 * Instruction classes come from the 32-bit encoding alone (Arm ARM, "A64
 * instruction set encoding": op0 = bits 28:25, then each class's own
 * fields), not from capstone: capstone 4 cannot decode the LSE atomics,
 * ldapr or SVE, and does not tell bl/blr as calls.  A few masks per
 * instruction, so no decode cache either.
 *
 * Branches (PVPERF_CTR_BRANCH_*).  The Arm ARM's BR_RETIRED counts the
 * architecturally executed branch instructions, a conditional one whether
 * taken or not; so do we, for: b.cond, bc.cond, cbz, cbnz, tbz, tbnz
 * (conditional, CLS_COND, with a taken target: cond_target), b, bl
 * (direct), br, blr and their PAC forms (indirect, CLS_INDIRECT), ret and
 * retaa/retab (returns).  Not counted: the exception-generating
 * instructions (svc, hvc, smc, brk, hlt) and eret.  They change the pc as
 * exception entry and return rather than as branches, and we could not
 * check here
 * whether BR_RETIRED includes them on real cores (x86_64.c counts syscall and
 * iret, which x86's branch event does): a FIXME for a run on hardware.
 *
 * Memory (CLS_MEM: may page-fault): every load and store the models see
 * through QEMU's memory callbacks: ldr/str of every size and addressing
 * mode (literal, pre/post-index, register offset, unscaled), ldp/stp/
 * ldnp/stnp/ldpsw, the exclusives and acquire/release forms (ldxr stxr
 * ldaxr stlxr ldar stlr ldapr ...), the LSE atomics (ldadd.. swp cas
 * casp: one load and one store each), the SIMD&FP register loads and
 * stores and ld1-4/st1-4, SVE's, the MTE tag ones, and dc zva (a store of
 * a block).  prfm/prfum are not: QEMU executes them as nops, with no
 * access and no fault.  The cache and TLB models see what QEMU's memory
 * callbacks report of these: one per access QEMU's translation makes (how
 * it splits a pair or a vector structure is QEMU's choice, not checked
 * here), while an instruction is one may-fault point however many
 * accesses it makes.
 *
 * Faults other than a data access (CLS_BOUNDARY alone): the exception-
 * generating instructions, eret, udf and unallocated encodings, and the
 * system instructions but hints and barriers (a system register access
 * can trap).
 *
 * Frame (CLS_FRAME, where sampling captures registers): writes sp, the
 * frame pointer x29 or the link register x30, the registers an unwinder
 * reads.  Over-approximated (one more capture point costs little): any
 * data-processing instruction whose Rd is x29, x30 or sp (not the zero
 * register, also 31), any general-register load or store of
 * Rt/Rt2 29 or 30, any writeback to a base of sp or x29, bl and blr, and
 * every system or exception instruction (they switch stacks).
 *
 * The marker.  A hypercall is the store `stur w16, [x17]`
 * (PVPERF_AARCH64_MARKER_INSN) at a kernel-half address, w16 holding
 * PVPERF_MARKER_MAGIC and x17 pointing at the caller's struct
 * pvperf_hcall (pvperf_abi.h).
 *
 * Registers: QEMU's (gdb's) names; the sample's are x0-x30 and sp, in
 * perf's arm64 order.
 *
 * The address space: user addresses translate through TTBR0_EL1, the
 * kernel half (bit 55 set) through TTBR1_EL1, whose table never changes.
 * Linux 6.1 switches a CPU to another mm in cpu_do_switch_mm
 * (arch/arm64/mm/context.c): the new ASID into TTBR1_EL1 (TCR_EL1.A1 is
 * set, so the ASID lives there), then `msr ttbr0_el1, xN` with the mm's
 * table | CnP (CLS_ASPACE, aspace_write_gpr).  With CnP,
 * check_and_switch_context first parks TTBR0_EL1 on reserved_pg_dir
 * (cpu_set_reserved_ttbr0, the same instruction), and idmap and EFI
 * switches write it too; those are address spaces of no task.  So the
 * page-table base (BADDR, bits 12..47 with 4K-aligned tables: the ASID
 * in 63..48 only with SW TTBR0 PAN, CnP in bit 0) names a user address
 * space, as CR3 does on x86_64; an ASID may be reused by another mm
 * after a rollover, a live mm's table may not.  QEMU 10.0 exposes
 * TTBR0_EL1 and SP_EL0 to plugins through its system register gdb XML
 * (org.qemu.gdb.arm.sys.regs, by those names): checked on neoverse-n1
 * and max (images/aarch64/plugin-registers-neoverse-n1.txt).
 *
 * The task register (pvperf-rmap.so's task= path) is SP_EL0: at EL1
 * Linux keeps `current` there (get_current()), and at the TTBR0 write of
 * a context switch that is still the task switched from.  Its rq->curr
 * is the task switched to: pyhost/arch/aarch64.py gives the path
 * current->se.cfs_rq->rq->curr (CONFIG_FAIR_GROUP_SCHED: a task's cfs_rq
 * on its CPU points to that CPU's rq), since Debian's arm64 kernel lists
 * no data symbols in kallsyms (no CONFIG_KALLSYMS_ALL), hence no
 * `runqueues` to start from.
 *
 * Guest physical addresses.  virt's RAM starts at 0x40000000 and is one
 * range: the RAM file's offset is the gpa minus ram_base.  A FAULT's page
 * walk is the 4K-granule, 4-level one (VA_BITS = 48, Debian's arm64
 * config): a user address under TTBR0_EL1, a kernel-half one (bits 63-48
 * all ones) under TTBR1_EL1 (REG_KERNEL_PAGE_TABLE); both index the
 * tables with bits 47-12.
 */
#include <string.h>

#include "arch.h"

#define A64_INSN_LEN 4

static uint32_t bits(uint32_t w, unsigned hi, unsigned lo)
{
	return (w >> lo) & ((1u << (hi - lo + 1)) - 1);
}

/* ---- branches, exception generation, system ---- */

/* b.cond bc.cond cbz cbnz tbz tbnz. */
static bool is_cond_branch(uint32_t w)
{
	return (w & 0x7e000000) == 0x34000000 ||	/* cbz, cbnz */
	       (w & 0x7e000000) == 0x36000000 ||	/* tbz, tbnz */
	       (w & 0xff000000) == 0x54000000;		/* b.cond, bc.cond */
}

/* Unconditional branch (register): opc = bits 24:21, op2 = 11111. */
static uint8_t branch_register(uint32_t w)
{
	if (bits(w, 20, 16) != 0x1f)
		return CLS_BOUNDARY | CLS_FRAME;	/* unallocated */
	switch (bits(w, 24, 21)) {
	case 0x0: case 0x8:		/* br, braaz/brabz, braa/brab */
		return CLS_BRANCH | CLS_INDIRECT;
	case 0x1: case 0x9:		/* blr, blraaz/blrabz, blraa/blrab */
		return CLS_BRANCH | CLS_INDIRECT | CLS_FRAME;
	case 0x2:			/* ret, retaa, retab */
		return CLS_BRANCH;
	default:			/* eret, drps, unallocated */
		return CLS_BOUNDARY | CLS_FRAME;
	}
}

/* MSR (register): 1101 0101 0001 o0 op1 CRn CRm op2 Rt; TTBR0_EL1 is
 * op0 3 (o0 1), op1 0, CRn 2, CRm 0, op2 0. */
#define MSR_TTBR0_EL1		0xd5182000u
#define MSR_RT_MASK		0x1fu

/* msr ttbr0_el1, xt: the page-table write. */
static bool writes_ttbr0(uint32_t w)
{
	return (w & ~MSR_RT_MASK) == MSR_TTBR0_EL1;
}

static uint8_t system_insn(uint32_t w)
{
	if ((w & 0xfffff01f) == 0xd503201f)	/* hints: nop, yield, bti, pac.. */
		return 0;
	if ((w & 0xfffff01f) == 0xd503301f)	/* clrex, dsb, dmb, isb, sb */
		return 0;
	if ((w & 0xffffffe0) == 0xd50b7420)	/* dc zva, xt: stores a block */
		return CLS_MEM | CLS_BOUNDARY;
	if (writes_ttbr0(w))
		return CLS_ASPACE | CLS_BOUNDARY | CLS_FRAME;
	return CLS_BOUNDARY | CLS_FRAME;	/* mrs, msr, sys, sysl */
}

static uint8_t branch_exception_system(uint32_t w)
{
	if ((w & 0x7c000000) == 0x14000000)	/* b, bl (bit 31: writes x30) */
		return CLS_BRANCH | (w >> 31 ? CLS_FRAME : 0);
	if (is_cond_branch(w))
		return CLS_BRANCH | CLS_COND;
	if ((w & 0xfe000000) == 0xd6000000)
		return branch_register(w);
	if ((w & 0xffc00000) == 0xd5000000)
		return system_insn(w);
	/* svc hvc smc brk hlt dcps, and unallocated */
	return CLS_BOUNDARY | CLS_FRAME;
}

/* ---- loads and stores ---- */

/* The general-register loads and stores, not SIMD&FP (V, bit 26). */
static bool is_gpr_access(uint32_t w)
{
	return !bits(w, 26, 26);
}

/* prfm (immediate, register, literal) and prfum: size 11, V 0, opc 10. */
static bool is_prefetch(uint32_t w)
{
	if ((w & 0xff000000) == 0xd8000000)	/* prfm (literal) */
		return true;
	return (w & 0xffc00000) == 0xf9800000 ||	/* prfm (unsigned imm) */
	       (w & 0xffe00c00) == 0xf8a00800 ||	/* prfm (register) */
	       (w & 0xffe00c00) == 0xf8800000;		/* prfum */
}

/* Writes back its base register: pre/post-index pairs and single
 * registers, post-index SIMD structures. */
static bool writes_back(uint32_t w)
{
	if ((w & 0x38000000) == 0x28000000)		/* ldp/stp family */
		return bits(w, 23, 23);			/* 01 post, 11 pre */
	if ((w & 0xbe000000) == 0x0c000000)		/* ld1-4, st1-4.. */
		return bits(w, 23, 23);			/* post-index */
	if ((w & 0x3b200000) == 0x38000000)		/* imm9 forms */
		return bits(w, 10, 10);			/* 01 post, 11 pre */
	return false;
}

static bool is_pair(uint32_t w)
{
	return (w & 0x38000000) == 0x28000000 ||	/* ldp/stp/ldnp/stnp */
	       (w & 0x3f200000) == 0x08200000;		/* ldxp/stxp, casp */
}

static bool writes_frame_reg(uint32_t w)
{
	unsigned rn = bits(w, 9, 5);

	if (writes_back(w) && (rn == 29 || rn == 31))
		return true;
	if (!is_gpr_access(w))
		return false;
	return bits(w, 4, 0) == 29 || bits(w, 4, 0) == 30 ||
	       (is_pair(w) && (bits(w, 14, 10) == 29 || bits(w, 14, 10) == 30));
}

/*
 * The general-register pairs QEMU loads or stores as one access (10.0,
 * target/arm/tcg/translate-a64.c: trans_LDP/STP give a W pair one 8-byte
 * access and an X pair one 16-byte access, for LSE2's atomicity; the
 * exclusive pairs likewise): ldp, stp, ldnp, stnp, ldpsw, ldxp, stxp,
 * ldaxp, stlxp.  The Arm ARM's LD_RETIRED/ST_RETIRED count one per
 * instruction; valgrind's arm64 front end makes two accesses of a pair,
 * so cachegrind counts two (Dr or Dw), each with its own cache lookup:
 * so do the models (MEM_PAIR).  SIMD&FP pairs (ldp q0, q1) are two
 * accesses in QEMU already, and casp stays as QEMU reports it.
 */
static bool is_gpr_pair(uint32_t w)
{
	/* ldp/stp family: op0 x1x0 (a load or store), bits 29:28 10 */
	if ((w & 0x3a000000) == 0x28000000)
		return is_gpr_access(w);
	return (w & 0xbfa00000) == 0x88200000;		/* ld(a)xp, st(l)xp */
}

static uint8_t load_store(uint32_t w)
{
	if (is_prefetch(w))
		return 0;
	return CLS_MEM | CLS_BOUNDARY | (writes_frame_reg(w) ? CLS_FRAME : 0);
}

/* SVE (op0 0010): its loads and stores have bit 31 set. */
static uint8_t sve(uint32_t w)
{
	return w >> 31 ? CLS_MEM | CLS_BOUNDARY : 0;
}

/* Rd 31 is sp (not the zero register) for add/sub (immediate, with
 * tags, extended register) and the logical immediates but ands, the
 * flag-setting forms (cmp, cmn, tst) excepted. */
static bool rd31_is_sp(uint32_t w)
{
	bool sets_flags = bits(w, 29, 29);

	if ((w & 0x1f000000) == 0x11000000)		/* add/sub (imm, tags) */
		return !sets_flags;
	if ((w & 0x1f800000) == 0x12000000)		/* logical (imm) */
		return bits(w, 30, 29) != 3;
	if ((w & 0x1f200000) == 0x0b200000)		/* add/sub (ext reg) */
		return !sets_flags;
	return false;
}

/* Data processing, immediate (op0 100x) or register (x101): Rd is 4:0. */
static uint8_t data_processing(uint32_t w)
{
	unsigned rd = bits(w, 4, 0);

	return rd == 29 || rd == 30 || (rd == 31 && rd31_is_sp(w)) ?
	       CLS_FRAME : 0;
}

static uint8_t classify_word(uint32_t w)
{
	unsigned op0 = bits(w, 28, 25);

	if ((op0 & 0xe) == 0xa)			/* 101x */
		return branch_exception_system(w);
	if ((op0 & 0x5) == 0x4)			/* x1x0 */
		return load_store(w);
	if ((op0 & 0xe) == 0x8 || (op0 & 0x7) == 0x5)	/* 100x, x101 */
		return data_processing(w);
	if ((op0 & 0x7) == 0x7)			/* x111: SIMD&FP data */
		return 0;
	if (op0 == 0x2)
		return sve(w);
	return CLS_BOUNDARY | CLS_FRAME;	/* udf, unallocated, SME */
}

static uint32_t insn_word(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

static uint8_t mem_shape(const uint8_t *bytes, size_t len)
{
	if (len != A64_INSN_LEN)
		return MEM_AS_IS;
	return is_gpr_pair(insn_word(bytes)) ? MEM_PAIR : MEM_AS_IS;
}

static bool is_marker(const uint8_t *bytes, size_t len)
{
	return len == PVPERF_AARCH64_MARKER_INSN_LEN &&
	       insn_word(bytes) == PVPERF_AARCH64_MARKER_INSN;
}

static void classify_tb(const struct cls_insn *insn, size_t n, bool kernel,
			uint8_t *cls)
{
	for (size_t i = 0; i < n; i++) {
		if (insn[i].len != A64_INSN_LEN) {
			cls[i] = CLS_BOUNDARY | CLS_FRAME;
			continue;
		}
		cls[i] = classify_word(insn_word(insn[i].bytes));
		if (kernel && is_marker(insn[i].bytes, insn[i].len))
			cls[i] |= CLS_MARKER;
	}
}

static int64_t sign_extend(uint32_t v, unsigned width)
{
	return (int64_t)((uint64_t)v << (64 - width)) >> (64 - width);
}

static bool cond_target(const uint8_t *bytes, size_t len, uint64_t vaddr,
			uint64_t *target)
{
	uint32_t w;
	int64_t words;

	if (len != A64_INSN_LEN)
		return false;
	w = insn_word(bytes);
	if ((w & 0x7e000000) == 0x36000000)		/* tbz, tbnz: imm14 */
		words = sign_extend(bits(w, 18, 5), 14);
	else if (is_cond_branch(w))			/* imm19 */
		words = sign_extend(bits(w, 23, 5), 19);
	else
		return false;
	*target = vaddr + (uint64_t)(words * 4);
	return true;
}

/* ---- the page walk ---- */

#define DESC_VALID	(1ULL << 0)
#define DESC_TABLE	(1ULL << 1)	/* levels 0-2: table, else block;
					 * level 3: page (else reserved) */
#define DESC_ADDR	0x0000fffffffff000ULL
#define TTBR_BADDR	0x0000fffffffffffeULL	/* CnP in bit 0, ASID above */
#define USER_VA_END	(1ULL << 48)
#define KERNEL_VA_START	(~0ULL << 48)

/* The 4K-granule, 4-level walk of vaddr from ttbr: TTBR0_EL1's for a user
 * address, TTBR1_EL1's for a kernel-half one. */
static uint64_t vaddr_to_gpa(uint64_t ttbr, uint64_t vaddr,
			     bool (*read_u64)(uint64_t gpa, uint64_t *val))
{
	uint64_t table = ttbr & TTBR_BADDR & DESC_ADDR;

	if (vaddr >= USER_VA_END && vaddr < KERNEL_VA_START)
		return GPA_NONE;	/* the hole between the halves */
	for (int level = 0; level <= 3; level++) {
		unsigned shift = 39 - 9 * level;
		uint64_t desc, span = 1ULL << shift;

		if (!read_u64(table + ((vaddr >> shift) & 0x1ff) * 8, &desc) ||
		    !(desc & DESC_VALID))
			return GPA_NONE;
		if (level == 3 || !(desc & DESC_TABLE)) {
			/* a block at levels 1 and 2, a page at level 3 */
			if ((level == 3) != !!(desc & DESC_TABLE) || level == 0)
				return GPA_NONE;
			return (desc & DESC_ADDR & ~(span - 1)) |
			       (vaddr & (span - 1));
		}
		table = desc & DESC_ADDR;
	}
	return GPA_NONE;
}

/* The sample's register slots (pvperf_abi.h): x0-x30, then sp, as perf
 * numbers arm64's registers; the pc is the sample's ip. */
_Static_assert(PVPERF_AARCH64_REG_X0 == 0 && PVPERF_AARCH64_REG_SP == 31 &&
	       PVPERF_NR_REGS >= 32,
	       "reg_names follows pvperf_sample's register order");

/* The Xt of `msr ttbr0_el1, xt` in code[0..len) (arch.h
 * aspace_write_gpr), or -1 (also for xzr, no register). */
static int msr_ttbr0_gpr(const uint8_t *code, size_t len)
{
	uint32_t w;

	if (len != A64_INSN_LEN)
		return -1;
	w = insn_word(code);
	if (!writes_ttbr0(w) || (w & MSR_RT_MASK) == 31)
		return -1;
	return w & MSR_RT_MASK;
}

/* x0..x30 in encoding order (Rt 31 is xzr in an msr: no register). */
static const char *const gpr_names[] = {
	"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7",
	"x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",
	"x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23",
	"x24", "x25", "x26", "x27", "x28", "x29", "x30",
};

const struct arch arch_aarch64 = {
	.target = "aarch64",
	.kernel_start = PVPERF_AARCH64_KERNEL_HALF_START,
	.ram_base = 0x40000000,			/* virt */
	.reg_names = {
		"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7",
		"x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",
		"x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23",
		"x24", "x25", "x26", "x27", "x28", "x29", "x30", "sp",
		[REG_PC] = "pc", [REG_PAGE_TABLE] = "TTBR0_EL1",
		[REG_KERNEL_PAGE_TABLE] = "TTBR1_EL1",
	},
	.marker_len = PVPERF_AARCH64_MARKER_INSN_LEN,
	.is_marker = is_marker,
	.classify_tb = classify_tb,
	.mem_shape = mem_shape,
	.cond_target = cond_target,
	.vaddr_to_gpa = vaddr_to_gpa,
	.aspace_write_gpr = msr_ttbr0_gpr,
	.n_gprs = sizeof(gpr_names) / sizeof(gpr_names[0]),
	.gpr_names = gpr_names,
	/* BADDR of a 4K-aligned table with 48-bit physical addresses. */
	.aspace_mask = 0x0000fffffffff000ULL,
	.task_reg = "SP_EL0",
};
