/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * mode.h - what the plugin instruments, as a set of MODE_* flags: nothing
 * but doorbells, exact instruction counts, branch counts, overflow
 * detection, register capture after the instructions that move the frame
 * (sp, bp) or at every instruction; switched by qemu_plugin_reset.
 */
#ifndef PVPERF_MODE_H
#define PVPERF_MODE_H

#include <stdbool.h>
#include <stdint.h>
#include <qemu-plugin.h>

/* Each flag adds generated code, so each is on only while it is needed. */
enum pvperf_mode {
	MODE_OFF = 0,			/* nothing open: only doorbells */
	MODE_COUNT = 1 << 0,		/* instruction counts: an inline add */
	MODE_BRANCHES = 1 << 1,		/* + branch counts: another add */
	MODE_SAMPLE = 1 << 2,		/* + a conditional callback per chunk */
	MODE_CAPTURE_FRAME = 1 << 3,	/* + capture points after sp/bp writers */
	MODE_CAPTURE_ALL = 1 << 4,	/* + a capture point per instruction */
	MODE_CACHE = 1 << 5,		/* + fetch and memory callbacks */
	MODE_BPRED = 1 << 6,		/* + branch sites, TB-start callbacks */
	MODE_TLB = 1 << 7,		/* + fetch and memory callbacks (TLBs) */
};

/* Where register capture points go (count.c), from the applied mode. */
enum capture_at {
	CAPTURE_NONE,
	CAPTURE_FRAME,		/* after each instruction that writes sp or bp */
	CAPTURE_ALL,		/* before every instruction but a chunk's first */
};

/* reinstall: registers every callback again after a reset (pvperf.c);
 * settled: runs inside the reset's exclusive section before that. */
void mode_init(qemu_plugin_id_t id, unsigned initial,
	       void (*reinstall)(qemu_plugin_id_t id), void (*settled)(void));
bool mode_counting(void);
bool mode_branches(void);
bool mode_sampling(void);
bool mode_cache(void);
bool mode_bpred(void);
bool mode_tlb(void);
enum capture_at mode_capture(void);
unsigned reply_mode(uint32_t flags);
void mode_request(unsigned mode);
void mode_request_flush(void);

#endif /* PVPERF_MODE_H */
