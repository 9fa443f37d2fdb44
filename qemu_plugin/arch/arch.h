/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * arch.h - what the plugins need to know of a guest architecture: one
 * ops table (struct arch) that each architecture's file, named after it,
 * fills and targets.c lists.  Both products link this folder: pvperf.so
 * (instruction classes, registers, the marker, the page walk) and
 * pvperf-rmap.so (the page-table write, the general registers by their
 * encoding, where the task= path starts).  Shared code reaches an
 * architecture only through it and names none.
 *
 * Every hook runs at translation time, at install or in a rare guest
 * request (a FAULT's page walk), never per executed instruction: what a
 * hot path needs of an architecture (the kernel half's start) is data,
 * copied where the path reads it.
 *
 * No QEMU dependency, so an architecture's file is unit-tested natively
 * (../tests/, ../fuzz/).
 */
#ifndef PVPERF_ARCH_H
#define PVPERF_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pvperf_abi.h"

/* Bytes of an instruction a classifier is given: more than any
 * architecture's longest instruction, so that a longer one shows. */
#define INSN_MAX_BYTES 16

/* Per-instruction flags, computed by the architecture at translation. */
enum {
	CLS_BRANCH	= 1 << 0,	/* a retired branch (PVPERF_CTR_BRANCH_*) */
	CLS_MEM		= 1 << 1,	/* accesses data memory: may page-fault */
	CLS_BOUNDARY	= 1 << 2,	/* may fault: it may not retire */
	CLS_MARKER	= 1 << 3,	/* the hypercall's marker store (pvperf_abi.h) */
	CLS_FRAME	= 1 << 4,	/* writes sp or bp (or is undecodable) */
	CLS_COND	= 1 << 5,	/* a conditional branch: taken or not */
	CLS_INDIRECT	= 1 << 6,	/* jump or call through a register or
					 * memory (not a return) */
	CLS_ASPACE	= 1 << 7,	/* writes the page-table root: a new
					 * address space */
};

/* One instruction as translated: its first bytes, its length (more than
 * INSN_MAX_BYTES - 1 only if it is longer), its address. */
struct cls_insn {
	uint8_t bytes[INSN_MAX_BYTES];
	size_t len;
	uint64_t vaddr;
};

/*
 * The registers the plugin reads (QEMU's register handles, by name):
 * the general-purpose ones in the order of struct pvperf_sample's regs[]
 * (pvperf_abi.h), then the pc and the root of the page tables (which
 * names the address space), and the kernel half's own root where the
 * architecture keeps one apart (a NULL name where one root maps both
 * halves).
 */
enum guest_reg {
	REG_PC = PVPERF_NR_REGS,
	REG_PAGE_TABLE,
	REG_KERNEL_PAGE_TABLE,
	N_GUEST_REGS
};

/*
 * How the models count the data accesses QEMU reports for one memory
 * instruction, so that they are counted as the instruction set counts
 * them (and cachegrind, the models' reference, does):
 *   MEM_AS_IS    each access QEMU reports is one;
 *   MEM_HALVES   two 16-byte accesses of one instruction at consecutive
 *                addresses are one (QEMU splits a 32-byte vector access);
 *   MEM_PAIR     each access is two of half its size, at its two halves
 *                (QEMU makes one access of a load or store of a register
 *                pair).
 */
enum mem_shape { MEM_AS_IS, MEM_HALVES, MEM_PAIR };

/* Not a gpa: code outside the RAM file (firmware ROM) or unknown. */
#define GPA_NONE UINT64_MAX

/* General-purpose registers an architecture numbers, at most. */
#define ARCH_MAX_GPRS	32

struct arch {
	const char *target;		/* QEMU's info->target_name */
	/* The first virtual address of the kernel half: code at or above
	 * it counts as kernel code, the rest as user code. */
	uint64_t kernel_start;
	/* The gpa of the RAM file's first byte (the machine's RAM base):
	 * a gpa indexes the file at gpa - ram_base. */
	uint64_t ram_base;
	/* QEMU's names (qemu_plugin_get_registers) of enum guest_reg. */
	const char *reg_names[N_GUEST_REGS];
	/* The marker instruction, the hypercall's store (pvperf_abi.h):
	 * its length in bytes, and whether bytes[0..len) are it. */
	size_t marker_len;
	bool (*is_marker)(const uint8_t *bytes, size_t len);
	/*
	 * The CLS_* flags of a TB's n instructions into cls[n]; kernel: the
	 * TB runs in the kernel half.  CLS_MARKER only on kernel-half
	 * markers (user code cannot issue a hypercall).  CLS_ASPACE where
	 * aspace_write_gpr finds a page-table write.
	 */
	void (*classify_tb)(const struct cls_insn *insn, size_t n, bool kernel,
			    uint8_t *cls);
	/* The mem_shape of the instruction with these bytes (any
	 * instruction: asked of each one the models instrument). */
	uint8_t (*mem_shape)(const uint8_t *bytes, size_t len);
	/* The taken target of a direct conditional branch at vaddr with these
	 * bytes; false for anything else (then assume no target). */
	bool (*cond_target)(const uint8_t *bytes, size_t len, uint64_t vaddr,
			    uint64_t *target);
	/* The gpa of vaddr in the address space whose page-table root is
	 * root, or GPA_NONE; read_u64 reads guest RAM at a gpa (false:
	 * outside RAM). */
	uint64_t (*vaddr_to_gpa)(uint64_t root, uint64_t vaddr,
				 bool (*read_u64)(uint64_t gpa, uint64_t *val));
	/* Whether bytes[0..len) are a port I/O instruction (a device
	 * access that is no memory access); NULL: the architecture has no
	 * port I/O. */
	bool (*is_port_io)(const uint8_t *bytes, size_t len);
	/*
	 * The page-table write: the general register (an index of
	 * gpr_names) whose value the instruction in bytes[0..len) writes
	 * into reg_names[REG_PAGE_TABLE], or -1 (no such write, or of no
	 * register).  The one decoder of it: classify_tb's CLS_ASPACE and
	 * pvperf-rmap.so's address-space timeline both ask it.
	 */
	int (*aspace_write_gpr)(const uint8_t *bytes, size_t len);
	/* The general registers in the order their encoding numbers them
	 * (not that of reg_names): QEMU's names, n_gprs <= ARCH_MAX_GPRS. */
	unsigned n_gprs;
	const char *const *gpr_names;
	/* The table's address bits in REG_PAGE_TABLE's value, and how far
	 * they lie right of the address: (value & aspace_mask) <<
	 * aspace_shift is the table's gpa (riscv64's satp holds a page
	 * number; x86_64's cr3 and arm64's TTBR hold the address, shift 0). */
	uint64_t aspace_mask;
	unsigned aspace_shift;
	/* QEMU's name of the register the task= path to the task switched
	 * to starts from (pvperf-rmap.so; pyhost/arch/<arch>.py). */
	const char *task_reg;
};

#endif /* PVPERF_ARCH_H */
