/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * classify_test.c - unit test of x86_64.c's instruction classes, through
 * its ops table (arch.h), natively (no QEMU): which x86 instructions
 * count as branches, access memory, or may fault, and the decoding-mode
 * fallback for 32-bit code.
 *
 *   make -C qemu_plugin check
 */
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "target_check.h"

extern const struct arch arch_x86_64;

#define KERNEL_VADDR 0xffff800000001000ULL

#define B CLS_BRANCH
#define M CLS_MEM
#define X CLS_BOUNDARY
#define D CLS_MARKER
#define F CLS_FRAME
#define C CLS_COND
#define I CLS_INDIRECT

struct expect {
	const char *name;
	uint8_t bytes[15];
	size_t len;
	uint8_t cls;
};

static const struct expect cases[] = {
	{ "add %rcx,%rdx",	{ 0x48, 0x01, 0xca }, 3, 0 },
	{ "lea (%rsp),%rax",	{ 0x48, 0x8d, 0x04, 0x24 }, 4, 0 },
	{ "nopw 0(%rax,%rax)",	{ 0x66, 0x0f, 0x1f, 0x44, 0, 0 }, 6, 0 },
	{ "mov %rsp,%rbp",	{ 0x48, 0x89, 0xe5 }, 3, F },
	{ "sub $8,%rsp",	{ 0x48, 0x83, 0xec, 0x08 }, 4, F },
	{ "pop %rbp",		{ 0x5d }, 1, M | X | F },
	{ "xor %ebp,%ebp",	{ 0x31, 0xed }, 2, F },
	{ "mov (%rsi),%rbx",	{ 0x48, 0x8b, 0x1e }, 3, M | X },
	{ "marker",  		{ 0xc7, 0x00, 0x50, 0x56, 0x50, 0x46 }, 6, M | X | D },
	{ "push %rbx",		{ 0x53 }, 1, M | X | F },
	{ "pop %rbx",		{ 0x5b }, 1, M | X | F },
	{ "pushfq",		{ 0x9c }, 1, M | X | F },
	{ "enter $8,$0",	{ 0xc8, 8, 0, 0 }, 4, M | X | F },
	{ "leave",		{ 0xc9 }, 1, M | X | F },
	{ "rep movsb",		{ 0xf3, 0xa4 }, 2, M | X },
	{ "stosq",		{ 0x48, 0xab }, 2, M | X },
	{ "xlat",		{ 0xd7 }, 1, M | X },
	{ "lock cmpxchg16b",	{ 0xf0, 0x48, 0x0f, 0xc7, 0x0e }, 5, M | X },
	{ "xsave (%rax)",	{ 0x0f, 0xae, 0x20 }, 3, M | X },
	{ "div %rcx",		{ 0x48, 0xf7, 0xf1 }, 3, X },
	{ "ud2",		{ 0x0f, 0x0b }, 2, X },
	{ "rdmsr",		{ 0x0f, 0x32 }, 2, X },
	{ "hlt",		{ 0xf4 }, 1, X },
	{ "jne .",		{ 0x75, 0xfe }, 2, B | C },
	{ "jmp .",		{ 0xeb, 0xfe }, 2, B },
	{ "jmp *%rax",		{ 0xff, 0xe0 }, 2, B | I },
	{ "jmp *(%rax)",	{ 0xff, 0x20 }, 2, B | M | X | I },
	{ "loop .",		{ 0xe2, 0xfe }, 2, B | C },
	{ "jrcxz .",		{ 0xe3, 0xfe }, 2, B | C },
	{ "call rel32",		{ 0xe8, 0, 0, 0, 0 }, 5, B | M | X | F },
	{ "call *(%rax)",	{ 0xff, 0x10 }, 2, B | M | X | F | I },
	{ "call *%rdx",	{ 0xff, 0xd2 }, 2, B | M | X | F | I },
	{ "jg rel32",		{ 0x0f, 0x8f, 0, 0, 0, 0 }, 6, B | C },
	{ "ret",		{ 0xc3 }, 1, B | M | X | F },
	{ "lret",		{ 0xcb }, 1, B | M | X | F },
	{ "iretq",		{ 0x48, 0xcf }, 2, B | M | X | F },
	{ "int $0x80",		{ 0xcd, 0x80 }, 2, B | M | X | F },
	{ "int3",		{ 0xcc }, 1, B | M | X | F },
	{ "syscall",		{ 0x0f, 0x05 }, 2, B | X | F },
	{ "sysretq",		{ 0x48, 0x0f, 0x07 }, 3, B | X | F },
	{ "sysenter",		{ 0x0f, 0x34 }, 2, B | X | F },
};

/* Taken targets of direct conditional branches (cond_target). */
#define N_TARGET_CASES 10
static int check_targets(void)
{
	static const struct {
		const char *name;
		uint8_t bytes[8];
		size_t len;
		bool direct;
		uint64_t target;
	} t[] = {
		{ "jne -5 (loop back)",	{ 0x75, 0xfb }, 2, true, 0x400ffd },
		{ "je +0x10",		{ 0x74, 0x10 }, 2, true, 0x401012 },
		{ "jg rel32 -0x100",	{ 0x0f, 0x8f, 0x00, 0xff, 0xff, 0xff },
					6, true, 0x400f06 },
		{ "loop -2",		{ 0xe2, 0xfe }, 2, true, 0x401000 },
		{ "jrcxz +1",		{ 0xe3, 0x01 }, 2, true, 0x401003 },
		{ "ds jne (hint)",	{ 0x3e, 0x75, 0x02 }, 3, true, 0x401005 },
		{ "jmp rel8",		{ 0xeb, 0x02 }, 2, false, 0 },
		{ "jmp *%rax",		{ 0xff, 0xe0 }, 2, false, 0 },
		{ "o16 jne",		{ 0x66, 0x75, 0x02 }, 3, false, 0 },
		{ "truncated jcc rel32",	{ 0x0f, 0x85, 0x00 }, 3, false, 0 },
	};
	int fails = 0;

	G_STATIC_ASSERT(G_N_ELEMENTS(t) == N_TARGET_CASES);
	for (size_t i = 0; i < G_N_ELEMENTS(t); i++)
		fails += check_cond_target(&arch_x86_64, t[i].name, t[i].bytes,
					   t[i].len, 0x401000, t[i].direct,
					   t[i].target);
	return fails;
}

static int check(const char *what, uint8_t got, uint8_t want)
{
	if (got == want)
		return 0;
	printf("FAIL %s: cls 0x%x, want 0x%x\n", what, got, want);
	return 1;
}

/* Each case alone, as a one-insn kernel-half TB. */
static int test_cases(void)
{
	int fails = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct cls_insn in = { .len = cases[i].len,
				       .vaddr = KERNEL_VADDR };
		uint8_t cls;

		memcpy(in.bytes, cases[i].bytes, cases[i].len);
		arch_x86_64.classify_tb(&in, 1, true, &cls);
		fails += check(cases[i].name, cls, cases[i].cls);
	}
	return fails;
}

/* 32-bit user code: 0x40 is "inc %eax", a REX prefix in 64-bit mode. */
static int test_mode_fallback(void)
{
	struct cls_insn tb[2] = {
		{ { 0x40 }, 1, 0x8048000 }, { { 0x50 }, 1, 0x8048001 },
	};
	uint8_t cls[2];
	int fails = 0;

	arch_x86_64.classify_tb(tb, 2, false, cls);
	fails += check("32-bit inc", cls[0], 0);
	fails += check("32-bit push", cls[1], M | X | F);
	return fails;
}

/* Port I/O instructions (is_port_io): device accesses without memory
 * operands.  Names as objdump prints the bytes. */
static const struct port_case {
	const char *name;
	uint8_t bytes[4];
	size_t len;
	bool port_io;
} port_cases[] = {
	{ "in (%dx),%al",	{ 0xec }, 1, true },
	{ "in (%dx),%ax",	{ 0x66, 0xed }, 2, true },
	{ "out %al,(%dx)",	{ 0xee }, 1, true },
	{ "out %eax,(%dx)",	{ 0xef }, 1, true },
	{ "in $0x60,%al",	{ 0xe4, 0x60 }, 2, true },
	{ "out %eax,$0x80",	{ 0xe7, 0x80 }, 2, true },
	{ "rep insb (%dx),%es:(%rdi)", { 0xf3, 0x6c }, 2, true },
	{ "rep outsw %ds:(%rsi),(%dx)", { 0xf3, 0x66, 0x6f }, 3, true },
	{ "rex.W in (%dx),%eax", { 0x48, 0xed }, 2, true },
	{ "call .",		{ 0xe8, 0xfb, 0xff, 0xff }, 4, false },
	{ "jmp .",		{ 0xeb, 0xfe }, 2, false },
	{ "loop .",		{ 0xe2, 0xfe }, 2, false },
	{ "jrcxz .",		{ 0xe3, 0xfe }, 2, false },
	{ "push $0x1",		{ 0x6a, 0x01 }, 2, false },
	{ "imul $0x1,%eax,%eax", { 0x6b, 0xc0, 0x01 }, 3, false },
	{ "mov %eax,%ecx",	{ 0x89, 0xc1 }, 2, false },
	{ "lock prefix alone",	{ 0xf0 }, 1, false },
};

static int test_port_io(void)
{
	int fails = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(port_cases); i++) {
		const struct port_case *c = &port_cases[i];

		if (arch_x86_64.is_port_io(c->bytes, c->len) == c->port_io)
			continue;
		printf("FAIL is_port_io %s: want %d\n", c->name, c->port_io);
		fails++;
	}
	return fails;
}

int main(void)
{
	int fails = test_cases() + test_mode_fallback() + check_targets() +
		    test_port_io();
	size_t total = G_N_ELEMENTS(cases) + 2 + N_TARGET_CASES +
		       G_N_ELEMENTS(port_cases);

	printf("%zu passed, %d failed\n", total - fails, fails);
	return fails ? 1 : 0;
}
