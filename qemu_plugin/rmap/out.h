/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * out.h - what the units of pvperf-rmap.so share, below both rmap.c
 * (the plugin: options, translation, flushes) and aspace.c (the
 * timeline of address spaces): the state, rm, and the output and
 * logging helpers of out.c.  The guest's architecture: ../arch/arch.h.
 */
#ifndef PVPERF_RMAP_OUT_H
#define PVPERF_RMAP_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <glib.h>
#include <qemu-plugin.h>

#include "arch.h"
#include "rmap_format.h"

/*
 * Where the kernel keeps the task a CPU switches to and its address space
 * (the task= option): from the architecture's task register, follow
 * `path` (at each step v = *(u64 *)(v + path[i])) to the task; its mm,
 * the mm's pgd (a kernel virtual address), and the linear map's base, so
 * that pgd - base is the table's physical address: read at `linear` if
 * `linear_indirect`, else `linear` itself.
 */
#define TASK_PATH_MAX	8

struct task_layout {
	bool valid;
	unsigned n_path;
	uint64_t path[TASK_PATH_MAX];
	uint64_t tgid, comm, mm;	/* offsets in task_struct */
	uint64_t pgd;			/* offset in mm_struct */
	bool linear_indirect;
	uint64_t linear;
};

struct rmap_state {
	int fd;
	const char *out_path;
	bool verbose;
	bool counts;			/* counts=on: counts.c */
	unsigned max_vcpus;
	const struct arch *arch;	/* set at install */
	struct task_layout task;
	/* Register handles: set once, at the first vcpu_init (every vCPU
	 * has the same gdb register list); read without the lock after. */
	struct qemu_plugin_register *gpr[ARCH_MAX_GPRS], *aspace, *task_reg;
	gint have_regs;			/* atomic: handles are set */
	/* Everything below but the atomics: rm.lock. */
	GMutex lock;
	GByteArray *obuf;
	GHashTable *sites;		/* guestpc -> aspace.c's sites */
	bool closing;
	uint64_t n_tbs, n_tb_no_base, n_flushes, n_vcpus;
	uint64_t n_tb_recs;		/* TB records in the file */
	uint64_t trans_ns;		/* time spent in tb_trans */
	uint64_t n_aspace_writes, n_named, n_unnamed, n_reg_errors;  /* atomic */
	uint64_t n_write_errors, aspace_ns;			  /* atomic */
};

extern struct rmap_state rm;

#define OBUF_FLUSH	(64 * 1024)	/* TB records buffered before a write */

void rmap_log(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
uint64_t now_ns(void);
void count(uint64_t *counter);
GByteArray *thread_buf(GByteArray **buf);
void write_all(const void *buf, size_t n);
void obuf_drain(void);
void obuf_append(const void *rec, size_t size);
struct rmap_rec_header rec_header(uint16_t type, size_t size);

#endif /* PVPERF_RMAP_OUT_H */
