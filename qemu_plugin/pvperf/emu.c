/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emu.c - the emulator's own work for the guest, counted in the counter
 * store (counters_add: a slot armed on one samples where it grows):
 *
 *   blocks translated  tb_trans, on the translating vCPU's thread; the
 *                      event's place is the guest pc translated (the
 *                      translating vCPU's address: it is about to run it)
 *                      and its half says kernel or user.
 *   flushes            the flush callback, which QEMU runs on the thread
 *                      of the vCPU that asked for it (a full code cache,
 *                      an instrumentation switch), in an exclusive
 *                      section; its place is that vCPU's pc.
 *   device accesses    while an open event counts them (INSTRUMENT_DEVICE):
 *                      a memory callback on every access, counting those
 *                      to I/O memory (qemu_plugin_hwaddr_is_io: MMIO), and
 *                      an exec callback on each port I/O instruction (the
 *                      architecture names them: arch.h is_port_io), which
 *                      runs before it, so one that traps (a user process
 *                      without I/O permission) counts too.
 *   host CPU time      the vCPU thread's CLOCK_THREAD_CPUTIME_ID, read at
 *                      points: every hypercall the service serves (before
 *                      its counters are read: per-task counts are exact to
 *                      the hypercalls that switch tasks); right before and
 *                      after each known device access (emu_io.c); and
 *                      while a sampling event is on it
 *                      (INSTRUMENT_HOST_TIME) either
 *                      - at ticks (timer mode: INSTRUMENT_HOST_TIME
 *                        without INSTRUMENT_SAMPLE): host_timer.c's timer
 *                        on the thread's CPU time, armed at every point
 *                        for when the nearest host-time slot may be due,
 *                        raises the guest's overflow interrupt, whose
 *                        handler answers with PVPERF_OP_TICK from where it
 *                        landed; nothing is instrumented for it;
 *                      - or at "checks" (when something else samples too,
 *                        or no timer can be kept): the start of a chunk
 *                        once the vCPU ran about k instructions since the
 *                        last check, k adapted so that a check comes about
 *                        every CHECK_NS of host time, paced by sampling's
 *                        countdown (sample.c): emu_host_time_room caps
 *                        each half's room, and the chunk callback that
 *                        finds it used up calls emu_host_time_check.
 *                      The time between two points is split between the
 *                      halves in proportion to the instructions each
 *                      retired meanwhile (all to the point's half if none
 *                      did).  A hypercall's own round trip (the vCPU
 *                      waiting for the service) is not charged.
 *
 * Which vCPU: a thread-local index set at vcpu_init.  Round-robin TCG
 * (one thread for every vCPU: -icount, deterministic runs) with smp > 1
 * cannot tell them apart: translations and flushes go to vCPU 0, and each
 * vCPU's host time is the shared thread's (docs/accounting.md).
 */
#include <glib.h>
#include <time.h>

#include "arena.h"
#include "core.h"
#include "counters.h"
#include "emu.h"
#include "emu_io.h"
#include "guest.h"
#include "host_timer.h"
#include "instrument.h"
#include "sample.h"

#define CHECK_NS	20000ULL	/* host time between checks, target */
#define CHECK_FIRST	4096ULL		/* instructions between checks */
#define CHECK_MIN	64ULL
#define CHECK_MAX	(1ULL << 22)	/* < sample.h ROOM_MAX */
/* Timer mode: never sooner than this after a point (a slot of the half
 * the interrupts do not land in stays due until one does). */
#define TICK_MIN_NS	50000ULL
#define HOST_NS_BITS	(1ULL << PVPERF_CTR_MODEL(PVPERF_M_HOST_NS, 0) | \
			 1ULL << PVPERF_CTR_MODEL(PVPERF_M_HOST_NS, 1))

#define THREAD_NONE	(-1)		/* not a vCPU thread */
#define THREAD_SHARED	(-2)		/* every vCPU's (round-robin) */

static __thread int thread_vcpu = THREAD_NONE;

/* Per vCPU, touched only by its thread (or an exclusive section). */
static struct emu_vcpu {
	uint64_t ns_at;		/* thread CPU time at the last point */
	uint64_t insn_at[2];	/* [!kernel] instructions then */
	/* Host-time checks: the instructions (both halves) between two,
	 * paced; the instructions and the thread CPU time at the last, the
	 * latter valid only if paced (not since an instrumentation switch). */
	uint64_t budget;
	uint64_t check_insn_at;
	uint64_t check_ns_at;
	bool paced;
} __attribute__((aligned(64))) *ev;

/* What a device callback needs. */
struct emu_site {
	uint64_t vaddr;		/* translated address */
	bool kernel;
};

static uint64_t thread_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/*
 * emu_io.c's device points (callbacks reading registers, on the vCPU's
 * thread): the host time from `since` (read right before the device
 * access, after the vCPU's last point) to now, the device's emulation,
 * all to ip in ip's half.  The interval before `since` stays pending for
 * the next point, as if the device time had not passed: charging it at
 * the device instruction would give that instruction the time of
 * whatever guest code ran before it.
 */
static void charge_device(unsigned vcpu, bool kernel, uint64_t ip,
			  uint64_t since)
{
	struct emu_vcpu *e = &ev[vcpu];
	uint64_t now = thread_ns();

	if (now < since || since < e->ns_at)
		return;
	e->ns_at += now - since;
	counters_add(PVPERF_M_HOST_NS, now - since, kernel,
		     (struct event_at){ vcpu, ip, 0, true });
}

static uint64_t point_ns(unsigned vcpu)
{
	return ev[vcpu].ns_at;
}

void emu_init(unsigned n_vcpus)
{
	ev = g_aligned_alloc0(n_vcpus, sizeof(*ev), 64);
	for (unsigned i = 0; i < n_vcpus; i++)
		ev[i].budget = CHECK_FIRST;
	emu_io_init(n_vcpus, charge_device, point_ns, thread_ns);
}

static uint64_t both_halves(const uint64_t *c)
{
	return c[PVPERF_CTR_INSN_KERNEL] + c[PVPERF_CTR_INSN_USER];
}

void emu_vcpu_init(unsigned vcpu)
{
	struct emu_vcpu *e = &ev[vcpu];
	uint64_t c[PVPERF_NR_INLINE_COUNTERS];

	thread_vcpu = thread_vcpu == THREAD_NONE ? (int)vcpu : THREAD_SHARED;
	host_timer_vcpu_init(vcpu, thread_vcpu == THREAD_SHARED);
	counters_inline(vcpu, c);
	e->insn_at[0] = c[PVPERF_CTR_INSN_KERNEL];
	e->insn_at[1] = c[PVPERF_CTR_INSN_USER];
	e->check_insn_at = both_halves(c);
	e->ns_at = e->check_ns_at = thread_ns();
	e->paced = true;
}

/* Not on the vCPUs' threads (their clocks cannot be read here): the next
 * check only starts the pace afresh. */
void emu_settled(void)
{
	for (unsigned i = 0; i < pv.n_vcpus &&
	     i < (unsigned)qemu_plugin_num_vcpus(); i++) {
		uint64_t c[PVPERF_NR_INLINE_COUNTERS];

		counters_inline(i, c);
		ev[i].check_insn_at = both_halves(c);
		ev[i].paced = false;
	}
}

/* The vCPU this thread runs, or -1. */
static int self(void)
{
	return thread_vcpu == THREAD_SHARED ? 0 : thread_vcpu;
}

/*
 * Instructions a half retired since *at, which becomes now.  The count
 * can go back: a chunk's instructions are added at its start, and when
 * one of them page-faults, the kernel's FAULT hypercall takes back the
 * ones that did not run (count_fault), after the kernel's fault handler
 * ran for a while, long enough for a host-time check in it to read the
 * user count with that tail still in.  A count behind *at retired
 * nothing since.  (As a u64 difference it wrapped, and with kernel
 * instructions in the interval the split below charged the user half
 * far more than the interval and the kernel half a wrapped negative
 * amount: a user counter near 2^64, past which the service's next
 * threshold was disarmed, so a forked program lost all its samples.)
 */
static uint64_t retired_since(uint64_t now, uint64_t *at)
{
	int64_t d = (int64_t)(now - *at);

	*at = now;
	return d > 0 ? (uint64_t)d : 0;
}

/* Charge the host time since the last point, read now: at is where, in
 * the kernel half or not; other, if not NULL, is where the other half's
 * share may overflow too (else it only grows). */
static uint64_t charge_at(unsigned vcpu, bool kernel, struct event_at at,
			  const struct event_at *other)
{
	struct emu_vcpu *e = &ev[vcpu];
	uint64_t c[PVPERF_NR_INLINE_COUNTERS], now = thread_ns();
	uint64_t d = now - e->ns_at, dk, du, user;

	if (now < e->ns_at)
		return 0;
	counters_inline(vcpu, c);
	dk = retired_since(c[PVPERF_CTR_INSN_KERNEL], &e->insn_at[0]);
	du = retired_since(c[PVPERF_CTR_INSN_USER], &e->insn_at[1]);
	user = dk + du ? (uint64_t)((unsigned __int128)d * du / (dk + du)) :
	       kernel ? 0 : d;
	e->ns_at = now;
	/* A sample's ip must be in its half: the other half's slots see
	 * their growth at their next point, unless we know an ip of it. */
	counters_add(PVPERF_M_HOST_NS, kernel ? d - user : user, kernel, at);
	if (other)
		counters_add(PVPERF_M_HOST_NS, kernel ? user : d - user,
			     !kernel, *other);
	else
		counters_add_quiet(vcpu, PVPERF_M_HOST_NS,
				   kernel ? user : d - user, !kernel);
	return d;
}

static uint64_t charge(unsigned vcpu, bool kernel, struct event_at at)
{
	return charge_at(vcpu, kernel, at, NULL);
}

static bool timer_mode(void)
{
	return instrument_host_time() && !instrument_sampling();
}

/* After a point: the timer for when the nearest host-time slot may be
 * due, if all the time from the last point went to its halves. */
static void rearm(unsigned vcpu)
{
	uint64_t room = timer_mode() ? sample_room(vcpu, HOST_NS_BITS) :
		       UINT64_MAX;

	host_timer_arm(vcpu, room == UINT64_MAX ? 0 :
		       ev[vcpu].ns_at + MAX(room, TICK_MIN_NS));
}

void emu_host_time_tick(unsigned vcpu, uint64_t ip, bool kernel,
			uint64_t user_ip)
{
	struct event_at at = { vcpu, ip, 0, false };
	struct event_at user = { vcpu, user_ip, 0, false };

	if (instrument_host_time())
		charge_at(vcpu, kernel, at, kernel && user_ip ? &user : NULL);
	rearm(vcpu);
}

void emu_hcall_enter(unsigned vcpu, uint64_t ip)
{
	charge(vcpu, true, (struct event_at){ vcpu, ip, 0, false });
}

void emu_hcall_leave(unsigned vcpu)
{
	ev[vcpu].ns_at = thread_ns();
}

void emu_hcall_done(unsigned vcpu)
{
	rearm(vcpu);
}

/* ---- callbacks ---- */

static void device_mem(unsigned vcpu, qemu_plugin_meminfo_t info,
		       uint64_t vaddr, void *udata)
{
	const struct emu_site *s = udata;
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);

	if (hw && qemu_plugin_hwaddr_is_io(hw))
		counters_add(PVPERF_M_DEVICE, 1, s->kernel,
			     (struct event_at){ vcpu, s->vaddr, vaddr, false });
}

static void port_io_exec(unsigned vcpu, void *udata)
{
	const struct emu_site *s = udata;

	counters_add(PVPERF_M_DEVICE, 1, s->kernel,
		     (struct event_at){ vcpu, s->vaddr, 0, false });
}

/* ---- host-time checks (sample.c's pacer: sample.h) ---- */

uint64_t emu_host_time_room(unsigned vcpu, const uint64_t *count)
{
	const struct emu_vcpu *e = &ev[vcpu];
	/* a count gone back (count_fault) ran nothing */
	int64_t ran = (int64_t)(both_halves(count) - e->check_insn_at);

	if (!instrument_host_time())
		return UINT64_MAX;
	return ran <= 0 ? e->budget :
	       (uint64_t)ran < e->budget ? e->budget - ran : 0;
}

/* Read the clock here, at pc (a chunk's start), and pace the next check:
 * from the time since the last check (not the last point: a hypercall in
 * between would make the instructions look cheap).  The countdown calls
 * when either half alone has run the room it was given, so the
 * instructions between two checks are one to two budgets by the mix;
 * scaling the budget (not what ran) by the time keeps checks CHECK_NS
 * apart whatever the (steady) mix. */
void emu_host_time_check(unsigned vcpu, bool kernel, uint64_t pc)
{
	struct emu_vcpu *e = &ev[vcpu];
	uint64_t c[PVPERF_NR_INLINE_COUNTERS], d;

	charge(vcpu, kernel, (struct event_at){ vcpu, pc, 0, true });
	counters_inline(vcpu, c);
	e->check_insn_at = both_halves(c);
	d = e->ns_at - e->check_ns_at;
	if (e->paced)
		e->budget = d ? e->budget * CHECK_NS / d : e->budget * 2;
	e->budget = MIN(MAX(e->budget, CHECK_MIN), CHECK_MAX);
	e->check_ns_at = e->ns_at;
	e->paced = true;
}

/* ---- translation ---- */

static struct emu_site *site(uint64_t vaddr, bool kernel)
{
	struct emu_site *s = arena_alloc(sizeof(*s));

	s->vaddr = vaddr;
	s->kernel = kernel;
	return s;
}

static void device_tb(struct qemu_plugin_tb *tb, size_t n, bool kernel)
{
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		struct emu_site *s = site(qemu_plugin_insn_vaddr(insn), kernel);
		uint8_t bytes[INSN_MAX_BYTES];
		size_t len = qemu_plugin_insn_data(insn, bytes, sizeof(bytes));

		/* Only instructions that access memory get the callback. */
		qemu_plugin_register_vcpu_mem_cb(insn, device_mem,
						 QEMU_PLUGIN_CB_NO_REGS,
						 QEMU_PLUGIN_MEM_RW, s);
		if (pv.arch->is_port_io && pv.arch->is_port_io(bytes, len))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, port_io_exec,
				QEMU_PLUGIN_CB_NO_REGS, s);
	}
}

void emu_tb(struct qemu_plugin_tb *tb, size_t n)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	bool kernel = vaddr_is_kernel(vaddr);
	int vcpu = self();

	if (vcpu >= 0)
		counters_add(PVPERF_M_TB_TRANSLATED, 1, kernel,
			     (struct event_at){ vcpu, vaddr, 0, false });
	if (instrument_device())
		device_tb(tb, n, kernel);
	if (instrument_host_time())
		emu_io_tb(tb, n, kernel);
}

void emu_flush(void)
{
	int vcpu = self();
	uint64_t pc = 0;

	if (vcpu < 0)
		return;		/* not on a vCPU thread: nobody to charge */
	guest_read_reg(REG_PC, &pc);
	counters_add(PVPERF_M_TB_FLUSH, 1, vaddr_is_kernel(pc),
		     (struct event_at){ vcpu, pc, 0, false });
}
