/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * counts.h - per-TB execution counts of pvperf-rmap.so (counts=on):
 * how many times each recorded translation ran, written at exit as
 * RMAP_REC_COUNTS records (contracts/rmap_format.h), so that pyhost can
 * give each guest function its guest instructions executed in the same
 * run as the host samples (pyhost/profile/bt_table.py).
 */
#ifndef PVPERF_RMAP_COUNTS_H
#define PVPERF_RMAP_COUNTS_H

#include <stdint.h>
#include <qemu-plugin.h>

/* rm.lock: count the executions of `tb`, the `index`th TB record. */
void counts_hook_tb(struct qemu_plugin_tb *tb, uint64_t index);
/* rm.lock, at exit: the counts of TB records 0 .. n_tbs-1, summed over
 * vCPUs, into the output buffer. */
void counts_write(uint64_t n_tbs);

#endif /* PVPERF_RMAP_COUNTS_H */
