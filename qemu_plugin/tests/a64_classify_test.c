/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * a64_classify_test.c - unit test of aarch64.c through its ops table
 * (arch.h), natively (no QEMU).
 *
 * Instruction classes: a64insns.S, cross-assembled, gives the
 * instructions and their expected classes; objdump's listing of it gives
 * each instruction word and mnemonic.  Every instruction is classified
 * and compared with its expected class, and, as a check independent of
 * the expectations written by hand, its branch and memory classes with
 * what objdump's mnemonic says.  Then the taken targets of conditional
 * branches, the marker in user code, and the page walk.
 *
 *   make -C qemu_plugin check
 *   tests/a64_classify_test LISTING EXPECT   (objdump -d, objcopy -j .expect)
 */
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "target_check.h"

extern const struct arch arch_aarch64;

#define KERNEL_VADDR 0xffff800008001000ULL
#define USER_VADDR   0x400000ULL

struct listed {
	uint32_t word;
	char mnemonic[32];
	char operands[96];
};

static struct cls_insn insn_of(uint32_t word, uint64_t vaddr)
{
	struct cls_insn in = { .len = 4, .vaddr = vaddr };

	for (int i = 0; i < 4; i++)
		in.bytes[i] = word >> (8 * i);
	return in;
}

static uint8_t classify(uint32_t word, bool kernel)
{
	struct cls_insn in = insn_of(word, kernel ? KERNEL_VADDR : USER_VADDR);
	uint8_t cls;

	arch_aarch64.classify_tb(&in, 1, kernel, &cls);
	return cls;
}

/* objdump -d lines "   c:\t8b020020 \tadd\tx0, x1, x2". */
static GArray *read_listing(const char *path)
{
	GArray *out = g_array_new(FALSE, TRUE, sizeof(struct listed));
	char *text, **lines;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return out;
	lines = g_strsplit(text, "\n", -1);
	for (char **l = lines; *l; l++) {
		struct listed e = { 0 };
		unsigned off;

		if (sscanf(*l, " %x: %8x %31s %95[^\n]", &off, &e.word,
			   e.mnemonic, e.operands) >= 3)
			g_array_append_val(out, e);
	}
	g_strfreev(lines);
	g_free(text);
	return out;
}

/* What the mnemonic alone says: a branch of the A64 branch class. */
static bool mnemonic_is_branch(const char *m)
{
	static const char *const names[] = {
		"b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz",
		"braa", "brab", "braaz", "brabz", "blraa", "blrab", "blraaz",
		"blrabz", "retaa", "retab",
	};

	if (g_str_has_prefix(m, "b.") || g_str_has_prefix(m, "bc."))
		return true;
	for (size_t i = 0; i < G_N_ELEMENTS(names); i++)
		if (!strcmp(m, names[i]))
			return true;
	return false;
}

/* Loads, stores, atomics and dc zva access memory; prefetches do not. */
static bool mnemonic_accesses_memory(const char *m, const char *operands)
{
	if (g_str_has_prefix(m, "prf"))
		return false;
	if (!strcmp(m, "dc"))
		return g_str_has_prefix(operands, "zva");
	return g_str_has_prefix(m, "ld") || g_str_has_prefix(m, "st") ||
	       g_str_has_prefix(m, "cas") || g_str_has_prefix(m, "swp");
}

/* The general-register pairs, which QEMU accesses as one (MEM_PAIR):
 * a pair mnemonic whose first operand is an x or w register. */
static bool mnemonic_is_gpr_pair(const char *m, const char *operands)
{
	static const char *const names[] = {
		"ldp", "stp", "ldnp", "stnp", "ldpsw", "ldxp", "stxp",
		"ldaxp", "stlxp",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(names); i++)
		if (!strcmp(m, names[i]))
			return operands[0] == 'x' || operands[0] == 'w';
	return false;
}

static int check_mem_shape(const struct listed *e)
{
	struct cls_insn in = insn_of(e->word, USER_VADDR);
	uint8_t shape = arch_aarch64.mem_shape(in.bytes, in.len);
	bool pair = mnemonic_is_gpr_pair(e->mnemonic, e->operands);

	if (shape == (pair ? MEM_PAIR : MEM_AS_IS))
		return 0;
	printf("FAIL %08x %s %s: mem_shape %u against objdump's mnemonic\n",
	       e->word, e->mnemonic, e->operands, shape);
	return 1;
}

static int check_listing(const char *listing, const char *expect_path)
{
	GArray *insns = read_listing(listing);
	gchar *expect = load_expectations(listing, insns->len, expect_path);
	int fails = 0;

	if (!expect)
		return 1;
	for (guint i = 0; i < insns->len; i++) {
		const struct listed *e = &g_array_index(insns, struct listed, i);
		uint8_t cls = classify(e->word, true);
		uint8_t want = (uint8_t)expect[i];

		if (cls != want) {
			printf("FAIL %08x %s %s: cls 0x%x, want 0x%x\n", e->word,
			       e->mnemonic, e->operands, cls, want);
			fails++;
		}
		if (!!(cls & CLS_BRANCH) != mnemonic_is_branch(e->mnemonic) ||
		    !!(cls & CLS_MEM) !=
		    mnemonic_accesses_memory(e->mnemonic, e->operands)) {
			printf("FAIL %08x %s %s: cls 0x%x against objdump's "
			       "mnemonic\n", e->word, e->mnemonic, e->operands,
			       cls);
			fails++;
		}
		fails += check_mem_shape(e);
	}
	printf("a64_classify_test: %u instructions classified\n", insns->len);
	g_array_free(insns, TRUE);
	g_free(expect);
	return fails;
}

/* User code cannot ring: the same store is no marker there. */
static int check_user_marker(void)
{
	uint8_t cls = classify(PVPERF_AARCH64_MARKER_INSN, false);

	if (cls == (CLS_MEM | CLS_BOUNDARY))
		return 0;
	printf("FAIL marker in user code: cls 0x%x\n", cls);
	return 1;
}

static int check_targets(void)
{
	static const struct {
		const char *name;
		uint32_t word;
		bool direct;
		uint64_t target;
	} t[] = {
		{ "b.ne .-8",		0x54ffffc1, true, 0x400ff8 },
		{ "b.eq .+0x10",	0x54000080, true, 0x401010 },
		{ "cbz x0, .+0x100",	0xb4000800, true, 0x401100 },
		{ "cbnz w1, .-4",	0x35ffffe1, true, 0x400ffc },
		{ "tbz x2, #63, .+8",	0xb6f80042, true, 0x401008 },
		{ "tbnz w3, #0, .-0x20",	0x3707ff03, true, 0x400fe0 },
		{ "b .+8",		0x14000002, false, 0 },
		{ "bl .+8",		0x94000002, false, 0 },
		{ "ret",		0xd65f03c0, false, 0 },
		{ "add x0, x1, x2",	0x8b020020, false, 0 },
	};
	int fails = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		struct cls_insn in = insn_of(t[i].word, 0x401000);

		fails += check_cond_target(&arch_aarch64, t[i].name, in.bytes,
					   in.len, 0x401000, t[i].direct,
					   t[i].target);
	}
	return fails;
}

/* ---- the page walk, over a small RAM at virt's base ---- */

#define RAM_BASE 0x40000000ULL
#include "fake_ram.h"

static void set_desc(int page, uint64_t index, uint64_t desc)
{
	fake_ram[page * 512 + index] = desc;
}

#define PAGE_GPA(p) (RAM_BASE + (uint64_t)(p) * 4096)

static int check_walk(void)
{
	/* TTBR0 with ASID 5 and CnP: the walk uses only the base.  TTBR1
	 * (the kernel half's root, tables at pages 4-5) likewise. */
	uint64_t ttbr0 = 5ULL << 48 | PAGE_GPA(0) | 1;
	uint64_t ttbr1 = 7ULL << 48 | PAGE_GPA(4) | 1;
	static const struct {
		bool kernel;
		uint64_t vaddr, gpa;
	} t[] = {
		{ false, 0x400123, 0x45678123 },	/* 4K page */
		{ false, 0x20145678, 0x80145678 },	/* 2M block */
		{ false, 0x401000, GPA_NONE },		/* not present */
		/* the kernel half under TTBR0's tables: L0[256] is empty */
		{ false, 0xffff800008000000ULL, GPA_NONE },
		/* kernel text: L0[256] -> L1[0] -> L2[64], a 2M block */
		{ true, 0xffff800008012345ULL, 0x40212345 },
		{ true, 0xffff800008212345ULL, GPA_NONE },	/* L2[65] empty */
		/* the hole between the halves: no walk from either root */
		{ true, 0x0001000000000000ULL, GPA_NONE },
		{ false, 0x0001000000000000ULL, GPA_NONE },
	};
	int fails = 0;

	memset(fake_ram, 0, sizeof(fake_ram));
	set_desc(0, 0, PAGE_GPA(1) | 3);		/* L0[0] -> L1 */
	set_desc(1, 0, PAGE_GPA(2) | 3);		/* L1[0] -> L2 */
	set_desc(2, 2, PAGE_GPA(3) | 3);		/* L2[2] -> L3 */
	set_desc(3, 0, 0x45678000ULL | 0x403);		/* L3[0]: page, AF */
	set_desc(2, 0x100, 0x80000000ULL | 0x401);	/* L2[256]: block */
	set_desc(4, 0x100, PAGE_GPA(5) | 3);		/* L0[256] -> L1 */
	set_desc(5, 0, PAGE_GPA(6) | 3);		/* L1[0] -> L2 */
	set_desc(6, 0x40, 0x40200000ULL | 0x401);	/* L2[64]: block */
	for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
		uint64_t gpa = arch_aarch64.vaddr_to_gpa(
			t[i].kernel ? ttbr1 : ttbr0, t[i].vaddr, read_fake);

		if (gpa != t[i].gpa) {
			printf("FAIL walk %#" G_GINT64_MODIFIER "x: %#"
			       G_GINT64_MODIFIER "x, want %#" G_GINT64_MODIFIER
			       "x\n", t[i].vaddr, gpa, t[i].gpa);
			fails++;
		}
	}
	return fails;
}

int main(int argc, char **argv)
{
	int fails = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: %s LISTING EXPECT\n", argv[0]);
		return 2;
	}
	fails += check_listing(argv[1], argv[2]);
	fails += check_user_marker();
	fails += check_targets();
	fails += check_walk();
	if (fails) {
		printf("a64_classify_test: %d failures\n", fails);
		return 1;
	}
	printf("a64_classify_test: all passed\n");
	return 0;
}
