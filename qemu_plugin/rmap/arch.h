/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * arch.h - what a guest architecture tells pvperf-rmap.so: how a kernel
 * switches address spaces and where it keeps the running task.  One
 * file per architecture, named after it, fills a struct rmap_arch;
 * targets.c lists them and rmap.c picks one by QEMU's target name.
 *
 * Index space: "gpr" numbers the general-purpose registers in the order
 * of gpr_names, which is the order the decoder returns them in (the
 * instruction encoding's), not QEMU's register list order.
 */
#ifndef PVPERF_RMAP_ARCH_H
#define PVPERF_RMAP_ARCH_H

#include <stddef.h>
#include <stdint.h>

#define RMAP_MAX_GPRS	32

struct rmap_arch {
	const char *target;		/* qemu_info_t.target_name */
	uint64_t kernel_half_start;	/* guest vaddrs from here are kernel's */
	unsigned n_gprs;		/* at most RMAP_MAX_GPRS */
	const char *const *gpr_names;	/* [n_gprs], in decoder order */
	/* QEMU's names of the register holding the user page-table base,
	 * and of the one the task= option's path to the next task starts
	 * from (pyhost/arch/<arch>.py computes the path). */
	const char *aspace_reg;
	const char *task_reg;
	uint64_t aspace_mask;		/* the table's address bits in it */
	/* The gpr that the instruction in code[0..len) writes into
	 * aspace_reg (a kernel address-space switch), or -1. */
	int (*aspace_write_gpr)(const uint8_t *code, size_t len);
};

/* targets.c: the architectures pvperf-rmap.so knows, NULL-terminated. */
extern const struct rmap_arch *const rmap_arches[];

#endif /* PVPERF_RMAP_ARCH_H */
