/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * classify.h - per-instruction flags, computed with capstone at
 * translation time only.  No QEMU dependency (unit-tested natively).
 */
#ifndef PVPERF_CLASSIFY_H
#define PVPERF_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define X86_MAX_INSN_LEN 15

enum {
	CLS_BRANCH	= 1 << 0,	/* a retired branch (see classify.c) */
	CLS_MEM		= 1 << 1,	/* accesses data memory: may page-fault */
	CLS_BOUNDARY	= 1 << 2,	/* may fault: it may not retire */
	CLS_DOORBELL	= 1 << 3,	/* the hypercall store (pvperf_abi.h) */
	CLS_FRAME	= 1 << 4,	/* writes sp or bp (or is undecodable) */
	CLS_COND	= 1 << 5,	/* jcc, loop*, j*cxz: taken or not */
	CLS_INDIRECT	= 1 << 6,	/* jmp or call through a register or
					 * memory (not ret) */
	CLS_CR3_WRITE	= 1 << 7,	/* mov to cr3: a new address space */
};

struct cls_insn {
	uint8_t bytes[X86_MAX_INSN_LEN + 1];
	size_t len;
	uint64_t vaddr;
};

bool classify_is_doorbell(const uint8_t *bytes, size_t len);

/*
 * The taken target of a direct conditional branch in 64-bit code (jcc
 * rel8/rel32, loop*, j*cxz; branch-hint prefixes allowed), at vaddr with
 * these bytes; false for anything else (then the caller must not assume
 * a target).
 */
bool classify_cond_target(const uint8_t *bytes, size_t len, uint64_t vaddr,
			  uint64_t *target);

/* kernel: the TB runs in the kernel half (64-bit code for sure). */
void classify_tb(const struct cls_insn *insn, size_t n, bool kernel,
		 uint8_t *cls);

#endif /* PVPERF_CLASSIFY_H */
