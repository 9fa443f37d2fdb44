/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PROTOTYPE (groundwork for the plugin's arm64 arch file; may be
 * rewritten): instruction classes of an A64 instruction word from its
 * encoding alone (Arm ARM, "A64 instruction set encoding": op0 = bits
 * 28:25).  capstone 4 cannot decode LSE atomics, LDAPR or SVE and puts
 * bl/blr outside CS_GRP_CALL, so the plugin should not depend on it.
 */
#ifndef A64CLASS_H
#define A64CLASS_H

#include <stdint.h>

enum a64_class {
	A64_BRANCH	= 1 << 0,	/* any branch: b bl b.cond cbz cbnz tbz tbnz br blr ret (+PAC forms) */
	A64_COND	= 1 << 1,	/* b.cond cbz cbnz tbz tbnz */
	A64_CALL	= 1 << 2,	/* bl blr blraa... (writes x30) */
	A64_RETURN	= 1 << 3,	/* ret retaa retab */
	A64_INDIRECT	= 1 << 4,	/* br blr ret and their PAC forms */
	A64_LOAD	= 1 << 5,	/* reads memory (atomics: LOAD|STORE) */
	A64_STORE	= 1 << 6,	/* writes memory (dc zva included) */
	A64_EXCLUSIVE	= 1 << 7,	/* ldxr/stxr/ldaxr/stlxr/ldxp/stxp... */
	A64_ATOMIC	= 1 << 8,	/* LSE: ldadd.. swp cas casp */
	A64_PAIR	= 1 << 9,	/* ldp stp ldnp stnp ldpsw */
	A64_SIMD	= 1 << 10,	/* FP/SIMD register load/store (V bit) or ld1..st4 */
	A64_PREFETCH	= 1 << 11,	/* prfm/prfum: no data access retired */
	A64_ERET	= 1 << 12,	/* eret (an exception return, not BR_RETIRED here) */
	A64_EXCEPTION	= 1 << 13,	/* svc hvc smc brk hlt */
};

unsigned a64_classify(uint32_t insn);

#endif
