/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * host_timer.c - host-time ticks without instrumented code (ABI v6,
 * PVPERF_OP_TICK).
 *
 * Sampling host CPU time through the countdown cost a check in every
 * chunk of guest code (1.26x plain TCG on a tight loop, before any
 * sample).  Here emu.c, at each point, gives each vCPU a target: the
 * CPU time of its thread at which the nearest host-time slot may fall
 * due.  One waiter thread of ours reads each armed vCPU's thread CPU
 * clock (pthread_getcpuclockid) and sleeps on the monotonic clock for
 * what is left (a thread's CPU time never runs ahead of the wall clock,
 * so the sleep never overshoots; it wakes again if the thread did not
 * run all the while).  At the target it increments the vCPU's ring's
 * `ticks` in guest RAM and writes the vCPU's doorbell eventfd; QEMU
 * raises the overflow interrupt, and the guest's handler answers with
 * TICK from where the interrupt landed, which emu.c charges on the
 * vCPU's thread.  The kernel's cpu-clock event works the same way (an
 * hrtimer, the interrupted registers).
 *
 * Not a POSIX CPU-time timer (timer_create on CLOCK_THREAD_CPUTIME_ID):
 * the kernel checks those at its scheduler tick, so on this host (HZ
 * 250) they fired at most 250 times a second whatever the period.  The
 * waiter's sleeps are hrtimers with a timer slack of 1 ns.
 *
 * Only when every vCPU has a thread of its own (MTTCG) and the plugin
 * writes every vCPU's ring: one thread's clock cannot tell round-robin
 * vCPUs apart, and the ticks word lives in the ring (host_timer_usable).
 *
 * Contexts: init and exit on whatever thread installs or exits; vcpu
 * init and arm on the vCPU's own thread; tick on the waiter.
 */
#define _GNU_SOURCE	/* ppoll */
#include <glib.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "host_timer.h"

/* Close enough to the target to tick rather than sleep again. */
#define TICK_SLACK_NS	2000ULL

static struct host_timer {
	clockid_t clock;	/* the vCPU thread's CPU clock */
	bool created;
	uint64_t target;	/* thread ns to tick at, 0: none (atomic) */
	uint32_t *ticks;	/* the ring's ticks word (atomic), or NULL */
	uint64_t fired;		/* verbose */
} __attribute__((aligned(64))) *ht;

static unsigned n_timers;
static int wake_fd = -1;	/* -1: no waiter (init failed or exited) */
static pthread_t waiter;
static bool stopping;		/* atomic */
static bool shared_thread;	/* a vCPU thread runs several vCPUs */

static void tick(unsigned vcpu)
{
	struct host_timer *t = &ht[vcpu];
	uint32_t *word = __atomic_load_n(&t->ticks, __ATOMIC_ACQUIRE);
	int fd = __atomic_load_n(&pv.vcpu[vcpu].doorbell_fd, __ATOMIC_RELAXED);

	if (!word || fd < 0)
		return;
	__atomic_fetch_add(word, 1, __ATOMIC_RELEASE);
	t->fired++;
	doorbell_write(fd);	/* not written: an interrupt is pending */
}

/* Tick the vCPUs whose target is reached; the wall time to sleep until
 * the nearest other one could be (-1: none armed). */
static int64_t tick_due(void)
{
	int64_t sleep_ns = -1;

	for (unsigned i = 0; i < n_timers; i++) {
		uint64_t target = __atomic_load_n(&ht[i].target, __ATOMIC_ACQUIRE);
		uint64_t now;

		if (!target || !ht[i].created)
			continue;
		now = clock_ns(ht[i].clock);
		if (now + TICK_SLACK_NS >= target) {
			/* disarmed, unless the vCPU re-armed meanwhile */
			if (__atomic_compare_exchange_n(&ht[i].target, &target, 0,
					false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				tick(i);
			continue;
		}
		if (sleep_ns < 0 || (int64_t)(target - now) < sleep_ns)
			sleep_ns = target - now;
	}
	return sleep_ns;
}

static void *waiter_main(void *arg)
{
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	while (!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) {
		int64_t sleep_ns = tick_due();
		struct timespec ts = { sleep_ns / 1000000000LL,
				       sleep_ns % 1000000000LL };
		struct pollfd p = { .fd = wake_fd, .events = POLLIN };
		uint64_t drained;

		if (ppoll(&p, 1, sleep_ns < 0 ? NULL : &ts, NULL) > 0 &&
		    read(wake_fd, &drained, sizeof(drained)) < 0)
			continue;	/* EAGAIN: nothing to drain */
	}
	return NULL;
}

bool host_timer_init(unsigned n_vcpus)
{
	ht = g_aligned_alloc0(n_vcpus, sizeof(*ht), 64);
	n_timers = n_vcpus;
	wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (wake_fd < 0)
		return false;
	if (pthread_create(&waiter, NULL, waiter_main, NULL)) {
		close(wake_fd);
		wake_fd = -1;
		return false;
	}
	return true;
}

void host_timer_vcpu_init(unsigned vcpu, bool shared)
{
	if (shared)
		__atomic_store_n(&shared_thread, true, __ATOMIC_RELAXED);
	if (wake_fd < 0 || vcpu >= n_timers || shared)
		return;
	ht[vcpu].created = !pthread_getcpuclockid(pthread_self(),
						  &ht[vcpu].clock);
}

void host_timer_set_ticks(unsigned vcpu, uint32_t *word)
{
	if (vcpu < n_timers)
		__atomic_store_n(&ht[vcpu].ticks, word, __ATOMIC_RELEASE);
}

bool host_timer_usable(void)
{
	unsigned n = MIN(n_timers, (unsigned)qemu_plugin_num_vcpus());

	if (wake_fd < 0 || __atomic_load_n(&shared_thread, __ATOMIC_RELAXED))
		return false;
	for (unsigned i = 0; i < n; i++) {
		if (!ht[i].created ||
		    !__atomic_load_n(&ht[i].ticks, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&pv.vcpu[i].doorbell_fd, __ATOMIC_RELAXED) < 0)
			return false;
	}
	return n > 0;
}

void host_timer_arm(unsigned vcpu, uint64_t at_ns)
{
	uint64_t one = 1, before;

	if (vcpu >= n_timers || !ht[vcpu].created)
		return;
	before = __atomic_exchange_n(&ht[vcpu].target, at_ns, __ATOMIC_ACQ_REL);
	/* The waiter sleeps until the old target at most: wake it only for
	 * an earlier one. */
	if (at_ns && (!before || at_ns < before) &&
	    write(wake_fd, &one, sizeof(one)) != sizeof(one))
		return;		/* a full eventfd wakes it all the same */
}

void host_timer_exit(void)
{
	uint64_t one = 1;

	if (wake_fd < 0)
		return;
	__atomic_store_n(&stopping, true, __ATOMIC_RELEASE);
	if (write(wake_fd, &one, sizeof(one)) == sizeof(one))
		pthread_join(waiter, NULL);
	for (unsigned i = 0; i < n_timers && pv.verbose; i++) {
		if (ht[i].fired)
			pvperf_log("vcpu %u: %" PRIu64 " host-time ticks\n", i,
				   ht[i].fired);
	}
	/* wake_fd stays open: a vCPU still running may arm after this, and
	 * a closed number could be another file's by then. */
}
