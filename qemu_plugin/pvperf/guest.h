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

#include "arch.h"
#include "pvperf_abi.h"

int guest_ram_init(const char *path, uint64_t *size);
void guest_ram_exit(void);
void *guest_ram_block(uint64_t gpa, uint64_t len);

uint64_t guest_insn_gpa(const struct qemu_plugin_insn *insn);
uint64_t guest_vaddr_to_gpa(uint64_t page_table, uint64_t vaddr);

/*
 * Registers (arch.h enum guest_reg), from callbacks registered with
 * QEMU_PLUGIN_CB_R_REGS.
 */
void guest_regs_init(void);
bool guest_read_reg(enum guest_reg reg, uint64_t *val);
bool guest_read_gprs(uint64_t out[PVPERF_NR_REGS]);
/* How far this execution of code translated in a TB at tb_vaddr lies
 * from where it was translated (a multiple of the page size: TBs are
 * PC-relative, shared by every mapping of the page); 0 for kernel code,
 * mapped alike everywhere. */
uint64_t guest_runtime_delta(uint64_t tb_vaddr, bool kernel);

#endif /* PVPERF_GUEST_H */
