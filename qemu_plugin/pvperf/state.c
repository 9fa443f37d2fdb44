/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * state.c - checkpoints: the plugin's part of a saved VM (pvperf_proto.h).
 *
 * Save.  pvperf stops the VM, drains the service, migrates the VM to a
 * file and quits QEMU; this plugin's atexit then writes, for every vCPU,
 * its exact counts, the last reply's flags, the thresholds armed now and
 * the overflows still held (state_out=PATH, written whole or not at all:
 * g_file_set_contents renames a complete temporary file).  The vCPUs are
 * stopped by then, so nothing moves under it.
 *
 * Restore.  The QEMU that resumes the VM loads state_in=PATH at install,
 * checks every field and refuses to install on any error (never applied
 * half); what to instrument is the last reply's, from the first
 * TB on.  Each vCPU is re-armed in its init callback (its scoreboard
 * entry exists from then on): its counts become the bias of a zero
 * counter, and its slots and held overflows are what a reply and a held
 * overflow would have made them.  No guest code runs before that: the
 * VM waits for the incoming migration.
 */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "core.h"
#include "counters.h"
#include "models.h"
#include "sample.h"
#include "state.h"

static struct pvperf_state_vcpu *loaded;	/* [pv.n_vcpus] or NULL */

static const char *check_slot(const struct pvperf_proto_slot *sl,
			      bool *inline_seen_after_model, bool *model_seen)
{
	if (sl->rand_bits > 31 || sl->flags & ~(PVPERF_PROTO_SYNC | PVPERF_PROTO_REGS))
		return "bad slot fields";
	if (sample_slot_on_inline(sl->ctr_mask)) {
		*inline_seen_after_model |= *model_seen;
		return NULL;
	}
	if (!sample_slot_on_models(sl->ctr_mask))
		return "bad slot counter mask";
	*model_seen = true;
	return NULL;
}

/* Why record s cannot be restored, or NULL. */
static const char *check_vcpu(const struct pvperf_state_vcpu *s)
{
	bool disorder = false, model = false;
	unsigned n_inline = 0;

	if (s->reply_flags & ~PVPERF_REPLY_KNOWN || s->n_slots > PVPERF_PROTO_MAX_SLOTS)
		return "bad flags or slot count";
	for (unsigned i = 0; i < s->n_slots; i++) {
		const char *why = check_slot(&s->slot[i], &disorder, &model);

		if (why)
			return why;
		n_inline += sample_slot_on_inline(s->slot[i].ctr_mask);
	}
	if (disorder)
		return "inline slots after model slots";
	if (s->held_mask >> n_inline)
		return "held overflow without its slot";
	for (unsigned m = s->held_mask; m; m &= m - 1) {
		const struct pvperf_state_held *h = &s->held[__builtin_ctz(m)];

		if ((h->mode != PVPERF_MODE_KERNEL && h->mode != PVPERF_MODE_USER) ||
		    h->has_regs > 1 || h->ip < h->chunk_ip)
			return "bad held overflow";
	}
	return NULL;
}

static const char *check_file(const struct pvperf_state_header *h, gsize len)
{
	if (len < sizeof(*h) || h->magic != PVPERF_STATE_MAGIC)
		return "not a pvperf plugin state";
	if (h->version != PVPERF_STATE_VERSION)
		return "state version differs from this plugin's";
	if (h->vcpu_size != sizeof(struct pvperf_state_vcpu) || h->n_vcpus != pv.n_vcpus)
		return "state is for another number of vCPUs or another layout";
	if (len != sizeof(*h) + (gsize)h->n_vcpus * h->vcpu_size)
		return "state file truncated or too long";
	if (h->reply_flags & ~PVPERF_REPLY_KNOWN)
		return "bad reply flags";
	return NULL;
}

int state_load(const char *path, uint32_t *reply_flags)
{
	g_autofree gchar *buf = NULL;
	g_autoptr(GError) err = NULL;
	const struct pvperf_state_header *h;
	const char *why;
	gsize len;

	if (!g_file_get_contents(path, &buf, &len, &err)) {
		pvperf_log("state_in: %s\n", err->message);
		return -1;
	}
	h = (const struct pvperf_state_header *)buf;
	why = check_file(h, len);
	for (unsigned i = 0; !why && i < h->n_vcpus; i++) {
		const struct pvperf_state_vcpu *s =
			(const void *)(buf + sizeof(*h) + i * sizeof(*s));

		why = check_vcpu(s);
	}
	if (why) {
		pvperf_log("state_in %s refused: %s\n", path, why);
		return -1;
	}
	*reply_flags = h->reply_flags;
	loaded = g_memdup2(buf + sizeof(*h), h->n_vcpus * sizeof(*loaded));
	return 0;
}

/* The reply that arms what record s had armed. */
static void reply_of(const struct pvperf_state_vcpu *s,
		     struct pvperf_proto_reply *r)
{
	memset(r, 0, sizeof(*r));
	r->magic = PVPERF_PROTO_REPLY_MAGIC;
	r->flags = s->reply_flags & ~PVPERF_REPLY_MODELS_COLD;
	r->n_slots = s->n_slots;
	memcpy(r->slot, s->slot, sizeof(r->slot));
}

/* Re-arm from a checkpoint: the slots of the synthetic reply, then the
 * held overflows, then the countdown (sample.c). */
static void restore_sampling(unsigned vcpu,
			     const struct pvperf_proto_reply *reply,
			     const struct pvperf_state_vcpu *s)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	v->prng = s->prng;
	sample_arm(vcpu, reply);
	for (unsigned m = s->held_mask; m; m &= m - 1) {
		unsigned i = __builtin_ctz(m);
		const struct pvperf_state_held *h = &s->held[i];

		v->pending[i] = (struct pvperf_pending){
			.chunk_ip = h->chunk_ip, .ip = h->ip,
			.threshold = h->threshold,
			.next_threshold = h->next_threshold,
			.kctr_at = h->kctr_at, .idx = h->idx, .mode = h->mode,
			.has_regs = h->has_regs,
		};
		memcpy(v->pending[i].regs, h->regs, sizeof(h->regs));
	}
	v->pending_mask = s->held_mask;
	sample_update_room(vcpu);
}

/* vcpu_init: put the vCPU back where the checkpoint left it. */
void state_restore_vcpu(unsigned vcpu)
{
	const struct pvperf_state_vcpu *s;
	struct pvperf_proto_reply reply;
	uint64_t counts[PVPERF_NR_COUNTERS];

	if (!loaded || vcpu >= pv.n_vcpus)
		return;
	s = &loaded[vcpu];
	memcpy(counts, s->counters, sizeof(counts));
	counters_restore(vcpu, counts);
	pv.vcpu[vcpu].reply_flags = s->reply_flags;
	reply_of(s, &reply);
	/* The slots first: the models' fast paths follow what is armed.
	 * The caches, TLBs and predictor themselves start cold. */
	restore_sampling(vcpu, &reply, s);
	models_reply(vcpu, &reply);
}

static struct pvperf_proto_slot slot_record(const struct pvperf_sample_slot *sl)
{
	return (struct pvperf_proto_slot){
		.threshold = sl->threshold, .period = sl->period,
		.ctr_mask = sl->ctr_mask, .event_id = sl->event_id,
		.rand_bits = sl->rand_bits, .flags = sl->flags,
	};
}

/* The vCPU's armed slots (the inline ones first, as sample.c keeps them:
 * held overflows are those of inline slots, by index) and held
 * overflows.  Awaiting overflows are held without registers, as a fault
 * would. */
static void save_sampling(unsigned vcpu, struct pvperf_state_vcpu *s)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	sample_hold_awaiting(vcpu);
	s->prng = v->prng;
	s->n_slots = v->n_slots;
	s->held_mask = v->pending_mask;
	for (unsigned i = 0; i < v->n_slots; i++) {
		const struct pvperf_pending *p = &v->pending[i];

		s->slot[i] = slot_record(&v->slot[i]);
		if (!(v->pending_mask & (1u << i)))
			continue;
		s->held[i] = (struct pvperf_state_held){
			.chunk_ip = p->chunk_ip, .ip = p->ip,
			.threshold = p->threshold,
			.next_threshold = p->next_threshold,
			.kctr_at = p->kctr_at, .idx = p->idx, .mode = p->mode,
			.has_regs = p->has_regs,
		};
		memcpy(s->held[i].regs, p->regs, sizeof(p->regs));
	}
}

/* atexit, every vCPU stopped: write the checkpoint (whole or nothing). */
void state_save(const char *path)
{
	unsigned n = pv.n_vcpus;
	gsize len = sizeof(struct pvperf_state_header) + n * sizeof(struct pvperf_state_vcpu);
	g_autofree gchar *buf = g_malloc0(len);
	struct pvperf_state_header *h = (void *)buf;
	struct pvperf_state_vcpu *s = (void *)(buf + sizeof(*h));
	g_autoptr(GError) err = NULL;

	*h = (struct pvperf_state_header){
		.magic = PVPERF_STATE_MAGIC, .version = PVPERF_STATE_VERSION,
		.n_vcpus = n, .vcpu_size = sizeof(*s),
		.reply_flags = __atomic_load_n(&pv.reply_flags, __ATOMIC_RELAXED),
	};
	for (unsigned i = 0; i < n && i < (unsigned)qemu_plugin_num_vcpus(); i++) {
		uint64_t c[PVPERF_NR_COUNTERS];

		counters_snapshot(i, c);
		memcpy(s[i].counters, c, sizeof(c));
		s[i].reply_flags = pv.vcpu[i].reply_flags;
		save_sampling(i, &s[i]);
	}
	if (!g_file_set_contents(path, buf, len, &err))
		pvperf_log("state_out: %s\n", err->message);
}
