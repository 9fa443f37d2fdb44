/* SPDX-License-Identifier: GPL-2.0-or-later */
/* rmap_arch_test's aarch64 cases: msr ttbr0_el1 from every Xt, and
 * neighbours that must not count (xzr, TTBR1_EL1, TTBR0_EL2, reads, other
 * system registers).  objdump's listing is the expectation. */
	.text
	.irp r, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30
	msr ttbr0_el1, x\r
	.endr
	msr ttbr0_el1, xzr
	msr ttbr1_el1, x1
	msr ttbr0_el2, x1
	mrs x1, ttbr0_el1
	msr sp_el0, x1
	msr tcr_el1, x2
	add x0, x1, x2
	ret
