/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models.c - feeds the cache and branch-predictor models (models.h).
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
 * Sampling.  A slot on model counters (the service never mixes them with
 * inline ones) is checked where its counters grow, in the callback that
 * saw the event, so the overflow names that very instruction (and, for
 * data events, the access's address).  A memory callback runs after its
 * access succeeded, so the instruction retires (unless a later access of
 * it faults: a FIXME, rare).
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
 * Fast paths.  Most TB starts and fetches change nothing: their line is
 * already the most recent of its I1 set (and its page of its iTLB set),
 * and the branch that led there was a loop branch taken in the
 * predictor's steady state (bpred_taken_is_steady: taken again, it is
 * predicted and moves nothing).  A callback costs more than the host
 * instructions it would run (a dec/jnz loop: 1.9 ns an iteration plain,
 * 6.7 ns more with the start callback alone), so these are put behind
 * conditional callbacks on a second scoreboard (FS_*), which the slow
 * paths keep true to the models:
 *   FS_I1, fs_itlb  a mirror of each set's most recent block, written
 *                   on each reference; a fetch's callbacks run only if
 *                   its block is not the mirror's (one condition per
 *                   model; a reference straddling two blocks is always
 *                   called).
 *   FS_STEADY       per slot (branch address, low bits), the address of
 *                   a branch now steady taken, set right after the
 *                   fetch of the TB it is taken to, so that TB's line and
 *                   page are their sets' most recent; all cleared when a
 *                   branch is not taken (the history then changes;
 *                   nothing else can undo a steady state) and when a
 *                   fetch makes another block the most recent of a set.
 *   FS_EXPECT       a direct conditional branch stores its taken target
 *                   there, and clears it in a callback if its FS_STEADY
 *                   slot is not its own; a TB start runs its callback if
 *                   FS_EXPECT is not its address, then clears it.  So a
 *                   TB skips its start (fetch included) only when
 *                   entered by the taken edge of a steady branch; the
 *                   branch's site, stored anyway, is cleared unresolved
 *                   (resolving it would change nothing).  Without the
 *                   predictor, a TB start has the fetch conditions
 *                   instead.  Conditional branches are therefore counted
 *                   where they run, by an inline add (FS_COND), in code
 *                   the models ignore too (outside any live event: the
 *                   service counts between an event's enable and disable).
 *   one-block loops a TB whose last instruction is a direct conditional
 *                   branch to its own start (loop_branch) needs neither
 *                   FS_EXPECT nor the clearing stores: its start's one
 *                   condition is that the pending branch is not its own
 *                   site, as its branch stores it.  The branch's
 *                   callback, when it is not steady, tags the site
 *                   (PENDING_UNSTEADY), and so does every loss of the
 *                   steady marks (fast_unsteady); the start's callback
 *                   resolves tagged sites like others.  A skipped start
 *                   leaves the site in place until the branch stores it
 *                   again; an instruction that faults in between restarts
 *                   in another TB, whose start must not resolve it again
 *                   (models_fault clears it; an exception the guest does
 *                   not report, a divide error say, leaves it, resolved
 *                   once more as taken: no change unless kernel branches
 *                   moved the history in between).  A two-instruction
 *                   loop (decrement, branch): five inline operations a
 *                   block instead of eight.
 * While the fast paths must not be taken (compat with no live event; a
 * slot on cycles or conditional branches, which needs every TB start or
 * branch), the mirrors and steady slots are emptied and not refilled
 * (fast_ok), so every condition fires; and while samples need runtime
 * addresses or registers, TBs are instrumented with plain callbacks.
 *
 * Sharing.  L1I, L1D and the predictor are per vCPU and touched only by
 * its thread.  The LL is shared, as on a multi-core chip, and locked when
 * there is more than one vCPU; it is reached on L1 misses only.
 */
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "arena.h"
#include "bpred.h"
#include "cachesim.h"
#include "core.h"
#include "guest.h"
#include "instrument.h"
#include "link.h"
#include "model_config.h"
#include "models.h"
#include "sample.h"

/*
 * The fast paths' scoreboard (struct pvperf_score is fixed-size; this one
 * follows the geometry): per vCPU, an array of u64 at these indexes.
 */
#define STEADY_SLOTS	256		/* by branch address, low bits */
#define STEADY_LIST	16
enum {
	FS_EXPECT,		/* the TB a steady branch was taken to, 0 */
	FS_COND,		/* [2] conditional branches, per half */
	FS_STEADY = FS_COND + 2,	/* [STEADY_SLOTS] steady branches */
	FS_I1 = FS_STEADY + STEADY_SLOTS, /* [I1 sets] each set's MRU block */
	/* FS_I1 + I1 sets: [iTLB sets] each set's MRU page (fs_itlb) */
};
#define FS_HANDLED	1	/* FS_EXPECT: this TB start already ran */
/* A pending branch (struct pvperf_score.branch, an 8-aligned site) with
 * this bit must be resolved even by a one-block loop's start. */
#define PENDING_UNSTEADY	1ull

struct model_vcpu {
	struct cache i1, d1, itlb, dtlb;
	uint64_t ctr[2 * PVPERF_NR_MODEL_COUNTERS];	/* [2 * m + mode] */
	/* delta of the last TB started in each half (kernel: always 0) */
	uint64_t delta[2];
	/* The last data access, if a load: a store matching it is merged. */
	uint64_t load_site, load_addr;
	unsigned load_size;
	/* The site of that load if its instruction then faulted: the same
	 * load again is the re-execution, not a new access. */
	uint64_t refault_site;
	/* The first half of a 32-byte access (QEMU splits vector ones in two
	 * 16-byte accesses; cachegrind sees one): its site, end, direction
	 * and whether it missed L1D and the LL. */
	uint64_t half_site, half_end;
	bool half_store, half_d1_miss, half_ll_miss, half_tlb_miss;
	bool live;		/* compat: the models watch this vCPU */
	/* Armed slots on model counters, and the union of their masks;
	 * whether one is on cycles (instructions + stall: timing model). */
	unsigned n_slots;
	uint64_t armed;
	bool armed_cycles;
	struct model_slot {
		uint64_t threshold;	/* UINT64_MAX: disarmed */
		uint64_t period;
		uint32_t event_id;
		uint64_t mask;		/* raw counter bits (model ones) */
		uint8_t rand_bits;
		uint8_t flags;		/* PVPERF_PROTO_SYNC */
	} slot[PVPERF_PROTO_MAX_SLOTS];
	/* compat: whether the last TB started in each half was watched, so
	 * whether a pending branch is the watched task's (the inline store
	 * runs in unwatched code too: perf's own before it execs the task) */
	bool watched[2];
	uint64_t epoch;		/* compat: the cold epoch it last reset at */
	/* The D1 block of the last data access, if it lay wholly in it
	 * (CACHE_EMPTY if none): that block is then the most recent of its
	 * D1 set and its page of its dTLB set, so an access within it again
	 * changes neither (most accesses of a loop: no lookup at all). */
	uint64_t last_dblock;
	/* Fast paths (see "Fast paths" above): whether they may be taken
	 * now, and the steady-branch slots set since the history last broke
	 * (n_steady > STEADY_LIST: too many to list, clear them all). */
	bool fast_ok;
	unsigned n_steady;
	uint16_t steady_slot[STEADY_LIST];
	struct bpred bp;	/* last: large, touched at a few places */
} __attribute__((aligned(64)));

static struct model_vcpu *mv;		/* [pv.n_vcpus] */
static struct cache ll;
static GMutex ll_lock;
static uint64_t cold_epoch;		/* atomic; bumped under ll_lock */
static struct qemu_plugin_scoreboard *fast_sb;
static size_t fast_size;		/* bytes per vCPU */
static size_t fs_itlb;			/* index of the iTLB mirror */
static char *fast_base;			/* kept as pv.score_base; atomic */

/* What a TB-start callback needs. */
struct tb_site {
	uint64_t vaddr;		/* where the TB was translated */
	uint32_t len;		/* bytes of its first I1 reference */
	bool kernel;
	bool fetch;		/* run the I1 reference */
	bool runtime;		/* read the pc: runtime code addresses */
	bool regs;		/* registered with R_REGS for captures */
	bool fast;		/* behind conditions (fast paths) */
	/* A one-block loop: its last instruction, a direct conditional
	 * branch to its start (see "Fast paths"); else NULL. */
	struct branch_site *loop;
};

/* A conditional or indirect branch (stored in the scoreboard). */
struct branch_site {
	uint64_t vaddr;		/* translated address */
	uint32_t len;
	bool conditional;
	bool kernel;		/* in the kernel half */
};

/* An I1 reference by an instruction that is not a TB's first. */
struct fetch_site {
	uint64_t vaddr;
	uint32_t len;
	bool kernel;
	bool regs;		/* registered with R_REGS for captures */
};

/*
 * An instruction that accesses memory (the memory callbacks' udata).
 * kind[store]: the access kind QEMU passed last, plus 1 so that 0 means
 * "not seen yet" (bits 0..32, ACCESS_KIND_KEY), and its size shift
 * (bits 40..47), in one word so that a vCPU never reads one without the
 * other.  An instruction's kind is nearly always fixed (QEMU passes it
 * as a constant of the generated code; accesses made by helpers, an FPU
 * state save say, may vary, and each change takes the full path), so
 * the fast path compares it and never calls QEMU's accessor, and a
 * call-free fast path saves fewer registers.
 */
struct mem_site {
	uint64_t vaddr;		/* translated address */
	uint64_t kind[2];	/* [store], atomic */
	bool kernel;		/* vaddr is in the kernel half */
};

/* Where and on what a model event happened (the overflow's ip, addr). */
struct event_at {
	unsigned vcpu;
	uint64_t ip;
	uint64_t addr;
	bool regs;		/* the callback may read registers (R_REGS) */
};

#define INLINE_BITS	((1ull << PVPERF_NR_INLINE_COUNTERS) - 1)
#define INSN_BITS	(1ull << PVPERF_CTR_INSN_KERNEL | 1ull << PVPERF_CTR_INSN_USER)
#define STALL_BITS	(1ull << PVPERF_CTR_MODEL(PVPERF_M_STALL, 0) | \
			 1ull << PVPERF_CTR_MODEL(PVPERF_M_STALL, 1))

/* ---- the fast paths' scoreboard ---- */

static inline uint64_t *fast_of(unsigned vcpu)
{
	char *base = __atomic_load_n(&fast_base, __ATOMIC_RELAXED);

	if (__builtin_expect(base != NULL, 1))
		return (uint64_t *)(base + vcpu * fast_size);
	return qemu_plugin_scoreboard_find(fast_sb, vcpu);
}

static qemu_plugin_u64 fs_entry(size_t index)
{
	return (qemu_plugin_u64){ fast_sb, index * sizeof(uint64_t) };
}

static void fast_create(void)
{
	size_t n = FS_I1 + (mv[0].i1.set_mask + 1) + (mv[0].itlb.set_mask + 1);

	fs_itlb = FS_I1 + mv[0].i1.set_mask + 1;
	fast_size = (n * sizeof(uint64_t) + 63) & ~(size_t)63;
	fast_sb = qemu_plugin_scoreboard_new(fast_size);
}

/* The I1 and iTLB mirrors say nothing is most recent: conditions fire. */
static void fast_empty_mirrors(uint64_t *fs)
{
	size_t n = fs_itlb + mv[0].itlb.set_mask + 1 - FS_I1;

	for (size_t i = 0; i < n; i++)
		fs[FS_I1 + i] = CACHE_EMPTY;
}

/*
 * The history broke (or the predictor was reset, or a fetch made another
 * block the most recent of a set): no branch is steady.  A one-block
 * loop's branch stored as pending (see "Fast paths") is tagged, so that
 * its block's start runs its callback again.
 */
static void fast_unsteady(unsigned vcpu)
{
	struct model_vcpu *m = &mv[vcpu];
	uint64_t *fs;
	struct pvperf_score *s;

	if (!m->n_steady)
		return;
	fs = fast_of(vcpu);
	s = score_of(vcpu);
	for (unsigned h = 0; h < 2; h++)
		if (s->branch[h])
			s->branch[h] |= PENDING_UNSTEADY;
	if (m->n_steady > STEADY_LIST)
		memset(&fs[FS_STEADY], 0, STEADY_SLOTS * sizeof(uint64_t));
	else
		for (unsigned i = 0; i < m->n_steady; i++)
			fs[FS_STEADY + m->steady_slot[i]] = 0;
	m->n_steady = 0;
}

/* Every condition fires until slow paths learn the state again. */
static void fast_forget(unsigned vcpu)
{
	uint64_t *fs = fast_of(vcpu);

	fast_unsteady(vcpu);
	fast_empty_mirrors(fs);
	fs[FS_EXPECT] = 0;
}

/*
 * The branch at pc is steady taken: the TB it is taken to may skip its
 * start, fetch included.  So a steady branch's target is always the most
 * recent block of its I1 set and page of its iTLB set: set only right
 * after that TB's fetch, and every steady branch is forgotten when a
 * fetch makes another block the most recent of a set (fetch).
 */
static void fast_steady(uint64_t *fs, struct model_vcpu *m, uint64_t pc)
{
	unsigned slot = pc & (STEADY_SLOTS - 1);

	if (fs[FS_STEADY + slot] == pc)
		return;
	fs[FS_STEADY + slot] = pc;
	if (m->n_steady < STEADY_LIST)
		m->steady_slot[m->n_steady] = slot;
	m->n_steady++;
}

/*
 * Whether the fast paths may be taken: not while the models ignore this
 * vCPU (compat), nor while a slot wants the place of every conditional
 * branch or every TB start (a sample on branches, on cycles).
 */
static void fast_update_ok(unsigned vcpu, struct model_vcpu *m)
{
	const uint64_t cond_bits =
		1ull << PVPERF_CTR_MODEL(PVPERF_M_COND, 0) |
		1ull << PVPERF_CTR_MODEL(PVPERF_M_COND, 1);
	bool ok = !(mcfg.compat && !m->live) && !m->armed_cycles &&
		  !(m->armed & cond_bits);

	if (!ok && m->fast_ok)
		fast_forget(vcpu);
	m->fast_ok = ok;
}

/* Model counter idx (2 * m + mode): conditional branches are counted by
 * generated code, in the fast paths' scoreboard. */
static uint64_t model_ctr(unsigned vcpu, const struct model_vcpu *m,
			  unsigned idx)
{
	uint64_t n = m->ctr[idx];

	if (idx / 2 == PVPERF_M_COND)
		n += fast_of(vcpu)[FS_COND + idx % 2];
	return n;
}

static uint64_t slot_sum(unsigned vcpu, const struct model_vcpu *m,
			 uint64_t mask)
{
	uint64_t sum = 0, insn[PVPERF_NR_INLINE_COUNTERS];

	if (mask & INLINE_BITS) {	/* cycles: instructions too */
		score_count(vcpu, insn);
		for (unsigned c = 0; c < PVPERF_NR_INLINE_COUNTERS; c++)
			if (mask & (1ull << c))
				sum += insn[c];
	}
	for (mask >>= PVPERF_NR_INLINE_COUNTERS; mask; mask &= mask - 1)
		sum += model_ctr(vcpu, m, __builtin_ctzll(mask));
	return sum;
}

/*
 * Slots on raw counters in bits that an increment made reach threshold.
 * A cycles slot (timing model) is also checked at each TB start, for the
 * instructions: the count then already holds the whole first chunk, so
 * its sample may name an instruction up to a block early.
 */
static void __attribute__((noinline, cold))
check_slots(struct model_vcpu *m, uint64_t bits, bool kernel,
	    struct event_at at)
{
	for (unsigned i = 0; i < m->n_slots; i++) {
		struct model_slot *sl = &m->slot[i];
		struct pvperf_proto_overflow msg;
		uint64_t regs[PVPERF_NR_REGS];

		if (!(sl->mask & bits) ||
		    slot_sum(at.vcpu, m, sl->mask) < sl->threshold)
			continue;
		msg = (struct pvperf_proto_overflow){
			.magic = PVPERF_PROTO_OVERFLOW_MAGIC,
			.vcpu = at.vcpu,
			.event_id = sl->event_id,
			.mode = kernel ? PVPERF_MODE_KERNEL : PVPERF_MODE_USER,
			.flags = sl->flags & PVPERF_PROTO_SYNC,
			.ip = at.ip,
			.threshold = sl->threshold,
			.data_addr = at.addr,
		};
		if ((sl->flags & PVPERF_PROTO_REGS) && at.regs &&
		    guest_read_gprs(regs)) {
			memcpy(msg.regs, regs, sizeof(msg.regs));
			msg.flags |= PVPERF_PROTO_REGS;
		}
		sl->threshold = msg.next_threshold = sample_next_threshold(
			at.vcpu, sl->threshold, sl->period, sl->rand_bits);
		link_send_overflow(at.vcpu, &msg);
	}
}

/* Model counter ctr grew by n in the half given, at at.  The event's
 * place is passed by value, so that nothing is built unless a slot is
 * armed on the counter (the callbacks' fast paths stay short). */
static inline void add(struct model_vcpu *m, unsigned ctr, uint64_t n,
		       bool kernel, struct event_at at)
{
	unsigned c = PVPERF_CTR_MODEL(ctr, !kernel);

	m->ctr[2 * ctr + !kernel] += n;
	if (__builtin_expect(m->armed & (1ull << c), 0))
		check_slots(m, 1ull << c, kernel, at);
}

/* An event (model counter ctr) in the half given, at *at; it stalls the
 * timing model by its penalty. */
static inline void bump(struct model_vcpu *m, unsigned ctr, bool kernel,
			struct event_at at)
{
	add(m, ctr, 1, kernel, at);
	if (mcfg.penalty[ctr])
		add(m, PVPERF_M_STALL, mcfg.penalty[ctr], kernel, at);
}

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
	fast_create();
}

void models_vcpu_init(unsigned vcpu)
{
	if (pv.n_vcpus <= SCORE_FIXED_VCPUS)
		__atomic_store_n(&fast_base, (char *)qemu_plugin_scoreboard_find(
				 fast_sb, vcpu) - vcpu * fast_size,
				 __ATOMIC_RELAXED);
	fast_empty_mirrors(fast_of(vcpu));
}

void models_count(unsigned vcpu, uint64_t *out)
{
	for (unsigned i = 0; i < 2 * PVPERF_NR_MODEL_COUNTERS; i++)
		out[i] = model_ctr(vcpu, &mv[vcpu], i);
}

/* ---- the models' inputs ---- */

static bool ll_ref(uint64_t addr, unsigned size)
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
		fast_unsteady(vcpu);
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

/* Whether this file serves a slot: model counters only, or cycles under
 * the timing model (instructions and stall cycles, both present). */
static bool models_slot(uint64_t mask)
{
	const uint64_t all_bits = (1ull << PVPERF_NR_COUNTERS) - 1;

	if (!mask || (mask & ~all_bits))
		return false;
	if (!(mask & INLINE_BITS))
		return true;
	return (mask & STALL_BITS) && !(mask & ~(INSN_BITS | STALL_BITS)) &&
	       (mask & INSN_BITS);
}

/* The reply's slots on model counters. */
static void arm(struct model_vcpu *m, const struct pvperf_proto_reply *reply)
{
	unsigned n = 0;

	m->armed = 0;
	m->armed_cycles = false;
	for (unsigned i = 0; i < reply->n_slots && i < PVPERF_PROTO_MAX_SLOTS; i++) {
		const struct pvperf_proto_slot *ps = &reply->slot[i];

		if (!models_slot(ps->ctr_mask) || ps->rand_bits > 31)
			continue;
		m->slot[n++] = (struct model_slot){
			.threshold = ps->threshold,
			.period = ps->period,
			.event_id = ps->event_id,
			.mask = ps->ctr_mask,
			.rand_bits = ps->rand_bits,
			.flags = ps->flags & (PVPERF_PROTO_SYNC | PVPERF_PROTO_REGS),
		};
		m->armed |= ps->ctr_mask & ~INLINE_BITS;
		m->armed_cycles |= !!(ps->ctr_mask & INLINE_BITS);
	}
	m->n_slots = n;
}

void models_reply(unsigned vcpu, const struct pvperf_proto_reply *reply)
{
	uint32_t flags = reply->flags;

	arm(&mv[vcpu], reply);
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

/* The models ignore this vCPU's code now (compat, no live event). */
static inline bool ignored(const struct model_vcpu *m)
{
	return mcfg.compat && !m->live;
}

/* compat: empty this vCPU's own models, a cold start was asked for. */
static void __attribute__((noinline, cold))
cold_start(unsigned vcpu, struct model_vcpu *m, uint64_t epoch)
{
	uint64_t *fs = fast_of(vcpu);

	fast_unsteady(vcpu);
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

static void fetch_exec(unsigned vcpu, void *udata)
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

		/* Counted where it ran, by generated code (FS_COND). */
		if (__builtin_expect(m->armed & (1ull << c), 0))
			check_slots(m, 1ull << c, kernel, at);
		miss = bpred_cond(&m->bp, pc, taken);
		if (miss)
			bump(m, PVPERF_M_COND_MISS, kernel, at);
		if (!taken)
			fast_unsteady(vcpu);
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

static void tb_start_exec(unsigned vcpu, void *udata)
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
	if (m->armed_cycles) {
		struct event_at at = { vcpu, t->vaddr + delta, 0, t->regs };

		check_slots(m, INSN_BITS, t->kernel, at);
	}
	if (t->fetch)
		fetch(vcpu, m, t->vaddr + delta, t->len, t->kernel, t->regs);
	/* After the fetch: this TB's line and page are now the most recent,
	 * which its start's fast path takes for granted (it has no fetch
	 * conditions when it has a branch one). */
	if (steady && t->fast)
		fast_steady(fs, m, steady);
}

/* The second 16 bytes of a split 32-byte access: the lines it touches,
 * but no second access, and a miss only if the first half had none. */
static void second_half(struct model_vcpu *m, uint64_t vaddr, bool store,
			bool kernel, struct event_at at)
{
	unsigned acc = store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ;

	m->half_site = 0;
	/* its lines and pages are now the most recent: in a cache of one
	 * set, the first half's no longer is */
	m->last_dblock = CACHE_EMPTY;
	if (instrument_tlb() && cache_ref(&m->dtlb, vaddr, 16) && !m->half_tlb_miss)
		bump(m, store ? PVPERF_M_DTLB_WRITE_MISS :
				PVPERF_M_DTLB_READ_MISS, kernel, at);
	if (!instrument_cache() || !cache_ref(&m->d1, vaddr, 16))
		return;
	if (!m->half_d1_miss)
		bump(m, acc + 1, kernel, at);
	if (ll_ref(vaddr, 16) && !m->half_ll_miss)
		bump(m, store ? PVPERF_M_LL_WRITE_MISS : PVPERF_M_LL_READ_MISS,
		     kernel, at);
}

/* A D1 miss (and the LL behind it): out of line, the rarer case. */
static void __attribute__((noinline))
d1_miss(struct model_vcpu *m, uint64_t vaddr, unsigned size, bool store,
	bool kernel, struct event_at at)
{
	m->half_d1_miss = true;
	bump(m, (store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ) + 1, kernel,
	     at);
	if (ll_ref(vaddr, size)) {
		m->half_ll_miss = true;
		bump(m, store ? PVPERF_M_LL_WRITE_MISS : PVPERF_M_LL_READ_MISS,
		     kernel, at);
	}
}

static void __attribute__((noinline))
dtlb_miss(struct model_vcpu *m, bool store, bool kernel, struct event_at at)
{
	m->half_tlb_miss = true;
	bump(m, store ? PVPERF_M_DTLB_WRITE_MISS : PVPERF_M_DTLB_READ_MISS,
	     kernel, at);
}

#define ACCESS_KIND_KEY	((1ull << 33) - 1)
#define ACCESS_KIND_SHIFT	40

static inline uint64_t mem_kind_key(qemu_plugin_meminfo_t info)
{
	_Static_assert(sizeof(info) == sizeof(uint32_t), "meminfo is 32 bits");
	return (uint64_t)info + 1;
}

/*
 * The accesses that are not new ones, or not wholly: a faulted load seen
 * again, the second half of a split 32-byte access, the store of a
 * modify.  True if the access is done with.
 */
static bool __attribute__((noinline))
mem_access_repeat(struct model_vcpu *m, uint64_t site, uint64_t vaddr,
		  unsigned size, bool store, bool kernel, struct event_at at)
{
	if (!store && m->refault_site) {
		bool again = m->refault_site == site &&
			     m->load_addr == vaddr && m->load_size == size;

		m->refault_site = 0;
		if (again)
			return true;	/* counted before the fault */
	}
	m->refault_site = 0;
	if (size == 16 && m->half_site == site && m->half_end == vaddr &&
	    m->half_store == store) {
		second_half(m, vaddr, store, kernel, at);
		return true;
	}
	if (store && m->load_site == site && m->load_addr == vaddr &&
	    m->load_size == size) {
		m->load_site = 0;	/* a modify: counted as its load */
		m->half_site = 0;
		return true;
	}
	return false;
}

/*
 * A data access, the whole of it: the repeats, the access count with its
 * overflow check, the dTLB and D1 (and LL) references.
 */
static void __attribute__((noinline))
mem_access_full(unsigned vcpu, const struct mem_site *ms, uint64_t vaddr,
		unsigned size, bool store, bool regs)
{
	struct model_vcpu *m = &mv[vcpu];
	uint64_t site = ms->vaddr;
	bool kernel = ms->kernel;
	struct event_at at = { vcpu, site + m->delta[!kernel], vaddr, regs };
	uint64_t first = vaddr >> m->d1.line_bits;

	if (ignored(m) ||
	    mem_access_repeat(m, site, vaddr, size, store, kernel, at))
		return;
	m->refault_site = 0;
	m->load_site = store ? 0 : site;
	m->load_addr = vaddr;
	m->load_size = size;
	m->half_site = 0;
	/* an access stalls nothing: add, not bump */
	add(m, store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ, 1, kernel, at);
	if (size == 16) {	/* perhaps the first half of an AVX access */
		m->half_site = site;
		m->half_end = vaddr + 16;
		m->half_store = store;
		m->half_d1_miss = m->half_ll_miss = m->half_tlb_miss = false;
	}
	m->last_dblock = first == (vaddr + size - 1) >> m->d1.line_bits ?
			 first : CACHE_EMPTY;
	if (instrument_tlb() && cache_ref(&m->dtlb, vaddr, size))
		dtlb_miss(m, store, kernel, at);
	if (instrument_cache() && cache_ref(&m->d1, vaddr, size))
		d1_miss(m, vaddr, size, store, kernel, at);
}

/* The first access of an instruction of this kind: learn its size. */
static void __attribute__((noinline))
mem_access_new_kind(unsigned vcpu, qemu_plugin_meminfo_t info,
		    uint64_t vaddr, struct mem_site *ms, bool store, bool regs)
{
	unsigned shift = qemu_plugin_mem_size_shift(info);

	__atomic_store_n(&ms->kind[store],
			 (uint64_t)shift << ACCESS_KIND_SHIFT | mem_kind_key(info),
			 __ATOMIC_RELAXED);
	mem_access_full(vcpu, ms, vaddr, 1u << shift, store, regs);
}

/*
 * A data access; store and regs are constants of each callback below,
 * into which it is inlined.  The common case, a plain access within the
 * last one's D1 block with no slot on it, only books it (a few stores);
 * anything else goes to mem_access_full, in tail position, and the
 * common case calls nothing (gcc 12 then saves two registers, not four).
 */
static inline __attribute__((always_inline)) void
mem_access_at(unsigned vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr,
	      void *udata, bool store, bool regs)
{
	struct mem_site *ms = udata;
	uint64_t kind = __atomic_load_n(&ms->kind[store], __ATOMIC_RELAXED);
	struct model_vcpu *m = &mv[vcpu];
	uint64_t site = ms->vaddr;
	unsigned size = 1u << (kind >> ACCESS_KIND_SHIFT);
	unsigned ctr = PVPERF_CTR_MODEL(store ? PVPERF_M_D1_WRITE :
					PVPERF_M_D1_READ, !ms->kernel);
	uint64_t block = m->last_dblock;

	if (__builtin_expect((kind & ACCESS_KIND_KEY) != mem_kind_key(info), 0))
		return mem_access_new_kind(vcpu, info, vaddr, ms, store, regs);
	if (__builtin_expect(ignored(m) || m->refault_site || size == 16 ||
			     (store && m->load_site == site) ||
			     (m->armed & (1ull << ctr)) ||
			     vaddr >> m->d1.line_bits != block ||
			     (vaddr + size - 1) >> m->d1.line_bits != block, 0))
		return mem_access_full(vcpu, ms, vaddr, size, store, regs);
	m->load_site = store ? 0 : site;
	m->load_addr = vaddr;
	m->load_size = size;
	m->half_site = 0;
	m->ctr[ctr - PVPERF_NR_INLINE_COUNTERS]++;
}

/* The memory callbacks: loads and stores apart (which one an access is
 * is known at registration), each also with R_REGS, registered while the
 * service asks for captures. */
#define MEM_CALLBACK(name, store, regs)					\
	static void name(unsigned vcpu, qemu_plugin_meminfo_t info,	\
			 uint64_t vaddr, void *udata)			\
	{								\
		mem_access_at(vcpu, info, vaddr, udata, store, regs);	\
	}
MEM_CALLBACK(mem_read, false, false)
MEM_CALLBACK(mem_write, true, false)
MEM_CALLBACK(mem_read_regs, false, true)
MEM_CALLBACK(mem_write_regs, true, true)

/* A write to the page-table root: another address space, with no
 * address-space tags kept in the TLBs (docs/events.md). */
static void aspace_exec(unsigned vcpu, void *udata)
{
	cache_reset(&mv[vcpu].itlb);
	cache_reset(&mv[vcpu].dtlb);
	mv[vcpu].last_dblock = CACHE_EMPTY;
	fast_empty_mirrors(fast_of(vcpu));
	fast_unsteady(vcpu);
}

/* A steady branch turned out not to be (its condition fired): the TB it
 * is taken to must not skip its callback, a one-block loop's included
 * (its site was just stored as pending). */
static void branch_unsteady_exec(unsigned vcpu, void *udata)
{
	const struct branch_site *b = udata;

	fast_of(vcpu)[FS_EXPECT] = 0;
	score_of(vcpu)->branch[!b->kernel] =
		(uintptr_t)b | PENDING_UNSTEADY;
}

/* ---- translation ---- */

static uint64_t line_of(uint64_t addr)
{
	return addr / mcfg.i1.line;
}

/* Whether [vaddr, vaddr + len) is one block of each model that fetches
 * reference (a straddling reference has no single mirror entry). */
static bool one_block(uint64_t vaddr, uint32_t len, bool cache, bool tlb)
{
	uint64_t end = vaddr + len - 1;

	return (!cache || line_of(vaddr) == line_of(end)) &&
	       (!tlb || vaddr / mcfg.itlb.line == end / mcfg.itlb.line);
}

/* Call cb unless vaddr's block is the most recent of its set in the
 * mirror at index at of cache c. */
static void register_unless_mru(struct qemu_plugin_insn *insn, uint64_t vaddr,
				const struct cache *c, size_t at,
				qemu_plugin_vcpu_udata_cb_t cb, void *udata)
{
	uint64_t block = vaddr >> c->line_bits;

	qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, cb,
		QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
		fs_entry(at + (block & c->set_mask)), block, udata);
}

/* Call cb unless the block of vaddr is already its set's most recent in
 * I1 and in the iTLB (see "Fast paths"): one condition per model. */
static void register_fetch(struct qemu_plugin_insn *insn, uint64_t vaddr,
			   bool cache, bool tlb, qemu_plugin_vcpu_udata_cb_t cb,
			   void *udata)
{
	if (cache)
		register_unless_mru(insn, vaddr, &mv[0].i1, FS_I1, cb, udata);
	if (tlb)
		register_unless_mru(insn, vaddr, &mv[0].itlb, fs_itlb, cb,
				    udata);
}

/* A TB's start: behind conditions when fast, else always called. */
static void register_tb_start(struct qemu_plugin_insn *insn,
			      struct tb_site *t, bool cache, bool bpred,
			      bool tlb)
{
	if (!t->fast) {
		qemu_plugin_register_vcpu_insn_exec_cb(insn, tb_start_exec,
			t->runtime || t->regs ? QEMU_PLUGIN_CB_R_REGS :
						QEMU_PLUGIN_CB_NO_REGS, t);
		return;
	}
	/* A one-block loop: entered by its own steady branch, its site is
	 * still the pending one, untagged; nothing to clear after. */
	if (t->loop) {
		qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, tb_start_exec,
			QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
			score_branch(t->kernel), (uintptr_t)t->loop, t);
		return;
	}
	/* Not entered by a steady branch's taken edge (whose target's line
	 * and page are the most recent: no fetch conditions then), or not
	 * the most recent line and page. */
	if (bpred)
		qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, tb_start_exec,
			QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
			fs_entry(FS_EXPECT), t->vaddr, t);
	else
		register_fetch(insn, t->vaddr, cache, tlb, tb_start_exec, t);
	/* After the conditions: consumed, whichever path ran. */
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_STORE_U64, fs_entry(FS_EXPECT), 0);
	if (bpred)
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
			QEMU_PLUGIN_INLINE_STORE_U64, score_branch(t->kernel), 0);
}

/* A direct conditional branch's taken target, if it has one. */
static bool cond_target(struct qemu_plugin_insn *insn, uint64_t vaddr,
			uint64_t *target)
{
	uint8_t bytes[INSN_MAX_BYTES];

	return pv.arch->cond_target(bytes,
		qemu_plugin_insn_data(insn, bytes, sizeof(bytes)), vaddr,
		target);
}

/* The site of a fast TB's last instruction if the TB is a one-block loop
 * (that instruction a direct conditional branch to the TB's start). */
static struct branch_site *loop_branch(struct qemu_plugin_tb *tb, size_t n,
				       const uint8_t *cls, uint64_t tb_vaddr)
{
	struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, n - 1);
	uint64_t vaddr = qemu_plugin_insn_vaddr(insn), target;
	struct branch_site *b;

	if (!(cls[n - 1] & CLS_COND) || !cond_target(insn, vaddr, &target) ||
	    target != tb_vaddr)
		return NULL;
	b = arena_alloc(sizeof(*b));
	*b = (struct branch_site){ vaddr, qemu_plugin_insn_size(insn), true,
				   vaddr_is_kernel(vaddr) };
	return b;
}

/* A conditional or indirect branch: its site for the next TB start; a
 * conditional one also counted here, and, if direct in a fast TB, handed
 * over as steady (FS_EXPECT: its taken target) unless its condition says
 * otherwise.  A one-block loop's branch (loop: its site) hands over by
 * its site alone, which its TB's start compares. */
static void register_branch(struct qemu_plugin_insn *insn, uint64_t vaddr,
			    uint32_t len, uint8_t cls, bool kernel, bool fast,
			    struct branch_site *loop)
{
	struct branch_site *b = loop ? loop : arena_alloc(sizeof(*b));
	uint64_t target;

	*b = (struct branch_site){ vaddr, len, cls & CLS_COND,
				   vaddr_is_kernel(vaddr) };
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_STORE_U64, score_branch(kernel),
		(uintptr_t)b);
	if (!(cls & CLS_COND))
		return;
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
		QEMU_PLUGIN_INLINE_ADD_U64, fs_entry(FS_COND + !kernel), 1);
	if (!fast || !cond_target(insn, vaddr, &target))
		return;
	if (!loop)
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn,
			QEMU_PLUGIN_INLINE_STORE_U64, fs_entry(FS_EXPECT),
			target);
	qemu_plugin_register_vcpu_insn_exec_cond_cb(insn, branch_unsteady_exec,
		QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
		fs_entry(FS_STEADY + (vaddr & (STEADY_SLOTS - 1))), vaddr, b);
}

void models_tb(struct qemu_plugin_tb *tb, const uint8_t *cls, size_t n,
	       bool kernel)
{
	bool cache = instrument_cache(), bpred = instrument_bpred(), tlb = instrument_tlb();
	bool fetches = cache || tlb;	/* I1 and iTLB references */
	bool regs = instrument_capture() != CAPTURE_NONE;
	enum qemu_plugin_cb_flags cb_regs = regs ? QEMU_PLUGIN_CB_R_REGS :
						   QEMU_PLUGIN_CB_NO_REGS;
	uint64_t prev_last_line = 0;
	struct tb_site *t;

	if (!n || (!cache && !bpred && !tlb) || (mcfg.compat && kernel))
		return;
	t = arena_alloc(sizeof(*t));
	/* Kernel code is mapped alike everywhere: no delta to find. */
	*t = (struct tb_site){ .vaddr = qemu_plugin_tb_vaddr(tb),
			       .kernel = kernel, .fetch = fetches,
			       .runtime = !kernel && instrument_sampling(),
			       .regs = regs };
	/* Fast paths compare translated addresses and call back without
	 * registers: not while sampling needs either. */
	t->fast = !t->runtime && !regs &&
		  one_block(t->vaddr, qemu_plugin_insn_size(
				qemu_plugin_tb_get_insn(tb, 0)), cache, tlb);
	if (t->fast && bpred)
		t->loop = loop_branch(tb, n, cls, t->vaddr);
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint64_t vaddr = qemu_plugin_insn_vaddr(insn);
		uint32_t len = qemu_plugin_insn_size(insn);
		uint64_t first = line_of(vaddr), last = line_of(vaddr + len - 1);

		if (i == 0) {
			t->len = len;
			register_tb_start(insn, t, cache, bpred, tlb);
		} else if (fetches &&
			   !(first == prev_last_line && last == first)) {
			struct fetch_site *f = arena_alloc(sizeof(*f));

			*f = (struct fetch_site){ vaddr, len, kernel, regs };
			if (t->fast && one_block(vaddr, len, cache, tlb))
				register_fetch(insn, vaddr, cache, tlb,
					       fetch_exec, f);
			else
				qemu_plugin_register_vcpu_insn_exec_cb(insn,
					fetch_exec, cb_regs, f);
		}
		prev_last_line = last;
		if (tlb && !mcfg.compat && (cls[i] & CLS_ASPACE))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, aspace_exec,
				QEMU_PLUGIN_CB_NO_REGS, NULL);
		if (fetches) {
			struct mem_site *ms = arena_alloc(sizeof(*ms));

			*ms = (struct mem_site){ .vaddr = vaddr,
				.kernel = vaddr_is_kernel(vaddr) };
			/* Loads and stores apart: which one is known here. */
			qemu_plugin_register_vcpu_mem_cb(insn,
				regs ? mem_read_regs : mem_read, cb_regs,
				QEMU_PLUGIN_MEM_R, ms);
			qemu_plugin_register_vcpu_mem_cb(insn,
				regs ? mem_write_regs : mem_write, cb_regs,
				QEMU_PLUGIN_MEM_W, ms);
		}
		if (bpred && (cls[i] & (CLS_COND | CLS_INDIRECT)))
			register_branch(insn, vaddr, len, cls[i], kernel,
					t->fast, i + 1 == n ? t->loop : NULL);
	}
}

void models_fault(unsigned vcpu, uint64_t ip)
{
	struct model_vcpu *m = &mv[vcpu];

	/* No branch is pending at a fault: a TB's start, whose callback
	 * takes the pending one, comes before its instructions.  But a
	 * one-block loop's start skipped on entry leaves its branch's site
	 * in place (see "Fast paths"), and the instruction that faulted
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
		fast_unsteady(i);
	}
}

/* ---- checkpoints (state.c) ---- */

bool models_slot_ok(uint64_t mask)
{
	return models_slot(mask);
}

/* The vCPU's armed model slots, after the inline ones already in s. */
void models_save(unsigned vcpu, struct pvperf_state_vcpu *s)
{
	const struct model_vcpu *m = &mv[vcpu];

	for (unsigned i = 0; i < m->n_slots && s->n_slots < PVPERF_PROTO_MAX_SLOTS; i++) {
		const struct model_slot *sl = &m->slot[i];

		s->slot[s->n_slots++] = (struct pvperf_proto_slot){
			.threshold = sl->threshold, .period = sl->period,
			.ctr_mask = sl->mask, .event_id = sl->event_id,
			.rand_bits = sl->rand_bits, .flags = sl->flags,
		};
	}
}

/* The counts of a checkpoint and its slots (validated by state.c); the
 * caches, TLBs and predictor themselves start cold. */
void models_restore(unsigned vcpu, const uint64_t *counters,
		    const struct pvperf_proto_reply *reply)
{
	uint64_t *fs = fast_of(vcpu);

	memcpy(mv[vcpu].ctr, counters, sizeof(mv[vcpu].ctr));
	fs[FS_COND] = fs[FS_COND + 1] = 0;	/* the counts restored hold them */
	models_reply(vcpu, reply);
}
