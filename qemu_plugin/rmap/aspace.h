/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * aspace.h - pvperf-rmap.so's timeline of address spaces (aspace.c).
 */
#ifndef PVPERF_RMAP_ASPACE_H
#define PVPERF_RMAP_ASPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

/* tb_trans: the page-table base the translating vCPU runs under. */
bool translation_page_table(uint64_t *base);
/* tb_trans, kernel code: a callback on insn if it writes the page-table
 * base (code[0..len): its bytes). */
void hook_aspace_write(struct qemu_plugin_insn *insn, const uint8_t *code,
		       size_t len);
/* The first vcpu_init, under rm.lock: the register handles. */
void find_registers(void);

#endif /* PVPERF_RMAP_ASPACE_H */
