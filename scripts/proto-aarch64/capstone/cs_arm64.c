/* PROTOTYPE: how capstone 4 (Debian 12, libcapstone4 4.0.2) classifies
 * arm64 instructions: groups, memory operands, registers read/written.
 *   cs_arm64 FILE.bin   (raw little-endian instruction words) */
#include <capstone/capstone.h>
#include <stdio.h>
#include <stdlib.h>

static const char *group_name(csh h, uint8_t g)
{
	const char *n = cs_group_name(h, g);
	return n ? n : "?";
}

int main(int argc, char **argv)
{
	static uint8_t code[65536];
	FILE *f = fopen(argv[1], "rb");
	size_t len = fread(code, 1, sizeof(code), f);
	csh h;
	cs_insn *insn;

	cs_open(CS_ARCH_ARM64, CS_MODE_ARM, &h);
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	size_t decoded = 0;
	/* One word at a time: cs_disasm stops at the first word it cannot
	 * decode, and capstone 4 predates several arm64 extensions. */
	for (size_t off = 0; off + 4 <= len; off += 4) {
		size_t n = cs_disasm(h, code + off, 4, off, 1, &insn);
		size_t i = 0;
		if (n == 0) {
			printf("%08x UNKNOWN to capstone\n", *(uint32_t *)(code + off));
			continue;
		}
		decoded++;
		cs_detail *d = insn[i].detail;
		printf("%08x %-8s %-28s groups:", *(uint32_t *)insn[i].bytes,
		       insn[i].mnemonic, insn[i].op_str);
		for (int g = 0; g < d->groups_count; g++)
			printf(" %s", group_name(h, d->groups[g]));
		int mem = 0;
		for (int o = 0; o < d->arm64.op_count; o++)
			if (d->arm64.operands[o].type == ARM64_OP_MEM)
				mem++;
		printf(" | mem_ops=%d wb=%d", mem, d->arm64.writeback);
		printf(" | regs_write:");
		for (int r = 0; r < d->regs_write_count; r++)
			printf(" %s", cs_reg_name(h, d->regs_write[r]));
		printf("\n");
		cs_free(insn, n);
	}
	printf("decoded %zu of %zu words\n", decoded, len / 4);
	cs_close(&h);
	return 0;
}
