/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvperf.h - internal interfaces of the pvperf TCG plugin (not an ABI: the
 * ABIs are guest_kernel_patch/pvperf_abi.h and pvperf_proto.h).
 *
 *   pvperf.c    version, options, state, callback registration, the
 *               counting on/off switch (qemu_plugin_reset), exit, install
 *   classify.c  capstone decode at translation: branch / memory / may-fault
 *   count.c     exact retired instructions and branches by chunks, and
 *               the page-fault correction (PVPERF_OP_FAULT)
 *   sample.c    overflow detection at the exact instruction (sampling)
 *   hcall.c     the doorbell: hypercall detection, dispatch, service socket
 *
 * Index spaces (as in pvperf_abi.h): "vcpu" is QEMU's cpu_index, "gpa" a
 * guest physical address (== offset into the RAM file, see hcall.c),
 * "vaddr" a guest virtual address.  Counters are indexed by PVPERF_CTR_*.
 *
 * Contexts: translation (tb_trans) runs on any vCPU thread, concurrently
 * on several under MTTCG; exec/mem callbacks run on the vCPU thread that
 * executes the code; flush and reset callbacks run in an exclusive section
 * (every vCPU stopped); plugin_exit runs in whatever thread calls exit(),
 * which may be a vCPU thread while other vCPUs still run (isa-debug-exit).
 */
#ifndef PVPERF_PLUGIN_H
#define PVPERF_PLUGIN_H

#include <stdbool.h>
#include <stdint.h>
#include <qemu-plugin.h>

#include "pvperf_abi.h"
#include "pvperf_proto.h"

/* x86_64 canonical kernel half; user space can never execute there. */
#define PVPERF_KERNEL_HALF	0xffff800000000000ULL

/* The pc machine keeps gpa == RAM file offset only below its 3 GiB hole
 * (q35: 2 GiB when RAM > 2.75 GiB); pvperf supports RAM up to 2 GiB. */
#define PVPERF_MAX_RAM		(2ULL << 30)

static inline bool vaddr_is_kernel(uint64_t vaddr)
{
	return vaddr >= PVPERF_KERNEL_HALF;
}

static inline unsigned ctr_insn(bool kernel)
{
	return kernel ? PVPERF_CTR_INSN_KERNEL : PVPERF_CTR_INSN_USER;
}

static inline unsigned ctr_branch(bool kernel)
{
	return kernel ? PVPERF_CTR_BRANCH_KERNEL : PVPERF_CTR_BRANCH_USER;
}

/* Instrumentation modes, switched by qemu_plugin_reset (pvperf.c). */
enum pvperf_mode {
	MODE_OFF = 0,		/* nothing open: only doorbells */
	MODE_COUNT = 1,		/* exact counts: inline adds or callbacks */
	MODE_SAMPLE = 2,	/* callbacks that also detect overflows */
};

/* A threshold armed on a vCPU (struct pvperf_proto_slot, validated). */
struct pvperf_slot {
	uint64_t threshold;	/* UINT64_MAX: disarmed */
	uint64_t period;	/* 0: one-shot */
	uint32_t event_id;
	uint8_t ctr_mask;
	uint8_t rand_bits;
	uint8_t flags;		/* PVPERF_PROTO_SYNC */
};

/*
 * An overflow at a segment's last instruction, which may fault and then
 * not retire: held until the vCPU shows it retired (sample.c).
 */
struct pvperf_pending {
	uint64_t ip;
	uint64_t threshold;	/* what was reached; restored on a fault */
	uint64_t next_threshold;
	uint64_t kctr_at;	/* kernel insn counter when it was held */
	uint8_t mode;		/* PVPERF_MODE_* */
};

/* Per-vCPU slot; cache-line aligned so vCPU threads never share a line. */
struct pvperf_vcpu {
	/*
	 * Raw counters.  Only this vCPU's thread touches them: the inline ops
	 * and exec callbacks of the code it runs, the FAULT handler and the
	 * doorbell callback (both run on this thread, inside its own
	 * execution).  No atomics needed; plugin_exit reads them racily, for
	 * the verbose report only.
	 */
	uint64_t ctr[PVPERF_NR_COUNTERS];
	int fd;			/* service connection or -1; vCPU thread only */
	unsigned log_budget;	/* guest-triggerable log lines left */
	/*
	 * Sampling, vCPU thread only too: the slots come from the service's
	 * replies to this vCPU's hypercalls, the exec callbacks check and
	 * re-arm them, the FAULT handler cancels pending overflows.
	 */
	unsigned n_slots;
	unsigned pending_mask;	/* bit i: pending[i] is held */
	/*
	 * Fast path of the sampling callbacks: instructions (room[0]) and
	 * branches (room[1]) that may still be counted before any armed
	 * slot can reach its threshold.  Each segment subtracts its counts
	 * and looks at the slots only when one goes <= 0 (or an overflow
	 * is held); sample.c recomputes both whenever slots or counters
	 * change under it.  Lower than the truth is safe, never higher.
	 */
	int64_t room[2];
	struct pvperf_slot slot[PVPERF_PROTO_MAX_SLOTS];
	struct pvperf_pending pending[PVPERF_PROTO_MAX_SLOTS];
	uint64_t prng;		/* xorshift64 state for randomized periods */
	uint64_t lost;		/* overflow messages the socket refused */
} __attribute__((aligned(64)));

struct pvperf_state {
	qemu_plugin_id_t id;
	/* Options, set at install and read-only afterwards. */
	const char *sock_path;	/* NULL: no service */
	const char *ram_path;	/* NULL: hypercalls are not handled */
	uint64_t ram_size;
	bool count_at_start;
	bool verbose;
	/* Guest RAM (MAP_SHARED) or NULL; see hcall.c for its lifetime. */
	uint8_t *ram;
	struct pvperf_vcpu *vcpu;	/* [n_vcpus], never reallocated */
	unsigned n_vcpus;		/* qemu_plugin_n_max_vcpus() */
	bool use_inline;		/* one vCPU: inline adds are exact */
};

extern struct pvperf_state pv;

/* pvperf.c */
bool pvperf_counting(void);
bool pvperf_sampling(void);
void pvperf_request_mode(enum pvperf_mode mode);
void pvperf_request_flush(void);
void pvperf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pvperf_guest_log(unsigned vcpu, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* classify.c: per-insn flags computed at translation. */
enum {
	CLS_BRANCH	= 1 << 0,	/* a retired branch (see classify.c) */
	CLS_MEM		= 1 << 1,	/* accesses data memory: may page-fault */
	CLS_BOUNDARY	= 1 << 2,	/* may fault: last insn of a segment */
	CLS_PHANTOM	= 1 << 3,	/* not executed: see classify.c */
};

struct cls_insn {
	const uint8_t *bytes;
	size_t len;
	uint64_t vaddr;
};

void classify_tb(const struct cls_insn *insn, size_t n, uint8_t *cls);

/* count.c */
void count_init(void);
void count_tb(struct qemu_plugin_tb *tb, size_t n);
int64_t count_fault(unsigned vcpu, uint64_t ip, uint64_t mode);
void count_flush(void);
void count_fold(void);
void count_snapshot(unsigned vcpu, uint64_t out[PVPERF_NR_COUNTERS]);

/* sample.c */
void sample_arm(unsigned vcpu, const struct pvperf_proto_reply *reply);
void sample_segment(unsigned vcpu, bool kernel, const uint64_t *insn_vaddr,
		    uint32_t n_insns, const uint64_t *branch_vaddr,
		    uint32_t n_branches, bool last_may_fault);
void sample_confirm_all(unsigned vcpu);
void sample_fault(unsigned vcpu, uint64_t ip);
void sample_update_room(unsigned vcpu);

/* hcall.c */
int hcall_init(void);
void hcall_send_overflow(unsigned vcpu, const struct pvperf_proto_overflow *m);
void hcall_tb(struct qemu_plugin_tb *tb, size_t n);
bool hcall_is_doorbell(const uint8_t *bytes, size_t len);
void hcall_vcpu_exit(unsigned vcpu);
void hcall_exit(void);

/* A tiny bump allocator for udata that lives as long as the TBs (count.c). */
void *arena_alloc(size_t size);

#endif /* PVPERF_PLUGIN_H */
