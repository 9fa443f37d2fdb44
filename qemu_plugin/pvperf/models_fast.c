/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models_fast.c - the models' fast paths (models_int.h; what the models
 * see: models.c).
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
 *                   where they run, by an inline add (score_cond), in code
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
 */
#include <string.h>

#include "core.h"
#include "model_config.h"
#include "models_int.h"

struct qemu_plugin_scoreboard *fast_sb;
size_t fast_size;			/* bytes per vCPU */
size_t fs_itlb;				/* index of the iTLB mirror */
static size_t fs_end;			/* one past the last mirror */
char *fast_base;			/* kept as pv.score_base; atomic */

qemu_plugin_u64 fs_entry(size_t index)
{
	return (qemu_plugin_u64){ fast_sb, index * sizeof(uint64_t) };
}

void fast_create(size_t i1_sets, size_t itlb_sets)
{
	fs_itlb = FS_I1 + i1_sets;
	fs_end = fs_itlb + itlb_sets;
	fast_size = (fs_end * sizeof(uint64_t) + 63) & ~(size_t)63;
	fast_sb = qemu_plugin_scoreboard_new(fast_size);
}

/* The I1 and iTLB mirrors say nothing is most recent: conditions fire. */
void fast_empty_mirrors(uint64_t *fs)
{
	for (size_t i = FS_I1; i < fs_end; i++)
		fs[i] = CACHE_EMPTY;
}

/*
 * The history broke (or the predictor was reset, or a fetch made another
 * block the most recent of a set): no branch is steady.  A one-block
 * loop's branch stored as pending (above) is tagged, so that
 * its block's start runs its callback again.
 */
void fast_unsteady(unsigned vcpu, struct model_vcpu *m)
{
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
void fast_forget(unsigned vcpu, struct model_vcpu *m)
{
	uint64_t *fs = fast_of(vcpu);

	fast_unsteady(vcpu, m);
	fast_empty_mirrors(fs);
	fs[FS_EXPECT] = 0;
}

/*
 * The branch at pc is steady taken: the TB it is taken to may skip its
 * start, fetch included.  So a steady branch's target is always the most
 * recent block of its I1 set and page of its iTLB set: set only right
 * after that TB's fetch, and every steady branch is forgotten when a
 * fetch makes another block the most recent of a set (models.c fetch).
 */
void fast_steady(uint64_t *fs, struct model_vcpu *m, uint64_t pc)
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
void fast_update_ok(unsigned vcpu, struct model_vcpu *m)
{
	const uint64_t cond_bits =
		1ull << PVPERF_CTR_MODEL(PVPERF_M_COND, 0) |
		1ull << PVPERF_CTR_MODEL(PVPERF_M_COND, 1);
	const struct counters_vcpu *cv = counters_of(vcpu);
	bool ok = !(mcfg.compat && !m->live) && !cv->armed_cycles &&
		  !(cv->armed & cond_bits);

	if (!ok && m->fast_ok)
		fast_forget(vcpu, m);
	m->fast_ok = ok;
}

/* vcpu_init: the vCPU's entries, before any of its code runs. */
void fast_vcpu_init(unsigned vcpu)
{
	if (pv.n_vcpus <= SCORE_FIXED_VCPUS)
		__atomic_store_n(&fast_base, (char *)qemu_plugin_scoreboard_find(
				 fast_sb, vcpu) - vcpu * fast_size,
				 __ATOMIC_RELAXED);
	fast_empty_mirrors(fast_of(vcpu));
}

/* A steady branch turned out not to be (its condition fired): the TB it
 * is taken to must not skip its callback, a one-block loop's included
 * (its site was just stored as pending). */
void branch_unsteady_exec(unsigned vcpu, void *udata)
{
	const struct branch_site *b = udata;

	fast_of(vcpu)[FS_EXPECT] = 0;
	score_of(vcpu)->branch[!b->kernel] =
		(uintptr_t)b | PENDING_UNSTEADY;
}
