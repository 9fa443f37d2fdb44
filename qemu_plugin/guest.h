/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * guest.h - the guest as the plugin sees it outside generated code: its
 * RAM (our own shared mapping of the RAM file), physical addresses of
 * translated code, a page walk, and register reads.
 */
#ifndef PVPERF_GUEST_H
#define PVPERF_GUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <qemu-plugin.h>

#include "pvperf_abi.h"

/* Not a gpa: code outside the RAM file (firmware ROM) or unknown. */
#define GPA_NONE UINT64_MAX

int guest_ram_init(const char *path, uint64_t *size);
void guest_ram_exit(void);
void *guest_ram_block(uint64_t gpa, uint64_t len);

uint64_t guest_insn_gpa(const struct qemu_plugin_insn *insn);
uint64_t guest_vaddr_to_gpa(uint64_t cr3, uint64_t vaddr);

/*
 * Registers, from callbacks registered with QEMU_PLUGIN_CB_R_REGS.  The
 * first PVPERF_NR_REGS are the general-purpose registers in the order of
 * struct pvperf_sample's regs[] (pvperf_abi.h: gdb's order).
 */
enum guest_reg {
	REG_RAX, REG_RBX, REG_RCX, REG_RDX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
	REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15,
	REG_RIP, REG_CR3, N_GUEST_REGS
};
void guest_regs_init(void);
bool guest_read_reg(enum guest_reg reg, uint64_t *val);
bool guest_read_gprs(uint64_t out[PVPERF_NR_REGS]);

#endif /* PVPERF_GUEST_H */
