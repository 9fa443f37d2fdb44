/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * hcall.c - the pvperf hypercall: marker detection at translation, the
 * marker's memory callback, and what each operation does.
 *
 * A hypercall is the marker instruction (pvperf_abi.h; the
 * architecture recognises it: arch.h), a store at a kernel-half address
 * to the caller's struct pvperf_hcall.  User-half code is never
 * instrumented for it: a user process cannot issue a hypercall.  The
 * memory callback runs after the store and gives us the block's physical
 * address; it reads the registers (the page-table root, for FAULT's page
 * walk).
 *
 * PVPERF_OP_FAULT and PVPERF_OP_TICK are handled here, on the vCPU,
 * without the service (count.c, sample.c; emu.c).  Every other op, PROBE
 * included, is forwarded to the service with the vCPU's exact counters
 * (link.c); the service writes
 * ->ret itself through its own mapping of guest RAM, and its reply says
 * what to instrument from now on and which thresholds to arm.  If the
 * service fails, the plugin writes -ENODEV or -ETIMEDOUT into ->ret.
 */
#include <errno.h>
#include <string.h>

#include "arena.h"
#include "core.h"
#include "counters.h"
#include "count.h"
#include "emu.h"
#include "guest.h"
#include "hcall.h"
#include "instrument.h"
#include "link.h"
#include "models.h"
#include "ring.h"
#include "sample.h"

/* Memory-callback udata; lives in the TB arena (arena.c). */
struct pvperf_marker {
	uint64_t insn_vaddr;
};

static void set_ret(struct pvperf_hcall *blk, int64_t ret)
{
	__atomic_store_n(&blk->ret, ret, __ATOMIC_RELAXED);
}

/* Returns 0 if the service answered (and wrote ->ret), else -errno. */
static int64_t forward(unsigned vcpu, uint64_t gpa, uint64_t insn_vaddr)
{
	struct pvperf_proto_hcall msg = {
		.magic = PVPERF_PROTO_HCALL_MAGIC,
		.vcpu = vcpu,
		.block_gpa = gpa,
		.insn_vaddr = insn_vaddr,
	};
	struct pvperf_proto_reply reply;
	uint64_t counters[PVPERF_NR_COUNTERS];
	int64_t err;

	_Static_assert(sizeof(counters) == sizeof(msg.counters), "counters");

	/* Held overflows retired (this is not their FAULT): send first, so
	 * the service sees them before this hypercall (one ordered socket). */
	sample_confirm_all(vcpu);
	emu_hcall_enter(vcpu, insn_vaddr);
	counters_snapshot(vcpu, counters);
	memcpy(msg.counters, counters, sizeof(msg.counters));
	err = link_exchange(vcpu, &msg, &reply);
	emu_hcall_leave(vcpu);
	if (err)
		return err;
	pv.vcpu[vcpu].reply_flags = reply.flags;
	__atomic_store_n(&pv.reply_flags, reply.flags, __ATOMIC_RELAXED);
	sample_arm(vcpu, &reply);
	ring_take(vcpu, &reply.ring);
	models_reply(vcpu, &reply);
	instrument_request(reply_instrumentation(reply.flags));
	emu_hcall_done(vcpu);
	return 0;
}

/* TICK: the host-time timer's interrupt landed at args[0] (mode
 * args[1]); the samples due go into the ring, which the guest's handler
 * drains right after, so they raise no interrupt of their own. */
static int64_t tick(unsigned vcpu, const struct pvperf_hcall *h)
{
	if (h->nr != PVPERF_HC_PERF_OP)
		return -ENOSYS;
	sample_confirm_all(vcpu);
	ring_quiet(true);
	emu_host_time_tick(vcpu, h->args[0], h->args[1] != PVPERF_MODE_USER,
			   h->args[2]);
	ring_quiet(false);
	return 0;
}

static int64_t fault(unsigned vcpu, const struct pvperf_hcall *h)
{
	uint64_t page_table = 0;
	int64_t ret;

	if (h->nr != PVPERF_HC_PERF_OP)
		return -ENOSYS;
	/* A kernel ip is walked from the kernel half's root, if apart. */
	if (!vaddr_is_kernel(h->args[0]) ||
	    !guest_read_reg(REG_KERNEL_PAGE_TABLE, &page_table))
		guest_read_reg(REG_PAGE_TABLE, &page_table);
	ret = count_fault(vcpu, h->args[0], h->args[1], page_table);
	if (!ret && instrument_sampling())
		sample_fault(vcpu, h->args[0]);
	if (!ret)
		models_fault(vcpu, h->args[0]);
	return ret;
}

static void dispatch(unsigned vcpu, struct pvperf_hcall *blk, uint64_t gpa,
		     uint64_t insn_vaddr)
{
	struct pvperf_hcall h;
	int64_t ret;

	memcpy(&h, blk, sizeof(h));	/* read the guest's block once */
	if (h.op == PVPERF_OP_FAULT)
		ret = fault(vcpu, &h);
	else if (h.op == PVPERF_OP_TICK)
		ret = tick(vcpu, &h);
	else
		ret = forward(vcpu, gpa, insn_vaddr);
	if (ret || h.op == PVPERF_OP_FAULT || h.op == PVPERF_OP_TICK)
		set_ret(blk, ret);
}

static struct pvperf_hcall *block_at(unsigned vcpu, qemu_plugin_meminfo_t info,
				     uint64_t vaddr, uint64_t *gpa)
{
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	struct pvperf_hcall *blk;

	if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
		pvperf_guest_log(vcpu, "marker store to I/O memory at 0x%" PRIx64 "\n", vaddr);
		return NULL;
	}
	*gpa = qemu_plugin_hwaddr_phys_addr(hw);
	/* Aligned to its size, the block never straddles a page. */
	blk = *gpa % PVPERF_HCALL_ALIGN ? NULL :
	      guest_ram_block(*gpa, sizeof(struct pvperf_hcall));
	if (!blk)
		pvperf_guest_log(vcpu, "bad hypercall block gpa 0x%" PRIx64 "\n", *gpa);
	return blk;
}

static void marker_mem(unsigned int vcpu, qemu_plugin_meminfo_t info,
			 uint64_t vaddr, void *udata)
{
	const struct pvperf_marker *db = udata;
	struct pvperf_hcall *blk;
	uint64_t gpa;

	if (vcpu >= pv.n_vcpus || !link_enter())
		return;
	blk = block_at(vcpu, info, vaddr, &gpa);
	if (blk)
		dispatch(vcpu, blk, gpa, db->insn_vaddr);
	link_leave();
}

/* tb_trans: instrument kernel-half marker stores, counting on or off. */
void hcall_tb(struct qemu_plugin_tb *tb, size_t n)
{
	if (!pv.ram_path || !vaddr_is_kernel(qemu_plugin_tb_vaddr(tb)))
		return;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint8_t bytes[INSN_MAX_BYTES];
		size_t len = qemu_plugin_insn_data(insn, bytes, sizeof(bytes));
		struct pvperf_marker *db;

		/* A longer insn returns the first bytes: check its size too. */
		if (qemu_plugin_insn_size(insn) != pv.arch->marker_len ||
		    !pv.arch->is_marker(bytes, len))
			continue;
		db = arena_alloc(sizeof(*db));
		db->insn_vaddr = qemu_plugin_insn_vaddr(insn);
		qemu_plugin_register_vcpu_mem_cb(insn, marker_mem,
						 QEMU_PLUGIN_CB_R_REGS,
						 QEMU_PLUGIN_MEM_W, db);
	}
}
