/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * count.c - exact retired-instruction and branch counts per vCPU, split
 * user/kernel by the half of the address space the TB runs in.
 *
 * Chunks.  Counting per TB over-counts when an instruction faults in the
 * middle of a TB: TCG abandons the rest of the TB and the guest re-executes
 * the faulting instruction after its handler.  Each TB is cut into chunks
 * whose instruction and branch counts are added just BEFORE the chunk's
 * first instruction executes, by inline adds on the vCPU's scoreboard
 * entry (struct pvperf_score).  If instruction m faults, every instruction
 * of m's chunk before m has retired, and m and the rest of its chunk were
 * counted but did not run: the count is too high by m's "tail", the
 * instructions (and branches) from m to the end of its chunk.  The guest
 * kernel reports each page fault it handles with a PVPERF_OP_FAULT
 * hypercall, {fault ip, mode}, and count_fault() takes the tail back.
 * Faults on instruction fetch are not reported (the guest skips them):
 * TCG raises them while translating, before anything of that TB was
 * counted.
 *
 * Tails by physical address.  The FAULT names a virtual ip, not a TB, and
 * several TBs may hold that instruction (a jump into the middle of a TB
 * starts another one over the same code; TBs cut short by TCG's limits);
 * and one TB serves every process that maps its physical page, each at
 * its own virtual address (TBs are PC-relative).  So translation
 * records every may-fault instruction's tail keyed by its gpa (guest.c),
 * the FAULT's ip is turned into a gpa by a page walk at the vCPU's
 * page-table root,
 * and when a second TB disagrees about a tail, that instruction becomes a
 * forced cut for every TB from then on (its tail is then itself alone)
 * and all code is retranslated once (instrument_request_flush).  Chunks end at
 * a TB's end, after a marker and at forced cuts, so a loop body costs
 * one add per TB (two in the kernel half with branches); tails almost
 * always agree because TBs end at control flow, which is the same in
 * every TB over that code.
 * Code outside the RAM file (firmware) is keyed by its vaddr instead.
 *
 * Why TBs disagree (measured: a debug line per disagreement, the first
 * perf stat of a run had 20, each a flush of all code).  Nearly all are a
 * TB of one instruction against the longer TBs over the same code: TCG's
 * cpu_io_recompile, when an MMIO access (the local APIC, IO-APIC, HPET,
 * virtio) is not its TB's last instruction, abandons the TB there and
 * runs that instruction alone in a CF_MEMI_ONLY TB, where instruction
 * callbacks (our adds) do not run; the cut after it is what keeps that
 * count exact (the abandoned chunk counted it once).  Such instructions
 * are learned while counting is off (count_learn_tb), which costs no
 * flush.  The rest were code that changed under the TBs (a static key
 * flipping a nop into a jmp in __schedule when perf enables an event):
 * the old TBs are gone then, and tail_code_gone() lets the new tail
 * replace theirs.  With counting on from boot, TBs of a long straight
 * line (blake2s) also disagreed: TCG halves max_insns when a TB's host
 * code grows too large, so their ends depend on where they start.
 *
 * Snapshots.  The marker store is a memory access and ends a chunk; in
 * its memory callback (which QEMU runs after the store) the counters hold
 * exactly the instructions up to and including the store.
 *
 * Branches are counted only while an event counts them (INSTRUMENT_BRANCHES);
 * when nothing samples, a user chunk adds both in one packed word
 * (packing(), core.h) and a kernel chunk's branch (its last instruction)
 * is added just before that branch instead (branch_at_end), and its
 * tails follow.
 * Sampling adds, per chunk, a conditional callback on the instruction
 * counter, which doubles as the countdown (core.h, sample.c), and
 * capture points for registers; the chunks are the same.
 *
 * Known inexactness (FIXMEs): user code that runs 2^29 - 2^26 branches
 * without entering the kernel while instructions and branches count
 * without sampling (a tickless CPU: nohz_full) wraps the packed word
 * (core.h); a fault the guest does not report (a
 * protection fault, a divide error, an undefined opcode..., or a kernel
 * that does not report at all) over-counts by its
 * tail; a tail two TBs still disagree on after a forced cut takes back
 * one instruction and no branch; a fault taken in an old TB and reported
 * after another vCPU retranslated its code with a new forced cut, or
 * after its code changed, takes back the new tail (a window of one TB
 * after a conflict or a code change); an atomic
 * instruction QEMU restarts in cpu_exec_step_atomic (EXCP_ATOMIC:
 * misaligned locked accesses under MTTCG) is counted twice; an MMIO
 * access first run while counting is on over-counts by its tail less
 * one until the flush its disagreement requests; a store that
 * invalidates its own TB (self-modifying code) re-runs as a new TB and is
 * counted twice.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "arena.h"
#include "core.h"
#include "count.h"
#include "counters.h"
#include "guest.h"
#include "instrument.h"
#include "sample.h"
#include "sample_tb.h"

/*
 * Translation-side lock.  Protects the tables below.
 * Taken at translation (tb_trans, any vCPU thread), in the flush callback
 * (exclusive section) and in the FAULT handler (a rare, guest-requested
 * hypercall); never on an exec callback of ordinary code.
 */
static GMutex tr_lock;

/*
 * Tails of may-fault instructions, code key -> tail_pack().  Two
 * generations, rotated by each flush, so that a fault taken just before a
 * flush and reported just after it is still found.  Conflicts are detected
 * within the current generation only: older TBs are gone.
 */
static GHashTable *tails[2];		/* [0] current, [1] previous; tr_lock */
/* Code keys after which every TB ends a chunk.  Grows, never shrinks. */
static GHashTable *forced_cuts;		/* tr_lock */

/* gpa keys live above every user vaddr and below every kernel one. */
#define KEY_GPA		(1ULL << 48)

static uint64_t code_key(uint64_t gpa, uint64_t vaddr)
{
	return gpa != GPA_NONE ? gpa | KEY_GPA : vaddr;
}

/*
 * A tail as recorded: its instructions and branches (a chunk has at most
 * TCG_MAX_INSNS, 512), TAIL_CONFLICT, and the code it was computed over,
 * the chunk's bytes from the instruction on: their length and a hash
 * (tail_code_gone).  Never 0 (a tail has at least its own instruction):
 * 0 means "absent".
 */
#define TAIL_FIELD	0x3ffULL
#define TAIL_CONFLICT	(1ULL << 20)
#define TAIL_LEN_SHIFT	21		/* 13 bits: a TB lies in one page */
#define TAIL_HASH_SHIFT	34		/* 30 bits */
#define TAIL_SHAPE	(TAIL_FIELD | TAIL_FIELD << 10)

static uint64_t tail_pack(uint32_t insns, uint32_t branches)
{
	return (uint64_t)(branches & TAIL_FIELD) << 10 | (insns & TAIL_FIELD);
}

static uint32_t tail_insns(uint64_t t)
{
	return t & TAIL_FIELD;
}

static uint32_t tail_branches(uint64_t t)
{
	return t >> 10 & TAIL_FIELD;
}

static uint64_t tail_with_code(uint64_t t, uint32_t len, uint32_t hash)
{
	return t | (uint64_t)MIN(len, 0x1fffu) << TAIL_LEN_SHIFT |
	       (uint64_t)hash << TAIL_HASH_SHIFT;
}

/* FNV-1a over bytes taken last to first, in 30 bits; extended by
 * whole instructions as record_tails walks a chunk backwards. */
#define CODE_HASH_INIT	2166136261u

static uint32_t code_hash(uint32_t h, const uint8_t *b, size_t len)
{
	while (len--)
		h = (h ^ b[len]) * 16777619u;
	return h;
}

static uint32_t code_hash_final(uint32_t h)
{
	return h >> 2;
}

/*
 * Whether the code a recorded tail was computed over has changed in
 * guest RAM since.  A write to a page that holds translated code (the
 * guest's own stores, text patching, DMA, a page reused for other code)
 * invalidates every TB on that page before it lands (QEMU's precise SMC
 * handling), so no TB with that tail runs any more and the new TB's tail
 * simply replaces it.  Provable only for code in RAM whose bytes lie in
 * one page (TBs do, but for a lone instruction crossing a page); an
 * unchanged hash, collisions included, leaves it a conflict, the safe
 * side.  (Our own writes to guest RAM do not invalidate TBs: a guest
 * that runs code from a page the service writes only hurts its own
 * counts.)
 */
static bool tail_code_gone(uint64_t key, uint64_t have)
{
	uint64_t gpa = key & ~KEY_GPA;
	uint32_t len = have >> TAIL_LEN_SHIFT & 0x1fff;
	const uint8_t *p;

	if ((key & ~(KEY_GPA - 1)) != KEY_GPA ||
	    (gpa & ~GUEST_PAGE_MASK) + len > GUEST_PAGE_SIZE)
		return false;
	p = guest_ram_block(gpa, len);
	return p && code_hash_final(code_hash(CODE_HASH_INIT, p, len)) !=
		    have >> TAIL_HASH_SHIFT;
}

/*
 * Where a kernel chunk's branch is added: before its first instruction,
 * with the instructions, or, when it only counts (no overflow to find)
 * and its one branch is its last instruction (a branch ends a TB), before
 * that branch (user chunks pack both into one add then: packing()).
 * A second inline op at a TB's start costs more than at its end (on a
 * dec/jnz loop, 0.47 against 0.28 ns a TB, where the first op costs
 * nothing measurable): bench_counting's loop went from 1.21x plain TCG
 * to 1.14x.  Then a fault before the branch leaves it uncounted, so its
 * tails (record_tails) hold no branch, and the branch's own tail does.
 */
static bool branch_at_end(const uint8_t *cls, size_t last,
			  uint32_t n_branches, bool kernel)
{
	return n_branches == 1 && (cls[last] & CLS_BRANCH) && kernel &&
	       instrument_branches() && !instrument_sampling();
}

/*
 * Counting both without sampling, a user chunk adds its instructions and
 * branches to one packed word (core.h), before its first instruction: one
 * inline op instead of two.  Kernel chunks keep two adds (the kernel may
 * run any number of instructions between two user chunks) and the first
 * of each kernel TB folds the word once it holds 2^26 instructions, a
 * compare and a branch when it does not.
 */
static bool packing(void)
{
	return instrument_branches() && !instrument_sampling();
}

static void fold_exec(unsigned int vcpu, void *udata)
{
	counters_fold(vcpu);
}

static void emit_adds(struct qemu_plugin_insn *first,
		      struct qemu_plugin_insn *last, bool kernel,
		      uint32_t n_insns, uint32_t n_branches, bool at_end)
{
	if (!kernel && packing()) {
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(first,
			QEMU_PLUGIN_INLINE_ADD_U64, score_packed(),
			(uint64_t)n_insns << PACK_SHIFT | n_branches);
		return;
	}
	qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(first,
		QEMU_PLUGIN_INLINE_ADD_U64, score_ctr(ctr_insn(kernel)), n_insns);
	if (n_branches && instrument_branches())
		qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
			at_end ? last : first, QEMU_PLUGIN_INLINE_ADD_U64,
			score_ctr(ctr_branch(kernel)), n_branches);
}

/* Does a chunk end at insn i?  tr_lock held (forced_cuts). */
static bool chunk_ends(const struct tb_insn *insn, const uint8_t *cls,
		       size_t i, size_t n)
{
	return i + 1 == n || (cls[i] & CLS_MARKER) ||
	       g_hash_table_contains(forced_cuts, (gpointer)(uintptr_t)insn[i].key);
}

/*
 * Record the tail of each may-fault insn of the chunk [first, last] in
 * the current generation.  Returns true if a tail disagreed with another
 * TB's still in the code cache and a new forced cut was made (the caller
 * flushes).  tr_lock held.
 */
static bool record_tails(const struct tb_insn *insn, const uint8_t *cls,
			 size_t first, size_t last, bool at_end)
{
	uint32_t t_insns = 0, t_branches = 0, len = 0, h = CODE_HASH_INIT;
	bool new_cut = false;

	for (size_t i = last + 1; i-- > first;) {
		gpointer key = (gpointer)(uintptr_t)insn[i].key;
		uint64_t want, have;

		t_insns++;
		t_branches += !!(cls[i] & CLS_BRANCH);
		/* a byte missing: no proof that the code changed */
		len += insn[i].whole ? insn[i].code->len : GUEST_PAGE_SIZE;
		h = code_hash(h, insn[i].code->bytes, insn[i].code->len);
		if (!(cls[i] & CLS_BOUNDARY))
			continue;
		/* branch added at the end: counted only if reached */
		want = tail_with_code(tail_pack(t_insns, at_end && i != last ?
						0 : t_branches),
				      len, code_hash_final(h));
		have = (uintptr_t)g_hash_table_lookup(tails[0], key);
		if (have == want || (have & TAIL_CONFLICT))
			continue;
		/* the same tail over other code (changed since) is no conflict */
		if (!have || (have & TAIL_SHAPE) == (want & TAIL_SHAPE) ||
		    tail_code_gone(insn[i].key, have)) {
			g_hash_table_insert(tails[0], key, (gpointer)(uintptr_t)want);
		} else {
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
 * Emit each chunk's adds (and, sampling, its room countdown and callback).
 * When this TB disagrees with an earlier one about a tail it is emitted as
 * planned all the same: the flush requested below retranslates both with
 * the new cut.
 */
static void emit_chunks(const struct tb_insn *insn, const uint8_t *cls,
			size_t n, bool kernel)
{
	bool sampling = instrument_sampling();
	enum capture_at at = instrument_capture();
	uint32_t n_insns = 0, n_branches = 0;
	bool new_cut = false, at_end;
	size_t first = 0;

	if (kernel && packing())
		qemu_plugin_register_vcpu_insn_exec_cond_cb(insn[0].handle,
			fold_exec, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_GE,
			score_packed(), PACK_FOLD_AT, NULL);
	g_mutex_lock(&tr_lock);
	for (size_t i = 0; i < n; i++) {
		struct sample_chunk *c = NULL;

		n_insns++;
		n_branches += !!(cls[i] & CLS_BRANCH);
		if (!chunk_ends(insn, cls, i, n))
			continue;
		at_end = branch_at_end(cls, i, n_branches, kernel);
		new_cut |= record_tails(insn, cls, first, i, at_end);
		if (sampling)
			c = sample_describe_chunk(insn + first, cls + first,
						  n_insns, n_branches, kernel,
						  insn[0].vaddr, at);
		emit_adds(insn[first].handle, insn[i].handle, kernel, n_insns,
			  n_branches, at_end);
		if (c)
			sample_emit_chunk(insn + first, c);
		first = i + 1;
		n_insns = n_branches = 0;
	}
	g_mutex_unlock(&tr_lock);
	if (new_cut)
		instrument_request_flush();
}

/* tb_trans with counting on (translate.c, after classification): the
 * instructions' code keys, then the chunks. */
void count_tb(struct tb_insn *insn, const uint8_t *cls, size_t n, bool kernel)
{
	for (size_t i = 0; i < n; i++)
		insn[i].key = code_key(guest_insn_gpa(insn[i].handle),
				       insn[i].vaddr);
	emit_chunks(insn, cls, n, kernel);
}

/*
 * tb_trans with counting off.  A TB of one instruction that does not end
 * a block is a shape TCG makes after the fact: the instruction after an
 * MMIO access that was not a TB's last (cpu_io_recompile: a TB of just
 * that instruction, CF_MEMI_ONLY, which runs no instruction callbacks,
 * so the TB it was cut from must end a chunk there for its count to be
 * exact), after sti or mov ss, after a store to its own TB's page, a
 * lone page-crossing instruction.  Once counting is on, every such TB
 * disagrees about that instruction's tail with the longer TBs over the
 * same code, and each disagreement costs a flush of all code
 * (record_tails).  While counting is off no TB holds a tail, so such an
 * instruction becomes a forced cut right away, for free: the code that
 * ran before counting (the timer, interrupt controllers, virtio) has its
 * cuts before the first event is opened.  A cut too many costs an add.
 */
void count_learn_tb(struct qemu_plugin_tb *tb, size_t n)
{
	struct qemu_plugin_insn *insn;
	struct cls_insn ci;
	uint8_t cls;
	uint64_t key;

	if (n != 1)
		return;
	insn = qemu_plugin_tb_get_insn(tb, 0);
	ci.vaddr = qemu_plugin_insn_vaddr(insn);
	ci.len = qemu_plugin_insn_data(insn, ci.bytes, sizeof(ci.bytes));
	pv.arch->classify_tb(&ci, 1, vaddr_is_kernel(ci.vaddr), &cls);
	/* only a may-fault instruction has a tail; a branch ends every TB */
	if ((cls & (CLS_BOUNDARY | CLS_BRANCH)) != CLS_BOUNDARY)
		return;
	key = code_key(guest_insn_gpa(insn), ci.vaddr);
	g_mutex_lock(&tr_lock);
	g_hash_table_add(forced_cuts, (gpointer)(uintptr_t)key);
	g_mutex_unlock(&tr_lock);
}

/* The tail recorded for key, newest generation first; 0 if none. */
static uint64_t tail_of(uint64_t key)
{
	gpointer k = (gpointer)(uintptr_t)key;
	uint64_t t;

	g_mutex_lock(&tr_lock);
	t = (uintptr_t)g_hash_table_lookup(tails[0], k);
	if (!t)
		t = (uintptr_t)g_hash_table_lookup(tails[1], k);
	g_mutex_unlock(&tr_lock);
	return t;
}

/*
 * PVPERF_OP_FAULT: the instruction at ip page-faulted on a data access;
 * it and the rest of its chunk were counted but did not run.  Runs on the
 * vCPU that took the fault (the guest reports from its handler, on that
 * CPU), whose page-table root is the faulting process's.  The counter to correct
 * follows the half ip lies in, which is what counted it; mode is
 * validated but the guest's notion of mode (CPL) cannot override that.
 */
int64_t count_fault(unsigned vcpu, uint64_t ip, uint64_t mode,
		    uint64_t page_table)
{
	uint64_t *bias = counters_of(vcpu)->bias;
	bool kernel = vaddr_is_kernel(ip);
	uint64_t tail;

	if (mode != PVPERF_MODE_KERNEL && mode != PVPERF_MODE_USER)
		return -EINVAL;
	/* Counting off: nothing was counted, nothing to take back. */
	if (!instrument_counting())
		return 0;
	tail = tail_of(code_key(guest_vaddr_to_gpa(page_table, ip), ip));
	if (!tail || (tail & TAIL_CONFLICT))
		tail = tail_pack(1, 0);	/* see "Known inexactness" */
	bias[ctr_insn(kernel)] -= tail_insns(tail);
	if (instrument_branches())
		bias[ctr_branch(kernel)] -= tail_branches(tail);
	return 0;
}

/* Flush callback (exclusive section): no TB refers to the arena any more. */
void count_flush(void)
{
	arena_free_all();
	g_mutex_lock(&tr_lock);
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
}
