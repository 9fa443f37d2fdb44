/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * count.c - exact retired-instruction and branch counts per vCPU, split
 * user/kernel by the half of the address space the TB runs in.
 *
 * Segments.  Counting per TB over-counts when an instruction faults in the
 * middle of a TB: TCG abandons the rest of the TB and the guest re-executes
 * the faulting instruction after its handler.  So each TB is cut into
 * segments that END at every instruction that may fault (classify.c), and a
 * segment's instruction and branch counts are added just BEFORE its first
 * instruction executes (an inline add, or an exec callback on that insn).
 * If instruction m faults, every instruction of m's segment before m has
 * retired, and m (the last one) was counted but did not retire: the count
 * is exactly one too high, whatever TB m is in, and nothing after m was
 * counted.  The guest kernel reports each page fault it handles with a
 * PVPERF_OP_FAULT hypercall, {fault ip, mode}, and count_fault() takes
 * that one instruction back (and one branch, if m was a branch that
 * accesses memory: call, ret, jmp *mem, iret...).  Faults on instruction
 * fetch are not reported (the guest skips X86_PF_INSTR): TCG raises them
 * while translating, before anything of that TB was counted.
 *
 * Snapshots.  The doorbell store is a memory access, so it ends a segment;
 * in its memory callback (which QEMU runs after the store, tcg-op.c
 * plugin_gen_mem_callbacks) the counters hold exactly the instructions up
 * to and including the store.
 *
 * Emission.  With one vCPU, inline adds into vcpu[0] (QEMU 7.2's inline
 * ops take one pointer for all vCPUs and are not atomic; with one vCPU
 * only one thread ever runs them, so both are harmless).  With more, an
 * exec callback per segment whose udata is a ready descriptor: no lock,
 * no lookup, no allocation on that path.  Per-vCPU scoreboards for inline
 * ops only arrive in QEMU 9.0.
 *
 * Known inexactness (FIXMEs): a fault the guest does not report (#GP, #DE,
 * #UD..., or a kernel that does not report at all) over-counts by one; an
 * atomic instruction QEMU restarts in cpu_exec_step_atomic (EXCP_ATOMIC:
 * misaligned locked accesses under MTTCG) is counted twice; a store that
 * invalidates its own TB (self-modifying code) re-runs as a new TB and is
 * counted twice.
 */
#include <errno.h>
#include <glib.h>

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
 * Vaddrs of branches that access memory, as seen at translation.  Two
 * generations, rotated by each flush, so that a fault taken just before a
 * flush and reported just after it is still recognised.  FIXME: keyed by
 * vaddr only, so two processes with different code at one user vaddr can
 * make a fault correction take back a branch that was not counted, or
 * miss one that was.
 */
static GHashTable *mem_branches[2];	/* [0] current, [1] previous; tr_lock */

/* Exec-callback udata: a segment's contribution (multi-vCPU mode). */
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
	uint64_t *ctr = pv.vcpu[vcpu_index].ctr;

	ctr[ctr_insn(s->kernel)] += s->n_insns;
	ctr[ctr_branch(s->kernel)] += s->n_branches;
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
	uint64_t *ctr = pv.vcpu[0].ctr;

	qemu_plugin_register_vcpu_insn_exec_inline(first,
		QEMU_PLUGIN_INLINE_ADD_U64, &ctr[ctr_insn(kernel)], n_insns);
	if (n_branches)
		qemu_plugin_register_vcpu_insn_exec_inline(first,
			QEMU_PLUGIN_INLINE_ADD_U64, &ctr[ctr_branch(kernel)],
			n_branches);
}

static void emit_segment(struct qemu_plugin_insn *first, bool kernel,
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

static bool is_mem_branch(uint8_t cls)
{
	return (cls & (CLS_BRANCH | CLS_MEM)) == (CLS_BRANCH | CLS_MEM);
}

static void remember_mem_branches(struct qemu_plugin_tb *tb,
				  const uint8_t *cls, size_t n)
{
	size_t i;

	for (i = 0; i < n && !is_mem_branch(cls[i]); i++)
		;
	if (i == n)
		return;
	g_mutex_lock(&tr_lock);
	for (; i < n; i++) {
		uint64_t vaddr = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i));

		if (is_mem_branch(cls[i]))
			g_hash_table_add(mem_branches[0], (gpointer)(uintptr_t)vaddr);
	}
	g_mutex_unlock(&tr_lock);
}

static void emit_segments(struct qemu_plugin_tb *tb,
			  const struct cls_insn *insn, const uint8_t *cls,
			  size_t n)
{
	bool kernel = vaddr_is_kernel(qemu_plugin_tb_vaddr(tb));
	bool sampling = pvperf_sampling();
	uint32_t n_insns = 0, n_branches = 0;
	size_t first = 0;

	for (size_t i = 0; i < n; i++) {
		n_insns++;
		n_branches += !!(cls[i] & CLS_BRANCH);
		if ((cls[i] & CLS_BOUNDARY) || i + 1 == n) {
			struct qemu_plugin_insn *fi = qemu_plugin_tb_get_insn(tb, first);

			if (sampling)
				emit_sample_segment(fi, kernel, insn + first,
						    cls + first, n_insns, n_branches);
			else
				emit_segment(fi, kernel, n_insns, n_branches);
			first = i + 1;
			n_insns = n_branches = 0;
		}
	}
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
	emit_segments(tb, s->insn, s->cls, n);
	remember_mem_branches(tb, s->cls, n);
}

static bool was_mem_branch(uint64_t ip)
{
	gpointer key = (gpointer)(uintptr_t)ip;
	bool found;

	g_mutex_lock(&tr_lock);
	found = g_hash_table_contains(mem_branches[0], key) ||
		g_hash_table_contains(mem_branches[1], key);
	g_mutex_unlock(&tr_lock);
	return found;
}

/*
 * PVPERF_OP_FAULT: the instruction at ip page-faulted on a data access and
 * was counted but did not retire.  Runs on the vCPU that took the fault
 * (the guest reports from its handler, on that CPU).  The counter to
 * correct follows the half ip lies in, which is what counted it; mode is
 * validated but the guest's notion of mode (CPL) cannot override that.
 */
int64_t count_fault(unsigned vcpu, uint64_t ip, uint64_t mode)
{
	uint64_t *ctr = pv.vcpu[vcpu].ctr;
	bool kernel = vaddr_is_kernel(ip);

	if (mode != PVPERF_MODE_KERNEL && mode != PVPERF_MODE_USER)
		return -EINVAL;
	/* Counting off: nothing was counted, nothing to take back. */
	if (!pvperf_counting())
		return 0;
	sample_fault(vcpu, ip);
	ctr[ctr_insn(kernel)]--;
	if (was_mem_branch(ip))
		ctr[ctr_branch(kernel)]--;
	return 0;
}

/* Flush callback (exclusive section): no TB refers to the arena any more. */
void count_flush(void)
{
	g_mutex_lock(&tr_lock);
	arena_free_all();
	g_hash_table_destroy(mem_branches[1]);
	mem_branches[1] = mem_branches[0];
	mem_branches[0] = g_hash_table_new(g_direct_hash, g_direct_equal);
	g_mutex_unlock(&tr_lock);
}

void count_init(void)
{
	mem_branches[0] = g_hash_table_new(g_direct_hash, g_direct_equal);
	mem_branches[1] = g_hash_table_new(g_direct_hash, g_direct_equal);
}
