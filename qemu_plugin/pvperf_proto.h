/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvperf_proto.h - the private protocol between the pvperf TCG plugin (in
 * the qemu-system-x86_64 process) and the pvperf host service (pyhost).
 * Mirrored by pyhost/plugin_protocol.py; tests compare the two.
 *
 * One SOCK_SEQPACKET connection per vCPU to the service's unix socket,
 * opened by that vCPU's thread on its first hypercall.  The service never
 * sees one message per guest instruction: only hypercalls cross.
 *
 *   plugin -> service   struct pvperf_proto_hcall   (the vCPU waits)
 *   service -> plugin   struct pvperf_proto_reply
 *
 * Counter snapshots are exact at the hypercall: they include every guest
 * instruction up to and including the doorbell store and nothing after it.
 */
#ifndef PVPERF_PROTO_H
#define PVPERF_PROTO_H

#include <linux/types.h>

#define PVPERF_PROTO_HCALL_MAGIC	0x51505650	/* "PVPQ" */
#define PVPERF_PROTO_REPLY_MAGIC	0x52505650	/* "PVPR" */

/* Raw per-vCPU counters the plugin keeps, in this order. */
#define PVPERF_CTR_INSN_KERNEL		0
#define PVPERF_CTR_INSN_USER		1
#define PVPERF_CTR_BRANCH_KERNEL	2
#define PVPERF_CTR_BRANCH_USER		3
#define PVPERF_NR_COUNTERS		4

/* Reply flags: what the plugin must instrument from now on. */
#define PVPERF_REPLY_COUNTING		(1U << 0)

/* How long a vCPU waits for the service before failing the hypercall. */
#define PVPERF_PROTO_TIMEOUT_MS		5000

struct pvperf_proto_hcall {
	__u32 magic;
	__u32 vcpu;			/* vcpu index */
	__u64 block_gpa;		/* gpa of struct pvperf_hcall */
	__u64 insn_vaddr;		/* where the doorbell store ran */
	__u64 counters[PVPERF_NR_COUNTERS];
};

struct pvperf_proto_reply {
	__u32 magic;
	__u32 flags;			/* PVPERF_REPLY_* */
};

_Static_assert(sizeof(struct pvperf_proto_hcall) == 56, "hcall msg size");
_Static_assert(sizeof(struct pvperf_proto_reply) == 8, "reply msg size");

#endif /* PVPERF_PROTO_H */
