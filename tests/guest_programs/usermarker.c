/*
 * usermarker [N]: issue the pvperf marker store from user mode, N times.
 *
 * The exact marker store of pvperf_abi.h, `movl $PVPERF_MARKER_MAGIC,
 * (%rax)` with %rax at a pvperf_hcall-shaped block (nr = PVPERF_HC_PERF_OP,
 * op = PVPERF_OP_PROBE, ret preset to -ENOSYS), on the program's own
 * buffer.  User mode can never issue a hypercall (the plugin does not even
 * instrument user-half code), so the host must never see it: the store
 * writes the magic and ->ret stays -ENOSYS.
 *
 * Exit status: 0 as it must be; 1 if ->ret changed (the host served a
 * user-mode marker); 2 if the store did not write the magic.
 */
#include <linux/errno.h>
#include "freestanding.h"
#include "pvperf_abi.h"

FREESTANDING_START

static struct pvperf_hcall blk __attribute__((aligned(64)));

static __attribute__((noinline)) void mark(void)
{
	blk.marker = 0;
	blk.nr = PVPERF_HC_PERF_OP;
	blk.op = PVPERF_OP_PROBE;
	blk.ret = -ENOSYS;
	asm volatile("movl %[magic], (%[block])"
		     : : [block] "a" (&blk), [magic] "i" (PVPERF_MARKER_MAGIC)
		     : "memory");
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	u64 n = arg_u64(sp, 1, 1000), i;

	for (i = 0; i < n; i++) {
		mark();
		if (blk.ret != -ENOSYS)
			sys_exit(1);
		if (blk.marker != PVPERF_MARKER_MAGIC)
			sys_exit(2);
	}
	sys_exit(0);
}
