/*
 * helperphases ROUNDS N_DIV N_FDIV N_ADD: ROUNDS rounds of three phases,
 * each a function called N times that runs a loop of 1000 iterations:
 *
 *   divide()   64-bit `div`, which TCG's x86_64 front end implements by a
 *              call to helper_divq_EAX (target/i386/tcg/int_helper.c,
 *              with its div64);
 *   fdivide()  SSE `divsd`, a call to helper_divsd (target/i386/ops_sse.h)
 *              with QEMU's softfloat float64_div (fpu/softfloat.c);
 *   add()      the same loop as divide() with `add`: inline host code.
 *
 * Before each phase the program creates s.R.P in its current directory
 * (R the round, P the phase: 0 divide, 1 fdivide, 2 add) and sleeps until
 * g.R.P exists; after the last phase it creates s.end.  The host reads
 * the vCPU thread's CPU time when an s file appears and just before it
 * creates the g file, while the guest only waits, so that the difference
 * of two readings is the host time of one phase run alone: the separate
 * count that pvperf profile's attribution of the same run is checked
 * against (tests/vm/test_qemu_build.py).
 */
#include "freestanding.h"

FREESTANDING_START

#include "divadd_loops.h"

/* a / d in double precision, 1000 times: an inexact quotient of normal
 * numbers (no exception is unmasked in the default MXCSR); the operands
 * reach the loop as bit patterns in integer registers, so that the loop's
 * only floating-point helper is the division; the xor sets the flags, as
 * in divide(), so that TCG knows the carry `dec` keeps without calling
 * helper_cc_compute_c (which it did, for a tenth of fdivide()'s samples,
 * without it). */
__attribute__((noinline)) void fdivide(u64 a, u64 d)
{
	union { double f; u64 bits; } x = { .f = (double)a }, y = { .f = (double)d };
	u64 n = 1000;

	asm volatile("movq %[y], %%xmm1\n\t"
		     "1: movq %[x], %%xmm0\n\t"
		     "xor %%edx, %%edx\n\t"
		     "divsd %%xmm1, %%xmm0\n\t"
		     "dec %[n]\n\t"
		     "jnz 1b"
		     : [n] "+r"(n)
		     : [x] "r"(x.bits), [y] "r"(y.bits)
		     : "rdx", "xmm0", "xmm1", "cc");
}

struct timespec_ { long sec, nsec; };

/* "X.RR.P" (X 's' or 'g'), or "s.end" for round -1 */
static void handshake_name(char *name, char x, int round, int phase)
{
	const char *end = "s.end";
	int i;

	if (round < 0) {
		for (i = 0; i < 6; i++)
			name[i] = end[i];
		return;
	}
	name[0] = x;
	name[1] = '.';
	name[2] = (char)('0' + round / 10 % 10);
	name[3] = (char)('0' + round % 10);
	name[4] = '.';
	name[5] = (char)('0' + phase);
	name[6] = 0;
}

static void create(const char *name)
{
	long fd = sys3(2, (long)name, 0101, 0644);	/* O_WRONLY|O_CREAT */

	if (fd < 0)
		sys_exit(1);
	sys3(3, fd, 0, 0);
}

/* s.R.P, then idle until g.R.P: a stat and a 10 ms sleep at a time */
static void handshake(int round, int phase)
{
	struct timespec_ t = { 0, 10 * 1000 * 1000 };
	char name[8], st[256];

	handshake_name(name, 's', round, phase);
	create(name);
	handshake_name(name, 'g', round, phase);
	while (sys3(4, (long)name, (long)st, 0) < 0)	/* stat */
		sys3(35, (long)&t, 0, 0);		/* nanosleep */
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	void (*const phase[3])(u64, u64) = { divide, fdivide, add };
	u64 rounds = arg_u64(sp, 1, 1), n[3];
	char name[8];
	int p;

	for (p = 0; p < 3; p++)
		n[p] = arg_u64(sp, 2 + p, 1000);
	if (rounds > 99)
		sys_exit(2);
	for (int r = 0; r < (int)rounds; r++) {
		for (p = 0; p < 3; p++) {
			handshake(r, p);
			for (u64 i = 0; i < n[p]; i++)
				phase[p](1000000007 + i, 7);
		}
	}
	handshake_name(name, 's', -1, 0);
	create(name);
	sys_exit(0);
}
