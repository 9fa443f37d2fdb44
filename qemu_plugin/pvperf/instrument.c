/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * instrument.c - what is instrumented (instrument.h), switched at the
 * service's request (PVPERF_REPLY_*) by qemu_plugin_reset(), which
 * flushes every TB inside an exclusive section and unregisters all our
 * callbacks (plugins/loader.c plugin_flush_destroy); reset_done()
 * re-registers them through the reinstall hook.
 *
 * An instrumentation is a set of INSTRUMENT_* flags ("mode", in the
 * plugin, is only the CPU's: kernel or user).
 *
 * desired: what the service asked for last.  Written by any vCPU thread in
 *   a marker callback, read in reset_done; atomic.
 * applied: what tb_trans instruments and the FAULT handler assumes.
 *   Written only in reset_done, inside the exclusive section (no vCPU runs,
 *   no TB is being translated), so every TB in the code cache agrees with
 *   it; read (atomically) by tb_trans and the callbacks.
 * reset_pending: a reset is in flight.  QEMU ignores a second
 *   qemu_plugin_reset while one is pending, so a request that finds one
 *   pending only updates desired, which reset_done reads when it finally
 *   runs.  Set by the requesting thread, cleared in reset_done; atomic.
 *
 * Why counts stay exact across a switch: the service turns counting (and
 * branch counting) on at an event's OPEN and off after the last CLOSE (of
 * a branch event), and an event counts only
 * between its ENABLE and DISABLE, which are later hypercalls.  QEMU enters
 * the exclusive section as soon as the current TB ends (every vCPU is
 * kicked out of its TB chain first), so the flush happens before this vCPU
 * runs another TB, and any later hypercall runs in a TB translated with
 * the new setting.  Only the rest of the marker's own TB runs with the
 * old instrumentation: the guest must not put two hypercalls in one TB
 * (any branch ends a TB; the driver's hypercall helper returns with ret).
 */
#include "host_timer.h"
#include "instrument.h"
#include "pvperf_proto.h"

static qemu_plugin_id_t plugin_id;
static void (*reinstall_cb)(qemu_plugin_id_t id);
static void (*settled_cb)(void);
static unsigned desired;	/* INSTRUMENT_* flags */
static unsigned applied;	/* INSTRUMENT_* flags */
static int reset_pending;

static bool applied_has(unsigned flag)
{
	return __atomic_load_n(&applied, __ATOMIC_RELAXED) & flag;
}

bool instrument_counting(void)
{
	return applied_has(INSTRUMENT_COUNT);
}

bool instrument_branches(void)
{
	return applied_has(INSTRUMENT_BRANCHES);
}

bool instrument_sampling(void)
{
	return applied_has(INSTRUMENT_SAMPLE);
}

bool instrument_cache(void)
{
	return applied_has(INSTRUMENT_CACHE);
}

bool instrument_bpred(void)
{
	return applied_has(INSTRUMENT_BPRED);
}

bool instrument_tlb(void)
{
	return applied_has(INSTRUMENT_TLB);
}

bool instrument_device(void)
{
	return applied_has(INSTRUMENT_DEVICE);
}

bool instrument_host_time(void)
{
	return applied_has(INSTRUMENT_HOST_TIME);
}

enum capture_at instrument_capture(void)
{
	return applied_has(INSTRUMENT_CAPTURE_ALL) ? CAPTURE_ALL :
	       applied_has(INSTRUMENT_CAPTURE_FRAME) ? CAPTURE_FRAME : CAPTURE_NONE;
}

/* Exclusive section, all our callbacks gone: apply the latest request. */
static void reset_done(qemu_plugin_id_t id)
{
	__atomic_store_n(&applied, __atomic_load_n(&desired, __ATOMIC_SEQ_CST),
			 __ATOMIC_SEQ_CST);
	settled_cb();
	reinstall_cb(id);
	__atomic_store_n(&reset_pending, 0, __ATOMIC_SEQ_CST);
}

/* Retranslate everything with the newest desired instrumentation.  Any
 * thread. */
void instrument_request_flush(void)
{
	if (__atomic_exchange_n(&reset_pending, 1, __ATOMIC_SEQ_CST))
		return;		/* the pending reset flushes too */
	qemu_plugin_reset(plugin_id, reset_done);
}

/*
 * The instrumentation a reply's PVPERF_REPLY_* flags ask for.  Each flag
 * needs the ones below it: overflows are detected on the instruction
 * counters, and captures happen at overflows.
 */
unsigned reply_instrumentation(uint32_t flags)
{
	unsigned what = INSTRUMENT_NONE;

	if (!(flags & (PVPERF_REPLY_COUNTING | PVPERF_REPLY_SAMPLING)))
		return INSTRUMENT_NONE;
	what |= INSTRUMENT_COUNT;
	if (flags & PVPERF_REPLY_BRANCHES)
		what |= INSTRUMENT_BRANCHES;
	if (flags & PVPERF_REPLY_CACHE)
		what |= INSTRUMENT_CACHE;
	if (flags & PVPERF_REPLY_BPRED)
		what |= INSTRUMENT_BPRED;
	if (flags & PVPERF_REPLY_TLB)
		what |= INSTRUMENT_TLB;
	if (flags & PVPERF_REPLY_DEVICE)
		what |= INSTRUMENT_DEVICE;
	if (flags & PVPERF_REPLY_HOST_TIME) {
		what |= INSTRUMENT_HOST_TIME;
		/* Without timers (emu.c), the countdown paces its checks. */
		if (!host_timer_usable())
			what |= INSTRUMENT_SAMPLE;
	}
	if (!(flags & PVPERF_REPLY_SAMPLING))
		return what;
	what |= INSTRUMENT_SAMPLE;
	if (flags & PVPERF_REPLY_REGS)
		what |= INSTRUMENT_CAPTURE_ALL;
	else if (flags & PVPERF_REPLY_FRAME)
		what |= INSTRUMENT_CAPTURE_FRAME;
	return what;
}

/* Marker callback (vCPU thread): what the service asked for. */
void instrument_request(unsigned what)
{
	__atomic_store_n(&desired, what, __ATOMIC_SEQ_CST);
	if (what == __atomic_load_n(&applied, __ATOMIC_SEQ_CST))
		return;
	instrument_request_flush();	/* reset_done applies desired */
}

void instrument_init(qemu_plugin_id_t id, unsigned initial,
	       void (*reinstall)(qemu_plugin_id_t id), void (*settled)(void))
{
	plugin_id = id;
	reinstall_cb = reinstall;
	settled_cb = settled;
	desired = applied = initial;
}
