/*
 * fpcalls N: main_sp calls step() N times, step() calls leaf(); both keep
 * a frame pointer (push %rbp; mov %rsp,%rbp ... pop %rbp; ret) around a
 * run of plain adds.  perf record -g walks the frame chain from rbp, so
 * which caller a sample names follows from where in its function the
 * sampled instruction lies: after `mov %rsp,%rbp` up to `pop %rbp`, rbp
 * is the function's own frame and the caller is the real one (leaf ->
 * step, step -> main_sp); at the push, the mov and the ret it is still or
 * again the caller's frame, so the walk skips one (leaf -> main_sp, step
 * -> _start).  tests/vm/test_sample_regs.py checks every sample against
 * that, which holds only if rbp is the sampled instruction's own.
 */
#include "freestanding.h"

FREESTANDING_START

void step(u64 x);

asm(".text\n"
    ".globl leaf\n.type leaf,@function\nleaf:\n"
    "\tpush %rbp\n\tmov %rsp, %rbp\n"
    "\tadd $1, %rdi\n\tadd $2, %rdi\n\tadd $3, %rdi\n"
    "\tadd $4, %rdi\n\tadd $5, %rdi\n\tadd $6, %rdi\n"
    "\tpop %rbp\n\tret\n.size leaf,.-leaf\n"
    ".globl step\n.type step,@function\nstep:\n"
    "\tpush %rbp\n\tmov %rsp, %rbp\n"
    "\tadd $1, %rdi\n\tadd $2, %rdi\n\tadd $3, %rdi\n"
    "\tcall leaf\n"
    "\tadd $4, %rdi\n\tadd $5, %rdi\n"
    "\tpop %rbp\n\tret\n.size step,.-step\n");

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000);

	for (u64 i = 0; i < n; i++)
		step(i);
	sys_exit(0);
}
