/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emu.h - the emulator's own work as guest events (PVPERF_M_TB_TRANSLATED,
 * _TB_FLUSH, _DEVICE, _HOST_NS): blocks translated, code-cache flushes,
 * device accesses and the vCPU thread's host CPU time.
 */
#ifndef PVPERF_EMU_H
#define PVPERF_EMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

void emu_init(unsigned n_vcpus);
/* vcpu_init (on the vCPU's own thread). */
void emu_vcpu_init(unsigned vcpu);
/* tb_trans: count the translation; instrument device accesses if asked
 * (INSTRUMENT_DEVICE). */
void emu_tb(struct qemu_plugin_tb *tb, size_t n);
/* An instrumentation switch (exclusive section): checks start afresh;
 * before the countdowns are rebased (sample_update_room). */
void emu_settled(void);
/* The host-time checks, as sampling's countdown paces them (struct
 * sample_pacer, sample.h): the instructions the vCPU may still run
 * before the next (count: its counts now; UINT64_MAX while no sampling
 * event is on host time), and the check, at a chunk's runtime start. */
uint64_t emu_host_time_room(unsigned vcpu, const uint64_t *count);
void emu_host_time_check(unsigned vcpu, bool kernel, uint64_t pc);
/* The flush callback (exclusive section). */
void emu_flush(void);
/* Around a hypercall the service serves (the vCPU's thread): bring the
 * host time up to date before its counters are read, and leave the
 * round trip itself uncharged. */
void emu_hcall_enter(unsigned vcpu, uint64_t ip);
void emu_hcall_leave(unsigned vcpu);
/* Once the service's reply is applied (its slots armed): the host-time
 * timer for them (timer mode, emu.c). */
void emu_hcall_done(unsigned vcpu);
/* PVPERF_OP_TICK (the vCPU's thread): charge the host time at ip, in the
 * kernel half or not; user_ip (0: none) is the task's user ip when the
 * tick landed in the kernel. */
void emu_host_time_tick(unsigned vcpu, uint64_t ip, bool kernel,
			uint64_t user_ip);

#endif /* PVPERF_EMU_H */
