/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * riscv64.c - the riscv64 guest (arch.h): instruction classes, registers,
 * the marker, the page walk and the page-table write, on QEMU's virt
 * machine (Linux, Sv39/Sv48/Sv57).
 *
 * Instruction classes come from the encoding alone (RISC-V unprivileged
 * ISA: the 32-bit base opcode map and the compressed quadrants), not from
 * capstone: Debian 12's capstone 4 has no RISC-V.  Decoded: RV64GC, the
 * privileged instructions, and what a distribution's code may also hold
 * (Zicbom/Zicboz cache-block ops, Zcb, Zabha/Zacas atomics, the vector
 * extension's loads, stores and arithmetic as classes only).  Lengths:
 * bits 1:0 != 11 is a 16-bit instruction, else 32-bit if bits 4:2 != 111;
 * a longer one (none is ratified) is undecodable.
 *
 * Branches (PVPERF_CTR_BRANCH_*), a conditional one taken or not:
 * beq bne blt bge bltu bgeu c.beqz c.bnez (CLS_COND, with a taken
 * target: cond_target), jal and c.j (direct), jalr, c.jr and c.jalr
 * (CLS_INDIRECT) but for returns (c.jal is rv32-only: c.addiw on rv64).
 * The models follow cachegrind, their reference, as valgrind's riscv64
 * front end (guest_riscv64_toIR.c) makes its IR: a return is `jalr x0,
 * 0(ra)` or `c.jr ra` (Ijk_Ret; not `jr t0`, the calling convention's
 * other return), and a branch its block has decided (auipc + jalr, a
 * compare of constants) is neither conditional nor indirect (classify_tb).
 * Calls write a link register (ra, or t0 for the kernel's and millicode's
 * alternate link): jal/jalr ra are CLS_FRAME, those through t0 are not.
 * Not counted: ecall, ebreak, sret, mret (exception entry and return).
 *
 * Memory (CLS_MEM: may page-fault): the loads and stores of every width
 * (lb..ld, sb..sd, lwu, FP flh..flq fsh..fsq), the compressed ones (c.lw
 * c.ld c.sw c.sd, c.lwsp.. c.sdsp, c.fld c.fsd c.fldsp c.fsdsp, Zcb's
 * c.lbu c.lhu c.lh c.sb c.sh), the atomics (lr, sc, amo*), hlv/hsv, the
 * vector loads and stores (LOAD-FP's and STORE-FP's opcodes), cbo.zero
 * (a block's store, like arm64's dc zva); not the prefetch hints (ori
 * with rd = x0: QEMU runs them as nops).
 *
 * Faults other than a data access (CLS_BOUNDARY alone): the SYSTEM
 * instructions (ecall, ebreak, sret, wfi, sfence.vma, every CSR access:
 * one can trap), cbo.clean/flush/inval (they check permissions), every
 * vector instruction (Linux enables the vector unit lazily: a task's
 * first one traps, and runs again), illegal or reserved encodings.
 *
 * Frame (CLS_FRAME, where sampling captures registers): writes sp (x2),
 * the frame pointer s0 (x8) or ra (x1), the registers an unwinder reads:
 * any instruction whose integer destination is one of them (a load, an
 * ALU result, jal/jalr/c.jalr's link, c.addi16sp, c.addi4spn into s0),
 * vector ones with rd one of them (vsetvli, vmv.x.s; over-approximated),
 * every SYSTEM or undecodable instruction (traps switch stacks).
 *
 * The marker.  A hypercall is the 32-bit store `sw a0, 0(a1)`
 * (PVPERF_RISCV64_MARKER_INSN) at a kernel-half address, a0 holding
 * PVPERF_MARKER_MAGIC, a1 the caller's struct pvperf_hcall
 * (pvperf_abi.h).  An RVC assembler emits c.sw for it (its registers are
 * RVC's): only `.option norvc` code has the word, and none of trixie's
 * 6.12.117 Image and 3103 modules does (`sw a6, 0(a7)`: 21 places).
 *
 * Registers: QEMU's (gdb's riscv-64bit-cpu.xml) names, x8 as "fp"; satp
 * from the CSR feature QEMU generates (org.gnu.gdb.riscv.csr); checked on
 * 10.0 with the image's CPU (images/riscv64/plugin-registers-rv64.txt).
 * The sample's slots are perf's riscv order (PERF_REG_RISCV_PC = 0, then
 * x1..x31): slot 0 is left 0, the pc being the sample's ip (as on arm64;
 * a capture point's pc would be that point's).
 *
 * The address space: one root, satp (MODE 63:60, ASID 59:44, PPN 43:0),
 * maps both halves.  Linux 6.12 switches a CPU to another mm in
 * set_mm/switch_mm (arch/riscv/mm/context.c): `csrw satp, rN` with the
 * mm's pgd PFN | ASID | MODE (CLS_ASPACE, aspace_write_gpr).  Every CSR
 * instruction that writes satp is CLS_ASPACE (csrrw/csrrwi always,
 * csrrs/csrrc/csrrsi/csrrci with a source other than x0 or 0); only
 * csrrw names a register holding the whole new value.  aspace_mask keeps
 * the PPN, the table's address shifted right by 12 (aspace_shift), not
 * the address: mm->pgd is the table's linear-map address, and the PPN is
 * that of its physical one (the kernel writes PFN_DOWN(__pa(pgd))).
 * The task register (pvperf-rmap.so's task= path) is tp: at S-mode Linux
 * keeps `current` there, and at the satp write of a context switch that
 * is still the task switched from.
 *
 * Guest physical addresses.  virt's RAM starts at 0x80000000 and is one
 * range: the RAM file's offset is the gpa minus ram_base.  A FAULT's page
 * walk is the one satp's MODE names: Sv39, Sv48 or Sv57 (3, 4 or 5
 * levels of 9 bits over 4K pages), leaves at any level (superpages) and
 * Svnapot's 64K pages; Bare (MODE 0) maps an address to itself.  The
 * kernel half is the upper one (bit 63), under every mode.
 */
#include <string.h>

#include "arch.h"

/* x1 ra, x2 sp, x8 s0/fp: the registers an unwinder reads. */
#define FRAME_REGS	((1u << 1) | (1u << 2) | (1u << 8))
#define REG_RA		1
#define CSR_SATP	0x180

static uint32_t bits(uint32_t w, unsigned hi, unsigned lo)
{
	return (w >> lo) & ((1u << (hi - lo + 1)) - 1);
}

static uint8_t frame_if(unsigned rd)
{
	return (FRAME_REGS >> rd) & 1 ? CLS_FRAME : 0;
}

#define UNDECODABLE	(CLS_BOUNDARY | CLS_FRAME)
#define MEMORY		(CLS_MEM | CLS_BOUNDARY)

/* The length the first bytes say, 0 for one longer than 32 bits. */
static size_t insn_len(const uint8_t *b)
{
	if ((b[0] & 0x3) != 0x3)
		return 2;
	return (b[0] & 0x1c) != 0x1c ? 4 : 0;
}

static uint32_t insn_word(const uint8_t *b, size_t len)
{
	uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8;

	if (len == 4)
		w |= (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return w;
}

/* ---- 32-bit instructions ---- */

/* The return of valgrind's front end: jalr x0, 0(ra). */
static uint8_t jalr(uint32_t w)
{
	unsigned rd = bits(w, 11, 7), rs1 = bits(w, 19, 15);
	bool ret = rd == 0 && rs1 == REG_RA && bits(w, 31, 20) == 0;

	if (bits(w, 14, 12))
		return UNDECODABLE;
	return CLS_BRANCH | (ret ? 0 : CLS_INDIRECT) | frame_if(rd);
}

/* Whether a CSR instruction writes its CSR: csrrw/csrrwi always, the
 * set and clear forms only with a source other than x0 (or uimm 0). */
static bool csr_writes(uint32_t w)
{
	unsigned f3 = bits(w, 14, 12);

	return (f3 & 3) == 1 || bits(w, 19, 15) != 0;
}

static bool writes_satp(uint32_t w)
{
	return (w & 0x7f) == 0x73 && (bits(w, 14, 12) & 3) != 0 &&
	       bits(w, 31, 20) == CSR_SATP && csr_writes(w);
}

static uint8_t system(uint32_t w)
{
	unsigned f3 = bits(w, 14, 12), f7 = bits(w, 31, 25);

	if (f3 == 4)		/* hlv.*, hlvx.*, hsv.*: funct7 0x30..0x37 */
		return (f7 & 0x78) == 0x30 ? MEMORY | CLS_FRAME : UNDECODABLE;
	if (f3 && writes_satp(w))
		return CLS_ASPACE | UNDECODABLE;
	/* ecall ebreak sret mret wfi sfence.vma, CSR reads and writes */
	return UNDECODABLE;
}

/* MISC-MEM: fence, fence.i, the cache-block operations. */
static uint8_t misc_mem(uint32_t w)
{
	switch (bits(w, 14, 12)) {
	case 0: case 1:			/* fence (pause, fence.tso), fence.i */
		return 0;
	case 2:
		if (bits(w, 11, 7))
			return UNDECODABLE;
		switch (bits(w, 31, 20)) {
		case 0: case 1: case 2:	/* cbo.inval, cbo.clean, cbo.flush */
			return CLS_BOUNDARY;
		case 4:			/* cbo.zero: stores a block */
			return MEMORY;
		}
		return UNDECODABLE;
	default:
		return UNDECODABLE;
	}
}

/* OP-FP: the results in integer registers (feq/flt/fle, fcvt to an
 * integer, fmv.x.*, fclass); the rest write FP registers. */
static uint8_t op_fp(uint32_t w)
{
	unsigned f5 = bits(w, 31, 27);

	return f5 == 0x14 || f5 == 0x18 || f5 == 0x1c ? frame_if(bits(w, 11, 7))
						       : 0;
}

static uint8_t classify32(uint32_t w)
{
	unsigned rd = bits(w, 11, 7), f3 = bits(w, 14, 12);

	switch (w & 0x7f) {
	case 0x03:			/* lb lh lw ld lbu lhu lwu */
		return f3 == 7 ? UNDECODABLE : MEMORY | frame_if(rd);
	case 0x07: case 0x27:		/* FP and vector loads and stores */
		return MEMORY;
	case 0x0f:
		return misc_mem(w);
	case 0x13: case 0x1b:		/* OP-IMM(-32): addi.., prefetch.* */
	case 0x17: case 0x37:		/* auipc, lui */
	case 0x33: case 0x3b:		/* OP(-32): add.., M, Zba, Zbb.. */
		return frame_if(rd);
	case 0x23:			/* sb sh sw sd */
		return f3 > 3 ? UNDECODABLE : MEMORY;
	case 0x2f:			/* lr sc amo*: w d (Zabha b h, Zacas q) */
		return f3 > 4 ? UNDECODABLE : MEMORY | frame_if(rd);
	case 0x43: case 0x47: case 0x4b: case 0x4f:	/* fmadd.. fnmadd */
		return 0;
	case 0x53:
		return op_fp(w);
	case 0x57:			/* OP-V: the first use traps */
		return CLS_BOUNDARY | frame_if(rd);
	case 0x63:			/* beq bne blt bge bltu bgeu */
		return f3 == 2 || f3 == 3 ? UNDECODABLE : CLS_BRANCH | CLS_COND;
	case 0x67:
		return jalr(w);
	case 0x6f:			/* jal */
		return CLS_BRANCH | frame_if(rd);
	case 0x73:
		return system(w);
	default:			/* custom and reserved opcodes */
		return UNDECODABLE;
	}
}

/* ---- 16-bit instructions ---- */

/* rd'/rs1' (bits 9:7) and rd'/rs2' (bits 4:2): x8..x15. */
static unsigned creg_hi(uint32_t h) { return 8 + bits(h, 9, 7); }
static unsigned creg_lo(uint32_t h) { return 8 + bits(h, 4, 2); }

/* Quadrant 0: c.addi4spn and the register-based loads and stores. */
static uint8_t quadrant0(uint32_t h)
{
	switch (bits(h, 15, 13)) {
	case 0:		/* c.addi4spn; nzuimm 0 is illegal (0x0000 is c.unimp) */
		return bits(h, 12, 5) ? frame_if(creg_lo(h)) : UNDECODABLE;
	case 2: case 3:			/* c.lw, c.ld */
		return MEMORY | frame_if(creg_lo(h));
	case 4:				/* Zcb: c.lbu c.lhu c.lh | c.sb c.sh */
		switch (bits(h, 12, 10)) {
		case 0: case 1:
			return MEMORY | frame_if(creg_lo(h));
		case 2: case 3:
			return MEMORY;
		}
		return UNDECODABLE;
	default:			/* c.fld, c.fsd, c.sw, c.sd */
		return MEMORY;
	}
}

/* Quadrant 1: immediates, c.j, c.beqz, c.bnez, the rd' ALU forms. */
static uint8_t quadrant1(uint32_t h)
{
	unsigned rd = bits(h, 11, 7);

	switch (bits(h, 15, 13)) {
	case 1:				/* c.addiw (rd 0 reserved) */
		return rd ? frame_if(rd) : UNDECODABLE;
	case 4:				/* c.srli c.srai c.andi c.sub.. (rd') */
		return frame_if(creg_hi(h));
	case 5:				/* c.j */
		return CLS_BRANCH;
	case 6: case 7:			/* c.beqz, c.bnez */
		return CLS_BRANCH | CLS_COND;
	default:			/* c.addi, c.li, c.addi16sp, c.lui */
		return frame_if(rd);
	}
}

/* c.jr c.mv c.ebreak c.jalr c.add: bit 12 and whether rs2 is x0. */
static uint8_t cr_format(uint32_t h)
{
	unsigned rd = bits(h, 11, 7), rs2 = bits(h, 6, 2);

	if (rs2)			/* c.mv, c.add */
		return frame_if(rd);
	if (!bits(h, 12, 12))		/* c.jr (rs1 0 reserved) */
		return !rd ? UNDECODABLE :
		       CLS_BRANCH | (rd == REG_RA ? 0 : CLS_INDIRECT);
	if (!rd)			/* c.ebreak */
		return UNDECODABLE;
	return CLS_BRANCH | CLS_INDIRECT | CLS_FRAME;	/* c.jalr: writes ra */
}

/* Quadrant 2: c.slli, the sp-relative loads and stores, CR forms. */
static uint8_t quadrant2(uint32_t h)
{
	unsigned rd = bits(h, 11, 7);

	switch (bits(h, 15, 13)) {
	case 0:				/* c.slli */
		return frame_if(rd);
	case 2: case 3:			/* c.lwsp, c.ldsp (rd 0 reserved) */
		return rd ? MEMORY | frame_if(rd) : UNDECODABLE;
	case 4:
		return cr_format(h);
	default:			/* c.fldsp, c.fsdsp, c.swsp, c.sdsp */
		return MEMORY;
	}
}

static uint8_t classify16(uint32_t h)
{
	switch (h & 3) {
	case 0:
		return quadrant0(h);
	case 1:
		return quadrant1(h);
	default:
		return quadrant2(h);
	}
}

static uint8_t classify(const uint8_t *bytes, size_t len)
{
	if (len < 2 || insn_len(bytes) != len)
		return UNDECODABLE;
	return len == 2 ? classify16(insn_word(bytes, 2))
			: classify32(insn_word(bytes, 4));
}

static bool is_marker(const uint8_t *bytes, size_t len)
{
	return len == PVPERF_RISCV64_MARKER_INSN_LEN &&
	       insn_word(bytes, 4) == PVPERF_RISCV64_MARKER_INSN;
}

/* Branches decided in their block.  VEX makes auipc a constant PUT,
 * jalr's target GET(rs1) + imm and a branch an exit on rs1 ? rs2; iropt
 * forwards PUTs to GETs and folds, so cachegrind sees a constant target
 * (no Bi) or a constant exit (no Bc): docs/architectures.md.  known: x0
 * and the registers holding a constant of the block: auipc, lui, c.lui,
 * c.li, and addi(w), slli, c.addi(w), c.slli, c.mv, c.add of known ones;
 * any other write clears one.  A VEX block has at most 50 instructions
 * (valgrind's --vex-guest-max-insns). */
#define VEX_MAX_INSNS	50
#define is_known(known, r)	(((known) >> (r)) & 1)

static uint32_t set_known(uint32_t known, unsigned rd, bool constant)
{
	uint32_t bit = rd ? 1u << rd : 0;	/* x0 stays known */

	return constant ? known | bit : known & ~bit;
}

static uint32_t known_after32(uint32_t w, uint32_t known)
{
	unsigned rd = bits(w, 11, 7), f3 = bits(w, 14, 12);
	bool from_known = is_known(known, bits(w, 19, 15));

	switch (w & 0x7f) {
	case 0x17: case 0x37:			/* auipc, lui */
		return set_known(known, rd, true);
	case 0x13:				/* addi, slli */
		return set_known(known, rd, from_known && (f3 == 0 ||
				 (f3 == 1 && !bits(w, 31, 26))));
	case 0x1b:				/* addiw */
		return set_known(known, rd, from_known && f3 == 0);
	case 0x07: case 0x0f: case 0x23: case 0x27: case 0x43: case 0x47:
	case 0x4b: case 0x4f: case 0x63:	/* no integer rd */
		return known;
	default:
		return set_known(known, rd, false);
	}
}

static uint32_t known_after16(uint32_t h, uint32_t known)
{
	unsigned rd = bits(h, 11, 7), rs2 = bits(h, 6, 2);

	switch ((h & 3) << 3 | bits(h, 15, 13)) {
	case 000: case 002: case 003:		/* c.addi4spn c.lw c.ld */
		return set_known(known, creg_lo(h), false);
	case 004:				/* Zcb: loads write rd' */
		return bits(h, 12, 11) ? known
				       : set_known(known, creg_lo(h), false);
	case 010: case 011: case 020:		/* c.addi c.addiw c.slli */
		return set_known(known, rd, is_known(known, rd));
	case 012:				/* c.li */
		return set_known(known, rd, true);
	case 013:				/* c.addi16sp, c.lui */
		return set_known(known, rd, rd != 2 || is_known(known, 2));
	case 014:				/* the rd' ALU forms */
		return set_known(known, creg_hi(h), false);
	case 022: case 023:			/* c.lwsp, c.ldsp */
		return set_known(known, rd, false);
	case 024:				/* c.mv, c.add (rs2: jumps) */
		return !rs2 ? known : set_known(known, rd, is_known(known, rs2)
			&& (!bits(h, 12, 12) || is_known(known, rd)));
	default:				/* stores, FP loads, c.j.. */
		return known;
	}
}

/* Whether a register jump's target, or a conditional branch's outcome,
 * is a constant of its block (its source registers are known). */
static bool decided(uint32_t w, size_t len, uint32_t known)
{
	if (len == 2)	/* c.beqz/c.bnez rs1' (against x0), c.jr/c.jalr */
		return is_known(known, (w & 3) == 1 ? creg_hi(w) : bits(w, 11, 7));
	return is_known(known, bits(w, 19, 15)) &&
	       ((w & 0x7f) != 0x63 || is_known(known, bits(w, 24, 20)));
}

static void classify_tb(const struct cls_insn *insn, size_t n, bool kernel,
			uint8_t *cls)
{
	uint32_t known = 1, w;

	for (size_t i = 0; i < n; i++) {
		const struct cls_insn *in = &insn[i];

		cls[i] = classify(in->bytes, in->len);
		if (kernel && is_marker(in->bytes, in->len))
			cls[i] |= CLS_MARKER;
		if (i % VEX_MAX_INSNS == 0)
			known = 1;
		w = insn_word(in->bytes, in->len == 2 ? 2 : 4);
		if ((cls[i] & (CLS_COND | CLS_INDIRECT)) &&
		    decided(w, in->len, known))
			cls[i] &= ~(CLS_COND | CLS_INDIRECT);
		known = in->len == 2 ? known_after16(w, known)
				     : known_after32(w, known);
	}
}

/* Each access QEMU reports is one, as valgrind's riscv64 front end makes
 * them (it has no vector extension to split). */
static uint8_t mem_shape(const uint8_t *bytes, size_t len)
{
	return MEM_AS_IS;
}

static int64_t sign_extend(uint32_t v, unsigned width)
{
	return (int64_t)((uint64_t)v << (64 - width)) >> (64 - width);
}

static bool cond_target(const uint8_t *bytes, size_t len, uint64_t vaddr,
			uint64_t *target)
{
	uint32_t w, off;
	int64_t delta;

	if (!(classify(bytes, len) & CLS_COND))
		return false;
	w = insn_word(bytes, len);
	if (len == 4) {			/* imm[12|10:5] 31:25, imm[4:1|11] 11:7 */
		off = bits(w, 31, 31) << 12 | bits(w, 7, 7) << 11 |
		      bits(w, 30, 25) << 5 | bits(w, 11, 8) << 1;
		delta = sign_extend(off, 13);
	} else {			/* offset[8|4:3] 12:10, [7:6|2:1|5] 6:2 */
		off = bits(w, 12, 12) << 8 | bits(w, 11, 10) << 3 |
		      bits(w, 6, 5) << 6 | bits(w, 4, 3) << 1 |
		      bits(w, 2, 2) << 5;
		delta = sign_extend(off, 9);
	}
	*target = vaddr + (uint64_t)delta;
	return true;
}

/* ---- the page walk ---- */

#define SATP_MODE_SHIFT	60
#define SATP_PPN	0x00000fffffffffffULL
#define PTE_V		(1ULL << 0)
#define PTE_R		(1ULL << 1)
#define PTE_W		(1ULL << 2)
#define PTE_X		(1ULL << 3)
#define PTE_N		(1ULL << 63)	/* Svnapot: a 64K page at level 0 */
#define PTE_PPN_SHIFT	10
#define PTE_PPN		0x003ffffffffffc00ULL	/* bits 53:10 */
#define NAPOT_64K	0x10000ULL

/* The levels of satp's MODE: Sv39 8, Sv48 9, Sv57 10; 0 for Bare, -1
 * for a reserved one. */
static int satp_levels(uint64_t satp)
{
	switch (satp >> SATP_MODE_SHIFT) {
	case 0: return 0;
	case 8: return 3;
	case 9: return 4;
	case 10: return 5;
	default: return -1;
	}
}

/* The leaf's gpa at this level (shift: the bits it maps), or GPA_NONE
 * for a misaligned superpage or a malformed napot page. */
static uint64_t leaf_gpa(uint64_t pte, unsigned shift, uint64_t vaddr)
{
	uint64_t pa = ((pte & PTE_PPN) >> PTE_PPN_SHIFT) << 12;
	uint64_t span = 1ULL << shift;

	if (pte & PTE_N) {		/* ppn[3:0] = 1000 over 16 pages */
		if (shift != 12 || (pa & (NAPOT_64K - 1)) != 0x8000)
			return GPA_NONE;
		return (pa & ~(NAPOT_64K - 1)) | (vaddr & (NAPOT_64K - 1));
	}
	if (pa & (span - 1))
		return GPA_NONE;
	return pa | (vaddr & (span - 1));
}

static uint64_t vaddr_to_gpa(uint64_t satp, uint64_t vaddr,
			     bool (*read_u64)(uint64_t gpa, uint64_t *val))
{
	int levels = satp_levels(satp);
	uint64_t table = (satp & SATP_PPN) << 12;
	unsigned va_bits;

	if (levels == 0)
		return vaddr;
	if (levels < 0)
		return GPA_NONE;
	/* the bits above the top level's must copy its highest bit */
	va_bits = 12 + 9 * (unsigned)levels;
	if ((uint64_t)((int64_t)(vaddr << (64 - va_bits)) >> (64 - va_bits)) !=
	    vaddr)
		return GPA_NONE;
	for (int level = levels - 1; level >= 0; level--) {
		unsigned shift = 12 + 9 * (unsigned)level;
		uint64_t pte;

		if (!read_u64(table + ((vaddr >> shift) & 0x1ff) * 8, &pte) ||
		    !(pte & PTE_V) || ((pte & PTE_W) && !(pte & PTE_R)))
			return GPA_NONE;
		if (pte & (PTE_R | PTE_X))
			return leaf_gpa(pte, shift, vaddr);
		if (pte & PTE_N)	/* reserved on a non-leaf */
			return GPA_NONE;
		table = ((pte & PTE_PPN) >> PTE_PPN_SHIFT) << 12;
	}
	return GPA_NONE;		/* a pointer at level 0 */
}

/* The sample's register slots (pvperf_abi.h): perf's riscv order, the pc
 * (left 0: it is the sample's ip), then x1..x31 at their numbers. */
_Static_assert(PVPERF_RISCV64_REG_PC == 0 && PVPERF_RISCV64_REG_RA == 1 &&
	       PVPERF_RISCV64_REG_SP == 2 && PVPERF_RISCV64_REG_FP == 8 &&
	       PVPERF_NR_REGS >= 32,
	       "reg_names follows pvperf_sample's register order");

/* The rs1 of `csrrw rd, satp, rs1` in code[0..len) (arch.h
 * aspace_write_gpr), or -1: no such write, x0 (no register), or a set,
 * clear or immediate form (no register holds the new value). */
static int csrw_satp_gpr(const uint8_t *code, size_t len)
{
	uint32_t w;

	if (len != 4 || insn_len(code) != 4)
		return -1;
	w = insn_word(code, 4);
	if (!writes_satp(w) || bits(w, 14, 12) != 1)
		return -1;
	return bits(w, 19, 15) ? (int)bits(w, 19, 15) : -1;
}

/* x0..x31 in encoding order: QEMU's names (x0 is never a source here). */
static const char *const gpr_names[] = {
	"zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2",
	"fp", "s1", "a0", "a1", "a2", "a3", "a4", "a5",
	"a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7",
	"s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6",
};

const struct arch arch_riscv64 = {
	.target = "riscv64",
	.kernel_start = PVPERF_RISCV64_KERNEL_HALF_START,
	.ram_base = 0x80000000,			/* virt */
	.reg_names = {
		[1] = "ra", "sp", "gp", "tp", "t0", "t1", "t2",
		"fp", "s1", "a0", "a1", "a2", "a3", "a4", "a5",
		"a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7",
		"s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6",
		[REG_PC] = "pc", [REG_PAGE_TABLE] = "satp",
	},
	.marker_len = PVPERF_RISCV64_MARKER_INSN_LEN,
	.is_marker = is_marker,
	.classify_tb = classify_tb,
	.mem_shape = mem_shape,
	.cond_target = cond_target,
	.vaddr_to_gpa = vaddr_to_gpa,
	.aspace_write_gpr = csrw_satp_gpr,
	.n_gprs = sizeof(gpr_names) / sizeof(gpr_names[0]),
	.gpr_names = gpr_names,
	/* satp's PPN: the root table's address >> 12. */
	.aspace_mask = SATP_PPN,
	.aspace_shift = 12,
	.task_reg = "tp",
};
