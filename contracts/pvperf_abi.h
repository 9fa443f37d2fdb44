/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * pvperf_abi.h - the paravirtual perf ABI between a guest kernel and the
 * pvperf host (QEMU TCG plugin + host service).  Defined once, here; the
 * guest driver and the TCG plugin include this file, pyhost/abi.py mirrors
 * it and tests/contracts/test_abi.py parses this file and compares.
 *
 * It follows the KVM paravirtual perf interface (Zhang Yanmin, v2, 2010):
 * KVM_PERF_OP with the operations OPEN, ENABLE, DISABLE, CLOSE, READ, a
 * parameter block {attr_addr, guest_event_addr, id}, a guest_perf_attr and a
 * guest_perf_event {count, overflows} that the host keeps up to date.
 *
 * Transport.  TCG gives a plugin no register access (QEMU 7.2), so a
 * hypercall is not vmcall: the guest kernel fills its per-CPU
 * struct pvperf_hcall in RAM and then executes exactly one marker store,
 * the one instruction of its architecture (see "Per guest architecture"
 * at the end) that writes PVPERF_MARKER_MAGIC into the block's marker
 * field.  The plugin recognises the instruction at translation time, and
 * the memory callback of the store yields the guest physical address of
 * the block.  The host reads the block once, validates it, acts, writes
 * ->ret, and only then lets the vCPU continue.  The store must run at a
 * kernel-half address (the architecture's PVPERF_<ARCH>_KERNEL_HALF_START):
 * user mode can never issue a hypercall.
 *
 * Index spaces (named once; code uses these names):
 *   event id   - chosen by the guest, unique per guest, < PVPERF_MAX_EVENT_ID
 *   vcpu index - QEMU's cpu_index of the vCPU that executed the store
 *   gpa        - guest physical address (offset into the guest RAM file)
 */
#ifndef PVPERF_ABI_H
#define PVPERF_ABI_H

#include <linux/types.h>

#define PVPERF_ABI_VERSION		6	/* 2: sampling; 3: sample registers;
						 * 4: EVENTS; 5: 32 register slots;
						 * 6: TICK, sample_buf.ticks */
/*
 * Renamed in version 6 without a new one (names only: every value and
 * layout is as it was): the hypercall's store and its magic, once the
 * "doorbell" (PVPERF_DOORBELL_*, PVPERF_AARCH64_DOORBELL_INSN*,
 * pvperf_hcall.doorbell), are the marker, since "doorbell" names the
 * host->guest overflow interrupt (pvperf_proto.h); x86_64's facts, once
 * unprefixed (PVPERF_DOORBELL_INSN_*, PVPERF_KERNEL_HALF_START,
 * PVPERF_REG_*), carry PVPERF_X86_64_ as arm64's carry PVPERF_AARCH64_.
 */

/* The value the marker store writes into pvperf_hcall.marker. */
#define PVPERF_MARKER_MAGIC		0x46505650	/* "PVPF" */

/* Hypercall number (seed: KVM_PERF_OP) and its operations. */
#define PVPERF_HC_PERF_OP		3
#define PVPERF_OP_OPEN			1
#define PVPERF_OP_CLOSE			2
#define PVPERF_OP_ENABLE		3
#define PVPERF_OP_DISABLE		4
#define PVPERF_OP_READ			5
/* Extensions to the 2010 KVM interface: versioned by PVPERF_ABI_VERSION. */
#define PVPERF_OP_PROBE			0x100	/* ret = PVPERF_ABI_VERSION */
#define PVPERF_OP_FAULT			0x101	/* args: fault ip, PVPERF_MODE_* */
/*
 * Freeze and thaw every event of the calling vCPU at one instruction, like
 * x86's PERF_GLOBAL_CTRL in pmu_disable/pmu_enable: ENABLE/DISABLE issued
 * while frozen take effect at the thaw/freeze point, so the members of a
 * group start and stop on the same instruction.
 */
#define PVPERF_OP_PMU_DISABLE		0x102
#define PVPERF_OP_PMU_ENABLE		0x103
/*
 * Sampling (ABI v2).  An event OPENed with attr.sample_period != 0 samples:
 * the host counts the period down and, at the exact guest instruction that
 * makes it overflow, writes a struct pvperf_sample into the calling vCPU's
 * sample buffer, increments guest_perf_event.overflows and injects an NMI
 * (for PVPERF_ATTR_BUFFERED events only once the buffer holds
 * buffer's watermark records, like PEBS/perfmon2 sampling buffers).
 *
 * SET_PERIOD  args: event id, new period.  Restarts the countdown from the
 *             next instruction (perf core's hwc->sample_period changed:
 *             frequency mode, PERF_EVENT_IOC_PERIOD).  The host clamps it
 *             to at least PVPERF_MIN_PERIOD; above PVPERF_MAX_PERIOD is
 *             -EINVAL.  A frequency-mode event (PVPERF_ATTR_FREQ) is
 *             one-shot, like a hardware counter between its overflow and
 *             the PMI that reloads it: after each overflow it counts on
 *             without sampling until the guest's SET_PERIOD re-arms it,
 *             so perf core sees one overflow per interrupt and times its
 *             period adjustment right.
 * SAMPLE_BUF  args: gpa of a struct pvperf_sample_buf (page aligned), its
 *             size in bytes (a power of two, 4 KiB .. 1 MiB), the
 *             watermark in records (1 .. capacity).  Per vCPU: the
 *             calling vCPU's buffer.  gpa 0 unregisters.
 */
#define PVPERF_OP_SET_PERIOD		0x104
#define PVPERF_OP_SAMPLE_BUF		0x105
/*
 * EVENTS (ABI v4)  args: gpa of a buffer, its size in bytes (at most
 *             PVPERF_EVENTS_BUF_MAX).  The host writes the events it
 *             counts, one per line, as sysfs spells them under
 *             events/ ("instructions=event=0xc0\n",
 *             "bus-cycles=event=0x3c,umask=0x01\n"), then a NUL, and
 *             returns the length without the NUL; -ENOSPC if the buffer
 *             is too small.  The host's event table is the one
 *             definition: the driver advertises what this returns.
 *             Left out: the events perf names as legacy hardware-cache
 *             events (L1-dcache-loads, branch-loads, ...), which perf
 *             reaches through PERF_TYPE_HW_CACHE; perf 6.12 refuses
 *             such a name when a PMU also has it as an alias.
 */
#define PVPERF_OP_EVENTS		0x106
#define PVPERF_EVENTS_BUF_MAX		16384
/*
 * ABI v6: host-time ticks.  A sampling event on the host's CPU time (the
 * emulator's own events) is paced by a timer on the vCPU thread's CPU
 * time, not by instrumented code: when it expires the host increments
 * the calling CPU's pvperf_sample_buf.ticks and raises the overflow
 * interrupt.  An overflow interrupt that finds ticks changed answers
 * with TICK: args[0] the interrupted ip, args[1] PVPERF_MODE_* of the
 * interrupted context, args[2] the current task's user ip (its user
 * registers') if it has a user context, else 0.  The host charges its CPU
 * time there and writes the samples that fall due into the ring, with no
 * interrupt of their own (the handler drains the ring after TICK) and
 * without PVPERF_SAMPLE_REGS: their registers are the interrupted
 * context's, or the task's user registers for a user sample that
 * interrupted the kernel.  Handled by the host without its service.
 */
#define PVPERF_OP_TICK			0x107

/* Execution modes, also the counter split the plugin keeps per vCPU. */
#define PVPERF_MODE_KERNEL		0
#define PVPERF_MODE_USER		1

/* Limits the host enforces (seed: per-guest event limit). */
#define PVPERF_MAX_EVENTS		4096	/* open at once per guest */
#define PVPERF_MAX_EVENT_ID		65536

/* Flags of guest_perf_attr.flags: our own bit numbers, not a C bitfield. */
#define PVPERF_ATTR_EXCLUDE_USER	(1ULL << 0)
#define PVPERF_ATTR_EXCLUDE_KERNEL	(1ULL << 1)
#define PVPERF_ATTR_EXCLUDE_HV		(1ULL << 2)
#define PVPERF_ATTR_EXCLUDE_IDLE	(1ULL << 3)
#define PVPERF_ATTR_FREQ		(1ULL << 4)
#define PVPERF_ATTR_PRECISE_SHIFT	5		/* 2 bits: precise_ip */
#define PVPERF_ATTR_PRECISE_MASK	(3ULL << 5)
#define PVPERF_ATTR_EXCLUDE_GUEST	(1ULL << 7)
#define PVPERF_ATTR_EXCLUDE_HOST	(1ULL << 8)
/* ABI v2: see PVPERF_OP_SAMPLE_BUF. */
#define PVPERF_ATTR_BUFFERED		(1ULL << 9)	/* NMI at the watermark */
/*
 * Randomized periods (perfmon2's reset randomization): each re-arm adds a
 * pseudo-random value in [0, 2^bits - 1] to the period; bits 0 = off.
 */
#define PVPERF_ATTR_RANDOM_SHIFT	10		/* 5 bits: log2(mask+1) */
#define PVPERF_ATTR_RANDOM_MASK		(31ULL << 10)
#define PVPERF_ATTR_KNOWN		((1ULL << 15) - 1)

/*
 * Lingering instrumentation.  Switching the TCG plugin's counting on or off
 * retranslates all guest code (about 0.1 s of TCG time), so the host keeps
 * counting for PVPERF_COUNT_LINGER_MS after the last event closes: back to
 * back perf runs (perf stat -r, scripts) pay for it once.  The host only
 * changes modes when it answers a hypercall, so the guest makes a PROBE
 * PVPERF_COUNT_LINGER_MS after its last CLOSE; a PROBE with no event open
 * ends the linger.
 */
#define PVPERF_COUNT_LINGER_MS		2000

/*
 * Largest guest RAM the host serves, in MiB: 512 GiB.  The host reads
 * guest memory through the RAM file, whose layout in guest physical
 * memory (one range, or two around the pc machine's PCI hole below 4 GiB)
 * holds up to here; on pc, RAM reaching the AMD HyperTransport hole at
 * 1012 GiB would move to 1 TiB.  Below this, the host's memory sets the
 * limit (checked before boot).
 */
#define PVPERF_MAX_RAM_MB		524288

/* Smallest period the host programs (x86's limit_period analogue). */
#define PVPERF_MIN_PERIOD		128
/* Largest period the host accepts (x86's max_period analogue). */
#define PVPERF_MAX_PERIOD		(1ULL << 62)
#define PVPERF_SAMPLE_BUF_MIN		4096
#define PVPERF_SAMPLE_BUF_MAX		(1 << 20)

/*
 * Per-CPU hypercall block; PVPERF_HCALL_ALIGN-aligned (its size) so it never
 * straddles a page.  The host ignores a marker store on a misaligned block.
 */
#define PVPERF_HCALL_ALIGN		64
struct pvperf_hcall {
	__u32 marker;		/* the marker store writes the magic here */
	__u32 nr;		/* PVPERF_HC_PERF_OP */
	__u32 op;		/* PVPERF_OP_* */
	__u32 __pad0;
	__u64 args[3];		/* OPEN: gpa of param; others: event id */
	__s64 ret;		/* host: 0 / value, or a negative errno */
	__u64 __reserved[2];
};

/* Seed: guest_perf_attr, with explicit padding so every side agrees. */
struct pvperf_guest_perf_attr {
	__u32 type;
	__u32 __pad0;
	__u64 config;
	__u64 sample_period;
	__u64 sample_type;
	__u64 read_format;
	__u64 flags;		/* PVPERF_ATTR_* */
	__u32 bp_type;
	__u32 __pad1;
	__u64 bp_addr;
	__u64 bp_len;
};

/* Seed: guest_perf_event, written by the host; 8-byte aligned. */
struct pvperf_guest_perf_event {
	__u64 count;
	__u32 overflows;	/* host increments (mod 2^32); the guest only
				 * reads it (differences), so no race */
	__u32 lost;		/* host increments (mod 2^32) for each sample
				 * of this event it could not record (its
				 * CPU's ring full, or none registered); was
				 * padding (0) before ABI v4's drivers used it */
};

/* Seed: guest_perf_event_param, the OPEN parameter block. */
struct pvperf_guest_perf_param {
	__u64 attr_addr;	/* gpa of struct pvperf_guest_perf_attr */
	__u64 guest_event_addr;	/* gpa of struct pvperf_guest_perf_event */
	__u32 id;		/* event id */
	__u32 __pad0;
};

/*
 * ABI v2: one sample, written by the host at the overflow.  ip is the
 * instruction whose retirement made the counter reach its period (exact,
 * not where the NMI lands); mode says which half it ran in.
 *
 * ABI v3: for events whose samples carry registers or a stack
 * (PERF_SAMPLE_CALLCHAIN, _REGS_USER, _REGS_INTR, _STACK_USER) the host
 * also records the general-purpose registers as they were just before
 * the instruction at ip ran, so that ip and regs describe one machine
 * state (what an unwinder needs), and sets PVPERF_SAMPLE_REGS in flags.
 * Each architecture has its own order in the same slots (its
 * PVPERF_<ARCH>_REG_*, at the end; ABI v5: 32 of them, enough for arm64's
 * general registers; slots an architecture does not use are 0).
 */
#define PVPERF_SAMPLE_REGS		(1U << 0)
#define PVPERF_NR_REGS			32

struct pvperf_sample {
	__u32 event_id;
	__u16 mode;		/* PVPERF_MODE_* */
	__u16 flags;		/* PVPERF_SAMPLE_REGS */
	__u64 ip;		/* guest virtual address of that instruction */
	__u64 data_addr;	/* model data events: the access; else 0 */
	__u64 period;		/* the period that elapsed */
	__u64 regs[PVPERF_NR_REGS];	/* valid with PVPERF_SAMPLE_REGS */
};

/*
 * ABI v2: the per-vCPU sample buffer, a ring of records after a 64-byte
 * header.  The host writes record head % capacity and then advances head;
 * the guest consumes up to head and advances tail.  A record that finds
 * the ring full is dropped and counted in lost.  Both indices run freely
 * (mod 2^32).
 */
struct pvperf_sample_buf {
	__u32 head;		/* host: records written */
	__u32 tail;		/* guest: records consumed */
	__u32 lost;		/* host: records dropped, ring full */
	__u32 nmis;		/* host: NMIs injected since registration
				 * (an injected NMI reaches every vCPU: each
				 * claims one per increment, see the driver) */
	__u32 ticks;		/* host: host-time ticks (PVPERF_OP_TICK) */
	__u32 __reserved32;
	__u64 __reserved[5];
	struct pvperf_sample rec[];	/* (size - 64) / 288 of them */
};

/* ----------------------------------------------------------------------
 * Per guest architecture: the marker store, the kernel half, the register
 * slots of a sample.  The kernel half splits guest code into kernel and
 * user for counting and profiles, and the host serves a hypercall only if
 * the marker store ran at or above its start.
 */

/*
 * x86_64.  The marker store is
 *
 *     movl $PVPERF_MARKER_MAGIC, (%rax)      bytes c7 00 50 56 50 46
 *
 * with %rax pointing at the caller's struct pvperf_hcall.  The kernel
 * half is 4-level paging's upper canonical half.  Register slots: gdb's
 * order, rax rbx rcx rdx rsi rdi rbp rsp r8..r15 (0..15); eflags is not
 * recorded, since TCG computes the flags lazily.
 */
#define PVPERF_X86_64_MARKER_INSN_LEN	6
#define PVPERF_X86_64_MARKER_INSN_BYTES	{ 0xc7, 0x00, 0x50, 0x56, 0x50, 0x46 }
#define PVPERF_X86_64_KERNEL_HALF_START	0xffff800000000000ULL
#define PVPERF_X86_64_REG_AX		0
#define PVPERF_X86_64_REG_BX		1
#define PVPERF_X86_64_REG_CX		2
#define PVPERF_X86_64_REG_DX		3
#define PVPERF_X86_64_REG_SI		4
#define PVPERF_X86_64_REG_DI		5
#define PVPERF_X86_64_REG_BP		6
#define PVPERF_X86_64_REG_SP		7
#define PVPERF_X86_64_REG_R8		8	/* r8..r15: 8..15 */

/*
 * arm64.  The marker store is
 *
 *     stur w16, [x17]                        word b8000230
 *
 * (one little-endian instruction word), with w16 = PVPERF_MARKER_MAGIC
 * and x17 pointing at the caller's struct pvperf_hcall.  The kernel half
 * is TTBR1_EL1's range (VA_BITS = 48, 4K pages).  Register slots: x0..x30
 * (0..30), sp (31), perf's arm64 register numbers (PERF_REG_ARM64_X0..SP);
 * the pc is ip, pstate is not recorded.
 */
#define PVPERF_AARCH64_MARKER_INSN	0xb8000230
#define PVPERF_AARCH64_MARKER_INSN_LEN	4
#define PVPERF_AARCH64_KERNEL_HALF_START	0xffff000000000000ULL
#define PVPERF_AARCH64_REG_X0		0	/* x0..x30: 0..30 */
#define PVPERF_AARCH64_REG_FP		29	/* x29 */
#define PVPERF_AARCH64_REG_LR		30	/* x30 */
#define PVPERF_AARCH64_REG_SP		31

/*
 * riscv64.  The marker store is
 *
 *     sw a0, 0(a1)                           word 00a5a023
 *
 * in its 32-bit form (one little-endian instruction word), with a0 =
 * PVPERF_MARKER_MAGIC and a1 pointing at the caller's struct
 * pvperf_hcall.  An assembler allowed compressed instructions emits c.sw
 * for it, so kernel code has this word only where written under
 * `.option norvc`, as the driver writes it.  The kernel half is every
 * address with bit 63 set: the kernel lives in the top half for sv39,
 * sv48 and sv57 alike (user addresses stop below 1 << 38, 1 << 47,
 * 1 << 56), so one start serves whichever mode the guest's kernel picks.
 * Register slots: perf's riscv order (PERF_REG_RISCV_PC..T6): slot 0 (pc)
 * is 0, the pc is ip; x1..x31 in slots 1..31 (ra 1, sp 2, s0/fp 8).
 */
#define PVPERF_RISCV64_MARKER_INSN	0x00a5a023
#define PVPERF_RISCV64_MARKER_INSN_LEN	4
#define PVPERF_RISCV64_KERNEL_HALF_START	0x8000000000000000ULL
#define PVPERF_RISCV64_REG_PC		0	/* 0 in samples: ip */
#define PVPERF_RISCV64_REG_RA		1	/* x1..x31: 1..31 */
#define PVPERF_RISCV64_REG_SP		2
#define PVPERF_RISCV64_REG_FP		8	/* s0 */

#define PVPERF_ABI_ASSERT(c, m) _Static_assert(c, m)
PVPERF_ABI_ASSERT(sizeof(struct pvperf_hcall) == PVPERF_HCALL_ALIGN,
		  "pvperf_hcall size");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_hcall, op) == 8, "op");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_hcall, args) == 16, "args");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_hcall, ret) == 40, "ret");
PVPERF_ABI_ASSERT(sizeof(struct pvperf_guest_perf_attr) == 72, "attr size");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_guest_perf_attr, flags) == 40,
		  "attr flags");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_guest_perf_attr, bp_addr) == 56,
		  "attr bp_addr");
PVPERF_ABI_ASSERT(sizeof(struct pvperf_guest_perf_event) == 16, "event size");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_guest_perf_event, lost) == 12,
		  "event lost");
PVPERF_ABI_ASSERT(sizeof(struct pvperf_guest_perf_param) == 24, "param size");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_guest_perf_param, id) == 16,
		  "param id");

PVPERF_ABI_ASSERT(sizeof(struct pvperf_sample) == 32 + 8 * PVPERF_NR_REGS,
		  "sample size");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_sample, flags) == 6,
		  "sample flags");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_sample, ip) == 8, "sample ip");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_sample, regs) == 32,
		  "sample regs");
PVPERF_ABI_ASSERT(sizeof(struct pvperf_sample_buf) == 64, "sample buf header");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_sample_buf, lost) == 8,
		  "sample buf lost");
PVPERF_ABI_ASSERT(__builtin_offsetof(struct pvperf_sample_buf, ticks) == 16,
		  "sample buf ticks");

#endif /* PVPERF_ABI_H */
