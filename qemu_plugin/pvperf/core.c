/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * core.c - the plugin's shared state (core.h): the per-vCPU state and
 * the scoreboard, and logging.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core.h"

/* Guest-triggerable log lines allowed per vCPU: a guest must not be able
 * to flood the host's log, and a few lines say what went wrong. */
#define GUEST_LOG_BUDGET 16

struct pvperf_state pv;

void pvperf_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("pvperf: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Log something a guest can trigger at will: verbose only, rate-limited. */
void pvperf_guest_log(unsigned vcpu, const char *fmt, ...)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	va_list ap;

	if (!pv.verbose || !v->log_budget)
		return;
	v->log_budget--;
	va_start(ap, fmt);
	fprintf(stderr, "pvperf: vcpu %u: ", vcpu);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (!v->log_budget)
		fprintf(stderr, "pvperf: vcpu %u: further guest errors not logged\n", vcpu);
}

int core_init(int n_vcpus)
{
	if (n_vcpus < 1)
		return -1;
	pv.n_vcpus = n_vcpus;
	pv.vcpu = g_aligned_alloc0(n_vcpus, sizeof(*pv.vcpu), 64);
	for (int i = 0; i < n_vcpus; i++) {
		pv.vcpu[i].fd = -1;
		pv.vcpu[i].doorbell_fd = -1;
		pv.vcpu[i].log_budget = GUEST_LOG_BUDGET;
		pv.vcpu[i].prng = 0x9e3779b97f4a7c15ULL * (i + 1);
	}
	pv.score = qemu_plugin_scoreboard_new(sizeof(struct pvperf_score));
	return 0;
}

void core_vcpu_init(unsigned vcpu)
{
	if (pv.n_vcpus <= SCORE_FIXED_VCPUS)
		__atomic_store_n(&pv.score_base, (struct pvperf_score *)
				 qemu_plugin_scoreboard_find(pv.score, vcpu) -
				 vcpu, __ATOMIC_RELAXED);
}
