/*
 * blocks.S - the x86-64 host code QEMU 10.0.2 generates for riscv64
 * hotcold's loop block (add a0,a0,a1; addi a1,a1,-1; bnez a1: `-d
 * out_asm`), replicated as native loops, plain and with what pvperf adds
 * to it (tb_replica.c times them).  %rbp stands for QEMU's env (a0 at
 * 0x50, a1 at 0x58, can_do_io at -4, the exit request at -8, pc at
 * 0x1230); score is the plugin's scoreboard entry, at an absolute
 * address as TCG loads it (movabs: one vCPU, no CF_PARALLEL).  The loop
 * back goes through the goto_tb stub as a chained block's does.
 * Each function: rdi = env, rsi = iterations.
 */
	.text
.macro ENTER
	push %rbp; push %rbx; push %r12
	mov %rdi, %rbp
	mov %rsi, 0x58(%rbp)
	jmp 1f
.endm
/* the block's start: the exit-request check, can_do_io cleared */
.macro HEAD
	movl -8(%rbp), %ebx
	testl %ebx, %ebx
	jl 9f
	movb $0, -4(%rbp)
.endm
/* add a0,a0,a1; addi a1,a1,-1 */
.macro BODY
	movq 0x50(%rbp), %rbx
	movq 0x58(%rbp), %r12
	addq %r12, %rbx
	movq %rbx, 0x50(%rbp)
	leaq -1(%r12), %rbx
	movq %rbx, 0x58(%rbp)
.endm
/* bnez a1: the pc's update on the way out, the goto_tb stub back */
.macro TAIL
	movb $1, -4(%rbp)
	testq %rbx, %rbx
	jne 5f
	movq 0x1230(%rbp), %rbx
	addq $6, %rbx
	movq %rbx, 0x1230(%rbp)
	nop
	jmp 9f
5:	.byte 0x66, 0x66, 0x90
	jmp 1b
9:	pop %r12; pop %rbx; pop %rbp; ret
.endm
/* pvperf's chunk add (count.c emit_adds) */
.macro ADD
	movabsq $score, %rbx
	movq (%rbx), %r12
	addq $3, %r12
	movq %r12, (%rbx)
.endm
/* the countdown's conditional callback (sample_tb.c), not taken */
.macro CHECK
	movq (%rbx), %rbx
	cmpq $0x7fffffff, %rbx
	jbe 3f
	movabsq $0, %rsi
	xorl %edi, %edi
	call cold
3:
.endm

	.globl blk_plain, blk_count, blk_armed, blk_store, blk_check
	.p2align 6
blk_plain: ENTER
	.p2align 6
1:	HEAD
	BODY
	TAIL

	.p2align 6
blk_count: ENTER			/* perf stat: the add */
	.p2align 6
1:	HEAD
	ADD
	BODY
	TAIL

	.p2align 6
blk_armed: ENTER			/* perf record: the add, the check */
	.p2align 6
1:	HEAD
	ADD
	CHECK
	BODY
	TAIL

	.p2align 6
blk_store: ENTER			/* a store of a constant instead */
	.p2align 6
1:	HEAD
	movabsq $score, %rbx
	movq $5, 8(%rbx)
	BODY
	TAIL

	.p2align 6
blk_check: ENTER			/* the check without the add */
	.p2align 6
1:	HEAD
	movabsq $score, %rbx
	CHECK
	BODY
	TAIL

cold:	ret
	.section .note.GNU-stack,"",@progbits
