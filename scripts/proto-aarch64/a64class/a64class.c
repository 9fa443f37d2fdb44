/* SPDX-License-Identifier: GPL-2.0-or-later */
/* PROTOTYPE: see a64class.h.  Masks from the Arm ARM's A64 encoding index. */
#include "a64class.h"

static unsigned branch_register(uint32_t w)
{
	unsigned opc = (w >> 21) & 0xf;

	switch (opc) {
	case 0x0: case 0x8:		/* br, braaz/brabz, braa/brab */
		return A64_BRANCH | A64_INDIRECT;
	case 0x1: case 0x9:		/* blr, blraaz/blrabz, blraa/blrab */
		return A64_BRANCH | A64_INDIRECT | A64_CALL;
	case 0x2:			/* ret, retaa, retab */
		return A64_BRANCH | A64_INDIRECT | A64_RETURN;
	case 0x4:			/* eret, eretaa, eretab */
		return A64_ERET;
	default:			/* drps (debug state), unallocated */
		return 0;
	}
}

/* svc, hvc, smc (opc 000, LL 01/10/11), brk (001, 00), hlt (010, 00);
 * not dcps1-3 (debug state) nor TME's tcancel. */
static int exception_generating(uint32_t w)
{
	unsigned opc = (w >> 21) & 7, ll = w & 3;

	return (opc == 0 && ll != 0) || ((opc == 1 || opc == 2) && ll == 0);
}

static unsigned branch_system(uint32_t w)
{
	if ((w & 0x7c000000) == 0x14000000)		/* b, bl */
		return A64_BRANCH | (w >> 31 ? A64_CALL : 0);
	if ((w & 0x7e000000) == 0x34000000 ||		/* cbz, cbnz */
	    (w & 0x7e000000) == 0x36000000 ||		/* tbz, tbnz */
	    (w & 0xff000000) == 0x54000000)		/* b.cond, bc.cond */
		return A64_BRANCH | A64_COND;
	if ((w & 0xfe000000) == 0xd6000000)
		return branch_register(w);
	if ((w & 0xff00001c) == 0xd4000000 && exception_generating(w))
		return A64_EXCEPTION;
	if ((w & 0xffffffe0) == 0xd50b7420)		/* dc zva, xt: writes a block */
		return A64_STORE;
	return 0;
}

/* Load/store exclusive, ordered, and (v8.1) compare-and-swap. */
static unsigned exclusive_ordered(uint32_t w)
{
	unsigned o2 = (w >> 23) & 1, l = (w >> 22) & 1, o1 = (w >> 21) & 1;
	unsigned o0 = (w >> 15) & 1;

	if (o2 == 1 && o1 == 1)			/* cas, casa, casl, casal (b/h/w/x) */
		return A64_LOAD | A64_STORE | A64_ATOMIC;
	if (o2 == 0 && o1 == 1 && !(w >> 31))	/* casp family (size 0x) */
		return A64_LOAD | A64_STORE | A64_ATOMIC | A64_PAIR;
	if (o2 == 1)				/* ldar/stlr, ldlar/stllr */
		return l ? A64_LOAD : A64_STORE;
	(void)o0;				/* ldxr/ldaxr/stxr/stlxr, ldxp/stxp (o1) */
	return (l ? A64_LOAD : A64_STORE) | A64_EXCLUSIVE | (o1 ? A64_PAIR : 0);
}

/* Load/store register forms with bits 29:27 = 111 (and 24 or not). */
static unsigned register_forms(uint32_t w)
{
	unsigned size = w >> 30, v = (w >> 26) & 1, opc = (w >> 22) & 3;
	unsigned simd = v ? A64_SIMD : 0;

	if (!(w & (1u << 24)) && (w & (1u << 21)) && ((w >> 10) & 3) == 0 && !v) {
		/* atomic memory operations: ldadd.. ldset.., swp, ldapr */
		if (((w >> 12) & 0xf) == 0xc && ((w >> 15) & 1) == 1)
			return A64_LOAD;		/* ldapr, ldaprb, ldaprh */
		return A64_LOAD | A64_STORE | A64_ATOMIC;
	}
	if (!(w & (1u << 24)) && (w & (1u << 21)) && ((w >> 10) & 1) == 1 && !v &&
	    size == 3 && (opc == 0 || opc == 1))
		return A64_LOAD;			/* ldraa, ldrab (PAC) */
	if (v)
		return simd | ((opc & 1) ? A64_LOAD : A64_STORE);
	if (opc == 0)
		return A64_STORE;
	if (size == 3 && opc == 2)
		return A64_PREFETCH;			/* prfm, prfum */
	return A64_LOAD;				/* ldr*, ldrs* */
}

static unsigned load_store(uint32_t w)
{
	unsigned l = (w >> 22) & 1;

	if ((w & 0xbe000000) == 0x0c000000)		/* ld1-4/st1-4, ld1r... */
		return A64_SIMD | (l ? A64_LOAD : A64_STORE);
	if ((w & 0x3f000000) == 0x08000000)
		return exclusive_ordered(w);
	if ((w & 0x3f200c00) == 0x19000000)		/* ldapur/stlur (RCpc2) */
		return ((w >> 22) & 3) ? A64_LOAD : A64_STORE;
	if ((w & 0x3b000000) == 0x18000000)		/* ldr (literal), prfm literal */
		return (w >> 30) == 3 && !((w >> 26) & 1) ? A64_PREFETCH :
		       A64_LOAD | (((w >> 26) & 1) ? A64_SIMD : 0);
	if ((w & 0x38000000) == 0x28000000)		/* ldp/stp/ldnp/stnp/ldpsw */
		return A64_PAIR | (((w >> 26) & 1) ? A64_SIMD : 0) |
		       (l ? A64_LOAD : A64_STORE);
	if ((w & 0xff200000) == 0xd9200000)		/* MTE: ldg ldgm / stg st2g stzg.. */
		return ((w >> 10) & 3) == 0 && ((w >> 22) & 1) ? A64_LOAD : A64_STORE;
	if ((w & 0x38000000) == 0x38000000)
		return register_forms(w);
	return 0;	/* memcpy/memset (FEAT_MOPS): not on neoverse-n1 */
}

/*
 * SVE memory (op0 = 0010, bit 31 set): bits 31:29 = 100, 101, 110 loads
 * (and SVE prefetches, not told apart here), 111 stores.  Only `-cpu max`
 * has SVE; neoverse-n1 never executes these.
 */
static unsigned sve_memory(uint32_t w)
{
	if (!(w >> 31))
		return 0;				/* SVE data processing */
	return ((w >> 29) & 7) == 7 ? A64_STORE | A64_SIMD : A64_LOAD | A64_SIMD;
}

unsigned a64_classify(uint32_t w)
{
	unsigned op0 = (w >> 25) & 0xf;

	if ((op0 & 0xe) == 0xa)				/* 101x */
		return branch_system(w);
	if ((op0 & 0x5) == 0x4)				/* x1x0 */
		return load_store(w);
	if (op0 == 0x2)					/* 0010: SVE */
		return sve_memory(w);
	return 0;
}
