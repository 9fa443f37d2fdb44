/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * mode.h - what the plugin instruments: nothing but doorbells, exact
 * counts, counts with overflow detection, or that with register capture
 * at any instruction; switched by qemu_plugin_reset.
 */
#ifndef PVPERF_MODE_H
#define PVPERF_MODE_H

#include <stdbool.h>
#include <stdint.h>
#include <qemu-plugin.h>

enum pvperf_mode {
	MODE_OFF = 0,		/* nothing open: only doorbells */
	MODE_COUNT = 1,		/* exact counts: inline adds */
	MODE_SAMPLE = 2,	/* + a conditional callback per chunk */
	MODE_SAMPLE_REGS = 3,	/* + a capture point per instruction */
};

/* reinstall: registers every callback again after a reset (pvperf.c);
 * settled: runs inside the reset's exclusive section before that. */
void mode_init(qemu_plugin_id_t id, enum pvperf_mode initial,
	       void (*reinstall)(qemu_plugin_id_t id), void (*settled)(void));
bool mode_counting(void);
bool mode_sampling(void);
bool mode_capturing(void);
enum pvperf_mode reply_mode(uint32_t flags);
void mode_request(enum pvperf_mode mode);
void mode_request_flush(void);

#endif /* PVPERF_MODE_H */
