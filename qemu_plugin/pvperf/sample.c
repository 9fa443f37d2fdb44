/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sample.c - counter overflow at the exact guest instruction.
 *
 * While any event samples, sample_tb.c gives every chunk (count.c cuts
 * them), after its inline adds, a conditional callback on the same
 * instruction counter: one add per chunk both counts and counts down.
 * The counter is biased (core.h): each time this file rearms, it rebases
 * each half's counter to COUNTDOWN_LIMIT - room, where room is the
 * number of instructions that half may still run before any armed
 * threshold can be reached (for a branch event too: branches never
 * outnumber instructions), so only a chunk that uses up its half's room
 * calls sample_chunk_exec(), about once per sample.  A slot that counts
 * both halves splits its room between them, in proportion to what each
 * ran lately, so that neither can reach the threshold unseen: a few
 * extra callbacks when the mix changes, never a missed overflow.  A
 * pacer (sample.h: emu.c's host-time checks) caps both rooms too, and
 * the chunk callback that finds its room used up runs its check.
 *
 * The callback runs at the chunk's start, after its counts were added.
 * A threshold T reached by the chunk, with the slot's sum S before it,
 * names the overflowing instruction: the (T - S)th of the chunk (for a
 * branch event, the (T - S)th branch).  The slot is re-armed at once
 * (T + period [+ xorshift & mask]; period 0 disarms it until the guest's
 * SET_PERIOD) and the sample leaves as one pvperf_proto_overflow.
 *
 * Runtime addresses.  TBs are PC-relative: a TB translated while one
 * process ran a page of shared code serves every process mapping that
 * physical page, at its own virtual address.  QEMU keeps the pc exact at
 * TB entry and updates it within a TB only to an instruction of the same
 * TB, whose first page holds every instruction start.  Code keeps its
 * page offset in every mapping, so the runtime TB is the translated one
 * moved by delta = (pc - tb_vaddr) rounded down to a page.
 *
 * Faults.  If an instruction of the chunk up to and including the
 * overflowing one may fault (the chunk's first_fault), the overflow may not
 * have happened; it is held ("pending") until the vCPU shows it retired:
 *   - a later user-mode chunk runs (a faulting user instruction sends the
 *     kernel into its page-fault handler, which reports FAULT before any
 *     user code runs again on this vCPU);
 *   - any hypercall but that FAULT (sample_confirm_all, before forwarding);
 *   - for a kernel-mode ip, CONFIRM_WINDOW kernel instructions later (the
 *     handler's FAULT comes well before that).
 * While one is held, room is 0, so the next chunk calls back.  A FAULT
 * between the chunk's start and the held ip cancels it and restores the
 * threshold, so the re-executed instruction crosses again and is sampled
 * then, once.
 *
 * Registers (PVPERF_PROTO_REGS slots): which capture point serves which
 * instruction, sample_tb.c.  An overflow served by the chunk's start
 * reads them at once; one served by a later point is "awaiting": the
 * chunk callback sets the vCPU's capture key and that point's callback
 * reads them and goes on as above.  An awaiting overflow whose capture
 * point did not run (an instruction before it faulted) is held without
 * registers, so the FAULT cancels it like any other.
 *
 * Delivery: with this vCPU's sample ring handed over (and its doorbell
 * eventfd), ring.c writes the record and raises the interrupt here, the
 * overflow message only tells the service (PVPERF_PROTO_WRITTEN), and a
 * SYNC (callchain) overflow waits for QEMU to raise it, never for the
 * service (but flow control's every 64th, link.c).  Without a ring the
 * service writes the record and raises the interrupt, and a SYNC
 * overflow waits for that round trip (link.c).
 *
 * Context: everything here runs on the vCPU thread that owns the slots
 * (its callbacks, its marker and FAULT handlers); no locks or allocation.
 */
#include <string.h>

#include "core.h"
#include "counters.h"
#include "guest.h"
#include "link.h"
#include "ring.h"
#include "sample.h"

/* Kernel instructions after which a held kernel-mode overflow is taken
 * as retired: a kernel page fault reaches the FAULT tracepoint in far
 * fewer (exception entry + handle_page_fault prologue). */
#define CONFIRM_WINDOW 4096
/* Halves, as indices of the instruction counters (core.h ctr_insn). */
#define HALF_K PVPERF_CTR_INSN_KERNEL
#define HALF_U PVPERF_CTR_INSN_USER

static uint64_t prng_next(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

static const struct sample_pacer *pacer;
static void sample_model_event(uint64_t bits, bool kernel, struct event_at at);

void sample_init(const struct sample_pacer *p)
{
	pacer = p;
	counters_set_hook(sample_model_event);
}

static uint64_t slot_sum(const uint64_t *ctr, uint64_t mask)
{
	uint64_t sum = 0;

	for (unsigned c = 0; c < PVPERF_NR_INLINE_COUNTERS; c++)
		if (mask & (1u << c))
			sum += ctr[c];
	return sum;
}

/* Which halves' counters (bit ctr_insn(kernel)) a counter mask sums. */
static unsigned slot_halves(uint64_t mask)
{
	const unsigned k = 1u << PVPERF_CTR_INSN_KERNEL |
			   1u << PVPERF_CTR_BRANCH_KERNEL;
	const unsigned u = 1u << PVPERF_CTR_INSN_USER |
			   1u << PVPERF_CTR_BRANCH_USER;

	return (mask & k ? 1u << HALF_K : 0) | (mask & u ? 1u << HALF_U : 0);
}

/* Instructions that slot may still retire before its threshold can be
 * reached, minus one (the chunk that reaches it must pass the limit). */
static uint64_t slot_room(const struct pvperf_sample_slot *sl,
			  const uint64_t *count)
{
	uint64_t sum = slot_sum(count, sl->ctr_mask);
	uint64_t left = sl->threshold > sum ? sl->threshold - sum : 0;

	/* Instructions and branches in one slot: its sum grows by up to
	 * twice the instructions. */
	if ((sl->ctr_mask & CTR_INSN_BITS) && (sl->ctr_mask & ~CTR_INSN_BITS))
		left /= 2;
	return left ? left - 1 : 0;
}

/* Instructions half h ran since its counter was last rebased. */
static uint64_t ran_since_rebase(const struct pvperf_score *s,
				 const struct pvperf_vcpu *v, unsigned h)
{
	uint64_t start = COUNTDOWN_LIMIT - v->room[h];

	return s->ctr[h] > start ? s->ctr[h] - start : 0;
}

/* The kernel's part of a room both halves share: what it ran lately,
 * within [1/8, 7/8]; the two parts add up to room. */
static uint64_t kernel_share(uint64_t room, uint64_t ran_k, uint64_t ran_u)
{
	double share = (ran_k + 1.0) / ((double)ran_k + ran_u + 2.0);
	uint64_t k = (uint64_t)(room * share);

	return MIN(MAX(k, room / 8), room - room / 8);
}

/* Counter of half h passes COUNTDOWN_LIMIT after room more instructions;
 * its count (counter + bias) stays what it is. */
static void rebase(unsigned vcpu, unsigned h, uint64_t room)
{
	uint64_t *bias = counters_of(vcpu)->bias;
	struct pvperf_score *s = score_of(vcpu);
	uint64_t count = s->ctr[h] + bias[h];

	s->ctr[h] = COUNTDOWN_LIMIT - room;
	bias[h] = count - s->ctr[h];
	pv.vcpu[vcpu].room[h] = room;
}

/* Rebase both halves from the slots and counts as they are now.  While an
 * overflow is held or awaited, room is 0: the next chunk calls back. */
void sample_update_room(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	const struct pvperf_score *s = score_of(vcpu);
	uint64_t count[PVPERF_NR_INLINE_COUNTERS], room[2] = { ROOM_MAX, ROOM_MAX };
	uint64_t ran_k = ran_since_rebase(s, v, HALF_K);
	uint64_t ran_u = ran_since_rebase(s, v, HALF_U);

	counters_inline(vcpu, count);
	for (unsigned i = 0; i < v->n_inline; i++) {
		unsigned halves = slot_halves(v->slot[i].ctr_mask);
		uint64_t left = slot_room(&v->slot[i], count), k = left, u = left;

		if (halves == (1u << HALF_K | 1u << HALF_U)) {
			k = kernel_share(left, ran_k, ran_u);
			u = left - k;
		}
		if (halves & 1u << HALF_K)
			room[HALF_K] = MIN(room[HALF_K], k);
		if (halves & 1u << HALF_U)
			room[HALF_U] = MIN(room[HALF_U], u);
	}
	if (pacer) {
		uint64_t due = pacer->room(vcpu, count);

		room[HALF_K] = MIN(room[HALF_K], due);
		room[HALF_U] = MIN(room[HALF_U], due);
	}
	if (v->pending_mask | v->awaiting_mask)
		room[HALF_K] = room[HALF_U] = 0;
	rebase(vcpu, HALF_K, room[HALF_K]);
	rebase(vcpu, HALF_U, room[HALF_U]);
}

bool sample_slot_on_models(uint64_t mask)
{
	const uint64_t all_bits = (1ull << PVPERF_NR_COUNTERS) - 1;
	const uint64_t stall_bits =
		1ull << PVPERF_CTR_MODEL(PVPERF_M_STALL, 0) |
		1ull << PVPERF_CTR_MODEL(PVPERF_M_STALL, 1);

	if (!mask || (mask & ~all_bits))
		return false;
	if (!(mask & CTR_INLINE_BITS))
		return true;
	return (mask & stall_bits) && !(mask & ~(CTR_INSN_BITS | stall_bits)) &&
	       (mask & CTR_INSN_BITS);
}

bool sample_slot_on_inline(uint64_t mask)
{
	return mask && !(mask & ~CTR_INLINE_BITS);
}

/* A reply's slot table (service -> this vCPU): validate and copy each
 * slot, the inline ones first; one on neither kind is ignored.  The
 * counter store learns which event counters to report. */
void sample_arm(unsigned vcpu, const struct pvperf_proto_reply *reply)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_sample_slot model[PVPERF_PROTO_MAX_SLOTS];
	uint64_t armed = 0;
	bool cycles = false;
	unsigned n = 0, n_model = 0;

	for (unsigned i = 0; i < reply->n_slots && i < PVPERF_PROTO_MAX_SLOTS; i++) {
		const struct pvperf_proto_slot *ps = &reply->slot[i];
		const struct pvperf_sample_slot sl = {
			.threshold = ps->threshold,
			.period = ps->period,
			.ctr_mask = ps->ctr_mask,
			.event_id = ps->event_id,
			.rand_bits = ps->rand_bits,
			.flags = ps->flags & (PVPERF_PROTO_SYNC | PVPERF_PROTO_REGS),
			.deliver_flags = reply->deliver[i].flags,
			.event_gpa = reply->deliver[i].event_gpa,
			.sample_period = reply->deliver[i].period,
		};

		if (ps->rand_bits > 31)
			continue;
		if (sample_slot_on_inline(ps->ctr_mask))
			v->slot[n++] = sl;
		else if (sample_slot_on_models(ps->ctr_mask)) {
			model[n_model++] = sl;
			armed |= sl.ctr_mask;
			cycles |= !!(sl.ctr_mask & CTR_INLINE_BITS);
		}
	}
	memcpy(&v->slot[n], model, n_model * sizeof(model[0]));
	v->n_inline = n;
	v->n_slots = n + n_model;
	counters_arm(vcpu, armed, cycles);
	/* confirmed before the hypercall went out */
	v->pending_mask = v->awaiting_mask = 0;
	sample_update_room(vcpu);
}

static void send_one(unsigned vcpu, const struct pvperf_sample_slot *sl,
		     const struct pvperf_pending *p)
{
	struct pvperf_proto_overflow m = {
		.magic = PVPERF_PROTO_OVERFLOW_MAGIC,
		.vcpu = vcpu,
		.event_id = sl->event_id,
		.mode = p->mode,
		.flags = (sl->flags & PVPERF_PROTO_SYNC) |
			 (p->has_regs ? PVPERF_PROTO_REGS : 0),
		.ip = p->ip,
		.threshold = p->threshold,
		.next_threshold = p->next_threshold,
		.data_addr = p->data_addr,
	};

	bool credit = link_credit_spent(vcpu);

	if (p->has_regs)
		memcpy(m.regs, p->regs, sizeof(m.regs));
	if (credit)
		m.flags |= PVPERF_PROTO_SYNC;
	/* Delivered here (ring.c), the service is only told: a SYNC
	 * overflow's vCPU waits for its interrupt, not for the service
	 * (but for flow control's). */
	if (ring_owned(vcpu) && link_enter()) {
		m.flags |= ring_deliver(vcpu, sl, &m,
					m.flags & PVPERF_PROTO_SYNC);
		link_leave();
		if (!credit)
			m.flags &= ~PVPERF_PROTO_SYNC;
	}
	link_send_overflow(vcpu, &m);
}

static void confirm(unsigned vcpu, unsigned i)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	v->pending_mask &= ~(1u << i);
	send_one(vcpu, &v->slot[i], &v->pending[i]);
}

/* Awaiting overflows whose capture point did not run: held, no regs. */
static void hold_awaiting(struct pvperf_vcpu *v)
{
	for (unsigned m = v->awaiting_mask; m; m &= m - 1)
		v->pending[__builtin_ctz(m)].has_regs = false;
	v->pending_mask |= v->awaiting_mask;
	v->awaiting_mask = 0;
}

void sample_confirm_all(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	hold_awaiting(v);
	while (v->pending_mask)
		confirm(vcpu, __builtin_ctz(v->pending_mask));
}

/* FAULT at ip (this vCPU, counters already corrected by count.c). */
void sample_fault(unsigned vcpu, uint64_t ip)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	hold_awaiting(v);
	for (unsigned m = v->pending_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);
		const struct pvperf_pending *p = &v->pending[i];

		if (ip < p->chunk_ip || ip > p->ip)
			continue;
		v->slot[i].threshold = p->threshold;
		v->pending_mask &= ~(1u << i);
	}
	sample_update_room(vcpu);
}

/* At a chunk's start: held overflows that this chunk proves retired. */
static void confirm_held(unsigned vcpu, bool kernel, uint64_t kctr)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	for (unsigned m = v->pending_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);

		if (!kernel || (v->pending[i].mode == PVPERF_MODE_KERNEL &&
				kctr - v->pending[i].kctr_at > CONFIRM_WINDOW))
			confirm(vcpu, i);
	}
}

/* The threshold a slot re-arms at after reaching threshold (~0: none). */
static uint64_t sample_next_threshold(unsigned vcpu, uint64_t threshold,
				      uint64_t period, unsigned rand_bits)
{
	uint64_t next;

	if (!period)
		return UINT64_MAX;		/* one-shot: the guest re-arms */
	next = threshold + period;
	if (rand_bits)
		next += prng_next(&pv.vcpu[vcpu].prng) & ((1ULL << rand_bits) - 1);
	return next < threshold ? UINT64_MAX : next;
}

static uint64_t next_threshold(struct pvperf_vcpu *v,
			       const struct pvperf_sample_slot *sl)
{
	return sample_next_threshold(v - pv.vcpu, sl->threshold, sl->period,
				     sl->rand_bits);
}

/* How far this execution of the chunk lies from where it was translated. */
static uint64_t runtime_delta(const struct sample_chunk *c)
{
	return guest_runtime_delta(c->tb_vaddr, c->kernel);
}

/* The insn index of the k-th (0-based) counted event of the chunk. */
static unsigned event_insn(const struct sample_chunk *c, bool branches,
			   uint64_t k)
{
	return branches ? c->branch[k] : (unsigned)k;
}

/* An overflow of slot i at idx: held if it may not retire, else sent. */
static void hold_or_send(unsigned vcpu, unsigned i, const struct sample_chunk *c,
			 const struct pvperf_pending *p)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	if (p->idx >= c->first_fault && !(v->pending_mask & (1u << i))) {
		v->pending[i] = *p;
		v->pending_mask |= 1u << i;
	} else {
		send_one(vcpu, &v->slot[i], p);
	}
}

/*
 * Can slot i's overflow at idx wait for its capture point?  Only with
 * capture points translated in, one key per vCPU (overflows of several
 * slots on one instruction share it; one on another instruction of the
 * same chunk goes without registers), one overflow per slot.
 */
static bool can_await(const struct pvperf_vcpu *v, unsigned i,
		      unsigned regs_at)
{
	if ((v->pending_mask | v->awaiting_mask) & (1u << i))
		return false;
	return !v->awaiting_mask ||
	       v->pending[__builtin_ctz(v->awaiting_mask)].regs_at == regs_at;
}

/* Every threshold of slot i reached within this chunk. */
static void check_slot(unsigned vcpu, unsigned i, const struct sample_chunk *c,
		       bool branches, uint64_t delta_events, uint64_t delta_ip,
		       const uint64_t *ctr)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_sample_slot *sl = &v->slot[i];
	uint64_t sum = slot_sum(ctr, sl->ctr_mask);
	uint64_t before = sum - delta_events;

	while (sum >= sl->threshold) {
		uint64_t k = sl->threshold > before ? sl->threshold - before - 1 : 0;
		unsigned idx = event_insn(c, branches, k);
		struct pvperf_pending p = {
			.chunk_ip = c->vaddr[0] + delta_ip,
			.ip = c->vaddr[idx] + delta_ip,
			.threshold = sl->threshold,
			.next_threshold = next_threshold(v, sl),
			.kctr_at = ctr[PVPERF_CTR_INSN_KERNEL],
			.idx = idx,
			.mode = c->kernel ? PVPERF_MODE_KERNEL : PVPERF_MODE_USER,
		};

		sl->threshold = p.next_threshold;
		if ((sl->flags & PVPERF_PROTO_REGS) && c->regs_at) {
			p.regs_at = c->regs_at[idx];
			if (!p.regs_at) {
				p.has_regs = guest_read_gprs(p.regs);
			} else if (can_await(v, i, p.regs_at)) {
				v->pending[i] = p;
				v->awaiting_mask |= 1u << i;
				score_of(vcpu)->capture = capture_key(c, p.regs_at);
				continue;
			}
		}
		hold_or_send(vcpu, i, c, &p);
	}
}

void sample_chunk_exec(unsigned int vcpu, void *udata)
{
	const struct sample_chunk *c = udata;
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	uint64_t ctr[PVPERF_NR_INLINE_COUNTERS];
	unsigned ci = ctr_insn(c->kernel), cb = ctr_branch(c->kernel);
	bool have_delta = false;
	uint64_t delta = 0;

	counters_inline(vcpu, ctr);
	hold_awaiting(v);
	if (v->pending_mask)
		confirm_held(vcpu, c->kernel, ctr[PVPERF_CTR_INSN_KERNEL]);
	for (unsigned i = 0; i < v->n_inline; i++) {
		uint64_t mask = v->slot[i].ctr_mask;
		bool insns = (mask & (1u << ci)) && c->n_insns;
		bool branches = !insns && (mask & (1u << cb)) && c->n_branches;

		if ((!insns && !branches) ||
		    slot_sum(ctr, mask) < v->slot[i].threshold)
			continue;
		if (!have_delta) {
			delta = runtime_delta(c);
			have_delta = true;
		}
		check_slot(vcpu, i, c, branches,
			   branches ? c->n_branches : c->n_insns, delta, ctr);
	}
	if (pacer && !pacer->room(vcpu, ctr))
		pacer->run(vcpu, c->kernel, c->vaddr[0] +
			   (have_delta ? delta : runtime_delta(c)));
	sample_update_room(vcpu);
}

/* A capture point whose key matched: the registers of the awaiting
 * overflows (all on this instruction), then on as check_slot would. */
void sample_capture_exec(unsigned int vcpu, void *udata)
{
	const struct capture_point *pt = udata;
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	uint64_t regs[PVPERF_NR_REGS];
	bool ok;

	score_of(vcpu)->capture = 0;
	ok = guest_read_gprs(regs);
	for (unsigned m = v->awaiting_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);
		struct pvperf_pending *p = &v->pending[i];

		memcpy(p->regs, regs, sizeof(regs));
		p->has_regs = ok;
		v->awaiting_mask &= ~(1u << i);
		hold_or_send(vcpu, i, pt->chunk, p);
	}
	sample_update_room(vcpu);
}

/* ---- model events ---- */

/* A model slot's sum: its model counters, and for cycles the instruction
 * counters too. */
static uint64_t event_slot_sum(unsigned vcpu, uint64_t mask)
{
	uint64_t sum = 0, insn[PVPERF_NR_INLINE_COUNTERS];

	if (mask & CTR_INLINE_BITS) {
		counters_inline(vcpu, insn);
		sum = slot_sum(insn, mask);
	}
	for (mask &= ~CTR_INLINE_BITS; mask; mask &= mask - 1)
		sum += counters_event(vcpu, __builtin_ctzll(mask));
	return sum;
}

uint64_t sample_room(unsigned vcpu, uint64_t bits)
{
	const struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	uint64_t room = UINT64_MAX;

	for (unsigned i = v->n_inline; i < v->n_slots; i++) {
		const struct pvperf_sample_slot *sl = &v->slot[i];

		uint64_t sum;

		if (!(sl->ctr_mask & bits) || sl->threshold == UINT64_MAX)
			continue;
		sum = event_slot_sum(vcpu, sl->ctr_mask);
		room = MIN(room, sum < sl->threshold ? sl->threshold - sum : 0);
	}
	return room;
}

/*
 * A model event is checked in the callback that saw it, so the overflow
 * names that very instruction (and, for data events, the access's
 * address), and it is sent at once: a memory callback runs after its
 * access succeeded, so the instruction retires (unless a later access of
 * it faults: a FIXME, rare).  A cycles slot (timing model) is also
 * checked at each TB start, for the instructions: the count then already
 * holds the whole first chunk, so its sample may name an instruction up
 * to a block early.
 */
static void
sample_model_event(uint64_t bits, bool kernel, struct event_at at)
{
	struct pvperf_vcpu *v = &pv.vcpu[at.vcpu];

	for (unsigned i = v->n_inline; i < v->n_slots; i++) {
		struct pvperf_sample_slot *sl = &v->slot[i];
		struct pvperf_pending p;

		if (!(sl->ctr_mask & bits) ||
		    event_slot_sum(at.vcpu, sl->ctr_mask) < sl->threshold)
			continue;
		p = (struct pvperf_pending){
			.ip = at.ip,
			.threshold = sl->threshold,
			.mode = kernel ? PVPERF_MODE_KERNEL : PVPERF_MODE_USER,
			.data_addr = at.addr,
		};
		if ((sl->flags & PVPERF_PROTO_REGS) && at.regs)
			p.has_regs = guest_read_gprs(p.regs);
		sl->threshold = p.next_threshold = next_threshold(v, sl);
		send_one(at.vcpu, sl, &p);
	}
}

/* ---- checkpoints (state.c) ---- */

void sample_hold_awaiting(unsigned vcpu)
{
	hold_awaiting(&pv.vcpu[vcpu]);
}
