/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models.c - feeds the cache and branch-predictor models (models.h):
 * their state, and their inputs but data accesses (models_mem.c).
 *
 * What each vCPU's models see, and from which callback:
 *
 *   instruction fetches  one I1 reference per run of instructions that
 *                        stay in one line: an instruction lying wholly in
 *                        the last line of the one before it is an MRU hit
 *                        that changes nothing, so it needs no callback
 *                        (I1 accesses themselves are the instruction
 *                        count).  The TB-start callback makes the first.
 *   data accesses        a memory callback per access, with the address
 *                        QEMU computed.  A store right after a load of
 *                        the same address and size by the same instruction
 *                        (a read-modify-write instruction) is one read, as
 *                        cachegrind counts a "modify".  An instruction
 *                        whose later access page-faults runs again: its
 *                        first load, seen twice, counts once (the
 *                        guest's FAULT names it; compat only, where
 *                        no kernel access comes between).  QEMU splits a
 *                        32-byte (vector) access in two 16-byte ones: the
 *                        second half of one is the same access, as for
 *                        cachegrind, which misses once if either does.
 *   branches             a conditional or indirect branch stores its site
 *                        into the vCPU's scoreboard entry (an inline
 *                        store, no callback); the next TB of the same half
 *                        starts at the branch's outcome, and its start
 *                        callback feeds the predictor.  Inline ops run
 *                        before their instruction, so a branch that
 *                        faults (call pushing onto an unmapped page) has
 *                        stored its site: the restart at its own address
 *                        is recognised and resolves nothing.  On a TB's
 *                        first instruction the start callback is
 *                        registered before the store, and QEMU emits
 *                        them in that order.
 *
 * Addresses.  Data addresses are the runtime ones (the memory callback's).
 * Code addresses are where the TB was translated: TBs are PC-relative
 * and serve every process mapping their page (sample.c), so shared code
 * run by another process is seen at the translating process's address,
 * a multiple of the page size away.  Reading the pc at every TB start to
 * correct that cost more than half of the models' time (27 ns a TB), and
 * it changes nothing that depends on the page offset: L1 set indexes
 * (sets * line <= page), the predictor's indexes (low 7 and 9 bits), a
 * branch's outcome (the next TB's start against its fall-through: the
 * same page offset a page apart is never both).  It matters for LL set
 * indexes and for sample ips, so while something samples (INSTRUMENT_SAMPLE)
 * a user TB's start callback reads the pc and keeps the runtime delta.
 *
 * Cachegrind compatibility (compat=on).  Cachegrind sees one process's
 * user code, from a cold start.  So only user-half code is instrumented
 * (kernel fetches, accesses and branches neither count nor disturb the
 * models); the models watch a vCPU only while it runs an event that
 * counts model events (PVPERF_REPLY_MODELS_LIVE on each reply: the
 * driver enables the events of the monitored task when it runs, so other
 * processes' code is not seen either); and a session of model events
 * starts cold (PVPERF_REPLY_MODELS_COLD: the LL is emptied there and
 * each vCPU empties its own L1s and predictor at its next TB, the cold
 * epoch telling it).  Otherwise both halves and every process feed the
 * same models, which stay warm, as hardware's do.
 *
 * Counts.  The models' events are counted in the counter store
 * (counters.h), which tells sampling of each growth of a counter a slot
 * is armed on, from the callback that saw the event.
 *
 * Registers (PVPERF_PROTO_REGS slots: callchains, sample registers, user
 * stacks).  While the service asks for captures (instrument_capture), the
 * callbacks that see events (block start, fetch, memory access) are
 * registered with QEMU_PLUGIN_CB_R_REGS, and an overflow
 * carries the general-purpose registers read in it: for an instruction
 * fetch (I1, iTLB) those just before the instruction ran; for a data
 * access those between the access and the instruction's register writes,
 * which TCG emits after its loads and stores (a pop's or a return's
 * stack pointer is still the old one, a load's destination not yet
 * written: the state just before the instruction, except for string
 * instructions, whose pointer and count registers are those of the
 * current iteration); for a branch, resolved at the next block's start,
 * those after it (the target's; a return's stack pointer already
 * popped).  The ip is always the event's instruction.
 *
 * Fast paths (models_fast.c) skip what would change nothing.
 *
 * Sharing.  L1I, L1D and the predictor are per vCPU and touched only by
 * its thread.  The LL is shared, as on a multi-core chip, and locked when
 * there is more than one vCPU; it is reached on L1 misses only.
 */
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "bpred.h"
#include "cachesim.h"
#include "core.h"
#include "guest.h"
#include "instrument.h"
#include "model_config.h"
#include "models.h"
#include "models_int.h"

struct model_vcpu *mv;			/* [pv.n_vcpus] */
static struct cache ll;
static GMutex ll_lock;
static uint64_t cold_epoch;		/* atomic; bumped under ll_lock */

/* cachegrind's predictor in compat, a stronger one otherwise. */
static enum bpred_kind predictor(void)
{
	return mcfg.compat ? BPRED_CACHEGRIND : BPRED_GSHARE;
}

void models_init(unsigned n_vcpus)
{
	mv = g_aligned_alloc0(n_vcpus, sizeof(*mv), 64);
	for (unsigned i = 0; i < n_vcpus; i++) {
		cache_init(&mv[i].i1, &mcfg.i1);
		cache_init(&mv[i].d1, &mcfg.d1);
		cache_init(&mv[i].itlb, &mcfg.itlb);
		cache_init(&mv[i].dtlb, &mcfg.dtlb);
		bpred_init(&mv[i].bp, predictor());
		mv[i].fast_ok = !mcfg.compat;
		mv[i].last_dblock = CACHE_EMPTY;
	}
	cache_init(&ll, &mcfg.ll);
	fast_create(mv[0].i1.set_mask + 1, mv[0].itlb.set_mask + 1);
}

void models_vcpu_init(unsigned vcpu)
{
	fast_vcpu_init(vcpu);
}

/* ---- the models' inputs ---- */

bool ll_ref(uint64_t addr, unsigned size)
{
	bool miss;

	/* One vCPU: only its thread touches the LL (hypercall replies run
	 * on it too), and the lock's two atomic operations were a fifth of
	 * a streaming loop's time. */
	if (pv.n_vcpus == 1)
		return cache_ref(&ll, addr, size);
	g_mutex_lock(&ll_lock);
	miss = cache_ref(&ll, addr, size);
	g_mutex_unlock(&ll_lock);
	return miss;
}

/* After a reference of [addr, addr + len) to c, its blocks are their
 * sets' most recent: say so in the mirror (the last one last, for a
 * cache of one set). */
static inline void mirror(uint64_t *fs, size_t at, const struct cache *c,
			  uint64_t addr, unsigned len)
{
	uint64_t first = addr >> c->line_bits;
	uint64_t last = (addr + len - 1) >> c->line_bits;

	fs[at + (first & c->set_mask)] = first;
	fs[at + (last & c->set_mask)] = last;
}

static void fetch(unsigned vcpu, struct model_vcpu *m, uint64_t addr,
		  unsigned len, bool kernel, bool regs)
{
	struct event_at at = { vcpu, addr, addr, regs };
	uint64_t *fs = m->fast_ok ? fast_of(vcpu) : NULL;	/* mirrors kept */

	/* A new most recent block in a set: a steady branch's target may
	 * no longer be one (see fast_steady). */
	if (m->n_steady && ((instrument_tlb() && !cache_is_mru(&m->itlb, addr, len)) ||
			    (instrument_cache() && !cache_is_mru(&m->i1, addr, len))))
		fast_unsteady(vcpu, m);
	if (instrument_tlb()) {
		if (cache_ref(&m->itlb, addr, len))
			bump(m, PVPERF_M_ITLB_MISS, kernel, at);
		if (fs)
			mirror(fs, fs_itlb, &m->itlb, addr, len);
	}
	if (!instrument_cache())
		return;
	if (fs)
		mirror(fs, FS_I1, &m->i1, addr, len);
	if (!cache_ref(&m->i1, addr, len))
		return;
	bump(m, PVPERF_M_I1_MISS, kernel, at);
	if (ll_ref(addr, len))
		bump(m, PVPERF_M_LL_IMISS, kernel, at);
}

void models_reply(unsigned vcpu, const struct pvperf_proto_reply *reply)
{
	uint32_t flags = reply->flags;

	if (mcfg.compat)
		mv[vcpu].live = flags & PVPERF_REPLY_MODELS_LIVE;
	fast_update_ok(vcpu, &mv[vcpu]);
	if (mcfg.compat && (flags & PVPERF_REPLY_MODELS_COLD)) {
		g_mutex_lock(&ll_lock);
		cache_reset(&ll);
		__atomic_add_fetch(&cold_epoch, 1, __ATOMIC_RELEASE);
		g_mutex_unlock(&ll_lock);
		/* Each vCPU empties its own models at its next slow TB start:
		 * make that the next.  Another vCPU's entries are written from
		 * here without a lock: one it is writing at the same time may
		 * keep a line "most recent", delaying its cold start to a later
		 * slow path (compat with events live on two vCPUs at once). */
		for (unsigned i = 0; i < pv.n_vcpus &&
		     i < (unsigned)qemu_plugin_num_vcpus(); i++) {
			fast_empty_mirrors(fast_of(i));
			fast_of(i)[FS_EXPECT] = 0;
		}
	}
}

/* compat: empty this vCPU's own models, a cold start was asked for. */
static void __attribute__((noinline, cold))
cold_start(unsigned vcpu, struct model_vcpu *m, uint64_t epoch)
{
	uint64_t *fs = fast_of(vcpu);

	fast_unsteady(vcpu, m);
	fast_empty_mirrors(fs);
	m->last_dblock = CACHE_EMPTY;
	m->epoch = epoch;
	cache_reset(&m->i1);
	cache_reset(&m->d1);
	cache_reset(&m->itlb);
	cache_reset(&m->dtlb);
	bpred_init(&m->bp, predictor());
	m->load_site = 0;
}

static inline void catch_up(unsigned vcpu, struct model_vcpu *m)
{
	uint64_t epoch = __atomic_load_n(&cold_epoch, __ATOMIC_ACQUIRE);

	if (__builtin_expect(m->epoch != epoch, 0))
		cold_start(vcpu, m, epoch);
}

void fetch_exec(unsigned vcpu, void *udata)
{
	const struct fetch_site *f = udata;
	struct model_vcpu *m = &mv[vcpu];

	if (ignored(m))
		return;
	fetch(vcpu, m, f->vaddr + m->delta[!f->kernel], f->len, f->kernel,
	      f->regs);
}

/* The pending branch of this half resolved by where execution went.
 * Returns its address if it is now steady taken (fast paths), else 0. */
static uint64_t resolve_branch(unsigned vcpu, struct model_vcpu *m,
			       const struct branch_site *b, uint64_t delta,
			       uint64_t next, bool kernel, bool regs)
{
	uint64_t pc = b->vaddr + delta;
	struct event_at at = { vcpu, pc, 0, regs };
	bool miss;

	if (next == pc)		/* it faulted and runs again: not retired */
		return 0;
	if (b->conditional) {
		unsigned c = PVPERF_CTR_MODEL(PVPERF_M_COND, !kernel);
		bool taken = next != pc + b->len;

		/* Counted where it ran, by generated code (score_cond). */
		if (__builtin_expect(counters_of(vcpu)->armed & (1ull << c), 0))
			counters_grew(1ull << c, kernel, at);
		miss = bpred_cond(&m->bp, pc, taken);
		if (miss)
			bump(m, PVPERF_M_COND_MISS, kernel, at);
		if (!taken)
			fast_unsteady(vcpu, m);
		else if (m->fast_ok && !delta &&
			 bpred_taken_is_steady(&m->bp, pc))
			return pc;
	} else {
		bump(m, PVPERF_M_IND, kernel, at);
		if (bpred_indirect(&m->bp, pc, next))
			bump(m, PVPERF_M_IND_MISS, kernel, at);
	}
	return 0;
}

void tb_start_exec(unsigned vcpu, void *udata)
{
	const struct tb_site *t = udata;
	struct model_vcpu *m = &mv[vcpu];
	struct pvperf_score *s = score_of(vcpu);
	uint64_t *pending = &s->branch[!t->kernel];
	uint64_t *fs = fast_of(vcpu);
	uint64_t delta = 0, pc, steady = 0;

	/* Several conditions of one fast TB start may fire: the first does
	 * it all (the TB's inline store clears the mark after them).  A
	 * one-block loop's start has one condition and no inline store. */
	if (t->loop) {
		fs[FS_EXPECT] = 0;
	} else if (t->fast) {
		if (fs[FS_EXPECT] == FS_HANDLED)
			return;
		fs[FS_EXPECT] = FS_HANDLED;
	} else {
		fs[FS_EXPECT] = 0;
	}
	/* A pending branch of the watched task waits while others run: its
	 * next TB resolves it (its delta is still the one kept). */
	if (ignored(m)) {
		m->watched[!t->kernel] = false;
		return;
	}
	catch_up(vcpu, m);
	if (t->runtime && guest_read_reg(REG_PC, &pc))
		delta = pc - t->vaddr;
	if (*pending && !m->watched[!t->kernel])
		*pending = 0;		/* stored by code nobody watches */
	m->watched[!t->kernel] = true;
	if (*pending) {
		steady = resolve_branch(vcpu, m,
			(const struct branch_site *)(uintptr_t)
				(*pending & ~PENDING_UNSTEADY),
			m->delta[!t->kernel], t->vaddr + delta, t->kernel,
			t->regs);
		*pending = 0;
	}
	m->delta[!t->kernel] = delta;
	if (counters_of(vcpu)->armed_cycles) {
		struct event_at at = { vcpu, t->vaddr + delta, 0, t->regs };

		counters_grew(CTR_INSN_BITS, t->kernel, at);
	}
	if (t->fetch)
		fetch(vcpu, m, t->vaddr + delta, t->len, t->kernel, t->regs);
	/* After the fetch: this TB's line and page are now the most recent,
	 * which its start's fast path takes for granted (it has no fetch
	 * conditions when it has a branch one). */
	if (steady && t->fast)
		fast_steady(fs, m, steady);
}

void models_fault(unsigned vcpu, uint64_t ip)
{
	struct model_vcpu *m = &mv[vcpu];

	/* No branch is pending at a fault: a TB's start, whose callback
	 * takes the pending one, comes before its instructions.  But a
	 * one-block loop's start skipped on entry leaves its branch's site
	 * in place (models_fast.c), and the instruction that faulted
	 * restarts in another TB, whose start would resolve it again, as
	 * taken (not at its fall-through).  With the history as it was that
	 * changes nothing, but the kernel's own branches (outside compat)
	 * may have moved it since. */
	score_of(vcpu)->branch[!vaddr_is_kernel(ip)] = 0;

	/* Sites are translated addresses: a page multiple from ip at most. */
	if (m->load_site && !((m->load_site ^ ip) & (GUEST_PAGE_SIZE - 1)))
		m->refault_site = m->load_site;
}

/* Flush (exclusive section): branch sites die with the arena. */
void models_flush(void)
{
	for (unsigned i = 0; mv && i < pv.n_vcpus &&
	     i < (unsigned)qemu_plugin_num_vcpus(); i++) {
		struct pvperf_score *s = score_of(i);

		s->branch[0] = s->branch[1] = 0;
		fast_of(i)[FS_EXPECT] = 0;
		/* an instrumentation switch may bring in a dTLB or I1 that saw none of
		 * the code since */
		mv[i].last_dblock = CACHE_EMPTY;
		fast_unsteady(i, &mv[i]);
	}
}

