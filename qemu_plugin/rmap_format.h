/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap_format.h - the record file written by pvperf-rmap.so (rmap.c) and
 * read by pyhost/rmap.py, defined once.  pyhost/rmap.py mirrors these
 * layouts with struct formats and asserts their sizes; tests/test_rmap.py
 * parses this header and compares.
 *
 * Index spaces: a "hostpc" is an address in QEMU's TCG code cache (host
 * virtual); a "guestpc" a guest virtual address of a guest instruction; a
 * "gpa" a guest physical address (offset into the guest RAM file); a
 * "generation" counts code-cache flushes (0 before the first flush): a
 * hostpc means something only together with its generation.
 *
 * File: one struct rmap_file_header, then records.  Every record starts
 * with struct rmap_rec_header; `size` is the whole record in bytes, a
 * multiple of 8, so a reader can skip unknown types.  Little-endian (x86
 * host).  The order of records in the file carries no meaning beyond
 * what their fields say.  A file cut short (QEMU killed) ends in the
 * middle of a record: readers stop at the last whole one.
 *
 * Markers (version 2).  The plugin gives every TB an inline op on its own
 * counter slot; QEMU's x86-64 backend materialises the slot's address in
 * the TB's host code as the 64-bit immediate of a 10-byte
 * `movabs $slot,%reg` (REX.W B8+r), the first code after the TB's
 * icount/exit-request check.  A "marker address" is the address of that
 * imm64 (2 bytes into the movabs): measured 13 bytes past the TB's host
 * code start (2 for the rare TB without the check, CF_NOIRQ), which QEMU
 * 7.2 aligns to 64 bytes (tcg/tcg.c tcg_tb_alloc), so the TB starts at
 * hostpc & ~63.  The plugin finds markers by scanning
 * the code cache, so records are written when a scan finds them: at every
 * code-cache flush (for the generation that ends), at QEMU's exit (the
 * live generation) and about every second while QEMU runs (a marker seen
 * at the same place by two scans) -- not at a TB's first execution.
 * Every TB whose code is in the cache is recorded, executed or not; a TB
 * QEMU translated but discarded is not.
 *
 * RMAP_REC_TB, once per translation block and generation:
 *   header, struct rmap_tb, then u8 insn_size[n_insns], then the TB's guest
 *   code bytes[n_bytes] (insn i starts at guestpc + sum(size[0..i-1])),
 *   zero-padded to 8.  hostpc is the TB's marker address; vcpu is
 *   RMAP_VCPU_UNKNOWN (a marker does not say which vCPU ran the TB).
 * RMAP_REC_INSN, with hooks=last|all: the marker address of instruction
 *   `index` (> 0) of the TB whose marker address is tb_hostpc (same
 *   generation).  That instruction's host code starts at the movabs,
 *   hostpc - 2; instruction 0's starts right after the TB's marker op.
 * RMAP_REC_FLUSH, at every code-cache flush: header.generation is the new
 *   generation, then struct rmap_flush with the host CLOCK_MONOTONIC time
 *   at the flush (the clock `perf record -k mono` stamps samples with), so
 *   a sample maps through the generation live at its time.
 */
#ifndef PVPERF_RMAP_FORMAT_H
#define PVPERF_RMAP_FORMAT_H

#include <stdint.h>

#define RMAP_MAGIC		"PVRMAP\0\0"
#define RMAP_VERSION		2

#define RMAP_REC_TB		1
#define RMAP_REC_INSN		2
#define RMAP_REC_FLUSH		3

/* rmap_file_header.flags: which instruction markers were placed */
#define RMAP_HOOK_LAST		0x1	/* the last insn of each TB */
#define RMAP_HOOK_ALL		0x2	/* every insn */

/* rmap_tb.flags */
#define RMAP_TB_KERNEL		0x1	/* guestpc in the kernel half */
#define RMAP_TB_GPA_VALID	0x2	/* gpa is the first insn's gpa */

#define RMAP_NO_GPA		UINT64_MAX
#define RMAP_VCPU_UNKNOWN	UINT32_MAX

struct rmap_file_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;	/* sizeof(struct rmap_file_header) */
	uint32_t flags;		/* RMAP_HOOK_* */
	uint32_t n_vcpus;
	uint64_t reserved;	/* 0 */
};

struct rmap_rec_header {
	uint16_t type;		/* RMAP_REC_* */
	uint16_t reserved;
	uint32_t size;		/* whole record, bytes, multiple of 8 */
	uint64_t generation;
};

struct rmap_tb {
	uint64_t hostpc;	/* marker address (imm64 in the TB code) */
	uint64_t guestpc;	/* vaddr of the first instruction */
	uint64_t gpa;		/* gpa of the first instruction or RMAP_NO_GPA */
	uint32_t n_insns;
	uint32_t n_bytes;
	uint32_t vcpu;		/* RMAP_VCPU_UNKNOWN (v1: first runner) */
	uint32_t flags;		/* RMAP_TB_* */
};

struct rmap_insn {
	uint64_t tb_hostpc;	/* the TB's rmap_tb.hostpc */
	uint64_t hostpc;	/* this insn's marker address */
	uint32_t index;		/* instruction index in the TB */
	uint32_t reserved;
};

struct rmap_flush {
	uint64_t monotonic_ns;
};

_Static_assert(sizeof(struct rmap_file_header) == 32, "file header");
_Static_assert(sizeof(struct rmap_rec_header) == 16, "record header");
_Static_assert(sizeof(struct rmap_tb) == 40, "rmap_tb");
_Static_assert(sizeof(struct rmap_insn) == 24, "rmap_insn");
_Static_assert(sizeof(struct rmap_flush) == 8, "rmap_flush");

#endif
