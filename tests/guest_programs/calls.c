/*
 * calls N: main_sp calls step() N times; step() is eight instructions
 * that end in `call leaf`, so they form one translated block and an NMI
 * raised at any of them lands in leaf(), one frame deeper, with rsp 8
 * lower.  No frame pointers, with unwind tables: perf's --call-graph dwarf
 * unwinds a sample in step() to main_sp only from step()'s own rsp
 * (tests/vm/test_sample_regs.py).
 */
#include "freestanding.h"

FREESTANDING_START

void step(u64 x);

asm(".text\n"
    ".globl leaf\n.type leaf,@function\nleaf:\n"
    "\t.cfi_startproc\n\tret\n\t.cfi_endproc\n.size leaf,.-leaf\n"
    ".globl step\n.type step,@function\nstep:\n"
    "\t.cfi_startproc\n"
    "\tsub $8, %rsp\n\t.cfi_adjust_cfa_offset 8\n"
    "\tadd $1, %rdi\n\tadd $2, %rdi\n\tadd $3, %rdi\n"
    "\tadd $4, %rdi\n\tadd $5, %rdi\n\tadd $6, %rdi\n"
    "\tcall leaf\n"
    "\tadd $8, %rsp\n\t.cfi_adjust_cfa_offset -8\n"
    "\tret\n\t.cfi_endproc\n.size step,.-step\n");

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	for (u64 i = 0; i < n; i++)
		step(i);
	sys_exit(0);
}
