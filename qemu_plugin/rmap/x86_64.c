/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * x86_64.c - pvperf-rmap.so on x86_64 guests: a kernel switches address
 * spaces with `mov %reg,%cr3` (in Linux 6.1: switch_mm_irqs_off, exec,
 * temporary mms and TLB flushes that reload CR3), and keeps this CPU's
 * per-cpu base in the kernel GS base, where the task= path to the task
 * switched to starts (runqueues.curr of this CPU).
 */
#include <stdbool.h>

#include "arch.h"
#include "pvperf_abi.h"

/* GPR names in the gdb register list, in x86 encoding order (ModRM.rm
 * with REX.B), which is not the gdb order (rax, rbx, rcx, ...). */
static const char *const gpr_names[] = {
	"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
};

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
 * The GPR (x86 encoding number, 0..15) that the 64-bit instruction in
 * code[0..len) moves into CR3, or -1: [prefixes] [REX] 0F 22 /r with
 * ModRM.reg == 3 (the mod bits are ignored: the source is always a
 * register).  REX.R would make it CR11 and LOCK (F0) CR8+reg on AMD.
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

const struct rmap_arch rmap_arch_x86_64 = {
	.target = "x86_64",
	.kernel_half_start = PVPERF_X86_64_KERNEL_HALF_START,
	.n_gprs = sizeof(gpr_names) / sizeof(gpr_names[0]),
	.gpr_names = gpr_names,
	.aspace_reg = "cr3",
	.task_reg = "gs_base",
	/* CR3 bits 12..51: the top-level table; below are PCID/PWT/PCD,
	 * above the no-flush bit 63 (and LAM bits in later CPUs). */
	.aspace_mask = 0x000ffffffffff000ULL,
	.aspace_write_gpr = mov_to_cr3_gpr,
};
