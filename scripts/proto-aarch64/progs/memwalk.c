/* PROTOTYPE test program: freestanding arm64 memory walk (no libc).
 * Touches a 256 KiB buffer with a 64-byte stride, ROUNDS times, so the
 * cache models see a known footprint; exits through svc directly. */
#define SIZE (256 * 1024)
#define STRIDE 64
#define ROUNDS 16
/* Initialised, so it lives in .data: valgrind 3.19 arm64 raised SIGBUS on
 * this program with the buffer in .bss (see docs/aarch64.md). */
static volatile unsigned char buf[SIZE] = { 1 };

static void sys_exit(long code)
{
	register long x0 __asm__("x0") = code;
	register long x8 __asm__("x8") = 93;
	__asm__ volatile("svc #0" : : "r"(x0), "r"(x8) : "memory");
	__builtin_unreachable();
}

void _start(void)
{
	unsigned long sum = 0;
	for (int r = 0; r < ROUNDS; r++)
		for (unsigned long i = 0; i < SIZE; i += STRIDE) {
			buf[i] = (unsigned char)(i + r);
			sum += buf[i];
		}
	sys_exit(sum == 0xdead);   /* 0 unless the sum happens to match */
}
