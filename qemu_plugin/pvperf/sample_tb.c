/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sample_tb.c - the sampling countdown's code generator, beside its
 * callbacks (sample.c): per chunk, at translation, the descriptor its
 * conditional callback gets, the callback on the chunk's instruction
 * add (the countdown, core.h), and the capture points for registers.
 * count.c cuts the chunks and calls it for each while sampling.
 *
 * Registers (PVPERF_PROTO_REGS slots: callchains, sample registers, user
 * stacks).  The registers of the overflowing instruction, as they were
 * just before it ran, go with the sample.  A callback registered with
 * QEMU_PLUGIN_CB_R_REGS sees the general-purpose registers exact at its
 * instruction (TCG writes them back before the call).  Which instruction
 * serves which is the chunk's regs_at (sample.h): with
 * INSTRUMENT_CAPTURE_ALL each its own; with INSTRUMENT_CAPTURE_FRAME
 * (frame-pointer callchains need only sp and bp exact) the point after
 * the last sp/bp writer before it, so straight-line code has no capture
 * point at all.  sample.c reads them (sample_chunk_exec at the chunk's
 * start, sample_capture_exec at a later point).
 */
#include <glib.h>

#include "arena.h"
#include "core.h"
#include "sample.h"
#include "sample_tb.h"

/* Capture keys of chunks (sample.h); 0 is "no capture".  Atomic:
 * translation runs on several vCPU threads at once under MTTCG. */
static uint64_t next_chunk_uid = 1;

/*
 * Where each instruction's registers are read (sample.h regs_at), and so
 * which instructions get a capture point: every one but the first for
 * CAPTURE_ALL; for CAPTURE_FRAME only those after an instruction that
 * writes sp or bp, since between two such points the frame registers do
 * not change and the last point's serve every instruction up to the next.
 */
static void place_capture_points(struct sample_chunk *c, const uint8_t *cls,
				 enum capture_at at)
{
	c->regs_at[0] = 0;
	for (uint32_t i = 1; i < c->n_insns; i++) {
		bool point = at == CAPTURE_ALL || (cls[i - 1] & CLS_FRAME);

		c->regs_at[i] = point ? i : c->regs_at[i - 1];
		c->point[i] = (struct capture_point){ c, i };
	}
}

struct sample_chunk *sample_describe_chunk(const struct tb_insn *insn,
					   const uint8_t *cls, uint32_t n,
					   uint32_t n_branches, bool kernel,
					   uint64_t tb_vaddr, enum capture_at at)
{
	struct sample_chunk *c = arena_alloc(sizeof(*c));

	c->tb_vaddr = tb_vaddr;
	c->n_insns = n;
	c->n_branches = n_branches;
	c->first_fault = n;
	c->kernel = kernel;
	c->uid = 0;
	c->point = NULL;
	c->regs_at = NULL;
	if (at != CAPTURE_NONE) {
		c->uid = __atomic_fetch_add(&next_chunk_uid, 1,
					    __ATOMIC_RELAXED);
		c->point = arena_alloc(n * sizeof(*c->point));
		c->regs_at = arena_alloc(n * sizeof(*c->regs_at));
		place_capture_points(c, cls, at);
	}
	c->vaddr = arena_alloc(n * sizeof(*c->vaddr));
	c->branch = arena_alloc(MAX(n_branches, 1) * sizeof(*c->branch));
	for (uint32_t i = 0, b = 0; i < n; i++) {
		c->vaddr[i] = insn[i].vaddr;
		if (cls[i] & CLS_BRANCH)
			c->branch[b++] = i;
		if ((cls[i] & CLS_BOUNDARY) && c->first_fault == n)
			c->first_fault = i;
	}
	return c;
}

/*
 * The chunk's instruction add doubles as the countdown (core.h): call
 * sample.c back when it passes COUNTDOWN_LIMIT; and the capture points.
 * The limit fits a 32-bit immediate, so the host's check is a compare and
 * a branch.
 */
void sample_emit_chunk(const struct tb_insn *insn, struct sample_chunk *c)
{
	qemu_plugin_register_vcpu_insn_exec_cond_cb(insn[0].handle,
		sample_chunk_exec, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_COND_GT,
		score_ctr(ctr_insn(c->kernel)), COUNTDOWN_LIMIT, c);
	for (unsigned i = 1; c->point && i < c->n_insns; i++)
		if (c->regs_at[i] == i)
			qemu_plugin_register_vcpu_insn_exec_cond_cb(insn[i].handle,
				sample_capture_exec, QEMU_PLUGIN_CB_R_REGS,
				QEMU_PLUGIN_COND_EQ, score_capture(),
				capture_key(c, i), &c->point[i]);
}
