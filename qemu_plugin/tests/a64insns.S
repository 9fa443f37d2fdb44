/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * a64insns.S - A64 instructions and the classes aarch64.c should give
 * them (arch.h CLS_*), for a64_classify_test.c.  Assembled with
 * aarch64-linux-gnu-as; each `insn FLAGS, instruction` (insn_classes.inc)
 * emits the instruction and its expected flags.  Each instruction is
 * classified alone, as a one-instruction kernel-half TB.
 */
	.include "insn_classes.inc"

	.text
here:
	/* data processing */
	insn 0, add x0, x1, x2
	insn 0, add x0, sp, #16
	insn F, add sp, sp, #16
	insn F, sub sp, sp, #0x40
	insn F, mov x29, sp
	insn F, mov sp, x29
	insn 0, cmp x0, #1		/* subs xzr: not sp */
	insn 0, tst x1, #0xff		/* ands xzr */
	insn F, and sp, x1, #0xfffffffffffffff0
	insn 0, adds x2, x3, x4
	insn F, movz x30, #1
	insn 0, adrp x0, here
	insn 0, adr x1, here
	insn 0, madd x0, x1, x2, x3
	insn 0, csel x0, x1, x2, eq
	insn 0, ubfx x0, x1, #4, #8
	insn 0, fadd d0, d1, d2
	insn 0, add v0.4s, v1.4s, v2.4s
	insn 0, fmov d0, x1

	/* branches */
	insn B, b here
	insn B|F, bl here
	insn B|C, b.ne here
	insn B|C, b.eq here
	insn B|C, cbz x0, here
	insn B|C, cbnz w1, here
	insn B|C, tbz x2, #63, here
	insn B|C, tbnz w3, #0, here
	insn B|I, br x16
	insn B|I|F, blr x8
	insn B, ret
	insn B, ret x5
	insn B|I, braa x1, x2
	insn B|I|F, blraaz x3
	insn B, retaa

	/* loads and stores */
	insn M|X, ldr x0, [x1]
	insn M|X, ldr w0, [x1, #4]
	insn M|X, ldrb w0, [x1, x2]
	insn M|X, ldrsh x0, [x1, #2]
	insn M|X, ldrsw x0, [x1, w2, sxtw #2]
	insn M|X, ldur x0, [x1, #-8]
	insn M|X, ldr x0, here		/* literal */
	insn M|X, str x0, [x1, #8]!
	insn M|X, str x0, [x1], #8
	insn M|X|F, str x0, [sp, #-16]!
	insn M|X|F, ldr x30, [sp], #16
	insn M|X|F, str x30, [sp, #8]	/* stores x30: over-approximated */
	insn M|X, strb w0, [x1]
	insn M|X, sturh w0, [x1, #1]
	insn M|X, ldtr x0, [x1]
	insn M|X|F, stp x29, x30, [sp, #-16]!
	insn M|X|F, ldp x29, x30, [sp], #16
	insn M|X, ldp x0, x1, [x2, #16]
	insn M|X, stp w0, w1, [x2]
	insn M|X, ldpsw x0, x1, [x2]
	insn M|X, ldnp x0, x1, [x2]
	insn M|X, stnp q0, q1, [x2]
	insn M|X, ldp q0, q1, [x2]
	insn M|X, ldp d0, d1, [x2]
	insn M|X, ldnp x0, x1, [x2]
	insn M|X, stnp w0, w1, [x2]
	insn M|X, ldr q0, [x0]
	insn M|X, str d1, [x0, #8]
	insn M|X, ldr s2, here
	insn M|X, ld1 {v0.16b}, [x0]
	insn M|X, st1 {v0.4s, v1.4s}, [x1]
	insn M|X, ld1 {v0.s}[1], [x0]
	insn M|X, ld4 {v0.8b, v1.8b, v2.8b, v3.8b}, [x0], #32
	insn M|X, ld1r {v0.4s}, [x0]
	insn M|X, ldxr x0, [x1]
	insn M|X, stxr w2, x0, [x1]
	insn M|X, ldaxr w0, [x1]
	insn M|X, stlxr w2, w0, [x1]
	insn M|X, ldxp x0, x1, [x2]
	insn M|X, stxp w3, x0, x1, [x2]
	insn M|X, ldaxp w0, w1, [x2]
	insn M|X, stlxp w3, w0, w1, [x2]
	insn M|X, ldar x0, [x1]
	insn M|X, stlr w0, [x1]
	insn M|X, ldapr x0, [x1]
	insn M|X, ldadd x0, x1, [x2]
	insn M|X, ldaddal w0, w1, [x2]
	insn M|X, stadd x0, [x2]
	insn M|X, ldclr x0, x1, [x2]
	insn M|X, ldsetl w0, w1, [x2]
	insn M|X, swp x0, x1, [x2]
	insn M|X, swpal w0, w1, [x2]
	insn M|X, cas x0, x1, [x2]
	insn M|X, casal w0, w1, [x2]
	insn M|X, casp x0, x1, x2, x3, [x4]
	insn M|X, ldraa x0, [x1]
	insn M|X, ld1d {z0.d}, p0/z, [x0]
	insn M|X, st1w {z0.s}, p0, [x0]
	insn M|X, stg x0, [x1]
	insn M|X, ldg x0, [x1]
	insn 0, prfm pldl1keep, [x0]
	insn 0, prfm pstl2strm, [x0, x1]
	insn 0, prfum pldl1keep, [x0, #1]
	insn 0, prfm pldl1keep, here

	/* system, exceptions */
	insn 0, nop
	insn 0, yield
	insn 0, bti c
	insn 0, paciasp
	insn 0, dmb ish
	insn 0, dsb sy
	insn 0, isb
	insn M|X, dc zva, x0
	insn X|F, dc civac, x0
	insn X|F, mrs x0, tpidr_el1
	insn X|F, msr tpidr_el0, x0
	insn A|X|F, msr ttbr0_el1, x0
	insn X|F, msr ttbr1_el1, x0
	insn X|F, msr daifset, #2
	insn X|F, tlbi vmalle1
	insn X|F, svc #0
	insn X|F, hvc #0
	insn X|F, brk #0x800
	insn X|F, eret
	insn X|F, udf #0

	/* the marker (pvperf_abi.h): a store, a marker in the kernel */
	insn M|X|D, stur w16, [x17]
	insn M|X, stur w16, [x18]
