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

/* charge_device: the vCPU's host time from `since` to now, charged at ip
 * (the interval before `since` left for its next point); point_ns: the
 * thread CPU time its last point read (unchanged: no point since);
 * now_ns: the thread's CPU time now.  emu.c's, on the vCPU's thread. */
void emu_io_init(unsigned n_vcpus,
		 void (*charge_device)(unsigned vcpu, bool kernel, uint64_t ip,
				       uint64_t since),
		 uint64_t (*point_ns)(unsigned vcpu), uint64_t (*now_ns)(void));
/* tb_trans, INSTRUMENT_HOST_TIME on: before emu.c's host-time check. */
void emu_io_tb(struct qemu_plugin_tb *tb, size_t n, bool kernel);

#endif /* PVPERF_EMU_IO_H */
