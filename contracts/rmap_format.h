/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap_format.h - the record file written by pvperf-rmap.so (rmap.c) and
 * read by pyhost/profile/rmap.py, defined once.  That module mirrors these
 * layouts with struct formats and asserts their sizes; tests/unit/profile/test_rmap.py
 * parses this header and compares.
 *
 * The file is one half of the reverse map.  The other half is QEMU's own
 * jitdump (qemu-system-ARCH -jitdump, tcg/perf.c): a timestamped
 * JIT_CODE_LOAD record per TB with its host code address and size, its
 * guest vaddr (the name "guest-0x...") and the thread that translated it.
 * This file adds what the jitdump lacks, per TB at translation time: the
 * guest instruction sizes and bytes, kernel/user and the page-table base
 * live on the translating vCPU; and at run time the address-space timeline
 * (every guest write of the user page-table base, per vCPU, with the task
 * it switches to).
 *
 * Index spaces: a "guestpc" is a guest virtual address; a
 * "page_table_base" the guest physical address of the top-level page
 * table that names a user address space, with the architecture's tag and
 * flag bits masked (the plugin's arch file says which register and bits:
 * x86_64 CR3 bits 12..51, without PCID; aarch64 TTBR0_EL1 bits 12..47,
 * without the ASID and CnP); a "vcpu" QEMU's cpu_index; a "tid" a host
 * thread id (gettid(), what the jitdump's JIT_CODE_LOAD.tid and host perf
 * samples carry); a "tgid" a guest process id.
 *
 * File: one struct rmap_file_header, then records.  Every record starts
 * with struct rmap_rec_header; `size` is the whole record in bytes, a
 * multiple of 8, so a reader can skip unknown types.  `monotonic_ns` is
 * host CLOCK_MONOTONIC, the clock of the jitdump (QEMU's get_clock()) and
 * of `perf record -k mono`.  Little-endian (the host's order; every guest
 * pvperf knows is little-endian too).  Records of one
 * host thread appear in time order; threads interleave.  A file cut short
 * (QEMU killed) ends in the middle of a record: readers stop at the last
 * whole one.
 *
 * RMAP_REC_TB, once per translation (tb_trans; QEMU may translate a block
 *   again after a flush, an invalidation, or a retry in tb_gen_code):
 *   header, struct rmap_tb, then u8 insn_size[n_insns], then the guest
 *   code bytes[n_bytes] (insn i starts at guestpc + sum(size[0..i-1])),
 *   zero-padded to 8.  `tid` is the translating thread.
 * RMAP_REC_FLUSH, at every code-cache flush (tb_flush, after the code
 *   buffer was reset): no body.  Code-cache addresses may be reused after.
 * RMAP_REC_VCPU, at each vCPU's init, on its own thread: its vcpu and tid.
 * RMAP_REC_ASPACE, before each executed write of the page-table base in
 *   kernel code (x86_64 `mov %reg,%cr3`, aarch64 `msr ttbr0_el1, xN`):
 *   the base written, the vCPU, and (with the plugin's task= option) the
 *   tgid and comm of the task the CPU switches to, or RMAP_NO_PID.
 * RMAP_REC_COUNTS, at exit with the counts=on option (file flag
 *   RMAP_FILE_COUNTS): header, struct rmap_counts, then u64
 *   executions[n_tbs]: how many times the TB records first_tb ..
 *   first_tb + n_tbs - 1 (0-based, in file order of RMAP_REC_TB) ran,
 *   summed over vCPUs; counted at each TB's start (a TB left in its
 *   middle by a fault counts whole).  Records cover the TB records in
 *   order; a TB record without a count (file cut short) ran unknown times.
 */
#ifndef PVPERF_RMAP_FORMAT_H
#define PVPERF_RMAP_FORMAT_H

#include <stdint.h>

#define RMAP_MAGIC		"PVRMAP\0\0"
#define RMAP_VERSION		3

#define RMAP_REC_TB		1
#define RMAP_REC_FLUSH		2
#define RMAP_REC_VCPU		3
#define RMAP_REC_ASPACE		4
#define RMAP_REC_COUNTS		5

/* rmap_file_header.flags */
#define RMAP_FILE_TASKS		0x1	/* ASPACE records name tasks (task=) */
#define RMAP_FILE_COUNTS	0x2	/* COUNTS records at exit (counts=on) */

/* rmap_tb.flags */
#define RMAP_TB_KERNEL		0x1	/* guestpc in the kernel half */
#define RMAP_TB_BASE_VALID	0x2	/* page_table_base was read */

#define RMAP_NO_PID		UINT32_MAX
#define RMAP_COMM_LEN		16	/* the kernel's TASK_COMM_LEN */

struct rmap_file_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;	/* sizeof(struct rmap_file_header) */
	uint32_t flags;		/* RMAP_FILE_* */
	uint32_t max_vcpus;
	uint64_t reserved;	/* 0 */
};

struct rmap_rec_header {
	uint16_t type;		/* RMAP_REC_* */
	uint16_t reserved;
	uint32_t size;		/* whole record, bytes, multiple of 8 */
	uint64_t monotonic_ns;	/* host CLOCK_MONOTONIC */
};

struct rmap_tb {
	uint64_t guestpc;	/* vaddr of the first instruction */
	uint64_t page_table_base;	/* of the translating vCPU */
	uint32_t tid;		/* host thread that translated */
	uint32_t n_insns;
	uint32_t n_bytes;
	uint32_t flags;		/* RMAP_TB_* */
};

struct rmap_vcpu {
	uint32_t vcpu;
	uint32_t tid;
};

struct rmap_aspace {
	uint64_t page_table_base;	/* the masked value written */
	uint64_t guestpc;	/* of the writing instruction */
	uint32_t vcpu;
	uint32_t tgid;		/* RMAP_NO_PID: unknown */
	char comm[RMAP_COMM_LEN];	/* NUL-padded; empty if unknown */
};

struct rmap_counts {
	uint64_t first_tb;	/* index of the first TB record counted */
	uint32_t n_tbs;
	uint32_t reserved;	/* 0 */
};

_Static_assert(sizeof(struct rmap_file_header) == 32, "file header");
_Static_assert(sizeof(struct rmap_rec_header) == 16, "record header");
_Static_assert(sizeof(struct rmap_tb) == 32, "rmap_tb");
_Static_assert(sizeof(struct rmap_vcpu) == 8, "rmap_vcpu");
_Static_assert(sizeof(struct rmap_aspace) == 40, "rmap_aspace");
_Static_assert(sizeof(struct rmap_counts) == 16, "rmap_counts");

#endif
