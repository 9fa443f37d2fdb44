/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap_arch_test.c - unit test of each architecture's page-table write
 * (arch/<arch>.c through arch/arch.h, the table both products link),
 * natively (no QEMU).
 *
 * For each architecture, a cross-assembled file of instructions
 * (rmap_<arch>.S) and binutils' objdump listing of it: every instruction
 * is given to the architecture's aspace_write_gpr, and its answer must be
 * what objdump says, independently of the decoder: the register named
 * by gpr_names[] for an instruction that writes the page-table base
 * register from a general register, -1 for every other.  And classify_tb
 * (kernel code) marks CLS_ASPACE on every instruction it names.
 *
 *   make -C qemu_plugin check
 *   tests/rmap_arch_test TARGET LISTING   (objdump -d --insn-width=16)
 */
#include <glib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "targets.h"

/* How objdump spells a write of the page-table base: the mnemonic, the
 * destination, the number of operands and which are the source and the
 * destination (AT&T's source comes first; riscv64's listing is
 * -M no-aliases, `csrrw rd,satp,rs1`). */
struct spelling {
	const char *target, *mnemonic, *dest, *reg_prefix;
	unsigned n_ops, src, dst;
	/* a register objdump names otherwise than QEMU (gpr_names) */
	const char *objdump_name, *qemu_name;
};

static const struct spelling spellings[] = {
	{ "x86_64", "mov", "%cr3", "%", 2, 0, 1, NULL, NULL },
	{ "aarch64", "msr", "ttbr0_el1", "", 2, 1, 0, NULL, NULL },
	{ "riscv64", "csrrw", "satp", "", 3, 2, 1, "s0", "fp" },
};

/* The source register objdump names if `mnemonic operands` writes the
 * base register (NULL otherwise); "" for no register (xzr). */
static const char *written_from(const struct spelling *sp,
				const char *mnemonic, const char *operands,
				char *buf, size_t len)
{
	g_auto(GStrv) ops = g_strsplit(operands, ",", 0);
	const char *src, *dst;

	if (strcmp(mnemonic, sp->mnemonic) || g_strv_length(ops) != sp->n_ops)
		return NULL;
	src = g_strstrip(ops[sp->src]);
	dst = g_strstrip(ops[sp->dst]);
	if (strcmp(dst, sp->dest))
		return NULL;
	if (!g_str_has_prefix(src, sp->reg_prefix))
		return NULL;
	g_strlcpy(buf, src + strlen(sp->reg_prefix), len);
	if (sp->objdump_name && !strcmp(buf, sp->objdump_name))
		g_strlcpy(buf, sp->qemu_name, len);
	return strcmp(buf, "xzr") && strcmp(buf, "zero") ? buf : "";
}

/* "   0:\t0f 22 d8   \tmov    %rax,%cr3" (bytes) or
 * "  70:\td518201c \tmsr\tttbr0_el1, x28" (a little-endian word) or
 * "   0:\t18051073 \tcsrrw\tzero,satp,a0" and "  80:\t4082 \tc.lwsp..."
 * (riscv64: a 32- or 16-bit little-endian parcel). */
static size_t line_bytes(const char *hex, uint8_t *out)
{
	g_auto(GStrv) tok = g_strsplit(g_strstrip((char *)hex), " ", 0);
	size_t n = 0;

	for (char **t = tok; *t; t++) {
		unsigned long v = strtoul(*t, NULL, 16);
		size_t width = strlen(*t) / 2;

		for (size_t i = 0; i < width && n < 16; i++)
			out[n++] = v >> (8 * i);
	}
	return n;
}

/* 0 if the decoder agrees with objdump on the line's instruction;
 * *writes counts the instructions that write the base. */
static int check_line(const struct arch *arch,
		      const struct spelling *sp, char **f, int *writes)
{
	uint8_t code[16];
	size_t len = line_bytes(f[1], code);
	g_auto(GStrv) insn = g_strsplit_set(g_strstrip(f[2]), " \t", 2);
	char buf[32];
	const char *want = written_from(sp, insn[0], insn[1] ? insn[1] : "",
					buf, sizeof(buf));
	int got = arch->aspace_write_gpr(code, len);
	const char *got_name = got < 0 ? NULL : arch->gpr_names[got];
	struct cls_insn in = { .len = len, .vaddr = arch->kernel_start };
	uint8_t cls = 0;

	memcpy(in.bytes, code, len);
	arch->classify_tb(&in, 1, true, &cls);
	*writes += want != NULL;
	if (got >= 0 && !(cls & CLS_ASPACE)) {
		fprintf(stderr, "%s: %s %s: not CLS_ASPACE (cls 0x%x)\n",
			arch->target, insn[0], insn[1] ? insn[1] : "", cls);
		return 1;
	}
	if ((!want || !*want) ? got < 0 : (got >= 0 && !strcmp(got_name, want)))
		return 0;
	fprintf(stderr, "%s: %s %s: decoder %d (%s), objdump %s\n",
		arch->target, insn[0], insn[1] ? insn[1] : "", got,
		got_name ? got_name : "-", want ? want : "no write");
	return 1;
}

int main(int argc, char **argv)
{
	const struct arch *arch = argc == 3 ? arch_of_target(argv[1]) : NULL;
	const struct spelling *sp = NULL;
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;
	int fails = 0, n = 0, writes = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(spellings); i++)
		if (arch && !strcmp(spellings[i].target, arch->target))
			sp = &spellings[i];
	if (!sp || !g_file_get_contents(argv[2], &text, NULL, NULL)) {
		fprintf(stderr, "usage: rmap_arch_test TARGET LISTING\n");
		return 2;
	}
	lines = g_strsplit(text, "\n", 0);
	for (char **l = lines; *l; l++) {
		g_auto(GStrv) f = g_strsplit(*l, "\t", 3);

		if (g_strv_length(f) != 3 || !strchr(f[0], ':'))
			continue;
		fails += check_line(arch, sp, f, &writes);
		n++;
	}
	printf("rmap_arch_test %s: %d instructions (%d write the page-table "
	       "base), %d failed\n", arch->target, n, writes, fails);
	return fails || n == 0 || writes == 0;
}
