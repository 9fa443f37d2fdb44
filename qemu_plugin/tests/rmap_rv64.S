/* SPDX-License-Identifier: GPL-2.0-or-later */
/* rmap_arch_test's riscv64 cases: csrw satp from every register (x0 is
 * none), csrrw with a destination, and neighbours that write satp with
 * no register holding the whole value (csrrs, csrrc, the immediate
 * forms), that only read it, or that write another CSR (vsatp, sscratch,
 * hgatp), among compressed instructions.  objdump's listing (no aliases)
 * is the expectation. */
	.option norvc
	.text
	.irp r, zero, ra, sp, gp, tp, t0, t1, t2, s0, s1, a0, a1, a2, a3, a4, a5, a6, a7, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, t3, t4, t5, t6
	csrw satp, \r
	.endr
	csrrw a1, satp, a0
	csrrw t0, satp, t6
	csrs satp, a0
	csrc satp, a0
	csrrs a0, satp, zero
	csrr a0, satp
	csrwi satp, 0
	csrrwi a0, satp, 5
	csrsi satp, 1
	csrw vsatp, a0
	csrw sscratch, a0
	csrw hgatp, a0
	sfence.vma
	sfence.vma zero, a0
	.option rvc
	c.mv a0, a1
	c.lwsp a0, 8(sp)
	c.jr ra
	add a0, a1, a2
	ret
