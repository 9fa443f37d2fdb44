/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * host_timer.h - per vCPU, a target on its thread's CPU time at which a
 * waiter thread raises the guest's overflow interrupt with a host-time
 * tick (host_timer.c).
 */
#ifndef PVPERF_HOST_TIMER_H
#define PVPERF_HOST_TIMER_H

#include <stdbool.h>
#include <stdint.h>

/* Install: start the waiter; false if that fails (host-time sampling
 * then uses the countdown). */
bool host_timer_init(unsigned n_vcpus);
/* vcpu_init, on the vCPU's thread (its CPU clock); shared: that thread
 * already runs another vCPU (round-robin), which turns ticks off for
 * good. */
void host_timer_vcpu_init(unsigned vcpu, bool shared);
/* The vCPU's ring's ticks word in guest RAM (ring_take), NULL: none. */
void host_timer_set_ticks(unsigned vcpu, uint32_t *word);
/* Whether every vCPU can be ticked (own thread, timer, ring, doorbell). */
bool host_timer_usable(void);
/* On the vCPU's thread: tick once its CPU time reaches at_ns
 * (CLOCK_THREAD_CPUTIME_ID's value); 0 disarms. */
void host_timer_arm(unsigned vcpu, uint64_t at_ns);
/* At exit: the waiter stopped. */
void host_timer_exit(void);

#endif /* PVPERF_HOST_TIMER_H */
