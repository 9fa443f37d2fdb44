/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rv64_classify_test.c - unit test of riscv64.c through its ops table
 * (arch.h), natively (no QEMU).
 *
 * Instruction classes: rv64insns.S, cross-assembled, gives the
 * instructions and their expected classes; objdump's listing of it
 * (-M no-aliases: c.jr, not ret) gives each instruction's bytes and
 * mnemonic.  Every instruction is classified and compared with its
 * expected class, and, as a check independent of the expectations
 * written by hand, with what objdump says: branch, conditional, indirect
 * (every register jump but `jalr zero,0(ra)` and `c.jr ra`), memory,
 * the satp write and its source register, and a conditional branch's
 * taken target (objdump prints it).  Then the marker in user code,
 * branches their TB has decided (constant targets and conditions), the
 * page walks (Sv39, Sv48, Sv57, Bare).
 *
 * With --corpus, only the checks against objdump, over the listing of a
 * real binary (every instruction of a riscv64 busybox: make rv-corpus),
 * reporting each disagreement.
 *
 *   make -C qemu_plugin check
 *   tests/rv64_classify_test LISTING EXPECT   (objdump -d, objcopy -j .expect)
 *   tests/rv64_classify_test --corpus LISTING
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "target_check.h"

extern const struct arch arch_riscv64;

#define KERNEL_VADDR 0xffffffff80001000ULL
#define USER_VADDR   0x10000ULL

struct listed {
	uint64_t addr;
	struct cls_insn in;
	char mnemonic[32];
	char operands[96];
};

/* objdump's ABI names of x0..x31 (s0, where QEMU says fp). */
static const char *const abi_names[32] = {
	"zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2",
	"s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5",
	"a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7",
	"s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6",
};

static int abi_reg(const char *name)
{
	for (int i = 0; i < 32; i++)
		if (!strcmp(name, abi_names[i]))
			return i;
	return -1;
}

static uint8_t classify(const struct cls_insn *in, bool kernel)
{
	uint8_t cls;

	arch_riscv64.classify_tb(in, 1, kernel, &cls);
	return cls;
}

/* "  74:\t00008067          \tjalr\tzero,0(ra) # 28 <here+0x28>" or
 * "  232:\t8082                \tc.jr\tra": a 16- or 32-bit word. */
static bool parse_line(const char *line, struct listed *e)
{
	g_auto(GStrv) f = g_strsplit(line, "\t", 4);
	char *end;
	uint32_t w;
	size_t digits;

	if (g_strv_length(f) < 3 || !strchr(f[0], ':'))
		return false;
	e->addr = g_ascii_strtoull(f[0], &end, 16);
	g_strstrip(f[1]);
	digits = strlen(f[1]);
	w = (uint32_t)strtoul(f[1], &end, 16);
	if ((digits != 4 && digits != 8) || *end)
		return false;
	memset(&e->in, 0, sizeof(e->in));
	e->in.len = digits / 2;
	for (size_t i = 0; i < e->in.len; i++)
		e->in.bytes[i] = w >> (8 * i);
	g_strlcpy(e->mnemonic, g_strstrip(f[2]), sizeof(e->mnemonic));
	g_strlcpy(e->operands, f[3] ? g_strstrip(f[3]) : "",
		  sizeof(e->operands));
	return true;
}

static GArray *read_listing(const char *path)
{
	GArray *out = g_array_new(FALSE, TRUE, sizeof(struct listed));
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return out;
	lines = g_strsplit(text, "\n", -1);
	for (char **l = lines; *l; l++) {
		struct listed e;

		if (parse_line(*l, &e))
			g_array_append_val(out, e);
	}
	return out;
}

static bool in_list(const char *m, const char *const *names)
{
	for (; *names; names++)
		if (!strcmp(m, *names))
			return true;
	return false;
}

/* ---- what objdump's mnemonic and operands say ---- */

static const char *const cond_names[] = {
	"beq", "bne", "blt", "bge", "bltu", "bgeu", "c.beqz", "c.bnez", NULL,
};
static const char *const jump_names[] = {
	"jal", "jalr", "c.j", "c.jal", "c.jr", "c.jalr", NULL,
};
static const char *const mem_names[] = {
	"lb", "lh", "lw", "ld", "lbu", "lhu", "lwu", "sb", "sh", "sw", "sd",
	"flh", "flw", "fld", "flq", "fsh", "fsw", "fsd", "fsq",
	"c.lw", "c.ld", "c.lwsp", "c.ldsp", "c.sw", "c.sd", "c.swsp",
	"c.sdsp", "c.fld", "c.fsd", "c.fldsp", "c.fsdsp", "c.lbu", "c.lhu",
	"c.lh", "c.sb", "c.sh", "cbo.zero", NULL,
};
static const char *const csr_names[] = {
	"csrrw", "csrrs", "csrrc", "csrrwi", "csrrsi", "csrrci", NULL,
};

static bool says_branch(const struct listed *e)
{
	return in_list(e->mnemonic, cond_names) ||
	       in_list(e->mnemonic, jump_names);
}

/* A register jump but the two returns valgrind knows. */
static bool says_indirect(const struct listed *e)
{
	if (!strcmp(e->mnemonic, "jalr"))
		return !g_str_has_prefix(e->operands, "zero,0(ra)");
	if (!strcmp(e->mnemonic, "c.jr"))
		return strcmp(e->operands, "ra") != 0;
	return !strcmp(e->mnemonic, "c.jalr");
}

static bool says_memory(const struct listed *e)
{
	static GRegex *vector;

	if (!vector)	/* vle32.v vlse64.v vluxei8.v vlseg2e8.v vl1re8.v vsm.v.. */
		vector = g_regex_new("^v[ls]([0-9]+r|e[0-9]|se[0-9]|[uo]xei|"
				     "seg|sseg|[uo]xseg|m\\.v)", 0, 0, NULL);
	return in_list(e->mnemonic, mem_names) ||
	       g_str_has_prefix(e->mnemonic, "lr.") ||
	       g_str_has_prefix(e->mnemonic, "sc.") ||
	       g_str_has_prefix(e->mnemonic, "amo") ||
	       g_str_has_prefix(e->mnemonic, "hlv") ||
	       g_str_has_prefix(e->mnemonic, "hsv") ||
	       g_regex_match(vector, e->mnemonic, 0, NULL);
}

/* Writes satp: -2 if not, else the source register's number when a
 * csrrw names one (-1 for the other writing forms and for zero). */
static int says_satp_write(const struct listed *e)
{
	g_auto(GStrv) ops = g_strsplit(e->operands, ",", 3);
	bool set_clear;

	if (!in_list(e->mnemonic, csr_names) || g_strv_length(ops) != 3 ||
	    strcmp(ops[1], "satp"))
		return -2;
	set_clear = strcmp(e->mnemonic, "csrrw") && strcmp(e->mnemonic, "csrrwi");
	if (set_clear && (!strcmp(ops[2], "zero") || !strcmp(ops[2], "0")))
		return -2;
	return !strcmp(e->mnemonic, "csrrw") && strcmp(ops[2], "zero") ?
	       abi_reg(ops[2]) : -1;
}

/* The taken target objdump prints: the last operand, "1f2 <name+0x4>". */
static bool says_target(const struct listed *e, uint64_t *target)
{
	const char *last = strrchr(e->operands, ',');
	char *end;

	if (!last)
		return false;
	*target = g_ascii_strtoull(last + 1, &end, 16);
	return end != last + 1;
}

/* 0, or 1 after saying where the decoder and objdump disagree. */
static int check_against_objdump(const struct listed *e, uint8_t cls)
{
	int satp = says_satp_write(e);
	int gpr = arch_riscv64.aspace_write_gpr(e->in.bytes, e->in.len);
	uint64_t want = 0, got = 0;
	bool direct = arch_riscv64.cond_target(e->in.bytes, e->in.len,
					       e->addr, &got);
	const char *why = NULL;

	if (!!(cls & CLS_BRANCH) != says_branch(e))
		why = "branch";
	else if (!!(cls & CLS_COND) != in_list(e->mnemonic, cond_names))
		why = "conditional";
	else if (!!(cls & CLS_INDIRECT) != says_indirect(e))
		why = "indirect";
	else if (!!(cls & CLS_MEM) != says_memory(e))
		why = "memory";
	else if (!!(cls & CLS_ASPACE) != (satp != -2))
		why = "satp write";
	else if (gpr != (satp == -2 ? -1 : satp))
		why = "satp source register";
	else if (direct != (in_list(e->mnemonic, cond_names) &&
			    says_target(e, &want)) || got != want)
		why = "taken target";
	if (!why)
		return 0;
	printf("FAIL %" G_GINT64_MODIFIER "x: %s %s: cls 0x%x, gpr %d, "
	       "target %#" G_GINT64_MODIFIER "x: %s against objdump\n",
	       e->addr, e->mnemonic, e->operands, cls, gpr, got, why);
	return 1;
}

static int check_listing(const char *listing, const char *expect_path)
{
	g_autoptr(GArray) insns = read_listing(listing);
	g_autofree gchar *expect = load_expectations(listing, insns->len,
						     expect_path);
	int fails = 0;

	if (!expect)
		return 1;
	for (guint i = 0; i < insns->len; i++) {
		struct listed *e = &g_array_index(insns, struct listed, i);
		uint8_t cls, want = (uint8_t)expect[i];

		e->in.vaddr = KERNEL_VADDR + e->addr;
		cls = classify(&e->in, true);
		if (cls != want) {
			printf("FAIL %s %s: cls 0x%x, want 0x%x\n",
			       e->mnemonic, e->operands, cls, want);
			fails++;
		}
		fails += check_against_objdump(e, cls);
		if (arch_riscv64.mem_shape(e->in.bytes, e->in.len) != MEM_AS_IS)
			fails++, printf("FAIL %s: not MEM_AS_IS\n", e->mnemonic);
	}
	printf("rv64_classify_test: %u instructions classified\n", insns->len);
	return fails;
}

/* Every instruction of a real binary, as user code, against objdump;
 * the counts of each class, and each disagreement.  A word objdump does
 * not decode (".4byte": an extension its default architecture lacks,
 * such as V in a raw kernel Image, or data) is counted, not compared. */
static int check_corpus(const char *listing)
{
	g_autoptr(GArray) insns = read_listing(listing);
	unsigned n16 = 0, n_branch = 0, n_cond = 0, n_ind = 0, n_mem = 0;
	unsigned n_raw = 0, n_raw_mem = 0;
	int fails = 0;

	for (guint i = 0; i < insns->len; i++) {
		struct listed *e = &g_array_index(insns, struct listed, i);
		uint8_t cls;

		e->in.vaddr = USER_VADDR + e->addr;
		cls = classify(&e->in, false);
		if (g_str_has_suffix(e->mnemonic, "byte")) {
			n_raw++;
			n_raw_mem += !!(cls & CLS_MEM);
			continue;
		}
		n16 += e->in.len == 2;
		n_branch += !!(cls & CLS_BRANCH);
		n_cond += !!(cls & CLS_COND);
		n_ind += !!(cls & CLS_INDIRECT);
		n_mem += !!(cls & CLS_MEM);
		fails += check_against_objdump(e, cls);
	}
	printf("rv64_classify_test %s: %u instructions (%u compressed): "
	       "%u branches (%u conditional, %u indirect), %u memory; "
	       "%d disagree with objdump; %u words objdump does not decode "
	       "(%u of them memory here)\n", listing, insns->len, n16,
	       n_branch, n_cond, n_ind, n_mem, fails, n_raw, n_raw_mem);
	return fails || insns->len == 0;
}

/* User code cannot ring: the same store is no marker there. */
static int check_user_marker(void)
{
	struct cls_insn in = { .len = 4, .vaddr = USER_VADDR };

	for (int i = 0; i < 4; i++)
		in.bytes[i] = PVPERF_RISCV64_MARKER_INSN >> (8 * i);
	if (arch_riscv64.is_marker(in.bytes, in.len) &&
	    classify(&in, false) == (CLS_MEM | CLS_BOUNDARY))
		return 0;
	printf("FAIL marker in user code: cls 0x%x\n", classify(&in, false));
	return 1;
}

/* ---- branches their block has decided ---- */

/* A TB of words (32-bit ones end in binary 11), after `nops` 32-bit
 * nops; the last instruction's class. */
static uint8_t last_of_tb(const uint32_t *words, size_t n, size_t nops)
{
	struct cls_insn tb[64];
	uint8_t cls[64];
	size_t k = 0;

	for (; k < nops; k++)
		tb[k] = (struct cls_insn){ .len = 4, .bytes = { 0x13 } };
	for (size_t i = 0; i < n; i++, k++) {
		tb[k] = (struct cls_insn){ .len = (words[i] & 3) == 3 ? 4 : 2,
					   .vaddr = USER_VADDR + 4 * k };
		for (size_t b = 0; b < tb[k].len; b++)
			tb[k].bytes[b] = words[i] >> (8 * b);
	}
	arch_riscv64.classify_tb(tb, k, false, cls);
	return cls[k - 1];
}

/* Encodings from riscv64-linux-gnu-as (objdump -M no-aliases): a target
 * or an exit VEX folds to a constant, cachegrind counts no Bi or Bc of. */
static int check_known_targets(void)
{
	static const struct {
		const char *name;
		uint32_t words[6];
		size_t n, nops;
		uint8_t want;
	} t[] = {
		{ "auipc ra; jalr ra,98(ra)", { 0x97, 0x062080e7 }, 2, 0,
		  CLS_BRANCH | CLS_FRAME },
		{ "jalr ra,98(ra) alone", { 0x062080e7 }, 1, 0,
		  CLS_BRANCH | CLS_INDIRECT | CLS_FRAME },
		{ "c.lui a4; addi a4; c.jr a4", { 0x6741, 0x54870713, 0x8702 },
		  3, 0, CLS_BRANCH },
		{ "switch: c.lui a4; addi a4; slli a5,s1; c.add a5,a4; c.lw "
		  "a5,0(a5); c.jr a5", { 0x6741, 0x54870713, 0x00249793,
		  0x97ba, 0x439c, 0x8782 }, 6, 0, CLS_BRANCH | CLS_INDIRECT },
		{ "auipc t1; c.mv t1,a0; c.jr t1", { 0x317, 0x832a, 0x8302 },
		  3, 0, CLS_BRANCH | CLS_INDIRECT },
		{ "c.li a5,1; c.jalr a5", { 0x4785, 0x9782 }, 2, 0,
		  CLS_BRANCH | CLS_FRAME },
		{ "c.li a5,0; lui a3; c.addi a5,1; bne a5,a3", { 0x4781,
		  0x000406b7, 0x0785, 0xfed79ce3 }, 4, 0, CLS_BRANCH },
		{ "c.li a5,3; c.bnez a5", { 0x478d, 0xfbed }, 2, 0,
		  CLS_BRANCH },
		{ "c.ld a5,0(a0); c.bnez a5", { 0x611c, 0xf7fd }, 2, 0,
		  CLS_BRANCH | CLS_COND },
		{ "c.li a5,3; bne a5,a0", { 0x478d, 0xfea796e3 }, 2, 0,
		  CLS_BRANCH | CLS_COND },
		{ "auipc ra; jalr ra as the 49th, 50th", { 0x97, 0x062080e7 },
		  2, 48, CLS_BRANCH | CLS_FRAME },
		{ "auipc ra; jalr ra as the 50th, 51st: two VEX blocks",
		  { 0x97, 0x062080e7 }, 2, 49,
		  CLS_BRANCH | CLS_INDIRECT | CLS_FRAME },
	};
	int fails = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		uint8_t cls = last_of_tb(t[i].words, t[i].n, t[i].nops);

		if (cls != t[i].want) {
			printf("FAIL %s: cls 0x%x, want 0x%x\n", t[i].name, cls,
			       t[i].want);
			fails++;
		}
	}
	return fails;
}

/* ---- the page walks, over a small RAM at virt's base ---- */

#define RAM_BASE 0x80000000ULL
#include "fake_ram.h"

#define PAGE_GPA(p)	(RAM_BASE + (uint64_t)(p) * 4096)
/* A PTE: the PPN at bit 10, the flags below. */
#define PTE(pa, fl)	((((uint64_t)(pa) >> 12) << 10) | (fl))
#define PTR		0x01		/* V: a pointer to the next table */
#define LEAF		0xcf		/* V R W X A D */
#define SATP(mode, asid, p) ((uint64_t)(mode) << 60 | (uint64_t)(asid) << 44 | \
			     PAGE_GPA(p) >> 12)

static int check_walk(void)
{
	static const struct {
		const char *name;
		uint64_t satp, vaddr, gpa;
	} t[] = {
		/* Sv39 from page 0: L2[0] -> page 1, L1[0] -> page 2 */
		{ "sv39 4K", SATP(8, 3, 0), 0x1234, 0x87654234 },
		{ "sv39 2M", SATP(8, 3, 0), 0x00345678, 0x90145678 },
		{ "sv39 absent", SATP(8, 3, 0), 0x3000, GPA_NONE },
		{ "sv39 kernel 1G", SATP(8, 3, 0), 0xffffffffc0012345ULL,
		  0xc0012345 },
		{ "sv39 non-canonical", SATP(8, 3, 0), 0x0000004000000000ULL,
		  GPA_NONE },
		{ "sv39 misaligned 2M", SATP(8, 3, 0), 0x00412345, GPA_NONE },
		{ "sv39 napot 64K", SATP(8, 3, 0), 0x1a345, 0x8abc0000 + 0xa345 },
		/* Sv48 from page 3: L3[0] -> page 0, so Sv39's tables below */
		{ "sv48 4K", SATP(9, 1, 3), 0x1234, 0x87654234 },
		{ "sv48 kernel", SATP(9, 1, 3), 0xffff800000005678ULL,
		  0x88885678 },
		{ "sv48 non-canonical", SATP(9, 1, 3), 0x0000800000000000ULL,
		  GPA_NONE },
		/* Sv57 from page 5: L4[0] -> page 3 */
		{ "sv57 4K", SATP(10, 0, 5), 0x1234, 0x87654234 },
		{ "sv57 512G", SATP(10, 0, 5), 0x0000008000012345ULL,
		  0x8000012345ULL },
		{ "bare", 0, 0x80001234, 0x80001234 },
		{ "reserved mode", SATP(1, 0, 0), 0x1234, GPA_NONE },
	};
	int fails = 0;

	memset(fake_ram, 0, sizeof(fake_ram));
	fake_ram[0 * 512 + 0] = PTE(PAGE_GPA(1), PTR);		/* L2[0] */
	fake_ram[0 * 512 + 511] = PTE(0xc0000000, LEAF);	/* L2[511]: 1G */
	fake_ram[1 * 512 + 0] = PTE(PAGE_GPA(2), PTR);		/* L1[0] */
	fake_ram[1 * 512 + 1] = PTE(0x90000000, LEAF);		/* L1[1]: 2M */
	fake_ram[1 * 512 + 2] = PTE(0x90001000, LEAF);		/* misaligned */
	fake_ram[2 * 512 + 1] = PTE(0x87654000, LEAF);		/* L0[1] */
	for (int i = 0x10; i < 0x20; i++)	/* a 64K napot page at 0x8abc0000 */
		fake_ram[2 * 512 + i] = PTE(0x8abc8000, LEAF) | 1ULL << 63;
	fake_ram[3 * 512 + 0] = PTE(PAGE_GPA(0), PTR);		/* Sv48 L3[0] */
	fake_ram[3 * 512 + 256] = PTE(PAGE_GPA(4), PTR);	/* kernel half */
	fake_ram[4 * 512 + 0] = PTE(PAGE_GPA(6), PTR);
	fake_ram[6 * 512 + 0] = PTE(PAGE_GPA(7), PTR);
	fake_ram[7 * 512 + 5] = PTE(0x88885000, LEAF);
	fake_ram[5 * 512 + 0] = PTE(PAGE_GPA(3), PTR);		/* Sv57 L4[0] */
	fake_ram[3 * 512 + 1] = PTE(0x8000000000ULL, LEAF);	/* L3[1]: 512G */
	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		uint64_t gpa = arch_riscv64.vaddr_to_gpa(t[i].satp, t[i].vaddr,
							 read_fake);

		if (gpa != t[i].gpa) {
			printf("FAIL walk %s %#" G_GINT64_MODIFIER "x: %#"
			       G_GINT64_MODIFIER "x, want %#" G_GINT64_MODIFIER
			       "x\n", t[i].name, t[i].vaddr, gpa, t[i].gpa);
			fails++;
		}
	}
	return fails;
}

int main(int argc, char **argv)
{
	int fails = 0;

	if (argc == 3 && !strcmp(argv[1], "--corpus"))
		return check_corpus(argv[2]);
	if (argc != 3) {
		fprintf(stderr, "usage: %s LISTING EXPECT | --corpus LISTING\n",
			argv[0]);
		return 2;
	}
	fails += check_listing(argv[1], argv[2]);
	fails += check_user_marker();
	fails += check_known_targets();
	fails += check_walk();
	if (fails) {
		printf("rv64_classify_test: %d failures\n", fails);
		return 1;
	}
	printf("rv64_classify_test: all passed\n");
	return 0;
}
