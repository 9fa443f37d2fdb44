/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models_tb.c - what the models instrument in each TB, at translation
 * (models.c says why; models_fast.c, the conditions).
 */
#include "arena.h"
#include "core.h"
#include "instrument.h"
#include "model_config.h"
#include "models.h"
#include "models_int.h"

static uint64_t line_of(uint64_t addr)
{
	return addr / mcfg.i1.line;
}

/* Whether [vaddr, vaddr + len) is one block of each model that fetches
 * reference (a straddling reference has no single mirror entry). */
static bool one_block(uint64_t vaddr, uint32_t len, bool cache, bool tlb)
{
	uint64_t end = vaddr + len - 1;

	return (!cache || line_of(vaddr) == line_of(end)) &&
	       (!tlb || vaddr / mcfg.itlb.line == end / mcfg.itlb.line);
}

/* Call cb unless vaddr's block is the most recent of its set in the
 * mirror at index at of cache c. */
static void register_unless_mru(struct qemu_plugin_insn *insn, uint64_t vaddr,
				const struct cache *c, size_t at,
				qemu_plugin_vcpu_udata_cb_t cb, void *udata)
{
	uint64_t block = vaddr >> c->line_bits;

	qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, cb,
		QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
		fs_entry(at + (block & c->set_mask)), block, udata);
}

/* Call cb unless the block of vaddr is already its set's most recent in
 * I1 and in the iTLB (models_fast.c): one condition per model. */
static void register_fetch(struct qemu_plugin_insn *insn, uint64_t vaddr,
			   bool cache, bool tlb, qemu_plugin_vcpu_udata_cb_t cb,
			   void *udata)
{
	if (cache)
		register_unless_mru(insn, vaddr, &mv[0].i1, FS_I1, cb, udata);
	if (tlb)
		register_unless_mru(insn, vaddr, &mv[0].itlb, fs_itlb, cb,
				    udata);
}

/* A TB's start: behind conditions when fast, else always called. */
static void register_tb_start(struct qemu_plugin_insn *insn,
			      struct tb_site *t, bool cache, bool bpred,
			      bool tlb)
{
	if (!t->fast) {
		qemu_plugin_register_vcpu_insn_exec_cb(insn, tb_start_exec,
			t->runtime || t->regs ? QEMU_PLUGIN_CB_R_REGS :
						QEMU_PLUGIN_CB_NO_REGS, t);
		return;
	}
	/* A one-block loop: entered by its own steady branch, its site is
	 * still the pending one, untagged; nothing to clear after. */
	if (t->loop) {
		qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, tb_start_exec,
			QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
			score_branch(t->kernel), (uintptr_t)t->loop, t);
		return;
	}
	/* Not entered by a steady branch's taken edge (whose target's line
	 * and page are the most recent: no fetch conditions then), or not
	 * the most recent line and page. */
	if (bpred)
		qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, tb_start_exec,
			QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
			fs_entry(FS_EXPECT), t->vaddr, t);
	else
		register_fetch(insn, t->vaddr, cache, tlb, tb_start_exec, t);
	/* After the conditions: consumed, whichever path ran. */
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_STORE_U64, fs_entry(FS_EXPECT), 0);
	if (bpred)
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
			QEMU_PLUGIN_INLINE_STORE_U64, score_branch(t->kernel), 0);
}

/* A direct conditional branch's taken target, if it has one. */
static bool cond_target(struct qemu_plugin_insn *insn, uint64_t vaddr,
			uint64_t *target)
{
	uint8_t bytes[INSN_MAX_BYTES];

	return pv.arch->cond_target(bytes,
		qemu_plugin_insn_data(insn, bytes, sizeof(bytes)), vaddr,
		target);
}

/* How its accesses count (arch.h, enum mem_shape). */
static uint8_t mem_shape(struct qemu_plugin_insn *insn)
{
	uint8_t bytes[INSN_MAX_BYTES];

	return pv.arch->mem_shape(bytes,
		qemu_plugin_insn_data(insn, bytes, sizeof(bytes)));
}

/* The site of a fast TB's last instruction if the TB is a one-block loop
 * (that instruction a direct conditional branch to the TB's start). */
static struct branch_site *loop_branch(struct qemu_plugin_tb *tb, size_t n,
				       const uint8_t *cls, uint64_t tb_vaddr)
{
	struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, n - 1);
	uint64_t vaddr = qemu_plugin_insn_vaddr(insn), target;
	struct branch_site *b;

	if (!(cls[n - 1] & CLS_COND) || !cond_target(insn, vaddr, &target) ||
	    target != tb_vaddr)
		return NULL;
	b = arena_alloc(sizeof(*b));
	*b = (struct branch_site){ vaddr, qemu_plugin_insn_size(insn), true,
				   vaddr_is_kernel(vaddr) };
	return b;
}

/* A conditional or indirect branch: its site for the next TB start; a
 * conditional one also counted here, and, if direct in a fast TB, handed
 * over as steady (FS_EXPECT: its taken target) unless its condition says
 * otherwise.  A one-block loop's branch (loop: its site) hands over by
 * its site alone, which its TB's start compares. */
static void register_branch(struct qemu_plugin_insn *insn, uint64_t vaddr,
			    uint32_t len, uint8_t cls, bool kernel, bool fast,
			    struct branch_site *loop)
{
	struct branch_site *b = loop ? loop : arena_alloc(sizeof(*b));
	uint64_t target;

	*b = (struct branch_site){ vaddr, len, cls & CLS_COND,
				   vaddr_is_kernel(vaddr) };
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_STORE_U64, score_branch(kernel),
		(uintptr_t)b);
	if (!(cls & CLS_COND))
		return;
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_ADD_U64, score_cond(kernel), 1);
	if (!fast || !cond_target(insn, vaddr, &target))
		return;
	if (!loop)
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
			QEMU_PLUGIN_INLINE_STORE_U64, fs_entry(FS_EXPECT),
			target);
	qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, branch_unsteady_exec,
		QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
		fs_entry(FS_STEADY + (vaddr & (STEADY_SLOTS - 1))), vaddr, b);
}

void models_tb(struct qemu_plugin_tb *tb, const uint8_t *cls, size_t n,
	       bool kernel)
{
	bool cache = instrument_cache(), bpred = instrument_bpred(), tlb = instrument_tlb();
	bool fetches = cache || tlb;	/* I1 and iTLB references */
	bool regs = instrument_capture() != CAPTURE_NONE;
	enum qemu_plugin_cb_flags cb_regs = regs ? QEMU_PLUGIN_CB_R_REGS :
						   QEMU_PLUGIN_CB_NO_REGS;
	uint64_t prev_last_line = 0;
	struct tb_site *t;

	if (!n || (!cache && !bpred && !tlb) || (mcfg.compat && kernel))
		return;
	t = arena_alloc(sizeof(*t));
	/* Kernel code is mapped alike everywhere: no delta to find. */
	*t = (struct tb_site){ .vaddr = qemu_plugin_tb_vaddr(tb),
			       .kernel = kernel, .fetch = fetches,
			       .runtime = !kernel && instrument_sampling(),
			       .regs = regs };
	/* Fast paths compare translated addresses and call back without
	 * registers: not while sampling needs either. */
	t->fast = !t->runtime && !regs &&
		  one_block(t->vaddr, qemu_plugin_insn_size(
				qemu_plugin_tb_get_insn(tb, 0)), cache, tlb);
	if (t->fast && bpred)
		t->loop = loop_branch(tb, n, cls, t->vaddr);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint64_t vaddr = qemu_plugin_insn_vaddr(insn);
		uint32_t len = qemu_plugin_insn_size(insn);
		uint64_t first = line_of(vaddr), last = line_of(vaddr + len - 1);

		if (i == 0) {
			t->len = len;
			register_tb_start(insn, t, cache, bpred, tlb);
		} else if (fetches &&
			   !(first == prev_last_line && last == first)) {
			struct fetch_site *f = arena_alloc(sizeof(*f));

			*f = (struct fetch_site){ vaddr, len, kernel, regs };
			if (t->fast && one_block(vaddr, len, cache, tlb))
				register_fetch(insn, vaddr, cache, tlb,
					       fetch_exec, f);
			else
				qemu_plugin_register_vcpu_insn_exec_cb(insn,
					fetch_exec, cb_regs, f);
		}
		prev_last_line = last;
		if (tlb && !mcfg.compat && (cls[i] & CLS_ASPACE))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, aspace_exec,
				QEMU_PLUGIN_CB_NO_REGS, NULL);
		if (fetches) {
			struct mem_site *ms = arena_alloc(sizeof(*ms));

			*ms = (struct mem_site){ .vaddr = vaddr,
				.kernel = vaddr_is_kernel(vaddr),
				.shape = mem_shape(insn) };
			/* Loads and stores apart: which one is known here. */
			qemu_plugin_register_vcpu_mem_cb(insn,
				regs ? mem_read_regs : mem_read, cb_regs,
				QEMU_PLUGIN_MEM_R, ms);
			qemu_plugin_register_vcpu_mem_cb(insn,
				regs ? mem_write_regs : mem_write, cb_regs,
				QEMU_PLUGIN_MEM_W, ms);
		}
		if (bpred && (cls[i] & (CLS_COND | CLS_INDIRECT)))
			register_branch(insn, vaddr, len, cls[i], kernel,
					t->fast, i + 1 == n ? t->loop : NULL);
	}
}
