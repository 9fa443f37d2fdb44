/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * counts.c - per-TB execution counts (the counts=on option).
 *
 * Each recorded TB gets one 64-bit counter, added to by an inline op at
 * the TB's start (qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu: a
 * per-vCPU slot, so no atomics and no callback).  Counters live in
 * scoreboards of CHUNK counters each (one scoreboard per TB, as
 * contrib/plugins/hotblocks.c does, costs an allocation and a vCPU-array
 * resize per translation); chunk k holds TB records k*CHUNK ...
 *
 * Inexact by design, like any per-TB count: an instruction that faults
 * in the middle of a TB (a page fault, an MMIO access TCG re-runs alone
 * through cpu_io_recompile) leaves the rest of the TB counted but not
 * run.  pvperf.so's count.c takes those tails back; here a demand-paged
 * program over-counts by at most one TB's tail per fault, which the
 * table's check against callgrind bounds (tests/vm/test_bt_table.py).
 */
#include <glib.h>

#include "counts.h"
#include "out.h"

#define CHUNK	8192		/* counters per scoreboard: 64 KiB a vCPU */

/* rm.lock: the scoreboards, one per CHUNK TB records */
static GPtrArray *chunks;

static qemu_plugin_u64 counter_of(uint64_t index)
{
	struct qemu_plugin_scoreboard *sb;

	if (!chunks)
		chunks = g_ptr_array_new();
	while (chunks->len <= index / CHUNK)
		g_ptr_array_add(chunks,
				qemu_plugin_scoreboard_new(CHUNK * sizeof(uint64_t)));
	sb = g_ptr_array_index(chunks, index / CHUNK);
	return (qemu_plugin_u64){ .score = sb,
				  .offset = (index % CHUNK) * sizeof(uint64_t) };
}

void counts_hook_tb(struct qemu_plugin_tb *tb, uint64_t index)
{
	qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
		tb, QEMU_PLUGIN_INLINE_ADD_U64, counter_of(index), 1);
}

/* One record: header, struct rmap_counts, u64 executions[n]. */
static void write_chunk(uint64_t first, uint32_t n)
{
	size_t size = sizeof(struct rmap_rec_header) +
		      sizeof(struct rmap_counts) + n * sizeof(uint64_t);
	g_autoptr(GByteArray) rec = g_byte_array_sized_new(size);
	struct rmap_rec_header *h;
	struct rmap_counts *c;
	uint64_t *executions;

	g_byte_array_set_size(rec, size);
	h = (void *)rec->data;
	c = (void *)(h + 1);
	executions = (void *)(c + 1);
	*h = rec_header(RMAP_REC_COUNTS, size);
	*c = (struct rmap_counts){ .first_tb = first, .n_tbs = n };
	for (uint32_t i = 0; i < n; i++)
		executions[i] = qemu_plugin_u64_sum(counter_of(first + i));
	obuf_append(rec->data, rec->len);
}

void counts_write(uint64_t n_tbs)
{
	for (uint64_t first = 0; first < n_tbs; first += CHUNK)
		write_chunk(first, MIN(CHUNK, n_tbs - first));
}
