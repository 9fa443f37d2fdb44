/*
 * regs_main.h - regs N's main for the foreign architectures' regs.c:
 * REGS_MAIN(REG, CODE, CLOBBERS...) runs CODE (the registers' set-up and
 * the loop between the labels regs_loop and regs_end, counting %0 down)
 * with N in register REG, then exits 0.
 */
#define REGS_MAIN(reg, code, ...)					\
__attribute__((noreturn, used)) void main_sp(long *sp)			\
{									\
	register u64 n asm(reg) = arg_u64(sp, 1, 1000);			\
									\
	if (n)								\
		asm volatile(code : "+r"(n) : : __VA_ARGS__);		\
	sys_exit(0);							\
}
