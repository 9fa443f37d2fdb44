/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_classify.c - libFuzzer harness for the decode path (x86_64.c):
 * arbitrary bytes cut into a translation block of up to 64 instructions
 * whose lengths the input gives (as QEMU would report them, 0..16).
 * Checked: the flags are consistent (a conditional or indirect branch is
 * a branch, a memory access ends a segment); the marker flag exactly on the
 * marker encoding in kernel code; the decode cache answers what a
 * fresh decode did (the TB classified twice gives the same flags).
 */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "arch.h"

extern const struct arch arch_x86_64;

#define MAX_TB 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cls_insn insn[MAX_TB];
	uint8_t cls[MAX_TB], again[MAX_TB];
	size_t n = 0;
	bool kernel;

	if (size < 1)
		return 0;
	kernel = data[0] & 1;
	data++, size--;
	while (n < MAX_TB && size > 0) {
		size_t len = data[0] % (INSN_MAX_BYTES + 1);

		data++, size--;
		if (len > size)
			len = size;
		memset(&insn[n], 0, sizeof(insn[n]));
		memcpy(insn[n].bytes, data, len);
		insn[n].len = len;
		insn[n].vaddr = kernel ? 0xffffffff81000000ull + n * 16 : 0x401000 + n * 16;
		data += len, size -= len;
		n++;
	}
	if (!n)
		return 0;
	arch_x86_64.classify_tb(insn, n, kernel, cls);
	arch_x86_64.classify_tb(insn, n, kernel, again);
	assert(!memcmp(cls, again, n));
	for (size_t i = 0; i < n; i++) {
		bool marker = kernel && arch_x86_64.is_marker(insn[i].bytes, insn[i].len);

		if (cls[i] & (CLS_COND | CLS_INDIRECT))
			assert(cls[i] & CLS_BRANCH);
		if (cls[i] & CLS_MEM)
			assert(cls[i] & CLS_BOUNDARY);
		assert(!!(cls[i] & CLS_MARKER) == marker);
	}
	return 0;
}
