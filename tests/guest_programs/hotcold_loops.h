/*
 * hotcold_loops.h - hotcold N's main for the foreign architectures'
 * hotcold.c, which define LOOP_FN(name, trips) in their own assembly
 * (a function of 1 + 3 * trips + 1 instructions) before including this:
 * hot() runs 1600 trips, cold() 400, N times each.
 */
LOOP_FN(hot, 1600)
LOOP_FN(cold, 400)

u64 hot(u64 acc);
u64 cold(u64 acc);

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), acc = 0;

	for (u64 i = 0; i < n; i++)
		acc = cold(hot(acc));
	sys_exit(acc == 42);
}
