/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * translate.c - the translation pipeline: everything the plugin does at
 * tb_trans, in the order it is done.  The order of registration is the
 * order callbacks and inline ops run in before an instruction, so it is
 * decided here, in one place:
 *
 *   1. markers      kernel-half marker stores get their memory callback
 *                   (hcall.c), whether counting is on or off;
 *   2. emulator     this translation counted, device accesses
 *                   instrumented while asked (emu.c, emu_io.c);
 *   counting off:
 *   3. learn        a lone may-fault instruction becomes a forced cut
 *                   (count.c count_learn_tb), and nothing else;
 *   counting on:
 *   3. read         each instruction's handle, bytes and address;
 *   4. classify     the guest architecture's classes (arch.h);
 *   5. chunks       each chunk's adds and, sampling, its countdown and
 *                   capture points (count.c, sample_tb.c);
 *   6. models       the models' callbacks, after the chunks' adds, so
 *                   that they run after an instruction's counts are
 *                   added, like any later ones (models_tb.c).
 *
 * Context: tb_trans, on any vCPU thread, concurrently on several under
 * MTTCG: the scratch arrays are per thread.
 */
#include <glib.h>

#include "core.h"
#include "count.h"
#include "emu.h"
#include "hcall.h"
#include "instrument.h"
#include "models.h"
#include "translate.h"

/* Per-thread scratch, grown as needed, never shrunk. */
static __thread struct tb_insn *scratch;
static __thread struct cls_insn *scratch_ci;
static __thread uint8_t *scratch_cls;
static __thread size_t scratch_cap;

static void scratch_reserve(size_t n)
{
	if (n <= scratch_cap)
		return;
	scratch_cap = MAX(n, 512);	/* TCG_MAX_INSNS */
	scratch = g_renew(struct tb_insn, scratch, scratch_cap);
	scratch_ci = g_renew(struct cls_insn, scratch_ci, scratch_cap);
	scratch_cls = g_renew(uint8_t, scratch_cls, scratch_cap);
}

/* Step 3: the TB's instructions into the scratch arrays. */
static void read_insns(struct qemu_plugin_tb *tb, size_t n)
{
	scratch_reserve(n);
	for (size_t i = 0; i < n; i++) {
		struct cls_insn *ci = &scratch_ci[i];
		struct tb_insn *t = &scratch[i];

		t->handle = qemu_plugin_tb_get_insn(tb, i);
		ci->len = qemu_plugin_insn_data(t->handle, ci->bytes,
						sizeof(ci->bytes));
		ci->vaddr = qemu_plugin_insn_vaddr(t->handle);
		t->vaddr = ci->vaddr;
		t->code = ci;
		t->whole = ci->len == qemu_plugin_insn_size(t->handle);
	}
}

void translate_tb(struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	bool kernel;

	hcall_tb(tb, n);
	emu_tb(tb, n);
	if (!instrument_counting()) {
		count_learn_tb(tb, n);
		return;
	}
	kernel = vaddr_is_kernel(qemu_plugin_tb_vaddr(tb));
	read_insns(tb, n);
	pv.arch->classify_tb(scratch_ci, n, kernel, scratch_cls);
	count_tb(scratch, scratch_cls, n, kernel);
	models_tb(tb, scratch_cls, n, kernel);
}
