/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvtest.S - a freestanding x86_64 test guest for the pvperf plugin, so the
 * plugin can be proven without the guest driver.  Multiboot (a.out kludge)
 * so that `qemu-system-x86_64 -kernel pvtest.bin` starts it in 32-bit
 * protected mode; it sets up long mode with the same 1 GiB identity-mapped
 * at 0 (user-accessible) and at KBASE (kernel only), runs its kernel code
 * from the kernel half (so markers are live) and its user code from the
 * low half, in ring 3.
 *
 * Every hypercall is the HCALL macro: fill this CPU's block (%r15), ring
 * the marker, read ->ret.  Marks are PVPERF_OP_READ hypercalls with
 * args[0] = mark number; the test service records the counter snapshot of
 * each and tests/plugin/test_plugin.py checks the differences between marks
 * against counts of the instructions in between, taken from the ELF with
 * objdump (global r_* labels delimit the regions; n_* give loop counts).
 *
 *   BSP: PROBE; mark 1; loop A; mark 2; loop B (an instruction straddles
 *        a page end: QEMU 7.2's phantom insn); mark 3; iretq to ring 3:
 *        loop C, P page faults on stores, a fault on `call *(%rdi)`, a
 *        fault on the stack push of a call, an instruction-fetch fault,
 *        a user-mode marker (must be ignored), int $0x80 -> mark 4;
 *        [wait for the AP]; mark 5 (service turns counting off); loop D;
 *        mark 6 (on again); mark 7; loop E; mark 8; exit via isa-debug-exit
 *        with a code made from the PROBE and mark-1 return values.
 *   AP (only with "smp2" on the command line): mark 101; loop; mark 102.
 *   The #PF handler maps the page and reports PVPERF_OP_FAULT unless the
 *   fault was an instruction fetch (error code bit 4; EFER.NXE is on so
 *   QEMU sets it).
 *
 * Build with -DBENCH for the overhead benchmark: a long CPU-bound loop in
 * the kernel half, then exit; no hypercalls.
 */
#include "abi-consts.h"

#define KBASE		0xffff800000000000
#define LOAD_ADDR	0x100000
#define TRAMP		0x8000		/* AP start-up code (SIPI vector 8) */
#define FAULT_BASE	0x400000	/* user 4 KiB pages, start not present */
#define RET_SENTINEL	-1234		/* ->ret before a hypercall */
#define ENODEV		19
#define ETIMEDOUT	110

#define SEL_KCODE	0x08
#define SEL_KDATA	0x10
#define SEL_UDATA	0x1b		/* 0x18 | RPL 3 */
#define SEL_UCODE	0x23		/* 0x20 | RPL 3 */
#define SEL_TSS		0x28
#define SEL_CODE32	0x38

#ifndef N_A
#define N_A 1000
#endif
#ifndef N_B
#define N_B 100
#endif
#ifndef N_C
#define N_C 1000
#endif
#ifndef N_P
#define N_P 8
#endif
#ifndef N_E
#define N_E 500
#endif
#ifndef N_AP
#define N_AP 700
#endif
#ifndef BENCH_ITERS
#define BENCH_ITERS 400000000
#endif

	/* Loop counts and layout, for the test (nm shows them). */
	.globl n_loopA, n_loopB, n_loopC, n_loopF, n_loopD, n_loopE, n_loopAP
	.globl fault_base, kbase_hi
	.set n_loopA, N_A
	.set n_loopB, N_B
	.set n_loopC, N_C
	.set n_loopF, N_P
	.set n_loopD, N_A
	.set n_loopE, N_E
	.set n_loopAP, N_AP
	.set fault_base, FAULT_BASE
	.set kbase_hi, KBASE >> 32

/* One hypercall on this CPU's block (%r15); \post labels the insn after
 * the marker; ->ret ends up in %rax. */
.macro HCALL op, a0, a1, post
	movl	$PVPERF_HC_PERF_OP, HCALL_NR(%r15)
	movl	$\op, HCALL_OP(%r15)
	movq	\a0, HCALL_ARG0(%r15)
	movq	\a1, HCALL_ARG1(%r15)
	movq	$RET_SENTINEL, HCALL_RET(%r15)
	movq	%r15, %rax
	movl	$PVPERF_MARKER_MAGIC, (%rax)
	.globl	\post
\post:
	movq	HCALL_RET(%r15), %rax
.endm

/* Counted loop over %ecx iterations; loads and stores at (%rsi). */
.macro LOOP name
	.globl	\name, \name\()_end
\name:
	movq	(%rsi), %rbx
	addq	%rcx, %rbx
	movq	%rbx, 8(%rsi)
	decl	%ecx
	jnz	\name
\name\()_end:
.endm

/* ------------------------------------------------------------------ */
	.section .multiboot, "a"
	.balign 4
mb_header:
	.long	0x1badb002			/* multiboot 1 magic */
	.long	0x00010000			/* flags: addresses below valid */
	.long	-(0x1badb002 + 0x00010000)
	.long	mb_header			/* header_addr */
	.long	LOAD_ADDR			/* load_addr */
	.long	_load_end			/* load_end_addr */
	.long	_bss_end			/* bss_end_addr */
	.long	_start				/* entry_addr */

/* ------------------------------------------------------------------ */
	.text
	.code32
	.globl _start
_start:
	cli
	movl	$boot_stack_top, %esp
	movl	%ebx, mbi_ptr
	call	build_page_tables
	call	find_smp2
	testl	%eax, %eax
	jz	1f
	movb	$1, smp2_flag
	call	start_ap
1:	lgdt	gdtr
	call	enter_paging
	ljmp	$SEL_KCODE, $entry64_low

/* 512 x 2 MiB pages for the kernel half (pd_k) and the user half (pd_u);
 * pd_u[2] (4..6 MiB) is a page table whose pages start not present. */
build_page_tables:
	movl	$(pdpt_u + 7), pml4
	movl	$(pdpt_k + 3), pml4 + 256 * 8
	movl	$(pd_u + 7), pdpt_u
	movl	$(pd_k + 3), pdpt_k
	xorl	%ecx, %ecx
1:	movl	%ecx, %eax
	shll	$21, %eax
	orl	$0x83, %eax			/* P | W | PS */
	movl	%eax, pd_k(, %ecx, 8)
	orl	$0x04, %eax			/* | U */
	movl	%eax, pd_u(, %ecx, 8)
	incl	%ecx
	cmpl	$512, %ecx
	jne	1b
	movl	$(pt_u + 7), pd_u + 2 * 8
	ret

/* eax = 1 if the multiboot command line contains "smp2". */
find_smp2:
	xorl	%eax, %eax
	movl	mbi_ptr, %esi
	testl	$4, (%esi)			/* MULTIBOOT_INFO_CMDLINE */
	jz	2f
	movl	16(%esi), %esi
1:	cmpb	$0, (%esi)
	je	2f
	cmpl	$0x32706d73, (%esi)		/* "smp2" */
	je	3f
	incl	%esi
	jmp	1b
3:	movl	$1, %eax
2:	ret

/* Copy the trampoline below 1 MiB and INIT-SIPI APIC id 1. */
start_ap:
	movl	$tramp_start, %esi
	movl	$TRAMP, %edi
	movl	$(tramp_end - tramp_start), %ecx
	rep movsb
	orl	$0x100, 0xfee000f0		/* APIC software enable */
	movl	$(1 << 24), 0xfee00310
	movl	$0x00004500, 0xfee00300		/* INIT */
	movl	$(1 << 24), 0xfee00310
	movl	$(0x00004600 | (TRAMP >> 12)), 0xfee00300	/* SIPI */
	ret

/* PAE, our page tables, EFER.LME|NXE, paging on: compatibility mode. */
enter_paging:
	movl	%cr4, %eax
	orl	$0x20, %eax
	movl	%eax, %cr4
	movl	$pml4, %eax
	movl	%eax, %cr3
	movl	$0xc0000080, %ecx
	rdmsr
	orl	$0x900, %eax
	wrmsr
	movl	%cr0, %eax
	orl	$0x80000001, %eax
	movl	%eax, %cr0
	ret

/* The AP starts here in real mode, copied to TRAMP, CS = TRAMP >> 4. */
	.code16
tramp_start:
	cli
	movw	%cs, %ax
	movw	%ax, %ds
	lgdtl	tramp_gdtr - tramp_start
	movl	%cr0, %eax
	orl	$1, %eax
	movl	%eax, %cr0
	ljmpl	$SEL_CODE32, $(TRAMP + tramp32 - tramp_start)
	.code32
tramp32:
	movw	$SEL_KDATA, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movw	%ax, %ss
	movl	$ap_boot_stack_top, %esp
	movl	$enter_paging, %eax		/* absolute: we run at TRAMP */
	call	*%eax
	ljmp	$SEL_KCODE, $ap_entry64_low
	.balign 8
tramp_gdtr:
	.word	gdt_end - gdt - 1
	.long	gdt
tramp_end:

/* ------------------------------------------------------------------ */
	.code64
entry64_low:
	movabsq	$(entry64 + KBASE), %rax
	jmp	*%rax

ap_entry64_low:
	movabsq	$(ap_entry64 + KBASE), %rax
	jmp	*%rax

load_segments:
	movw	$SEL_KDATA, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movw	%ax, %ss
	xorl	%eax, %eax
	movw	%ax, %fs
	movw	%ax, %gs
	ret

/* Kernel half from here on. */
entry64:
	leaq	stack0_top(%rip), %rsp
	call	load_segments
	leaq	hblock0(%rip), %r15
	call	setup_idt
	call	setup_tss
#ifdef BENCH
	jmp	bench
#endif
	HCALL	PVPERF_OP_PROBE, $0, $0, r_probe_post
	movq	%rax, probe_ret(%rip)
	jmp	1f				/* a new TB after the mode switch */
1:	movb	$1, go_flag(%rip)		/* release the AP */
	jmp	2f
2:	leaq	scratch0(%rip), %rsi
	HCALL	PVPERF_OP_READ, $1, $0, r_m1_post
	movq	%rax, m1_ret(%rip)
	movl	$N_A, %ecx
	LOOP	r_loopA
	HCALL	PVPERF_OP_READ, $2, $0, r_m2_post
	movl	$N_B, %ecx
	jmp	r_loopB
	.globl	r_m2_jmp_end
r_m2_jmp_end:

/* loop B starts 24 bytes before a page end: five insns (19 bytes), then
 * a 10-byte movabs straddling the page end, dec, jnz.  QEMU ends the
 * first TB before the movabs but still shows it to the plugin. */
	.balign	4096
	.skip	4096 - 24
	.globl	r_loopB, r_loopB_end, r_loopB_straddle
r_loopB:
	addq	$1, %rdx
	movq	%rdx, (%rsi)
	addq	$1, %rdx
	addq	$1, %rdx
	addq	$1, %rdx
r_loopB_straddle:
	movabsq	$0x1122334455667788, %rax
	decl	%ecx
	jnz	r_loopB
r_loopB_end:
	HCALL	PVPERF_OP_READ, $3, $0, r_m3_post
	call	prepare_fault_pages
	pushq	$SEL_UDATA
	pushq	$user_stack_top			/* low half */
	pushq	$0x2				/* RFLAGS: IF = 0 */
	pushq	$SEL_UCODE
	pushq	$user_entry			/* low half */
	.globl	r_iret, r_iret_end
r_iret:
	iretq
r_iret_end:

/* Page N_P holds a pointer to user_fn (for `call *(%rdi)`), page N_P+2 a
 * `ret` (the instruction-fetch fault); written through the kernel half. */
	.globl	prepare_fault_pages
prepare_fault_pages:
	movabsq	$(KBASE + FAULT_BASE + N_P * 4096), %rax
	movq	$user_fn, (%rax)
	movabsq	$(KBASE + FAULT_BASE + (N_P + 2) * 4096), %rax
	movb	$0xc3, (%rax)
	ret

	.globl	int80_entry
int80_entry:
	movq	user_block + HCALL_RET(%rip), %rdx
	HCALL	PVPERF_OP_READ, $4, %rdx, r_m4_post
	cmpb	$0, smp2_flag(%rip)
	je	2f
1:	cmpb	$0, ap_done(%rip)
	je	1b
2:	HCALL	PVPERF_OP_READ, $5, $0, r_m5_post
	leaq	scratch0(%rip), %rsi
	movl	$N_A, %ecx
	LOOP	r_loopD
	HCALL	PVPERF_OP_READ, $6, $0, r_m6_post
	jmp	r_m6_jmp_end
	.globl	r_m6_jmp_end
r_m6_jmp_end:
	HCALL	PVPERF_OP_READ, $7, $0, r_m7_post
	movl	$N_E, %ecx
	LOOP	r_loopE
	HCALL	PVPERF_OP_READ, $8, $0, r_m8_post
	movq	probe_ret(%rip), %rdi
	call	ret_code
	movl	%eax, %ebx
	movq	m1_ret(%rip), %rdi
	call	ret_code
	shll	$3, %eax
	orl	%ebx, %eax
	jmp	exit_qemu

/* eax = 0, 1 (PROBE's answer, the ABI version), 2 (-ENODEV), 3 (-ETIMEDOUT)
 * or 4 (other) for ret in rdi. */
ret_code:
	movl	$0, %eax
	cmpq	$0, %rdi
	je	1f
	movl	$1, %eax
	cmpq	$PVPERF_ABI_VERSION, %rdi
	je	1f
	movl	$2, %eax
	cmpq	$-ENODEV, %rdi
	je	1f
	movl	$3, %eax
	cmpq	$-ETIMEDOUT, %rdi
	je	1f
	movl	$4, %eax
1:	ret

/* isa-debug-exit at 0xf4: QEMU exits with status (eax << 1) | 1. */
exit_qemu:
	outl	%eax, $0xf4
1:	cli
	hlt
	jmp	1b

/* #PF: map the page, report the fault unless it was an insn fetch. */
	.globl	pf_entry, r_pf_report, r_pf_tail, r_pf_end
pf_entry:
	pushq	%rax
	pushq	%rcx
	pushq	%rdx
	pushq	%rdi				/* error code at 32(%rsp) */
	movq	%cr2, %rdi
	movq	%rdi, %rcx
	subq	$FAULT_BASE, %rcx
	shrq	$12, %rcx
	andq	$-4096, %rdi
	movq	%rdi, %rdx
	orq	$7, %rdx
	leaq	pt_u(%rip), %rax
	movq	%rdx, (%rax, %rcx, 8)
	invlpg	(%rdi)
	testb	$0x10, 32(%rsp)			/* X86_PF_INSTR */
	jnz	r_pf_tail
r_pf_report:
	movq	40(%rsp), %rdx			/* fault ip */
	movq	48(%rsp), %rcx			/* cs */
	andl	$3, %ecx
	setnz	%cl
	movzbl	%cl, %ecx			/* PVPERF_MODE_USER if ring 3 */
	HCALL	PVPERF_OP_FAULT, %rdx, %rcx, r_pf_post
r_pf_tail:
	popq	%rdi
	popq	%rdx
	popq	%rcx
	popq	%rax
	addq	$8, %rsp
	iretq
r_pf_end:

/* Any other exception: print vector, two stack words, cr2; exit 0x40+v. */
	.balign	16
exc_stubs:
	.irp	v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
	.balign	16
	pushq	$\v
	jmp	exc_common
	.endr

exc_common:
	popq	%rbx
	movq	%rbx, %rdi
	call	print_hex
	movq	(%rsp), %rdi
	call	print_hex
	movq	8(%rsp), %rdi
	call	print_hex
	movq	%cr2, %rdi
	call	print_hex
	leal	0x40(%rbx), %eax
	jmp	exit_qemu

/* rdi as 16 hex digits and a newline on the debug console (0xe9). */
print_hex:
	movl	$16, %ecx
1:	rolq	$4, %rdi
	movl	%edi, %eax
	andl	$15, %eax
	addb	$'0', %al
	cmpb	$'9', %al
	jbe	2f
	addb	$('a' - '0' - 10), %al
2:	outb	%al, $0xe9
	decl	%ecx
	jnz	1b
	movb	$'\n', %al
	outb	%al, $0xe9
	ret

/* set_gate(vector = rdi, handler = rsi, type = dl) */
set_gate:
	leaq	idt(%rip), %rax
	shlq	$4, %rdi
	addq	%rdi, %rax
	movw	%si, (%rax)
	movw	$SEL_KCODE, 2(%rax)
	movb	$0, 4(%rax)
	movb	%dl, 5(%rax)
	movq	%rsi, %rcx
	shrq	$16, %rcx
	movw	%cx, 6(%rax)
	shrq	$16, %rcx
	movl	%ecx, 8(%rax)
	movl	$0, 12(%rax)
	ret

setup_idt:
	xorl	%ebx, %ebx
1:	movq	%rbx, %rsi
	shlq	$4, %rsi
	leaq	exc_stubs(%rip), %rax
	addq	%rax, %rsi
	movq	%rbx, %rdi
	movl	$0x8e, %edx			/* interrupt gate, DPL 0 */
	call	set_gate
	incl	%ebx
	cmpl	$32, %ebx
	jne	1b
	movl	$14, %edi
	leaq	pf_entry(%rip), %rsi
	movl	$0x8e, %edx
	call	set_gate
	movl	$0x80, %edi
	leaq	int80_entry(%rip), %rsi
	movl	$0xee, %edx			/* DPL 3: int $0x80 from ring 3 */
	call	set_gate
	leaq	idt(%rip), %rax
	movq	%rax, idtr + 2(%rip)
	movw	$4095, idtr(%rip)
	lidt	idtr(%rip)
	ret

/* 64-bit TSS: rsp0 for ring 3 -> 0; its descriptor in gdt at SEL_TSS. */
setup_tss:
	leaq	stack0_top(%rip), %rax
	movq	%rax, tss + 4(%rip)
	movw	$104, tss + 102(%rip)
	leaq	tss(%rip), %rax
	movw	$103, gdt + SEL_TSS(%rip)
	movw	%ax, gdt + SEL_TSS + 2(%rip)
	shrq	$16, %rax
	movb	%al, gdt + SEL_TSS + 4(%rip)
	movb	$0x89, gdt + SEL_TSS + 5(%rip)
	movb	$0, gdt + SEL_TSS + 6(%rip)
	movb	%ah, gdt + SEL_TSS + 7(%rip)
	shrq	$16, %rax
	movl	%eax, gdt + SEL_TSS + 8(%rip)
	movl	$0, gdt + SEL_TSS + 12(%rip)
	movw	$SEL_TSS, %ax
	ltr	%ax
	ret

/* The AP: its own block and stack; runs its marks once released. */
ap_entry64:
	leaq	ap_stack_top(%rip), %rsp
	call	load_segments
	lidt	idtr(%rip)
	leaq	hblock1(%rip), %r15
	leaq	scratch1(%rip), %rsi
1:	cmpb	$0, go_flag(%rip)
	je	1b
	HCALL	PVPERF_OP_READ, $101, $0, r_ap1_post
	movl	$N_AP, %ecx
	LOOP	r_loopAP
	HCALL	PVPERF_OP_READ, $102, $0, r_ap2_post
	movb	$1, ap_done(%rip)
2:	cli
	hlt
	jmp	2b

#ifdef BENCH
/* CPU-bound: loads, stores, ALU, a call and a ret per iteration. */
bench:
	leaq	scratch0(%rip), %rsi
	movq	$BENCH_ITERS, %rcx
1:	movq	(%rsi), %rax
	addq	%rcx, %rax
	xorq	$0x55, %rax
	movq	%rax, 8(%rsi)
	call	bench_fn
	addq	%rax, %rdx
	decq	%rcx
	jnz	1b
	movl	$0, %eax
	jmp	exit_qemu
bench_fn:
	leaq	1(%rax), %rax
	imulq	$3, %rax, %rax
	ret
#endif

/* ------------------------------------------------------------------ */
/* User mode (ring 3), executed through the low half. */
	.globl	user_entry, r_loopC, r_loopC_end, r_loopF, r_loopF_end
	.globl	r_user_end, user_fn, user_fn_end
user_entry:
	movl	$N_C, %ecx
r_loopC:
	addq	%rcx, %rdx
	movq	%rdx, (%rsp)
	decl	%ecx
	jnz	r_loopC
r_loopC_end:
	movl	$FAULT_BASE, %edi
	movl	$N_P, %ecx
r_loopF:
	movq	%rcx, (%rdi)			/* faults once per page */
	addq	$4096, %rdi
	decl	%ecx
	jnz	r_loopF
r_loopF_end:
	call	*(%rdi)				/* page N_P: load faults */
	movq	%rsp, %rbx
	movq	$(FAULT_BASE + (N_P + 2) * 4096), %rsp
	call	user_fn				/* page N_P+1: push faults */
	movq	%rbx, %rsp
	movq	$(FAULT_BASE + (N_P + 2) * 4096), %rax
	call	*%rax				/* page N_P+2: fetch faults */
	movl	$user_block, %eax
	movl	$PVPERF_MARKER_MAGIC, (%rax)	/* user marker: ignored */
	int	$0x80
r_user_end:
user_fn:
	ret
user_fn_end:

/* ------------------------------------------------------------------ */
	.data
	.balign 16
	.globl	gdt
gdt:
	.quad	0
	.quad	0x00af9a000000ffff		/* 0x08 kernel code, 64-bit */
	.quad	0x00cf92000000ffff		/* 0x10 kernel data */
	.quad	0x00cff2000000ffff		/* 0x18 user data */
	.quad	0x00affa000000ffff		/* 0x20 user code, 64-bit */
	.quad	0, 0				/* 0x28 TSS (setup_tss) */
	.quad	0x00cf9a000000ffff		/* 0x38 code, 32-bit (AP) */
gdt_end:
	.balign 8
	.word	0, 0, 0
gdtr:
	.word	gdt_end - gdt - 1
	.quad	gdt
	.balign 8
	.word	0, 0, 0
idtr:
	.word	0
	.quad	0

	.balign 64
	.globl	hblock0, hblock1, user_block
hblock0:	.fill	HCALL_SIZE, 1, 0
hblock1:	.fill	HCALL_SIZE, 1, 0
user_block:
	.fill	HCALL_RET, 1, 0
	.quad	RET_SENTINEL
	.fill	HCALL_SIZE - HCALL_RET - 8, 1, 0

	.balign 8
mbi_ptr:	.quad 0
probe_ret:	.quad 0
m1_ret:		.quad 0
smp2_flag:	.byte 0
go_flag:	.byte 0
ap_done:	.byte 0

/* ------------------------------------------------------------------ */
	.bss
	.balign 4096
pml4:		.skip 4096
pdpt_k:		.skip 4096
pdpt_u:		.skip 4096
pd_k:		.skip 4096
pd_u:		.skip 4096
pt_u:		.skip 4096
idt:		.skip 4096
tss:		.skip 128
scratch0:	.skip 64
scratch1:	.skip 64
	.balign 16
		.skip 4096
boot_stack_top:
		.skip 4096
ap_boot_stack_top:
		.skip 8192
stack0_top:
		.skip 8192
ap_stack_top:
		.skip 8192
user_stack_top:
