/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models_int.h - what the models' files share, and nothing outside them
 * uses (models.h is their interface): each vCPU's model state, the fast
 * paths' scoreboard, the callbacks' udata and the inline steps of the
 * hot paths.
 *
 *   models.c       the models' state and inputs: TB starts, fetches,
 *                  branch outcomes; replies, faults, flushes
 *   models_mem.c   data accesses (the memory callbacks)
 *   models_fast.c  the fast paths: conditions that skip what would
 *                  change nothing
 *   models_tb.c    translation: what each TB gets
 */
#ifndef PVPERF_MODELS_INT_H
#define PVPERF_MODELS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <qemu-plugin.h>

#include "bpred.h"
#include "cachesim.h"
#include "core.h"
#include "counters.h"
#include "model_config.h"

/*
 * The fast paths' scoreboard (struct pvperf_score is fixed-size; this one
 * follows the geometry): per vCPU, an array of u64 at these indexes.
 */
#define STEADY_SLOTS	256		/* by branch address, low bits */
#define STEADY_LIST	16
enum {
	FS_EXPECT,		/* the TB a steady branch was taken to, 0 */
	FS_STEADY,		/* [STEADY_SLOTS] steady branches */
	FS_I1 = FS_STEADY + STEADY_SLOTS, /* [I1 sets] each set's MRU block */
	/* FS_I1 + I1 sets: [iTLB sets] each set's MRU page (fs_itlb) */
};
#define FS_HANDLED	1	/* FS_EXPECT: this TB start already ran */
/* A pending branch (struct pvperf_score.branch, an 8-aligned site) with
 * this bit must be resolved even by a one-block loop's start. */
#define PENDING_UNSTEADY	1ull

struct model_vcpu {
	struct cache i1, d1, itlb, dtlb;
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
	/* Fast paths (models_fast.c): whether they may be taken
	 * now, and the steady-branch slots set since the history last broke
	 * (n_steady > STEADY_LIST: too many to list, clear them all). */
	bool fast_ok;
	unsigned n_steady;
	uint16_t steady_slot[STEADY_LIST];
	struct bpred bp;	/* last: large, touched at a few places */
} __attribute__((aligned(64)));

extern struct model_vcpu *mv;		/* [pv.n_vcpus] */
/* The fast paths' scoreboard (models_fast.c). */
extern struct qemu_plugin_scoreboard *fast_sb;
extern size_t fast_size;		/* bytes per vCPU */
extern size_t fs_itlb;			/* index of the iTLB mirror */
extern char *fast_base;			/* kept as pv.score_base; atomic */

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
	 * branch to its start (models_fast.c); else NULL. */
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
	uint8_t shape;		/* enum mem_shape (arch.h) */
};

static inline uint64_t *fast_of(unsigned vcpu)
{
	char *base = __atomic_load_n(&fast_base, __ATOMIC_RELAXED);

	if (__builtin_expect(base != NULL, 1))
		return (uint64_t *)(base + vcpu * fast_size);
	return qemu_plugin_scoreboard_find(fast_sb, vcpu);
}

/* The models ignore this vCPU's code now (compat, no live event). */
static inline bool ignored(const struct model_vcpu *m)
{
	return mcfg.compat && !m->live;
}

/* An event (model counter ctr) in the half given, at at (the counter
 * store: counters.h); it stalls the timing model by its penalty. */
static inline void bump(struct model_vcpu *m, unsigned ctr, bool kernel,
			struct event_at at)
{
	counters_add(ctr, 1, kernel, at);
	if (mcfg.penalty[ctr])
		counters_add(PVPERF_M_STALL, mcfg.penalty[ctr], kernel, at);
}

/* models_fast.c */
qemu_plugin_u64 fs_entry(size_t index);
/* Install: the scoreboard for I1 and iTLB mirrors of these many sets. */
void fast_create(size_t i1_sets, size_t itlb_sets);
void fast_vcpu_init(unsigned vcpu);
void fast_empty_mirrors(uint64_t *fs);
void fast_unsteady(unsigned vcpu, struct model_vcpu *m);
void fast_forget(unsigned vcpu, struct model_vcpu *m);
void fast_steady(uint64_t *fs, struct model_vcpu *m, uint64_t pc);
void fast_update_ok(unsigned vcpu, struct model_vcpu *m);
void branch_unsteady_exec(unsigned vcpu, void *udata);

/* models.c */
bool ll_ref(uint64_t addr, unsigned size);
void tb_start_exec(unsigned vcpu, void *udata);
void fetch_exec(unsigned vcpu, void *udata);

/* models_mem.c: loads and stores apart, each also with R_REGS */
void mem_read(unsigned vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr,
	      void *udata);
void mem_write(unsigned vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr,
	       void *udata);
void mem_read_regs(unsigned vcpu, qemu_plugin_meminfo_t info,
		   uint64_t vaddr, void *udata);
void mem_write_regs(unsigned vcpu, qemu_plugin_meminfo_t info,
		    uint64_t vaddr, void *udata);
void aspace_exec(unsigned vcpu, void *udata);

#endif /* PVPERF_MODELS_INT_H */
