/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * core.h - the state every unit of the pvperf TCG plugin shares, below
 * every other unit: options, per-vCPU state, the scoreboard that inline
 * ops write, logging.  Not an ABI (the contracts are in the top-level
 * contracts/).  The units and who uses whom: ../README.md, "Units".
 *
 * Index spaces (as in pvperf_abi.h): "vcpu" is QEMU's cpu_index, "gpa" a
 * guest physical address (== offset into the RAM file), "vaddr" a guest
 * virtual address.  Counters are indexed by PVPERF_CTR_*.
 *
 * Contexts: translation (tb_trans) runs on any vCPU thread, concurrently
 * on several under MTTCG; exec/mem callbacks run on the vCPU thread that
 * executes the code; flush and reset callbacks run in an exclusive section
 * (every vCPU stopped); plugin_exit runs in whatever thread calls exit(),
 * which may be a vCPU thread while other vCPUs still run (isa-debug-exit).
 */
#ifndef PVPERF_CORE_H
#define PVPERF_CORE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <glib.h>
#include <qemu-plugin.h>

#include "arch.h"
#include "pvperf_abi.h"
#include "pvperf_proto.h"

#define GUEST_PAGE_SIZE		4096ULL
#define GUEST_PAGE_MASK		(~(GUEST_PAGE_SIZE - 1))

/* A clock in ns (0 if it cannot be read: a thread gone). */
static inline uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	if (clock_gettime(clock, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Raise a vCPU's overflow interrupt: 1 into its doorbell eventfd (fd < 0:
 * it has none).  False if not written (a full eventfd has one pending). */
static inline bool doorbell_write(int fd)
{
	uint64_t one = 1;

	return fd >= 0 && write(fd, &one, sizeof(one)) == sizeof(one);
}

static inline unsigned ctr_insn(bool kernel)
{
	return kernel ? PVPERF_CTR_INSN_KERNEL : PVPERF_CTR_INSN_USER;
}

static inline unsigned ctr_branch(bool kernel)
{
	return kernel ? PVPERF_CTR_BRANCH_KERNEL : PVPERF_CTR_BRANCH_USER;
}

/*
 * What generated code writes, one entry per vCPU in a QEMU scoreboard
 * (inline ADD_U64 on the entry of the vCPU that runs the code; no atomics,
 * each vCPU writes only its own).  Padded to two cache lines so that two
 * vCPUs never share one, whatever the array's base alignment.
 *
 * ctr:  the counters, biased: the count is ctr[i] + bias[i] (the
 *       counter store's: counters.h counters_inline).  Only grown by inline adds.
 *       The bias lets one add per chunk both count instructions and
 *       count down to the next overflow (sample.c): while sampling, the
 *       instruction counter of each half is rebased so that it passes
 *       COUNTDOWN_LIMIT, a small immediate, when that half's room is used
 *       up, and the chunk's conditional callback compares against it.
 * capture: register capture.  The key of the one instruction whose
 *       capture point must fire next (sample.h), 0 for none; keys are
 *       unique for the life of the plugin, so a stale one never matches.
 * packed: the user half's instructions and branches while counting both
 *       without sampling, one inline add per chunk instead of two
 *       (count.c emit_adds): instructions << PACK_SHIFT | branches, run
 *       since the last counters_fold.  A shift of 29 keeps the addend of a
 *       chunk of up to 3 instructions an imm32 (one host instruction
 *       less: a movabs).  Kernel TBs fold the word once it holds
 *       2^26 instructions (PACK_FOLD_AT); branches never outnumber
 *       instructions, so the branch field wraps only if user code runs
 *       over 2^29 - 2^26 branches (each ends a block: half a second of
 *       nothing else at least) without entering the kernel, whose timer
 *       tick comes every 4 ms (HZ=250), and the instruction field
 *       (35 bits) later still.
 */
struct pvperf_score {
	uint64_t ctr[PVPERF_NR_INLINE_COUNTERS];
	uint64_t capture;
	/* branch: models.c.  Per half (index !kernel), the site of the last
	 * conditional or indirect branch whose outcome the next TB of that
	 * half shows, 0 for none; an inline store writes it. */
	uint64_t branch[2];
	uint64_t packed;
	/* cond: conditional branches run, per half (index !kernel), while
	 * the models count them (models_tb.c; counters.c reads them). */
	uint64_t cond[2];
	uint8_t pad[128 - (PVPERF_NR_INLINE_COUNTERS + 6) * 8];
};

#define PACK_SHIFT	29
#define PACK_BRANCHES	((1ULL << PACK_SHIFT) - 1)
#define PACK_FOLD_AT	(1ULL << (PACK_SHIFT + 26))

/* One translated instruction, as the units that instrument a TB see it
 * (translate.c reads them; count.c keys them). */
struct tb_insn {
	uint64_t vaddr;
	uint64_t key;			/* count.c's code key */
	struct qemu_plugin_insn *handle;
	const struct cls_insn *code;	/* its bytes */
	bool whole;			/* code has all of them */
};

/* Per-vCPU state that only callbacks touch (never generated code). */
struct pvperf_vcpu {
	/* Sampling: each half's room when last rebased (sample.c). */
	uint64_t room[2];	/* [ctr_insn(kernel)] */
	int fd;			/* service connection or -1 (link.c) */
	int doorbell_fd;	/* its overflow interrupt's eventfd or -1 */
	/* How long SYNC overflows held the vCPU, overflow to interrupt
	 * raised, in us: the first LINK_WAITS (link.c, verbose report). */
	uint32_t *sync_us;
	unsigned n_sync;
	uint64_t wait_cpu_ns;	/* this thread's CPU time spent waiting */
	unsigned log_budget;	/* guest-triggerable log lines left */
	uint64_t lost;		/* overflow messages the socket refused */
	unsigned unanswered;	/* overflows sent since the last answered one */
	/*
	 * Sampling (sample.c): the slots the service armed on this vCPU,
	 * first the n_inline on the inline counters (instructions,
	 * branches: checked by the chunks' countdown, and the only ones
	 * held, so pending[i] is slot[i]'s), then those on event counters
	 * (checked where the counter store grows them: counters.h).
	 */
	unsigned n_slots, n_inline;
	unsigned pending_mask;	/* bit i: pending[i] is held */
	unsigned awaiting_mask;	/* bit i: pending[i] waits for its registers */
	struct pvperf_sample_slot {
		uint64_t threshold;	/* UINT64_MAX: disarmed */
		uint64_t period;	/* 0: one-shot */
		uint64_t ctr_mask;	/* the raw counters it sums */
		uint32_t event_id;
		uint8_t rand_bits;
		uint8_t flags;		/* PVPERF_PROTO_SYNC, _REGS */
		/* What its records carry when the plugin writes them
		 * (struct pvperf_proto_deliver; 0 after a restore). */
		uint32_t deliver_flags;	/* PVPERF_DELIVER_* */
		uint64_t event_gpa;
		uint64_t sample_period;
	} slot[PVPERF_PROTO_MAX_SLOTS];
	/*
	 * An overflow on an instruction that may not retire (it, or one
	 * before it in its chunk, may fault): held until the vCPU shows it
	 * retired (sample.c); or one waiting for the capture point of its
	 * instruction to record the registers.  ips are runtime addresses.
	 */
	struct pvperf_pending {
		uint64_t chunk_ip;	/* first instruction of its chunk */
		uint64_t ip;		/* the overflowing instruction */
		uint64_t threshold;	/* what was reached; restored on a fault */
		uint64_t next_threshold;
		uint64_t kctr_at;	/* kernel insn counter when held */
		uint16_t idx;		/* ip's instruction index in its chunk */
		uint16_t regs_at;	/* the capture point it awaits */
		uint8_t mode;		/* PVPERF_MODE_* */
		bool has_regs;
		uint64_t data_addr;	/* model events: the access's address */
		/* before ip ran (all of them, or sp and bp: instrument.h) */
		uint64_t regs[PVPERF_NR_REGS];
	} pending[PVPERF_PROTO_MAX_SLOTS];
	/* The vCPU's sample ring while the plugin writes it (ring.c). */
	struct pvperf_ring {
		uint64_t gpa;		/* 0: the service writes the records */
		uint32_t capacity;	/* records */
		uint32_t watermark;
		uint32_t head;		/* ours; never read back from the guest */
		uint32_t lost;
		uint32_t notified;	/* head when last raised, if notified_us */
		int64_t notified_us;	/* then (monotonic); 0: none outstanding */
	} ring;
	uint64_t prng;		/* xorshift64 state for randomized periods */
	uint32_t reply_flags;	/* the service's last reply to it */
} __attribute__((aligned(64)));

struct pvperf_state {
	qemu_plugin_id_t id;
	/* Options, set at install and read-only afterwards. */
	const char *sock_path;	/* NULL: no service */
	const char *ram_path;	/* NULL: hypercalls are not handled */
	uint64_t ram_size;
	bool count_at_start;
	const char *state_in;	/* checkpoint to resume (state.c), or NULL */
	const char *state_out;	/* where to save one at exit, or NULL */
	uint32_t reply_flags;	/* the last reply's, any vCPU (atomic) */
	bool verbose;
	const struct arch *arch;	/* the guest's (info->target_name) */
	unsigned n_vcpus;		/* info->system.max_vcpus */
	struct pvperf_vcpu *vcpu;	/* [n_vcpus], never reallocated */
	struct qemu_plugin_scoreboard *score;	/* struct pvperf_score */
	struct pvperf_score *score_base;	/* see score_of; atomic */
};

extern struct pvperf_state pv;

/* Whether vaddr lies in the kernel half.  Off the hot paths: those keep
 * what they need of it in their translation-time data. */
static inline bool vaddr_is_kernel(uint64_t vaddr)
{
	return vaddr >= pv.arch->kernel_start;
}

/*
 * The vCPU's scoreboard entry.  QEMU allocates scoreboards for 16 vCPUs
 * and moves them only when a vCPU index reaches that
 * (plugins/core.c, plugin_grow_scoreboards__locked), so with at most
 * SCORE_FIXED_VCPUS the array's base is kept at the first vcpu_init
 * (pv.score_base) instead of asked for in every callback: that call
 * through QEMU (an assert, two more calls) was a tenth of the models'
 * time.  With more vCPUs the base may move, and is asked for each time.
 */
#define SCORE_FIXED_VCPUS 16

static inline struct pvperf_score *score_of(unsigned vcpu)
{
	struct pvperf_score *base = __atomic_load_n(&pv.score_base,
						    __ATOMIC_RELAXED);

	if (__builtin_expect(base != NULL, 1))
		return &base[vcpu];
	return qemu_plugin_scoreboard_find(pv.score, vcpu);
}

static inline qemu_plugin_u64 score_ctr(unsigned ctr)
{
	return (qemu_plugin_u64){ pv.score, offsetof(struct pvperf_score, ctr) +
					     ctr * sizeof(uint64_t) };
}

static inline qemu_plugin_u64 score_branch(bool kernel)
{
	return (qemu_plugin_u64){ pv.score, offsetof(struct pvperf_score, branch) +
					     !kernel * sizeof(uint64_t) };
}

static inline qemu_plugin_u64 score_cond(bool kernel)
{
	return (qemu_plugin_u64){ pv.score, offsetof(struct pvperf_score, cond) +
					     !kernel * sizeof(uint64_t) };
}

static inline qemu_plugin_u64 score_packed(void)
{
	return qemu_plugin_scoreboard_u64_in_struct(pv.score,
						    struct pvperf_score, packed);
}

static inline qemu_plugin_u64 score_capture(void)
{
	return qemu_plugin_scoreboard_u64_in_struct(pv.score,
						    struct pvperf_score, capture);
}

/* Install: the per-vCPU state and the scoreboard for n_vcpus; -1 if
 * QEMU gave no vCPU count. */
int core_init(int n_vcpus);
/* vcpu_init: keep the scoreboard's base (see score_of). */
void core_vcpu_init(unsigned vcpu);

void pvperf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pvperf_guest_log(unsigned vcpu, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* PVPERF_CORE_H */
