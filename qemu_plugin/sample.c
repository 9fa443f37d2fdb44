/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sample.c - counter overflow at the exact guest instruction.
 *
 * While any event samples, count.c emits an exec callback per segment
 * (even with one vCPU) whose udata lists the segment's instruction and
 * branch vaddrs; after adding the segment's counts, sample_segment()
 * compares each armed slot's counter sum with its threshold.  A crossing
 * inside the segment names the exact instruction: if the sum before the
 * segment was S and the threshold T, the overflowing instruction is the
 * (T - S)th of the segment (for a branch event, the (T - S)th branch).
 *
 * Faults.  Only a segment's last instruction may fault (count.c cuts
 * segments there), so an overflow on any earlier instruction retires for
 * sure and is sent at once.  One on the last instruction, if that may
 * fault, is held ("pending") until the vCPU shows it retired:
 *   - a later user-mode segment runs (a faulting user instruction sends
 *     the kernel into its page-fault handler, which reports FAULT before
 *     any user code runs again on this vCPU);
 *   - any hypercall but that FAULT (sample_confirm_all, before forwarding);
 *   - for a kernel-mode ip, CONFIRM_WINDOW kernel instructions later (the
 *     handler's FAULT comes well before that).
 * A FAULT for the held ip cancels it and restores the threshold, so the
 * re-executed instruction crosses again and is sampled then, once.
 *
 * Delivery (habit: overflow only flags; delivery happens later): the
 * sample leaves the vCPU as one pvperf_proto_overflow message on its own
 * socket once it provably retired; the service writes the record into
 * guest memory and injects the NMI over QMP.  For callchain events (slot
 * flag PVPERF_PROTO_SYNC) the vCPU waits for the service's answer, given
 * once the NMI is raised, so the guest takes it at the next TB boundary
 * in the frame that overflowed (synchronous delivery, seed 003); other
 * overflows cost the vCPU one send.  The plugin re-arms by itself
 * (threshold += period [+ random]).
 *
 * Context: everything here runs on the vCPU thread that owns the slots
 * (exec callbacks, the doorbell and FAULT handlers of that vCPU); no
 * locks, no allocation.
 */
#include <string.h>

#include "pvperf.h"

/* Kernel instructions after which a held kernel-mode overflow is taken
 * as retired: a kernel page fault reaches the FAULT tracepoint in far
 * fewer (exception entry + handle_page_fault prologue). */
#define CONFIRM_WINDOW 4096

static uint64_t prng_next(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

/* A reply's slot table (service -> this vCPU): validate and copy. */
void sample_arm(unsigned vcpu, const struct pvperf_proto_reply *reply)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	unsigned n = 0;

	for (unsigned i = 0; i < reply->n_slots && i < PVPERF_PROTO_MAX_SLOTS; i++) {
		const struct pvperf_proto_slot *ps = &reply->slot[i];

		if (!ps->ctr_mask || ps->ctr_mask >> PVPERF_NR_COUNTERS ||
		    ps->rand_bits > 31)
			continue;
		v->slot[n].threshold = ps->threshold;
		v->slot[n].period = ps->period;
		v->slot[n].event_id = ps->event_id;
		v->slot[n].ctr_mask = ps->ctr_mask;
		v->slot[n].rand_bits = ps->rand_bits;
		v->slot[n].flags = ps->flags & PVPERF_PROTO_SYNC;
		n++;
	}
	v->n_slots = n;
	v->pending_mask = 0;	/* confirmed before the hypercall went out */
	sample_update_room(vcpu);
}

static void send_one(unsigned vcpu, const struct pvperf_slot *sl,
		     const struct pvperf_pending *p)
{
	struct pvperf_proto_overflow m = {
		.magic = PVPERF_PROTO_OVERFLOW_MAGIC,
		.vcpu = vcpu,
		.event_id = sl->event_id,
		.mode = p->mode,
		.flags = sl->flags,
		.ip = p->ip,
		.threshold = p->threshold,
		.next_threshold = p->next_threshold,
	};

	hcall_send_overflow(vcpu, &m);
}

static void confirm(unsigned vcpu, unsigned i)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	v->pending_mask &= ~(1u << i);
	send_one(vcpu, &v->slot[i], &v->pending[i]);
}

void sample_confirm_all(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	while (v->pending_mask)
		confirm(vcpu, __builtin_ctz(v->pending_mask));
}

static uint64_t slot_sum(const struct pvperf_vcpu *v, uint8_t mask);

/* The fast path's room (pvperf.h), from the slots and counters as they are. */
void sample_update_room(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	const uint8_t insn_mask = 1u << PVPERF_CTR_INSN_KERNEL |
				  1u << PVPERF_CTR_INSN_USER;
	int64_t room[2] = { INT64_MAX, INT64_MAX };

	for (unsigned i = 0; i < v->n_slots; i++) {
		const struct pvperf_slot *sl = &v->slot[i];
		uint64_t sum = slot_sum(v, sl->ctr_mask);
		uint64_t left = sl->threshold > sum ? sl->threshold - sum : 0;
		unsigned kind = (sl->ctr_mask & insn_mask) ? 0 : 1;

		/* Instructions and branches in one slot: its sum grows by up
		 * to twice the instructions, which room[0] alone tracks. */
		if (kind == 0 && (sl->ctr_mask & ~insn_mask))
			left /= 2;
		if (left < (uint64_t)room[kind])
			room[kind] = left;
	}
	v->room[0] = room[0];
	v->room[1] = room[1];
}

/* FAULT at ip (this vCPU): a held overflow there did not happen. */
void sample_fault(unsigned vcpu, uint64_t ip)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	for (unsigned m = v->pending_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);

		if (v->pending[i].ip != ip)
			continue;
		v->slot[i].threshold = v->pending[i].threshold;
		v->pending_mask &= ~(1u << i);
	}
	sample_update_room(vcpu);
}

/* At a segment's start: held overflows this segment proves retired. */
static void confirm_held(unsigned vcpu, bool kernel)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	uint64_t kctr = v->ctr[PVPERF_CTR_INSN_KERNEL];

	for (unsigned m = v->pending_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);

		if (!kernel || (v->pending[i].mode == PVPERF_MODE_KERNEL &&
				kctr - v->pending[i].kctr_at > CONFIRM_WINDOW))
			confirm(vcpu, i);
	}
}

static uint64_t next_threshold(struct pvperf_vcpu *v, const struct pvperf_slot *sl)
{
	uint64_t next;

	if (!sl->period)
		return UINT64_MAX;		/* one-shot: the guest re-arms */
	next = sl->threshold + sl->period;
	if (sl->rand_bits)
		next += prng_next(&v->prng) & ((1ULL << sl->rand_bits) - 1);
	return next < sl->threshold ? UINT64_MAX : next;
}

static uint64_t slot_sum(const struct pvperf_vcpu *v, uint8_t mask)
{
	uint64_t sum = 0;

	for (unsigned c = 0; c < PVPERF_NR_COUNTERS; c++)
		if (mask & (1u << c))
			sum += v->ctr[c];
	return sum;
}

/* Every threshold of slot i reached by this segment's `delta` events. */
static void check_slot(unsigned vcpu, unsigned i, bool kernel,
		       const uint64_t *list, uint32_t delta, uint64_t last_ip,
		       bool last_may_fault)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_slot *sl = &v->slot[i];
	uint64_t sum = slot_sum(v, sl->ctr_mask);
	uint64_t before = sum - delta;

	while (sum >= sl->threshold) {
		uint64_t k = sl->threshold > before ? sl->threshold - before - 1 : 0;
		struct pvperf_pending p = {
			.ip = list[k],
			.threshold = sl->threshold,
			.next_threshold = next_threshold(v, sl),
			.kctr_at = v->ctr[PVPERF_CTR_INSN_KERNEL],
			.mode = kernel ? PVPERF_MODE_KERNEL : PVPERF_MODE_USER,
		};

		sl->threshold = p.next_threshold;
		if (last_may_fault && p.ip == last_ip && !(v->pending_mask & (1u << i))) {
			v->pending[i] = p;
			v->pending_mask |= 1u << i;
		} else {
			send_one(vcpu, sl, &p);
		}
	}
}

/* Exec callback body for a sampling segment, after its counts were added. */
void sample_segment(unsigned vcpu, bool kernel, const uint64_t *insn_vaddr,
		    uint32_t n_insns, const uint64_t *branch_vaddr,
		    uint32_t n_branches, bool last_may_fault)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	unsigned ci = ctr_insn(kernel), cb = ctr_branch(kernel);
	uint64_t last_ip = insn_vaddr[n_insns - 1];

	if (v->pending_mask)
		confirm_held(vcpu, kernel);
	for (unsigned i = 0; i < v->n_slots; i++) {
		uint8_t mask = v->slot[i].ctr_mask;

		if ((mask & (1u << ci)) && n_insns)
			check_slot(vcpu, i, kernel, insn_vaddr, n_insns, last_ip,
				   last_may_fault);
		else if ((mask & (1u << cb)) && n_branches)
			check_slot(vcpu, i, kernel, branch_vaddr, n_branches,
				   last_ip, last_may_fault);
	}
	sample_update_room(vcpu);
}
