/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * state.h - checkpoints: the plugin's state saved at exit and restored at
 * install (state.c; the format is pvperf_proto.h's pvperf_state_*).
 */
#ifndef PVPERF_STATE_H
#define PVPERF_STATE_H

#include <stdint.h>

/* Install: read and check a checkpoint; its last reply's flags. */
int state_load(const char *path, uint32_t *reply_flags);
/* vcpu_init: re-arm that vCPU from the loaded checkpoint, if any. */
void state_restore_vcpu(unsigned vcpu);
/* atexit: write the checkpoint of every vCPU. */
void state_save(const char *path);

#endif /* PVPERF_STATE_H */
