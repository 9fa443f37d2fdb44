/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * count.h - exact retired instructions and branches per vCPU.
 */
#ifndef PVPERF_COUNT_H
#define PVPERF_COUNT_H

#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

#include "core.h"
#include "pvperf_proto.h"

void count_init(void);
/* tb_trans with counting on, the TB's n instructions classified: its
 * chunks' adds (and, sampling, their countdown, sample_tb.c). */
void count_tb(struct tb_insn *insn, const uint8_t *cls, size_t n,
	      bool kernel);
/* tb_trans with counting off. */
void count_learn_tb(struct qemu_plugin_tb *tb, size_t n);
int64_t count_fault(unsigned vcpu, uint64_t ip, uint64_t mode,
		    uint64_t page_table);
void count_flush(void);

#endif /* PVPERF_COUNT_H */
