/* SPDX-License-Identifier: GPL-2.0-or-later */
/* rmap_arch_test's x86_64 cases: every way to write CR3 from a GPR, and
 * neighbours that must not count (reads of CR3, writes of other control
 * registers, moves between GPRs).  objdump's listing is the expectation. */
	.text
	.irp r, rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15
	mov %\r, %cr3
	.endr
	mov %cr3, %rax
	mov %cr3, %r9
	mov %rax, %cr0
	mov %rdi, %cr4
	mov %r8, %cr8
	mov %rax, %rbx
	mov %rax, %dr3
	nop
	ret
