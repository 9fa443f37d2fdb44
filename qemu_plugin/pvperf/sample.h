/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sample.h - counter overflow at the exact guest instruction.
 */
#ifndef PVPERF_SAMPLE_H
#define PVPERF_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "counters.h"
#include "pvperf_proto.h"

/*
 * The countdown (core.h): a chunk calls sample_chunk_exec() when its
 * half's instruction counter passes this after the chunk's add.  It fits
 * a 32-bit immediate, so the generated check is a compare and a branch on
 * the host; a half's
 * room never exceeds ROOM_MAX, so the counter never starts below
 * COUNTDOWN_LIMIT - ROOM_MAX.
 */
#define COUNTDOWN_LIMIT	0x7fffffffULL
#define ROOM_MAX	(1ULL << 30)

/*
 * What the conditional callback of a chunk needs (udata, in the TB
 * arena, sample_tb.c): the chunk's instructions at translation time (the
 * process that translated it; runtime addresses come from the pc), which
 * of them are branches, and the first one that may fault.
 */
struct sample_chunk {
	uint64_t tb_vaddr;	/* the TB's first instruction */
	uint16_t n_insns;
	uint16_t n_branches;
	uint16_t first_fault;	/* index of the first may-fault insn, or n_insns */
	bool kernel;
	uint64_t *vaddr;	/* [n_insns] */
	uint16_t *branch;	/* [n_branches]: insn indices of the branches */
	/* Register capture (MODE_CAPTURE_*) only: */
	uint64_t uid;		/* unique per chunk, never 0 */
	struct capture_point *point;	/* [n_insns]: their udata */
	/* [n_insns]: the capture point whose registers serve insn i (the
	 * last at or before it); 0: the chunk's own callback reads them. */
	uint16_t *regs_at;
};

/*
 * Capture points: instructions (never a chunk's first) with a conditional
 * callback that runs, before the instruction, iff the vCPU's scoreboard
 * `capture` equals its key (sample_tb.c places them).  The chunk's own
 * callback sets that key when an overflow that needs registers falls on
 * an instruction served by a later point; it reads them itself otherwise.
 */
struct capture_point {
	const struct sample_chunk *chunk;
	uint16_t idx;
};

#define CAPTURE_IDX_BITS 16	/* > log2(TCG_MAX_INSNS) */

static inline uint64_t capture_key(const struct sample_chunk *c, unsigned idx)
{
	return c->uid << CAPTURE_IDX_BITS | idx;
}

/*
 * A check that the countdown paces besides the slots (emu.c's host-time
 * readings).  room: how many more instructions, both halves together,
 * the vCPU may run before it is due (count: its counts now; UINT64_MAX:
 * none).  Each half's room is capped by all of it, so a chunk callback
 * comes once either half alone ran that many (the check comes after one
 * to two times room by the mix); a chunk callback that finds room 0 calls
 * run, at the chunk's runtime start (kernel: its half).
 */
struct sample_pacer {
	uint64_t (*room)(unsigned vcpu, const uint64_t *count);
	void (*run)(unsigned vcpu, bool kernel, uint64_t pc);
};

/* Install: the pacer, if any; sampling hears of the event counters'
 * growth (counters.h). */
void sample_init(const struct sample_pacer *pacer);

/* The callbacks; registered with QEMU_PLUGIN_CB_R_REGS. */
void sample_chunk_exec(unsigned int vcpu, void *udata);
void sample_capture_exec(unsigned int vcpu, void *udata);

/* A reply's slot table, in one array: the inline slots first. */
void sample_arm(unsigned vcpu, const struct pvperf_proto_reply *reply);
/* Whether a slot on mask (raw counter bits) is checked by the chunks'
 * countdown: inline counters only. */
bool sample_slot_on_inline(uint64_t mask);
/* Whether a slot on mask is counted by the models: model counters only,
 * or cycles under the timing model (instructions and stall cycles). */
bool sample_slot_on_models(uint64_t mask);

/* How much the model counters in bits may still grow before the nearest
 * slot armed on one of them overflows (0: due), UINT64_MAX if none is
 * (emu.c's host-time timer). */
uint64_t sample_room(unsigned vcpu, uint64_t bits);
void sample_confirm_all(unsigned vcpu);
void sample_fault(unsigned vcpu, uint64_t ip);
void sample_update_room(unsigned vcpu);
/* Checkpoints (state.c): awaiting overflows held without registers, as
 * a fault would hold them. */
void sample_hold_awaiting(unsigned vcpu);

#endif /* PVPERF_SAMPLE_H */
