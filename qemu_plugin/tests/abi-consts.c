/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * abi-consts.c - compiled with -S only, like the kernel's asm-offsets.c:
 * turns pvperf_abi.h / pvperf_proto.h constants and struct offsets into
 * abi-consts.h for the assembly test guest and the Python test harness,
 * so neither repeats a hypercall number or an offset by hand.
 */
#include <stddef.h>
#include "pvperf_abi.h"
#include "pvperf_proto.h"

#define DEFINE(sym, val) \
	asm volatile("\n.ascii \"->" #sym " %c0\"" : : "i"((long)(val)))

void pvperf_abi_consts(void);

void pvperf_abi_consts(void)
{
	DEFINE(PVPERF_ABI_VERSION, PVPERF_ABI_VERSION);
	DEFINE(PVPERF_MARKER_MAGIC, PVPERF_MARKER_MAGIC);
	DEFINE(PVPERF_HC_PERF_OP, PVPERF_HC_PERF_OP);
	DEFINE(PVPERF_OP_READ, PVPERF_OP_READ);
	DEFINE(PVPERF_OP_PROBE, PVPERF_OP_PROBE);
	DEFINE(PVPERF_OP_FAULT, PVPERF_OP_FAULT);
	DEFINE(PVPERF_MODE_KERNEL, PVPERF_MODE_KERNEL);
	DEFINE(PVPERF_MODE_USER, PVPERF_MODE_USER);
	DEFINE(HCALL_SIZE, sizeof(struct pvperf_hcall));
	DEFINE(HCALL_MARKER, offsetof(struct pvperf_hcall, marker));
	DEFINE(HCALL_NR, offsetof(struct pvperf_hcall, nr));
	DEFINE(HCALL_OP, offsetof(struct pvperf_hcall, op));
	DEFINE(HCALL_ARG0, offsetof(struct pvperf_hcall, args[0]));
	DEFINE(HCALL_ARG1, offsetof(struct pvperf_hcall, args[1]));
	DEFINE(HCALL_RET, offsetof(struct pvperf_hcall, ret));
	DEFINE(PVPERF_PROTO_HCALL_MAGIC, PVPERF_PROTO_HCALL_MAGIC);
	DEFINE(PVPERF_PROTO_REPLY_MAGIC, PVPERF_PROTO_REPLY_MAGIC);
	DEFINE(PVPERF_REPLY_COUNTING, PVPERF_REPLY_COUNTING);
	DEFINE(PVPERF_REPLY_BRANCHES, PVPERF_REPLY_BRANCHES);
	DEFINE(PVPERF_PROTO_TIMEOUT_MS, PVPERF_PROTO_TIMEOUT_MS);
	DEFINE(PVPERF_CTR_INSN_KERNEL, PVPERF_CTR_INSN_KERNEL);
	DEFINE(PVPERF_CTR_INSN_USER, PVPERF_CTR_INSN_USER);
	DEFINE(PVPERF_CTR_BRANCH_KERNEL, PVPERF_CTR_BRANCH_KERNEL);
	DEFINE(PVPERF_CTR_BRANCH_USER, PVPERF_CTR_BRANCH_USER);
	DEFINE(PVPERF_NR_COUNTERS, PVPERF_NR_COUNTERS);
	DEFINE(PROTO_HCALL_SIZE, sizeof(struct pvperf_proto_hcall));
	DEFINE(PROTO_REPLY_SIZE, sizeof(struct pvperf_proto_reply));
}
