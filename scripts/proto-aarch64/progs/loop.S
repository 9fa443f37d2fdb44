// PROTOTYPE test program: a freestanding arm64 loop with an analytic count.
// N iterations of (subs; b.ne): retired instructions at user level =
//   2 (movz/movk of N) + 2*N + 3 (exit: mov x8, mov x0, svc)  = 2N + 5
// branches (b.ne) = N, taken N-1.
#ifndef N
#define N 1000000
#endif
	.text
	.globl _start
_start:
	movz	x0, #(N & 0xffff)
	movk	x0, #((N >> 16) & 0xffff), lsl #16
1:	subs	x0, x0, #1
	b.ne	1b
	mov	x8, #93			// __NR_exit
	mov	x0, #0
	svc	#0
