// PROTOTYPE: arm64 instructions whose capstone 4 classification matters to
// the plugin's instruction classes (branches, loads, stores).
	.arch armv8.2-a+lse+sve+rcpc
	.text
1:	b	1b
	b.ne	1b
	cbz	x0, 1b
	cbnz	w1, 1b
	tbz	x2, #3, 1b
	tbnz	w3, #31, 1b
	bl	1b
	blr	x4
	br	x5
	ret
	ret	x6
	eret
	svc	#0
	hvc	#0
	brk	#0
	ldr	x0, [x1]
	ldr	w0, [x1, #8]!
	ldrb	w0, [x1], #1
	ldr	x0, 1b
	ldur	x0, [x1, #-8]
	ldrsw	x0, [x1, x2, lsl #2]
	str	x0, [x1]
	stur	w16, [x17]
	str	w16, [x17]
	strb	wzr, [x1, #3]
	ldp	x29, x30, [sp], #16
	stp	x29, x30, [sp, #-16]!
	ldnp	q0, q1, [x1]
	stnp	x2, x3, [x1]
	ldxr	x0, [x1]
	stxr	w2, x0, [x1]
	ldaxr	w0, [x1]
	stlxr	w2, w0, [x1]
	ldar	x0, [x1]
	stlr	x0, [x1]
	ldapr	x0, [x1]
	ldadd	x0, x1, [x2]
	swp	x0, x1, [x2]
	cas	x0, x1, [x2]
	casp	x0, x1, x2, x3, [x4]
	ld1	{v0.16b}, [x1]
	st1	{v0.16b, v1.16b}, [x1], #32
	ld4	{v0.4s-v3.4s}, [x1]
	ldr	q0, [x1]
	str	d0, [x1]
	prfm	pldl1keep, [x1]
	dc	zva, x1
	ldr	z0, [x1]
	ld1d	{z0.d}, p0/z, [x1]
	sttr	w0, [x1]
	ldtr	w0, [x1]
	adr	x0, 1b
	add	x0, x1, x2
	nop
	hint	#0x6f
	csel	x0, x1, x2, eq
