/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * count.c - exact retired-instruction and branch counts per vCPU, split
 * user/kernel by the half of the address space the TB runs in.
 *
 * Chunks.  Counting per TB over-counts when an instruction faults in the
 * middle of a TB: TCG abandons the rest of the TB and the guest re-executes
 * the faulting instruction after its handler.  Each TB is cut into chunks
 * whose instruction and branch counts are added just BEFORE the chunk's
 * first instruction executes (an inline add, or an exec callback on that
 * insn).  If instruction m faults, every instruction of m's chunk before m
 * has retired, and m and the rest of its chunk were counted but did not
 * run: the count is too high by m's "tail", the instructions (and
 * branches) from m to the end of its chunk.  The guest kernel reports each
 * page fault it handles with a PVPERF_OP_FAULT hypercall, {fault ip, mode},
 * and count_fault() takes the tail back.  Faults on instruction fetch are
 * not reported (the guest skips X86_PF_INSTR): TCG raises them while
 * translating, before anything of that TB was counted.
 *
 * Tails by vaddr.  The FAULT names an ip, not a TB, and several TBs may
 * hold that ip (a jump into the middle of a TB starts another one over the
 * same code; TBs cut short by TCG's size limits; different processes'
 * code at one vaddr).  So translation records every may-fault
 * instruction's tail in a table keyed by vaddr, and when a second TB
 * disagrees about a tail, that vaddr becomes a forced cut for every TB
 * from then on (its tail is then itself alone) and all code is
 * retranslated once (pvperf_request_flush).  Chunks end at a TB's end, at
 * a doorbell and at forced cuts, so a loop body costs one add per TB
 * instead of one per memory access; tails almost always agree because TBs
 * end at control flow, which is the same in every TB over that code.
 *
 * Sampling mode cuts a segment at EVERY instruction that may fault
 * (classify.c), so a tail is always one instruction there, and sample.c
 * names the exact overflowing instruction from the segment's counts.
 *
 * Snapshots.  The doorbell store is a memory access and ends a chunk; in
 * its memory callback (which QEMU runs after the store, tcg-op.c
 * plugin_gen_mem_callbacks) the counters hold exactly the instructions up
 * to and including the store.
 *
 * Emission.  With one vCPU, one inline add per chunk (QEMU 7.2's inline
 * ops take one pointer for all vCPUs and are not atomic; with one vCPU
 * only one thread ever runs them, so both are harmless) into a packed
 * word per mode, instructions + branches << 32, which count_fold() moves
 * into vcpu[0].ctr: at every hypercall, FAULT and mode switch, and from a
 * thread every FOLD_INTERVAL_US, so that no half can wrap between two
 * folds (it would take 2^32 instructions, over a second at the fastest
 * TCG runs guest code; branches never outnumber instructions).  With more, an
 * exec callback per chunk whose udata is a ready descriptor: no lock,
 * no lookup, no allocation on that path.  Per-vCPU scoreboards for inline
 * ops only arrive in QEMU 9.0.
 *
 * Known inexactness (FIXMEs): a fault the guest does not report (#GP, #DE,
 * #UD..., or a kernel that does not report at all) over-counts by its
 * tail; a tail two TBs still disagree on after a forced cut (the same
 * vaddr is a memory branch in one process and a plain access in another)
 * takes back one instruction and no branch; a fault taken in an old TB and
 * reported after another vCPU retranslated its code with a new forced cut
 * takes back the new tail (a window of one TB after a conflict); an
 * atomic instruction QEMU restarts in cpu_exec_step_atomic (EXCP_ATOMIC:
 * misaligned locked accesses under MTTCG) is counted twice; a store that
 * invalidates its own TB (self-modifying code) re-runs as a new TB and is
 * counted twice.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "pvperf.h"

/*
 * Translation-side lock.  Protects the arena and the branch sets below.
 * Taken at translation (tb_trans, any vCPU thread), in the flush callback
 * (exclusive section) and in the FAULT handler (a rare, guest-requested
 * hypercall); never on an exec or memory callback of ordinary code.
 */
static GMutex tr_lock;

/*
 * Arena for callback udata that must live as long as the TBs referring to
 * it.  QEMU 7.2 has no TB-free callback; after a flush no TB is left, so
 * the flush callback frees everything at once.  TBs invalidated one by one
 * (self-modifying code, unmapped pages) leave garbage here until the next
 * flush; that is bounded by the code buffer, which fills and flushes.
 */
#define ARENA_CHUNK_BYTES (64 * 1024)

struct arena_chunk {
	struct arena_chunk *next;
	size_t used;
	uint8_t data[ARENA_CHUNK_BYTES];
};

static struct arena_chunk *arena;	/* tr_lock */

/*
 * Tails of may-fault instructions, vaddr -> tail_pack().  Two generations,
 * rotated by each flush, so that a fault taken just before a flush and
 * reported just after it is still found.  Conflicts are detected within
 * the current generation only: older TBs are gone.
 */
static GHashTable *tails[2];		/* [0] current, [1] previous; tr_lock */
/* Vaddrs after which every TB ends a chunk.  Grows, never shrinks. */
static GHashTable *forced_cuts;		/* tr_lock */

/*
 * Packed inline counting (one vCPU; see "Emission").  packed[] is only
 * ever added to by generated code and read here; fold_lock serialises
 * the folds (the vCPU thread's and the fold thread's) and every write to
 * vcpu[0].ctr outside generated code while packing is in use.
 */
#define FOLD_INTERVAL_US	(100 * 1000)
#define PACK_BRANCHES_SHIFT	32

static uint64_t packed[2];		/* [kernel] */
static uint64_t packed_folded[2];	/* fold_lock */
static GMutex fold_lock;

#define TAIL_CONFLICT	(1ULL << 63)

/* Never 0 (a tail has at least its own instruction): 0 means "absent". */
static uint64_t tail_pack(uint32_t insns, uint32_t branches)
{
	return (uint64_t)branches << 32 | insns;
}

/* Exec-callback udata: a chunk's contribution (multi-vCPU mode). */
struct pvperf_seg {
	uint32_t n_insns;
	uint32_t n_branches;
	uint8_t insn_ctr;	/* PVPERF_CTR_INSN_* */
	uint8_t branch_ctr;	/* PVPERF_CTR_BRANCH_* */
};

/*
 * Exec-callback udata in sampling mode: the segment's contribution and
 * the vaddrs sample.c needs to name the overflowing instruction.
 */
struct pvperf_sseg {
	uint32_t n_insns;
	uint32_t n_branches;
	bool kernel;
	bool last_may_fault;	/* the last insn may fault (not retire) */
	uint64_t vaddr[];	/* n_insns insn vaddrs, then n_branches
				 * branch vaddrs, in execution order */
};

void *arena_alloc(size_t size)
{
	void *p;

	size = (size + 7) & ~(size_t)7;
	g_assert(size <= ARENA_CHUNK_BYTES);
	g_mutex_lock(&tr_lock);
	if (!arena || arena->used + size > ARENA_CHUNK_BYTES) {
		struct arena_chunk *c = g_malloc(sizeof(*c));

		c->next = arena;
		c->used = 0;
		arena = c;
	}
	p = arena->data + arena->used;
	arena->used += size;
	g_mutex_unlock(&tr_lock);
	return p;
}

static void arena_free_all(void)
{
	while (arena) {
		struct arena_chunk *next = arena->next;

		g_free(arena);
		arena = next;
	}
}

/* Runs on the vCPU thread before the segment's first instruction. */
static void seg_exec(unsigned int vcpu_index, void *udata)
{
	const struct pvperf_seg *seg = udata;
	uint64_t *ctr = pv.vcpu[vcpu_index].ctr;

	ctr[seg->insn_ctr] += seg->n_insns;
	ctr[seg->branch_ctr] += seg->n_branches;
}

/* Sampling mode: count, then look for overflows (sample.c). */
static void sseg_exec(unsigned int vcpu_index, void *udata)
{
	const struct pvperf_sseg *s = udata;
	struct pvperf_vcpu *v = &pv.vcpu[vcpu_index];

	v->ctr[ctr_insn(s->kernel)] += s->n_insns;
	v->ctr[ctr_branch(s->kernel)] += s->n_branches;
	v->room[0] -= s->n_insns;
	v->room[1] -= s->n_branches;
	if (v->room[0] > 0 && v->room[1] > 0 && !v->pending_mask)
		return;		/* no threshold within reach: the common case */
	sample_segment(vcpu_index, s->kernel, s->vaddr, s->n_insns,
		       s->vaddr + s->n_insns, s->n_branches, s->last_may_fault);
}

static void emit_sample_segment(struct qemu_plugin_insn *first, bool kernel,
				const struct cls_insn *insn, const uint8_t *cls,
				uint32_t n_insns, uint32_t n_branches)
{
	struct pvperf_sseg *s = arena_alloc(sizeof(*s) +
		(n_insns + n_branches) * sizeof(uint64_t));
	uint32_t b = n_insns;

	s->n_insns = n_insns;
	s->n_branches = n_branches;
	s->kernel = kernel;
	s->last_may_fault = cls[n_insns - 1] & CLS_BOUNDARY;
	for (uint32_t i = 0; i < n_insns; i++) {
		s->vaddr[i] = insn[i].vaddr;
		if (cls[i] & CLS_BRANCH)
			s->vaddr[b++] = insn[i].vaddr;
	}
	qemu_plugin_register_vcpu_insn_exec_cb(first, sseg_exec,
					       QEMU_PLUGIN_CB_NO_REGS, s);
}

static void emit_inline(struct qemu_plugin_insn *first, bool kernel,
			uint32_t n_insns, uint32_t n_branches)
{
	qemu_plugin_register_vcpu_insn_exec_inline(first,
		QEMU_PLUGIN_INLINE_ADD_U64, &packed[kernel],
		n_insns | (uint64_t)n_branches << PACK_BRANCHES_SHIFT);
}

/* Move what the inline adds counted into vcpu[0].ctr.  fold_lock held. */
static void fold_locked(void)
{
	uint64_t *ctr = pv.vcpu[0].ctr;

	for (int kernel = 0; kernel < 2; kernel++) {
		uint64_t now = __atomic_load_n(&packed[kernel], __ATOMIC_RELAXED);
		uint64_t d = now - packed_folded[kernel];

		if (!d)
			continue;	/* no write: callbacks may own ctr now */
		packed_folded[kernel] = now;
		ctr[ctr_insn(kernel)] += (uint32_t)d;
		ctr[ctr_branch(kernel)] += d >> PACK_BRANCHES_SHIFT;
	}
}

void count_fold(void)
{
	g_mutex_lock(&fold_lock);
	fold_locked();
	g_mutex_unlock(&fold_lock);
}

/* A vCPU's exact counters now (its own thread, or an exclusive section). */
void count_snapshot(unsigned vcpu, uint64_t out[PVPERF_NR_COUNTERS])
{
	g_mutex_lock(&fold_lock);
	fold_locked();
	memcpy(out, pv.vcpu[vcpu].ctr, sizeof(pv.vcpu[vcpu].ctr));
	g_mutex_unlock(&fold_lock);
}

static gpointer fold_thread(gpointer unused)
{
	for (;;) {
		g_usleep(FOLD_INTERVAL_US);
		count_fold();
	}
	return NULL;
}

static void emit_chunk(struct qemu_plugin_insn *first, bool kernel,
			 uint32_t n_insns, uint32_t n_branches)
{
	struct pvperf_seg *seg;

	if (pv.use_inline) {
		emit_inline(first, kernel, n_insns, n_branches);
		return;
	}
	seg = arena_alloc(sizeof(*seg));
	seg->n_insns = n_insns;
	seg->n_branches = n_branches;
	seg->insn_ctr = ctr_insn(kernel);
	seg->branch_ctr = ctr_branch(kernel);
	qemu_plugin_register_vcpu_insn_exec_cb(first, seg_exec,
					       QEMU_PLUGIN_CB_NO_REGS, seg);
}

/* Does a chunk end at insn i?  Caller holds tr_lock (forced_cuts). */
static bool chunk_ends(const struct cls_insn *insn, const uint8_t *cls,
		       size_t i, size_t n, bool sampling)
{
	if (i + 1 == n)
		return true;
	if (sampling)
		return cls[i] & CLS_BOUNDARY;
	return hcall_is_doorbell(insn[i].bytes, insn[i].len) ||
	       g_hash_table_contains(forced_cuts,
				     (gpointer)(uintptr_t)insn[i].vaddr);
}

/*
 * Record the tail of each may-fault insn of the chunk [first, last] in
 * the current generation.  Returns true if a tail disagreed with another
 * TB's and a new forced cut was made (the caller flushes).  tr_lock held.
 */
static bool record_tails(const struct cls_insn *insn, const uint8_t *cls,
			 size_t first, size_t last)
{
	uint32_t t_insns = 0, t_branches = 0;
	bool new_cut = false;

	for (size_t i = last + 1; i-- > first;) {
		gpointer key = (gpointer)(uintptr_t)insn[i].vaddr;
		uint64_t want, have;

		t_insns++;
		t_branches += !!(cls[i] & CLS_BRANCH);
		if (!(cls[i] & CLS_BOUNDARY))
			continue;
		want = tail_pack(t_insns, t_branches);
		have = (uintptr_t)g_hash_table_lookup(tails[0], key);
		if (!have) {
			g_hash_table_insert(tails[0], key, (gpointer)(uintptr_t)want);
		} else if (have != want && !(have & TAIL_CONFLICT)) {
			g_hash_table_insert(tails[0], key,
					    (gpointer)(uintptr_t)(have | TAIL_CONFLICT));
			if (!g_hash_table_contains(forced_cuts, key)) {
				g_hash_table_add(forced_cuts, key);
				new_cut = true;
			}
		}
	}
	return new_cut;
}

/*
 * Emit one add per chunk (counting) or segment (sampling).  When this TB
 * disagrees with an earlier one about a tail it is emitted as planned all
 * the same: the flush requested below retranslates both with the new cut.
 */
static void emit_chunks(struct qemu_plugin_tb *tb,
			const struct cls_insn *insn, const uint8_t *cls,
			size_t n)
{
	bool kernel = vaddr_is_kernel(qemu_plugin_tb_vaddr(tb));
	bool sampling = pvperf_sampling();
	uint32_t n_insns = 0, n_branches = 0;
	bool new_cut = false;
	size_t first = 0;

	g_mutex_lock(&tr_lock);
	for (size_t i = 0; i < n; i++) {
		n_insns++;
		n_branches += !!(cls[i] & CLS_BRANCH);
		if (!chunk_ends(insn, cls, i, n, sampling))
			continue;
		new_cut |= record_tails(insn, cls, first, i);
		g_mutex_unlock(&tr_lock);	/* the emitters allocate */
		if (sampling)
			emit_sample_segment(qemu_plugin_tb_get_insn(tb, first),
					    kernel, insn + first, cls + first,
					    n_insns, n_branches);
		else
			emit_chunk(qemu_plugin_tb_get_insn(tb, first), kernel,
				     n_insns, n_branches);
		g_mutex_lock(&tr_lock);
		first = i + 1;
		n_insns = n_branches = 0;
	}
	g_mutex_unlock(&tr_lock);
	if (new_cut && !sampling)
		pvperf_request_flush();
}

/* Per-thread scratch for count_tb, grown as needed, never shrunk. */
struct tb_scratch {
	struct cls_insn *insn;
	uint8_t *cls;
	size_t cap;
};
static __thread struct tb_scratch scratch;

static struct tb_scratch *scratch_for(size_t n)
{
	struct tb_scratch *s = &scratch;

	if (n > s->cap) {
		s->cap = MAX(n, 512);	/* TCG_MAX_INSNS in QEMU 7.2 */
		s->insn = g_renew(struct cls_insn, s->insn, s->cap);
		s->cls = g_renew(uint8_t, s->cls, s->cap);
	}
	return s;
}

/* tb_trans with counting on: classify, then emit one add per segment. */
void count_tb(struct qemu_plugin_tb *tb, size_t n)
{
	struct tb_scratch *s = scratch_for(n);

	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *pi = qemu_plugin_tb_get_insn(tb, i);

		s->insn[i].bytes = qemu_plugin_insn_data(pi);
		s->insn[i].len = qemu_plugin_insn_size(pi);
		s->insn[i].vaddr = qemu_plugin_insn_vaddr(pi);
	}
	classify_tb(s->insn, n, s->cls);
	if (n && (s->cls[n - 1] & CLS_PHANTOM))
		n--;
	emit_chunks(tb, s->insn, s->cls, n);
}

/* The tail recorded for ip, newest generation first; 0 if none. */
static uint64_t tail_of(uint64_t ip)
{
	gpointer key = (gpointer)(uintptr_t)ip;
	uint64_t t;

	g_mutex_lock(&tr_lock);
	t = (uintptr_t)g_hash_table_lookup(tails[0], key);
	if (!t)
		t = (uintptr_t)g_hash_table_lookup(tails[1], key);
	g_mutex_unlock(&tr_lock);
	return t;
}

/*
 * PVPERF_OP_FAULT: the instruction at ip page-faulted on a data access;
 * it and the rest of its chunk were counted but did not run.  Runs on the vCPU that took the fault
 * (the guest reports from its handler, on that CPU).  The counter to
 * correct follows the half ip lies in, which is what counted it; mode is
 * validated but the guest's notion of mode (CPL) cannot override that.
 */
int64_t count_fault(unsigned vcpu, uint64_t ip, uint64_t mode)
{
	uint64_t *ctr = pv.vcpu[vcpu].ctr;
	bool kernel = vaddr_is_kernel(ip);
	uint64_t tail;

	if (mode != PVPERF_MODE_KERNEL && mode != PVPERF_MODE_USER)
		return -EINVAL;
	/* Counting off: nothing was counted, nothing to take back. */
	if (!pvperf_counting())
		return 0;
	sample_fault(vcpu, ip);
	tail = tail_of(ip);
	if (!tail || (tail & TAIL_CONFLICT))
		tail = tail_pack(1, 0);	/* see "Known inexactness" */
	g_mutex_lock(&fold_lock);
	fold_locked();
	ctr[ctr_insn(kernel)] -= (uint32_t)tail;
	ctr[ctr_branch(kernel)] -= (uint32_t)(tail >> 32);
	g_mutex_unlock(&fold_lock);
	return 0;
}

/* Flush callback (exclusive section): no TB refers to the arena any more. */
void count_flush(void)
{
	g_mutex_lock(&tr_lock);
	arena_free_all();
	g_hash_table_destroy(tails[1]);
	tails[1] = tails[0];
	tails[0] = g_hash_table_new(g_direct_hash, g_direct_equal);
	g_mutex_unlock(&tr_lock);
}

void count_init(void)
{
	tails[0] = g_hash_table_new(g_direct_hash, g_direct_equal);
	tails[1] = g_hash_table_new(g_direct_hash, g_direct_equal);
	forced_cuts = g_hash_table_new(g_direct_hash, g_direct_equal);
	if (pv.use_inline)
		g_thread_unref(g_thread_new("pvperf-fold", fold_thread, NULL));
}
