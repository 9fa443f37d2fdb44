/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * instrument.h - what the plugin instruments, as a set of INSTRUMENT_*
 * flags: nothing but markers, exact instruction counts, branch counts,
 * overflow detection, register capture after the instructions that move the frame
 * (sp, bp) or at every instruction; switched by qemu_plugin_reset.
 */
#ifndef PVPERF_INSTRUMENT_H
#define PVPERF_INSTRUMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <qemu-plugin.h>

/* Each flag adds generated code, so each is on only while it is needed. */
enum instrumentation {
	INSTRUMENT_NONE = 0,		/* nothing open: only markers */
	INSTRUMENT_COUNT = 1 << 0,	/* instruction counts: an inline add */
	INSTRUMENT_BRANCHES = 1 << 1,	/* + branch counts: another add */
	INSTRUMENT_SAMPLE = 1 << 2,	/* + a conditional callback per chunk */
	INSTRUMENT_CAPTURE_FRAME = 1 << 3, /* + capture points after sp/bp
					    * writers */
	INSTRUMENT_CAPTURE_ALL = 1 << 4, /* + a capture point per instruction */
	INSTRUMENT_CACHE = 1 << 5,	/* + fetch and memory callbacks */
	INSTRUMENT_BPRED = 1 << 6,	/* + branch sites, TB-start callbacks */
	INSTRUMENT_TLB = 1 << 7,	/* + fetch and memory callbacks (TLBs) */
	INSTRUMENT_DEVICE = 1 << 8,	/* + memory callbacks, port I/O ones */
	INSTRUMENT_HOST_TIME = 1 << 9,	/* nothing of its own: the countdown
					 * paces the clock reads (emu.c) */
};

/* Where register capture points go (count.c), from the applied
 * instrumentation. */
enum capture_at {
	CAPTURE_NONE,
	CAPTURE_FRAME,		/* after each instruction that writes sp or bp */
	CAPTURE_ALL,		/* before every instruction but a chunk's first */
};

/* reinstall: registers every callback again after a reset (pvperf.c);
 * settled: runs inside the reset's exclusive section before that. */
void instrument_init(qemu_plugin_id_t id, unsigned initial,
	       void (*reinstall)(qemu_plugin_id_t id), void (*settled)(void));
bool instrument_counting(void);
bool instrument_branches(void);
bool instrument_sampling(void);
bool instrument_cache(void);
bool instrument_bpred(void);
bool instrument_tlb(void);
bool instrument_device(void);
bool instrument_host_time(void);
enum capture_at instrument_capture(void);
unsigned reply_instrumentation(uint32_t flags);
void instrument_request(unsigned what);
void instrument_request_flush(void);

#endif /* PVPERF_INSTRUMENT_H */
