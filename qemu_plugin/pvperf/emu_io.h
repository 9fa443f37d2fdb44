/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emu_io.h - device emulation's host time charged to the device access
 * (points before and right after each, while host time is instrumented).
 */
#ifndef PVPERF_EMU_IO_H
#define PVPERF_EMU_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

/* charge_at: a point at ip, charging the vCPU's host time since its
 * last point there; point_ns: the thread CPU time its last point read
 * (unchanged: no point since).  emu.c's, on the vCPU's thread. */
void emu_io_init(unsigned n_vcpus,
		 void (*charge_at)(unsigned vcpu, bool kernel, uint64_t ip),
		 uint64_t (*point_ns)(unsigned vcpu));
/* tb_trans, INSTRUMENT_HOST_TIME on: before emu.c's host-time check. */
void emu_io_tb(struct qemu_plugin_tb *tb, size_t n, bool kernel);

#endif /* PVPERF_EMU_IO_H */
