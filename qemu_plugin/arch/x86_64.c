/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * x86_64.c - the x86_64 guest (arch.h): instruction classes, registers,
 * the marker, the page walk and the page-table write.
 *
 * Instruction classes.  A translation block's instructions are decoded
 * with capstone (4.0.2, Debian 12) to say, per instruction, whether it
 * is a branch, whether it accesses data memory, and whether it may
 * fault.  Runs at translation time only; never on an exec or memory
 * callback.
 *
 * Branches (PVPERF_CTR_BRANCH_*), conditional ones counted taken or not:
 *   jcc, jmp (direct, indirect, far), call (all forms), ret/retf,
 *   loop/loope/loopne, jcxz/jecxz/jrcxz, iret*, int/int1/int3/into,
 *   syscall/sysret/sysenter/sysexit.
 * That is capstone's groups JUMP, CALL, RET, IRET, INT and
 * BRANCH_RELATIVE (loop* is only in the last one) plus the syscall family
 * by id, since capstone files sysret/sysexit under IRET and syscall/
 * sysenter under INT but we do not want to depend on that.
 *
 * Decoding mode.  The plugin API does not tell the CPU mode.  Kernel-half
 * code is 64-bit.  Elsewhere (firmware, 32-bit compat processes) we try
 * 64-, 32- and 16-bit decoding and keep the first mode in which every
 * instruction decodes to exactly the length QEMU translated; if none
 * does, every instruction is a segment boundary and nothing is a branch
 * (exact instruction counts, branches under-counted: a candid FIXME).
 *
 * The marker.  A hypercall is the store `movl $PVPERF_MARKER_MAGIC,
 * (%rax)` (exactly PVPERF_X86_64_MARKER_INSN_BYTES) at a kernel-half address,
 * %rax pointing at the caller's struct pvperf_hcall (pvperf_abi.h).
 *
 * Registers: gdb's names, which QEMU's x86 target gives its registers;
 * the page-table root is cr3.
 *
 * The page-table write.  A kernel switches address spaces with `mov
 * %reg,%cr3` (in Linux 6.1: switch_mm_irqs_off, exec, temporary mms and
 * TLB flushes that reload CR3); decoded by hand from the bytes (one
 * opcode), so pvperf-rmap.so needs no capstone handle for it.  The
 * task= path (pvperf-rmap.so) starts at the kernel GS base, this CPU's
 * per-cpu base (runqueues.curr of this CPU).
 *
 * Guest physical addresses.  On the pc machine RAM starts at 0 and runs
 * up to the PCI hole at 3 GiB, where the launcher pins it
 * (max-ram-below-4g, pyhost/arch/x86_64.py RAM_BELOW_4G); the rest of the
 * RAM file is mapped from 4 GiB (QEMU 10.0 hw/i386/pc.c pc_memory_init,
 * "ram-above-4g").  A FAULT's page walk is the 4-level one (no LA57) at
 * the vCPU's cr3.
 */
#include <glib.h>
#include <capstone/capstone.h>
#include <string.h>

#include "arch.h"

#define X86_MAX_INSN_LEN 15

enum { MODE_64, MODE_32, MODE_16, N_MODES };

static const cs_mode cs_modes[N_MODES] = { CS_MODE_64, CS_MODE_32, CS_MODE_16 };

/*
 * Capstone handles are not thread-safe and translation runs concurrently
 * on MTTCG vCPU threads, so each thread opens its own, lazily.  They are
 * reclaimed at process exit (see plugin_exit for why not earlier).
 */
struct cs_thread {
	bool tried[N_MODES];
	csh handle[N_MODES];
	cs_insn *insn[N_MODES];
};
static __thread struct cs_thread cs_tls;

static bool cs_get(int mode, csh *h, cs_insn **ci)
{
	struct cs_thread *t = &cs_tls;

	if (!t->tried[mode]) {
		t->tried[mode] = true;
		if (cs_open(CS_ARCH_X86, cs_modes[mode], &t->handle[mode]) != CS_ERR_OK)
			return false;
		cs_option(t->handle[mode], CS_OPT_DETAIL, CS_OPT_ON);
		t->insn[mode] = cs_malloc(t->handle[mode]);
	}
	*h = t->handle[mode];
	*ci = t->insn[mode];
	return *ci != NULL;
}

static bool in_list(unsigned id, const unsigned *list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (list[i] == id)
			return true;
	}
	return false;
}

static bool in_group(const cs_detail *d, unsigned group)
{
	for (unsigned i = 0; i < d->groups_count; i++) {
		if (d->groups[i] == group)
			return true;
	}
	return false;
}

static bool is_stack_reg(unsigned reg)
{
	return reg == X86_REG_RSP || reg == X86_REG_ESP || reg == X86_REG_SP;
}

static bool uses_stack(const cs_detail *d)
{
	for (unsigned i = 0; i < d->regs_read_count; i++) {
		if (is_stack_reg(d->regs_read[i]))
			return true;
	}
	for (unsigned i = 0; i < d->regs_write_count; i++) {
		if (is_stack_reg(d->regs_write[i]))
			return true;
	}
	return false;
}

static bool is_frame_reg(unsigned reg)
{
	return is_stack_reg(reg) || reg == X86_REG_SPL ||
	       reg == X86_REG_RBP || reg == X86_REG_EBP ||
	       reg == X86_REG_BP || reg == X86_REG_BPL;
}

static const unsigned syscall_family[] = {
	X86_INS_SYSCALL, X86_INS_SYSRET, X86_INS_SYSENTER, X86_INS_SYSEXIT,
};

static bool is_branch(const cs_insn *ci)
{
	static const unsigned groups[] = {
		X86_GRP_JUMP, X86_GRP_CALL, X86_GRP_RET, X86_GRP_IRET,
		X86_GRP_INT, X86_GRP_BRANCH_RELATIVE,
	};

	for (size_t i = 0; i < G_N_ELEMENTS(groups); i++) {
		if (in_group(ci->detail, groups[i]))
			return true;
	}
	return in_list(ci->id, syscall_family, G_N_ELEMENTS(syscall_family));
}

/* A direct conditional branch: the relative ones but jmp and call. */
static bool is_conditional(const cs_insn *ci)
{
	return in_group(ci->detail, X86_GRP_BRANCH_RELATIVE) &&
	       ci->id != X86_INS_JMP && ci->id != X86_INS_CALL;
}

/* A near jmp or call whose target is not an immediate. */
static bool is_indirect(const cs_insn *ci)
{
	const cs_x86 *x = &ci->detail->x86;

	return (ci->id == X86_INS_JMP || ci->id == X86_INS_CALL) &&
	       x->op_count == 1 && x->operands[0].type != X86_OP_IMM;
}

static bool is_legacy_prefix(uint8_t b)
{
	switch (b) {
	case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:
	case 0x66: case 0x67: case 0xf2: case 0xf3:
		return true;
	}
	return false;
}

/*
 * The page-table write (arch.h aspace_write_gpr): the GPR (encoding
 * number, 0..15) that the instruction in code[0..len) moves into CR3, or
 * -1: [prefixes] [REX] 0F 22 /r with ModRM.reg == 3 (the mod bits are
 * ignored: the source is always a register).  REX.R would make it CR11
 * and LOCK (F0) CR8+reg on AMD.  The TLB model flushes there too.
 */
static int mov_to_cr3_gpr(const uint8_t *code, size_t len)
{
	size_t i = 0;
	uint8_t rex = 0, modrm;

	while (i < len && is_legacy_prefix(code[i]))
		i++;
	if (i < len && (code[i] & 0xf0) == 0x40)
		rex = code[i++];
	if (i + 3 > len || code[i] != 0x0f || code[i + 1] != 0x22)
		return -1;
	modrm = code[i + 2];
	if (((modrm >> 3) & 7) != 3 || (rex & 0x4))
		return -1;
	return (modrm & 7) | ((rex & 0x1) << 3);
}

/* Move the stack pointer implicitly: they access memory without a
 * memory operand, and capstone 4 does not list rsp among the registers
 * some of them (enter, iret*, retf, int*) read or write. */
static const unsigned stack_movers[] = {
	X86_INS_PUSH, X86_INS_POP, X86_INS_PUSHF, X86_INS_PUSHFD,
	X86_INS_PUSHFQ, X86_INS_POPF, X86_INS_POPFD, X86_INS_POPFQ,
	X86_INS_PUSHAL, X86_INS_PUSHAW, X86_INS_POPAL, X86_INS_POPAW,
	X86_INS_CALL, X86_INS_LCALL, X86_INS_RET, X86_INS_RETF,
	X86_INS_RETFQ, X86_INS_ENTER, X86_INS_LEAVE, X86_INS_IRET,
	X86_INS_IRETD, X86_INS_IRETQ, X86_INS_INT, X86_INS_INT1,
	X86_INS_INT3, X86_INS_INTO,
};

/* Other memory accesses without a memory operand. */
static const unsigned implicit_mem[] = {
	X86_INS_XLATB, X86_INS_MONITOR,
	X86_INS_MASKMOVQ, X86_INS_MASKMOVDQU, X86_INS_VMASKMOVDQU,
	X86_INS_MOVSB, X86_INS_MOVSW, X86_INS_MOVSD, X86_INS_MOVSQ,
	X86_INS_STOSB, X86_INS_STOSW, X86_INS_STOSD, X86_INS_STOSQ,
	X86_INS_LODSB, X86_INS_LODSW, X86_INS_LODSD, X86_INS_LODSQ,
	X86_INS_CMPSB, X86_INS_CMPSW, X86_INS_CMPSD, X86_INS_CMPSQ,
	X86_INS_SCASB, X86_INS_SCASW, X86_INS_SCASD, X86_INS_SCASQ,
	X86_INS_INSB, X86_INS_INSW, X86_INS_INSD,
	X86_INS_OUTSB, X86_INS_OUTSW, X86_INS_OUTSD,
};

static bool has_mem_operand(const cs_insn *ci)
{
	const cs_x86 *x = &ci->detail->x86;

	/* lea and the multi-byte nops have a memory operand but no access. */
	if (ci->id == X86_INS_LEA || ci->id == X86_INS_NOP)
		return false;
	for (unsigned i = 0; i < x->op_count; i++) {
		if (x->operands[i].type == X86_OP_MEM)
			return true;
	}
	return false;
}

static bool accesses_memory(const cs_insn *ci)
{
	return has_mem_operand(ci) || uses_stack(ci->detail) ||
	       in_list(ci->id, stack_movers, G_N_ELEMENTS(stack_movers)) ||
	       in_list(ci->id, implicit_mem, G_N_ELEMENTS(implicit_mem));
}

/* Writes sp or bp, explicitly or not (push, call, leave, mov to rbp,
 * syscall...). */
static bool writes_frame(csh h, const cs_insn *ci)
{
	cs_regs rd, wr;
	uint8_t n_rd, n_wr;

	if (in_list(ci->id, stack_movers, G_N_ELEMENTS(stack_movers)) ||
	    in_list(ci->id, syscall_family, G_N_ELEMENTS(syscall_family)) ||
	    cs_regs_access(h, ci, rd, &n_rd, wr, &n_wr) != CS_ERR_OK)
		return true;
	for (unsigned i = 0; i < n_wr; i++) {
		if (is_frame_reg(wr[i]))
			return true;
	}
	return false;
}

/* Faults other than on a data access; each ends a segment so that an
 * uncorrected fault of this kind costs at most one instruction. */
static const unsigned may_trap_ids[] = {
	X86_INS_DIV, X86_INS_IDIV, X86_INS_UD0, X86_INS_UD2, X86_INS_UD2B,
	X86_INS_RDMSR, X86_INS_WRMSR, X86_INS_RDPMC, X86_INS_RDTSC,
	X86_INS_RDTSCP, X86_INS_IN, X86_INS_OUT, X86_INS_XGETBV,
	X86_INS_XSETBV, X86_INS_BOUND,
};

static bool may_trap(const cs_insn *ci)
{
	const cs_detail *d = ci->detail;

	return in_group(d, X86_GRP_INT) || in_group(d, X86_GRP_IRET) ||
	       in_group(d, X86_GRP_PRIVILEGE) || in_group(d, X86_GRP_VM) ||
	       in_list(ci->id, syscall_family, G_N_ELEMENTS(syscall_family)) ||
	       in_list(ci->id, may_trap_ids, G_N_ELEMENTS(may_trap_ids));
}

/* Decode one instruction; true if capstone agrees with QEMU's length. */
static bool decode(int mode, const struct cls_insn *in, uint8_t *flags)
{
	const uint8_t *code = in->bytes;
	size_t size = in->len;
	uint64_t addr = in->vaddr;
	cs_insn *ci;
	csh h;

	if (!cs_get(mode, &h, &ci) || !cs_disasm_iter(h, &code, &size, &addr, ci))
		return false;
	if (ci->size != in->len)
		return false;
	*flags = 0;
	if (is_branch(ci))
		*flags |= CLS_BRANCH;
	if (is_conditional(ci))
		*flags |= CLS_COND;
	if (is_indirect(ci))
		*flags |= CLS_INDIRECT;
	if (mov_to_cr3_gpr(in->bytes, in->len) >= 0)
		*flags |= CLS_ASPACE;
	if (accesses_memory(ci))
		*flags |= CLS_MEM;
	if ((*flags & CLS_MEM) || may_trap(ci))
		*flags |= CLS_BOUNDARY;
	if (writes_frame(h, ci))
		*flags |= CLS_FRAME;
	return true;
}

/*
 * Decode cache.  Capstone costs about 2 us per TB, and every mode switch
 * (qemu_plugin_reset) retranslates the whole working set; instructions
 * repeat, so the flags of each distinct encoding are remembered, keyed
 * by the exact bytes and the decoding mode (the flags depend on nothing
 * else: not on the address).  Per thread, since translation runs
 * concurrently under MTTCG; emptied when it grows past DC_MAX_ENTRIES.
 */
#define DC_MAX_ENTRIES	(1u << 18)
#define DC_UNDECODABLE	0xff	/* no CLS_* combination reaches it */

struct dc_key {
	uint8_t mode;
	uint8_t len;
	uint8_t bytes[X86_MAX_INSN_LEN];
};

static __thread GHashTable *dc_table;

static guint dc_hash(gconstpointer p)
{
	const uint8_t *b = p;
	guint h = 2166136261u;		/* FNV-1a */

	for (size_t i = 0; i < sizeof(struct dc_key); i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

static gboolean dc_equal(gconstpointer a, gconstpointer b)
{
	return !memcmp(a, b, sizeof(struct dc_key));
}

static bool decode_cached(int mode, const struct cls_insn *in, uint8_t *flags)
{
	struct dc_key key;
	uintptr_t v;
	uint8_t f = 0;
	bool ok;

	if (in->len > X86_MAX_INSN_LEN)
		return decode(mode, in, flags);
	memset(&key, 0, sizeof(key));	/* the hash covers the padding bytes */
	key.mode = mode;
	key.len = in->len;
	memcpy(key.bytes, in->bytes, in->len);
	if (!dc_table)
		dc_table = g_hash_table_new_full(dc_hash, dc_equal, g_free, NULL);
	v = (uintptr_t)g_hash_table_lookup(dc_table, &key);
	if (v) {
		if (v - 1 == DC_UNDECODABLE)
			return false;
		*flags = v - 1;
		return true;
	}
	ok = decode(mode, in, &f);
	if (g_hash_table_size(dc_table) >= DC_MAX_ENTRIES)
		g_hash_table_remove_all(dc_table);
	g_hash_table_insert(dc_table, g_memdup2(&key, sizeof(key)),
			    (gpointer)(uintptr_t)((ok ? f : DC_UNDECODABLE) + 1));
	if (ok)
		*flags = f;
	return ok;
}

static bool decode_all(int mode, const struct cls_insn *insn, size_t n,
		       uint8_t *cls)
{
	for (size_t i = 0; i < n; i++) {
		if (!decode_cached(mode, &insn[i], &cls[i]))
			return false;
	}
	return true;
}

/* Decoded by hand, not with capstone: a handful of opcodes, and capstone
 * 4's operand for a relative target is already the address, computed
 * from the address it was given (here, the translated one: the same). */
static bool cond_target(const uint8_t *bytes, size_t len, uint64_t vaddr,
			uint64_t *target)
{
	size_t i = 0;
	int64_t rel;

	while (i < len && (bytes[i] == 0x2e || bytes[i] == 0x3e))
		i++;			/* branch hints: no effect */
	if (i + 2 == len && ((bytes[i] >= 0x70 && bytes[i] <= 0x7f) ||
			     (bytes[i] >= 0xe0 && bytes[i] <= 0xe3)))
		rel = (int8_t)bytes[i + 1];
	else if (i + 6 == len && bytes[i] == 0x0f && bytes[i + 1] >= 0x80 &&
		 bytes[i + 1] <= 0x8f)
		rel = (int32_t)((uint32_t)bytes[i + 2] |
				(uint32_t)bytes[i + 3] << 8 |
				(uint32_t)bytes[i + 4] << 16 |
				(uint32_t)bytes[i + 5] << 24);
	else
		return false;
	*target = vaddr + len + rel;
	return true;
}

static bool is_marker(const uint8_t *bytes, size_t len)
{
	static const uint8_t marker[PVPERF_X86_64_MARKER_INSN_LEN] =
		PVPERF_X86_64_MARKER_INSN_BYTES;

	return len == sizeof(marker) && !memcmp(bytes, marker, len);
}

/*
 * in/out and ins/outs (the SDM's IN, OUT, INS, OUTS): opcodes 6C-6F,
 * E4-E7, EC-EF after any legacy prefixes and a REX byte.  Read from the
 * bytes, in every mode (they mean the same in 16, 32 and 64 bits).
 */
static bool is_port_io(const uint8_t *bytes, size_t len)
{
	size_t i = 0;

	while (i < len && (is_legacy_prefix(bytes[i]) || bytes[i] == 0xf0))
		i++;
	if (i < len && (bytes[i] & 0xf0) == 0x40)	/* REX */
		i++;
	if (i >= len)
		return false;
	return (bytes[i] & 0xfc) == 0x6c || (bytes[i] & 0xf4) == 0xe4;
}

static void classify_tb(const struct cls_insn *insn, size_t n, bool kernel,
			uint8_t *cls)
{
	int last_mode = kernel ? MODE_64 : MODE_16;
	int mode;

	for (mode = MODE_64; mode <= last_mode; mode++) {
		if (decode_all(mode, insn, n, cls))
			break;
	}
	if (mode > last_mode)
		memset(cls, CLS_BOUNDARY | CLS_FRAME, n);
	for (size_t i = 0; kernel && i < n; i++)
		if (is_marker(insn[i].bytes, insn[i].len))
			cls[i] |= CLS_MARKER;
}

/* ---- the page walk ---- */

#define PTE_PRESENT	(1ULL << 0)
#define PTE_LARGE	(1ULL << 7)
#define PTE_ADDR	0x000ffffffffff000ULL

/* The 4-level walk (no LA57): the gpa of vaddr under cr3, or GPA_NONE. */
static uint64_t vaddr_to_gpa(uint64_t cr3, uint64_t vaddr,
			     bool (*read_u64)(uint64_t gpa, uint64_t *val))
{
	uint64_t table = cr3 & PTE_ADDR;

	for (int level = 3; level >= 0; level--) {
		unsigned shift = 12 + 9 * level;
		uint64_t pte;

		if (!read_u64(table + ((vaddr >> shift) & 511) * 8, &pte))
			return GPA_NONE;
		if (!(pte & PTE_PRESENT))
			return GPA_NONE;
		if (level == 0 || (level <= 2 && (pte & PTE_LARGE))) {
			uint64_t span = 1ULL << shift;

			return ((pte & PTE_ADDR) & ~(span - 1)) | (vaddr & (span - 1));
		}
		table = pte & PTE_ADDR;
	}
	return GPA_NONE;
}

_Static_assert(PVPERF_X86_64_REG_AX == 0 && PVPERF_X86_64_REG_BX == 1 &&
	       PVPERF_X86_64_REG_CX == 2 && PVPERF_X86_64_REG_DX == 3 &&
	       PVPERF_X86_64_REG_SI == 4 && PVPERF_X86_64_REG_DI == 5 &&
	       PVPERF_X86_64_REG_BP == 6 && PVPERF_X86_64_REG_SP == 7 &&
	       PVPERF_X86_64_REG_R8 == 8 && PVPERF_NR_REGS >= 16,
	       "reg_names follows pvperf_sample's register order");

/* QEMU makes two 16-byte accesses of a 32-byte AVX load or store
 * (vmovdqu ymm): one access, as the instruction (and cachegrind) see it.
 * Nothing else makes two 16-byte accesses at consecutive addresses. */
static uint8_t mem_shape(const uint8_t *bytes, size_t len)
{
	(void)bytes;
	(void)len;
	return MEM_HALVES;
}

/* GPR names in the gdb register list, in x86 encoding order (ModRM.rm
 * with REX.B), which is not the gdb order (rax, rbx, rcx, ...). */
static const char *const gpr_names[] = {
	"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
};

const struct arch arch_x86_64 = {
	.target = "x86_64",
	.kernel_start = PVPERF_X86_64_KERNEL_HALF_START,
	.ram_base = 0,
	.ram_hole_start = 0xc0000000,		/* pc, max-ram-below-4g=3G */
	.ram_hole_end = 0x100000000,
	.reg_names = {
		"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
		[REG_PC] = "rip", [REG_PAGE_TABLE] = "cr3",
	},
	.marker_len = PVPERF_X86_64_MARKER_INSN_LEN,
	.is_marker = is_marker,
	.classify_tb = classify_tb,
	.mem_shape = mem_shape,
	.cond_target = cond_target,
	.vaddr_to_gpa = vaddr_to_gpa,
	.is_port_io = is_port_io,
	.aspace_write_gpr = mov_to_cr3_gpr,
	.n_gprs = G_N_ELEMENTS(gpr_names),
	.gpr_names = gpr_names,
	/* CR3 bits 12..51: the top-level table; below are PCID/PWT/PCD,
	 * above the no-flush bit 63 (and LAM bits in later CPUs). */
	.aspace_mask = 0x000ffffffffff000ULL,
	.task_reg = "gs_base",
};
