/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvperf_proto.h - the private protocol between the pvperf TCG plugin (in
 * the qemu-system-x86_64 process) and the pvperf host service (pyhost).
 * Mirrored by pyhost/pmu/plugin_protocol.py; tests compare the two.
 *
 * One SOCK_SEQPACKET connection per vCPU to the service's unix socket,
 * opened by that vCPU's thread on its first hypercall.  The service never
 * sees one message per guest instruction: only hypercalls cross.
 *
 *   plugin -> service   struct pvperf_proto_hcall   (the vCPU waits)
 *   service -> plugin   struct pvperf_proto_reply
 *   plugin -> service   struct pvperf_proto_overflow (no reply: the vCPU
 *                       goes on; one per sample, never per instruction;
 *                       a sample the plugin delivered itself, or one the
 *                       service must write: pvperf_proto_ring)
 *
 * Sampling.  Every reply carries the complete table of thresholds to arm
 * on that vCPU (the service's PMU model owns periods and thresholds).  A
 * threshold is an absolute value of the sum of the raw counters in
 * ctr_mask: the event overflows at the instruction (or branch) that makes
 * the sum reach it.  After an overflow the plugin re-arms on its own with
 * threshold += period + (prng & ((1 << rand_bits) - 1)) and tells the
 * service both numbers in the overflow message; period 0 means one-shot
 * (frequency mode: the guest re-arms with SET_PERIOD).  Messages on one
 * connection are served in order, so a hypercall's reply always reflects
 * every overflow sent before it.
 *
 * Counter snapshots are exact at the hypercall: they include every guest
 * instruction up to and including the marker store and nothing after it.
 */
#ifndef PVPERF_PROTO_H
#define PVPERF_PROTO_H

#include <linux/types.h>

#include "pvperf_abi.h"

#define PVPERF_PROTO_HCALL_MAGIC	0x51505650	/* "PVPQ" */
#define PVPERF_PROTO_REPLY_MAGIC	0x52505650	/* "PVPR" */
#define PVPERF_PROTO_OVERFLOW_MAGIC	0x4f505650	/* "PVPO" */

/*
 * Raw per-vCPU counters the plugin keeps, in this order.  The first
 * PVPERF_NR_INLINE_COUNTERS are counted by generated code (inline adds)
 * and can be sampled (slot ctr_mask); the models' counters follow, each
 * as a (kernel, user) pair: PVPERF_CTR_MODEL(PVPERF_M_*, PVPERF_MODE_*).
 */
#define PVPERF_CTR_INSN_KERNEL		0
#define PVPERF_CTR_INSN_USER		1
#define PVPERF_CTR_BRANCH_KERNEL	2
#define PVPERF_CTR_BRANCH_USER		3
#define PVPERF_NR_INLINE_COUNTERS	4

/* Model counters, in cachegrind's terms where it has one. */
#define PVPERF_M_I1_MISS		0	/* I1mr: fetches missing L1I */
#define PVPERF_M_LL_IMISS		1	/* ILmr: ... and the LL */
#define PVPERF_M_D1_READ		2	/* Dr: data reads */
#define PVPERF_M_D1_READ_MISS		3	/* D1mr */
#define PVPERF_M_LL_READ_MISS		4	/* DLmr */
#define PVPERF_M_D1_WRITE		5	/* Dw: data writes */
#define PVPERF_M_D1_WRITE_MISS		6	/* D1mw */
#define PVPERF_M_LL_WRITE_MISS		7	/* DLmw */
#define PVPERF_M_COND			8	/* Bc: conditional branches */
#define PVPERF_M_COND_MISS		9	/* Bcm: ... mispredicted */
#define PVPERF_M_IND			10	/* Bi: indirect jumps, calls */
#define PVPERF_M_IND_MISS		11	/* Bim: ... mispredicted */
#define PVPERF_M_DTLB_READ_MISS		12	/* data reads missing the dTLB */
#define PVPERF_M_DTLB_WRITE_MISS	13	/* data writes missing it */
#define PVPERF_M_ITLB_MISS		14	/* fetches missing the iTLB */
#define PVPERF_M_STALL			15	/* timing: penalty cycles */
/* The emulator's own work (emu.c), counted like the models' counters. */
#define PVPERF_M_TB_TRANSLATED		16	/* blocks translated */
#define PVPERF_M_TB_FLUSH		17	/* code-cache flushes */
#define PVPERF_M_DEVICE			18	/* MMIO and port I/O accesses */
#define PVPERF_M_HOST_NS		19	/* vCPU thread's host CPU time, ns */
#define PVPERF_NR_MODEL_COUNTERS	20
#define PVPERF_CTR_MODEL(m, mode)	(PVPERF_NR_INLINE_COUNTERS + 2 * (m) + (mode))
#define PVPERF_NR_COUNTERS		44	/* inline + 2 * model */

/* Reply flags: what the plugin must instrument from now on. */
#define PVPERF_REPLY_COUNTING		(1U << 0)
/* Some event samples somewhere: instrument for exact overflow detection. */
#define PVPERF_REPLY_SAMPLING		(1U << 1)
/* Some sampling event needs every register exact at the overflowing
 * instruction (sample registers, user stacks): capture points at every
 * instruction. */
#define PVPERF_REPLY_REGS		(1U << 2)
/* Some open event counts branches: count them (instructions are always
 * counted while anything is open). */
#define PVPERF_REPLY_BRANCHES		(1U << 3)
/* Some sampling event needs only the frame registers (sp, bp) exact
 * (frame-pointer callchains): capture points only after the instructions
 * that write them.  REGS wins over FRAME. */
#define PVPERF_REPLY_FRAME		(1U << 4)
/* Some open event counts cache-model events: run the cache model. */
#define PVPERF_REPLY_CACHE		(1U << 5)
/* Some open event counts branch-predictor events: run the predictor. */
#define PVPERF_REPLY_BPRED		(1U << 6)
/* This vCPU runs an event counting model events (set on every reply to
 * this vCPU; cachegrind-compatible models only watch such code). */
#define PVPERF_REPLY_MODELS_LIVE	(1U << 7)
/* A session of model events starts: the models start cold (compat). */
#define PVPERF_REPLY_MODELS_COLD	(1U << 8)
/* Some open event counts TLB-model events: run the TLB models. */
#define PVPERF_REPLY_TLB		(1U << 9)
/* Some open event counts device accesses: watch every data access for
 * I/O memory, and the port I/O instructions. */
#define PVPERF_REPLY_DEVICE		(1U << 10)
/* Some sampling event is on host CPU time.  With _SAMPLING: read the
 * vCPU thread's clock about every 20 us of it (at chunk starts the
 * sampling countdown paces), to overflow near where the time was spent.
 * Without (the service leaves _SAMPLING, _REGS and _FRAME out when only
 * host-time events without :p sample and the plugin writes the rings):
 * a timer on the vCPU thread's CPU time raises the guest's overflow
 * interrupt when a host-time slot may be due, and the guest answers
 * with PVPERF_OP_TICK from where it landed (pvperf_abi.h); nothing is
 * instrumented for it.  A plugin that cannot keep such timers (one
 * thread for every vCPU, a vCPU whose ring it does not write) falls
 * back to the countdown. */
#define PVPERF_REPLY_HOST_TIME		(1U << 11)
#define PVPERF_REPLY_KNOWN		((1U << 12) - 1)
/*
 * Only on the answer to a SYNC overflow (never saved, not in KNOWN): the
 * service wrote the records and an overflow interrupt is due; the plugin
 * raises it by writing its vCPU's doorbell eventfd (8 bytes, value 1).
 * The service hands that eventfd over with SCM_RIGHTS on a reply to a
 * hypercall (the first of each connection, when the guest has an
 * ivshmem-doorbell device): the vector QEMU raises in the guest for
 * this vCPU.  After a SYNC answer, with RING or not, the plugin waits
 * until QEMU has taken its eventfd (no longer readable): the interrupt
 * is then raised and lands at the vCPU's next block boundary.
 */
#define PVPERF_REPLY_RING		(1U << 12)

/*
 * Slot and overflow flags.  SYNC: the vCPU waits for the service's (empty)
 * answer to this overflow before it goes on, so that the NMI is raised
 * first and lands in the frame that overflowed (callchain events); other
 * overflows are sent without an answer and the vCPU never waits.
 */
#define PVPERF_PROTO_SYNC		(1U << 0)
/*
 * REGS on a slot: capture the registers just before the overflowing
 * instruction runs; on an overflow message: regs[] holds them (order and
 * meaning: struct pvperf_sample in pvperf_abi.h).
 */
#define PVPERF_PROTO_REGS		(1U << 1)
/*
 * Overflow message only: the plugin delivered the sample itself (it owns
 * the vCPU's ring, struct pvperf_proto_ring) and tells the service what
 * it must still account, without an answer (flow control's every 64th
 * aside).  WRITTEN: the record went into the ring at the head the service
 * mirrors; LOST: the ring was full (the plugin counted it in the ring's
 * and the event's lost); RANG: the plugin raised the overflow interrupt
 * right after this record (the ring's notified head is now its head).
 */
#define PVPERF_PROTO_WRITTEN		(1U << 2)
#define PVPERF_PROTO_LOST		(1U << 3)
#define PVPERF_PROTO_RANG		(1U << 4)
/* Delivery flags (struct pvperf_proto_deliver): the event is buffered
 * (PVPERF_ATTR_BUFFERED): an interrupt only at the ring's watermark. */
#define PVPERF_DELIVER_BUFFERED		(1U << 0)
/* Ring flags (struct pvperf_proto_ring): notified is valid (an interrupt
 * was raised for the ring's records up to it). */
#define PVPERF_RING_NOTIFIED		(1U << 0)
/* An overflow interrupt the guest has not answered (its ring's tail not
 * past the notified head) within this long is raised again, by whichever
 * side writes the ring: the plugin (ring.c) or the service (sampling.py). */
#define PVPERF_IRQ_RETRY_US		50000

/* Thresholds a reply can arm per vCPU (= the guest's counters per CPU). */
#define PVPERF_PROTO_MAX_SLOTS		8

/* How long a vCPU waits for the service before failing the hypercall. */
#define PVPERF_PROTO_TIMEOUT_MS		5000

struct pvperf_proto_hcall {
	__u32 magic;
	__u32 vcpu;			/* vcpu index */
	__u64 block_gpa;		/* gpa of struct pvperf_hcall */
	__u64 insn_vaddr;		/* where the marker store ran */
	__u64 counters[PVPERF_NR_COUNTERS];
};

struct pvperf_proto_slot {
	__u64 threshold;		/* raw sum at which it overflows */
	__u64 period;			/* raw re-arm period; 0: one-shot */
	__u64 ctr_mask;			/* bit i: raw counter i is summed;
					 * inline counters only, or model
					 * counters only (models.c) */
	__u32 event_id;
	__u8 rand_bits;			/* re-arm randomization, 0..31 */
	__u8 flags;			/* PVPERF_PROTO_SYNC, _REGS */
	__u16 __pad0;
};

/*
 * Plugin-written samples.  With a doorbell (the vCPU's own interrupt, on
 * an eventfd the plugin holds), the service hands the vCPU's sample ring
 * to the plugin on a hypercall's reply: gpa != 0.  The plugin then writes
 * every record of that vCPU into guest RAM itself (struct pvperf_sample
 * at head % capacity, then head), bumps the event's lost when the ring is
 * full, raises the interrupt, and sends the overflow message afterwards
 * with PVPERF_PROTO_WRITTEN or _LOST (and _RANG): the service only
 * accounts.  Messages are served in order, so the ring in a reply always
 * has the head of every record written before the hypercall; gpa 0 (no
 * ring registered, no doorbell, deterministic runs): the service writes.
 * The gpas are the guest's, checked by the service (SAMPLE_BUF, OPEN);
 * the plugin checks them against RAM again and never trusts tail.
 */
struct pvperf_proto_ring {
	__u64 gpa;			/* struct pvperf_sample_buf; 0: none */
	__u32 capacity;			/* records */
	__u32 watermark;		/* records (buffered events) */
	__u32 head;			/* records written (mod 2^32) */
	__u32 lost;			/* the ring's lost */
	__u32 notified;			/* head when last raised (RING_NOTIFIED) */
	__u32 flags;			/* PVPERF_RING_* */
};

/* What a record of slot[i] carries beyond the overflow (with a ring). */
struct pvperf_proto_deliver {
	__u64 event_gpa;		/* its struct pvperf_guest_perf_event */
	__u64 period;			/* struct pvperf_sample.period */
	__u32 flags;			/* PVPERF_DELIVER_* */
	__u32 __pad0;
};

struct pvperf_proto_reply {
	__u32 magic;
	__u32 flags;			/* PVPERF_REPLY_* */
	__u32 n_slots;			/* valid entries of slot[] */
	__u32 __pad0;
	struct pvperf_proto_slot slot[PVPERF_PROTO_MAX_SLOTS];
	struct pvperf_proto_ring ring;	/* hypercall replies only */
	struct pvperf_proto_deliver deliver[PVPERF_PROTO_MAX_SLOTS];
};

struct pvperf_proto_overflow {
	__u32 magic;
	__u32 vcpu;			/* vcpu index */
	__u32 event_id;
	__u16 mode;			/* PVPERF_MODE_* of ip */
	__u16 flags;			/* PVPERF_PROTO_SYNC: answer it;
					 * PVPERF_PROTO_REGS: regs[] valid;
					 * _WRITTEN, _LOST, _RANG: see above */
	__u64 ip;			/* the overflowing instruction */
	__u64 threshold;		/* the threshold it reached */
	__u64 next_threshold;		/* re-armed at; ~0: disarmed */
	__u64 data_addr;		/* model events: the access's address */
	__u64 regs[PVPERF_NR_REGS];	/* before ip ran (pvperf_abi.h) */
};

/*
 * Checkpoints (pvperf run --checkpoint, pvperf restore).  A VM is saved by
 * stopping it, migrating it to a file and quitting QEMU; the plugin of
 * that QEMU writes its part at exit (option state_out=PATH): the exact
 * counts of every vCPU, what the service last asked it to instrument, the
 * armed thresholds and the overflows still held.  The QEMU that resumes
 * the VM (-incoming) loads it at install (state_in=PATH), before any vCPU
 * runs, so counting and sampling go on at the next instruction as if
 * nothing had happened.  The models' caches and predictor start cold.
 * pyhost/pmu/plugin_protocol.py validates a file before pvperf starts
 * QEMU; the plugin validates it again and refuses to install on any error.
 */
#define PVPERF_STATE_MAGIC		0x53505650	/* "PVPS" */
#define PVPERF_STATE_VERSION		3	/* 3: PVPERF_NR_REGS 32 */

struct pvperf_state_header {
	__u32 magic;
	__u32 version;
	__u32 n_vcpus;			/* = the QEMU's max_vcpus */
	__u32 vcpu_size;		/* sizeof(struct pvperf_state_vcpu) */
	__u32 reply_flags;		/* the last reply's: what is instrumented */
	__u32 __pad0;
};

/* An overflow held at the checkpoint (sample.c: it may not have retired). */
struct pvperf_state_held {
	__u64 chunk_ip;			/* first instruction of its chunk */
	__u64 ip;			/* the overflowing instruction */
	__u64 threshold;
	__u64 next_threshold;
	__u64 kctr_at;			/* kernel instruction count when held */
	__u16 idx;			/* ip's index in its chunk */
	__u8 mode;			/* PVPERF_MODE_* */
	__u8 has_regs;
	__u32 __pad0;
	__u64 regs[PVPERF_NR_REGS];
};

struct pvperf_state_vcpu {
	__u64 counters[PVPERF_NR_COUNTERS];	/* exact counts */
	__u64 prng;			/* re-arm randomization state */
	__u32 reply_flags;		/* the last reply to this vCPU */
	__u32 n_slots;			/* slots on inline counters first */
	__u32 held_mask;		/* bit i: held[i], for inline slot i */
	__u32 __pad0;
	struct pvperf_proto_slot slot[PVPERF_PROTO_MAX_SLOTS];	/* armed now */
	struct pvperf_state_held held[PVPERF_PROTO_MAX_SLOTS];
};

_Static_assert(PVPERF_NR_COUNTERS ==
	       PVPERF_NR_INLINE_COUNTERS + 2 * PVPERF_NR_MODEL_COUNTERS, "counters");
_Static_assert(sizeof(struct pvperf_proto_hcall) == 376, "hcall msg size");
_Static_assert(sizeof(struct pvperf_proto_slot) == 32, "slot size");
_Static_assert(sizeof(struct pvperf_proto_ring) == 32, "ring size");
_Static_assert(sizeof(struct pvperf_proto_deliver) == 24, "deliver size");
_Static_assert(sizeof(struct pvperf_proto_reply) == 496, "reply msg size");
_Static_assert(sizeof(struct pvperf_proto_overflow) == 48 + 8 * PVPERF_NR_REGS,
	       "overflow msg size");
_Static_assert(PVPERF_NR_COUNTERS <= 64, "ctr_mask bits");
_Static_assert(sizeof(struct pvperf_state_header) == 24, "state header size");
_Static_assert(sizeof(struct pvperf_state_held) == 48 + 8 * PVPERF_NR_REGS,
	       "held size");
_Static_assert(sizeof(struct pvperf_state_vcpu) ==
	       2040 + PVPERF_PROTO_MAX_SLOTS * 8 * (PVPERF_NR_REGS - 16),
	       "state vcpu size");

#endif /* PVPERF_PROTO_H */
