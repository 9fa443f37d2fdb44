// SPDX-License-Identifier: GPL-2.0
/*
 * hctest_fuzz.c - mode=fuzz of pvperf_hctest.ko (see hctest.c): the
 * sequence of hct_gen.h, issued with addresses inside the canary, checked
 * call by call and summed up in dmesg.
 */

#define pr_fmt(fmt) "pvperf_hctest: " fmt

#include <linux/errno.h>
#include <linux/gfp.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/perf_event.h>
#include <linux/preempt.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "pvperf_abi.h"
#include "hct_gen.h"
#include "hctest.h"

#define HCT_CANARY_ORDER	2
#define HCT_CANARY_SIZE		(PAGE_SIZE << HCT_CANARY_ORDER)
#define HCT_OFF_PARAM		0x040
#define HCT_OFF_ATTR		0x080
#define HCT_OFF_SLOTS		0x100
#define HCT_SLOT_SIZE		sizeof(struct pvperf_guest_perf_event)
#define HCT_NR_SLOTS		(HCT_NR_FUZZ_IDS + 1)	/* + the defect slot */
#define HCT_DEFECT_SLOT		HCT_NR_FUZZ_IDS
#define HCT_OFF_PURE		PAGE_SIZE
#define HCT_PURE_PAGES		((1 << HCT_CANARY_ORDER) - 1)

/* x86 architectural event select "instructions retired" (Intel SDM 3B). */
#define HCT_RAW_INSTRUCTIONS	0xc0

#define HCT_MAX_RETS		8	/* distinct rets kept per kind */

struct hct_hist {
	s64 ret[HCT_MAX_RETS];
	u32 n[HCT_MAX_RETS];
	u32 used, other, total;
};

struct hct_fuzz {
	struct pvperf_hcall *hc;
	u8 *canary;			/* HCT_CANARY_SIZE, physically contiguous */
	u64 canary_gpa;
	u64 ram_end;			/* gpa just past the guest's RAM */
	struct pvperf_guest_perf_param param;	/* last written */
	struct pvperf_guest_perf_attr attr;
	bool open[HCT_NR_SLOTS];	/* id of the slot open on the host now */
	bool slot_written[HCT_NR_SLOTS];	/* an OPEN with it returned 0 */
	struct hct_hist hist[HCT_NR_KINDS];
	struct hct_hist all;
	u64 hash;
	u32 ok, errors, block_violations, cleanup_errors, defect_opens;
	unsigned int count;		/* calls to make */
	u64 seed;			/* of the sequence */
};

static const char *const hct_kind_name[HCT_NR_KINDS] = {
	[HCT_PROBE] = "probe", [HCT_BADNR] = "badnr", [HCT_BADOP] = "badop",
	[HCT_FAULT] = "fault", [HCT_PMU] = "pmu",
	[HCT_ID_UNKNOWN] = "id_unknown", [HCT_ID_FUZZ] = "id_fuzz",
	[HCT_OPEN_VALID] = "open_valid", [HCT_OPEN_ATTR] = "open_attr",
	[HCT_OPEN_PARAM_ADDR] = "open_param_addr",
	[HCT_OPEN_ATTR_ADDR] = "open_attr_addr",
	[HCT_OPEN_EVENT_ADDR] = "open_event_addr",
	[HCT_OPEN_BADID] = "open_badid", [HCT_BADBLOCK] = "badblock",
};

/* Every byte >= 0x80: 8 of them never read as a gpa inside RAM. */
static u8 hct_pattern(size_t off)
{
	return 0x80 | (((off * 0x9e) ^ (off >> 7)) & 0x7f);
}

static void hct_fill(struct hct_fuzz *f, size_t off, size_t len)
{
	for (; len; off++, len--)
		f->canary[off] = hct_pattern(off);
}

static void hct_count(struct hct_hist *h, s64 ret)
{
	u32 i;

	h->total++;
	for (i = 0; i < h->used; i++) {
		if (h->ret[i] == ret) {
			h->n[i]++;
			return;
		}
	}
	if (h->used == HCT_MAX_RETS) {
		h->other++;
		return;
	}
	h->ret[h->used] = ret;
	h->n[h->used++] = 1;
}

static u64 hct_slot_gpa(struct hct_fuzz *f, unsigned int slot)
{
	return f->canary_gpa + HCT_OFF_SLOTS + slot * HCT_SLOT_SIZE;
}

static unsigned int hct_slot_of(const struct hct_call *c)
{
	return c->kind == HCT_OPEN_VALID ? c->id - HCT_FUZZ_ID_BASE :
	       HCT_DEFECT_SLOT;
}

/* A gpa in the untouched pages, 8-aligned, with 64 bytes after it. */
static u64 hct_pure_gpa(struct hct_fuzz *f, u64 v)
{
	return f->canary_gpa + HCT_OFF_PURE +
	       ((v % (HCT_PURE_PAGES * PAGE_SIZE - 64)) & ~7ULL);
}

/* The bad address of HCT_OPEN_*_ADDR for an object of @size bytes. */
static u64 hct_bad_addr(struct hct_fuzz *f, u32 variant, u64 v, size_t size,
			u64 unaligned_base)
{
	switch (variant) {
	case HCT_ADDR_HUGE:
		return v | (1ULL << 40);
	case HCT_ADDR_STRADDLE:		/* size is a multiple of 8, > 8 */
		return f->ram_end - 8 * (1 + v % (size / 8 - 1));
	case HCT_ADDR_RAM_END:
		return f->ram_end;
	case HCT_ADDR_TOP:
		return ~7ULL;
	case HCT_ADDR_UNALIGNED:
		return unaligned_base + 1 + v % 7;
	default:			/* HCT_ADDR_CANARY */
		return hct_pure_gpa(f, v);
	}
}

static void hct_attr_valid(struct pvperf_guest_perf_attr *a, u32 variant,
			   u64 v1, u64 v2)
{
	static const u64 modes[] = {
		0, PVPERF_ATTR_EXCLUDE_USER, PVPERF_ATTR_EXCLUDE_KERNEL,
	};

	memset(a, 0, sizeof(*a));
	a->type = variant == 1 ? PERF_TYPE_RAW : PERF_TYPE_HARDWARE;
	a->config = variant == 0 ? PERF_COUNT_HW_INSTRUCTIONS :
		    variant == 1 ? HCT_RAW_INSTRUCTIONS :
		    PERF_COUNT_HW_BRANCH_INSTRUCTIONS;
	a->flags = modes[(v1 >> 32) % 3] |
		   (v1 & (PVPERF_ATTR_EXCLUDE_HV | PVPERF_ATTR_EXCLUDE_IDLE |
			  PVPERF_ATTR_EXCLUDE_GUEST));
	a->read_format = v2 & 0xf;
}

/* PVPERF_ATTR_* flags are bits 0 .. hct_known_bits - 1. */
static const unsigned int hct_known_bits = __builtin_popcountll(PVPERF_ATTR_KNOWN);
static_assert((PVPERF_ATTR_KNOWN & (PVPERF_ATTR_KNOWN + 1)) == 0);

/* A valid attr with exactly one defect (enum hct_attr_defect). */
static void hct_attr_defect(struct pvperf_guest_perf_attr *a, u32 defect,
			    u64 v)
{
	hct_attr_valid(a, 0, 0, 0);
	switch (defect) {
	case HCT_ATTR_TYPE:
		a->type = (u32)v;
		if (a->type == PERF_TYPE_HARDWARE || a->type == PERF_TYPE_RAW ||
		    a->type == PERF_TYPE_HW_CACHE)
			a->type += 8;
		break;
	case HCT_ATTR_HW_CACHE:
		a->type = PERF_TYPE_HW_CACHE;
		a->config = v;
		break;
	case HCT_ATTR_HW_CONFIG:
		a->config = 16 + (u32)v;
		break;
	case HCT_ATTR_RAW_BITS:
		a->type = PERF_TYPE_RAW;
		a->config = HCT_RAW_INSTRUCTIONS | ((v | 1) << 16);
		break;
	case HCT_ATTR_RAW_UNKNOWN:
		a->type = PERF_TYPE_RAW;
		a->config = 0xffff;
		break;
	case HCT_ATTR_FLAGS:		/* PVPERF_ATTR_KNOWN: the low bits */
		a->flags = 1ULL << (hct_known_bits + v % (64 - hct_known_bits));
		break;
	case HCT_ATTR_BP_TYPE:
		a->bp_type = (u32)v | 1;
		break;
	case HCT_ATTR_BP_ADDR:
		a->bp_addr = v | 1;
		break;
	case HCT_ATTR_BP_LEN:
		a->bp_len = v | 1;
		break;
	default:			/* HCT_ATTR_NO_MODE */
		a->flags = PVPERF_ATTR_EXCLUDE_USER | PVPERF_ATTR_EXCLUDE_KERNEL;
		break;
	}
}

/* Write param and attr for an OPEN kind; returns args[0]. */
static u64 hct_prepare_open(struct hct_fuzz *f, const struct hct_call *c)
{
	u64 param_gpa = f->canary_gpa + HCT_OFF_PARAM;
	u64 attr_gpa = f->canary_gpa + HCT_OFF_ATTR;
	u64 event_gpa = hct_slot_gpa(f, hct_slot_of(c));
	const u64 *v = c->v;

	if (c->kind == HCT_OPEN_ATTR)
		hct_attr_defect(&f->attr, c->variant, v[1]);
	else
		hct_attr_valid(&f->attr, c->kind == HCT_OPEN_VALID ?
			       c->variant : 0, v[1], v[2]);

	if (c->kind == HCT_OPEN_ATTR_ADDR)
		attr_gpa = hct_bad_addr(f, c->variant, v[1], sizeof(f->attr),
					attr_gpa);
	if (c->kind == HCT_OPEN_EVENT_ADDR)
		event_gpa = hct_bad_addr(f, c->variant, v[1], HCT_SLOT_SIZE,
					 event_gpa);
	f->param.attr_addr = attr_gpa;
	f->param.guest_event_addr = event_gpa;
	f->param.id = (u32)c->id;
	memcpy(f->canary + HCT_OFF_PARAM, &f->param, sizeof(f->param));
	memcpy(f->canary + HCT_OFF_ATTR, &f->attr, sizeof(f->attr));

	if (c->kind == HCT_OPEN_PARAM_ADDR)
		return hct_bad_addr(f, c->variant, v[1], sizeof(f->param),
				    param_gpa);
	return param_gpa;
}

/* A block placed where the plugin or the service must refuse it. */
static size_t hct_bad_block_off(u32 variant, u64 v)
{
	size_t page = HCT_OFF_PURE + (v % (HCT_PURE_PAGES - 1)) * PAGE_SIZE;
	size_t in_page = 64 * (1 + (v >> 8) % 32);

	switch (variant) {
	case HCT_BLOCK_ALIGN8:
		return page + in_page + 8 * (1 + (v >> 16) % 7);
	case HCT_BLOCK_ALIGN4:
		return page + in_page + 4;
	case HCT_BLOCK_ODD:
		return page + in_page + 1 + 2 * ((v >> 16) % 3);
	default:			/* HCT_BLOCK_CROSS */
		return page + PAGE_SIZE - 8 * (1 + (v >> 16) % 7);
	}
}

static s64 hct_call_bad_block(struct hct_fuzz *f, struct hct_call *c)
{
	size_t off = hct_bad_block_off(c->variant, c->v[1]);
	void *blk = f->canary + off;
	s64 ret;

	ret = hct_hypercall(blk, c->nr, c->op, c->args, -ENOSYS);
	if (!hct_block_intact(blk, c->nr, c->op, c->args, ret) ||
	    ret != -ENOSYS)
		f->block_violations++;
	hct_fill(f, off, sizeof(struct pvperf_hcall));
	return ret;
}

static s64 hct_call(struct hct_fuzz *f, struct hct_call *c)
{
	bool is_open = c->kind >= HCT_OPEN_VALID && c->kind <= HCT_OPEN_BADID;
	s64 ret;

	if (c->kind == HCT_BADBLOCK)
		return hct_call_bad_block(f, c);
	if (is_open)
		c->args[0] = hct_prepare_open(f, c);
	ret = hct_hypercall(f->hc, c->nr, c->op, c->args, -ENOSYS);
	if (!hct_block_intact(f->hc, c->nr, c->op, c->args, ret))
		f->block_violations++;
	else if (memcmp(f->canary + HCT_OFF_PARAM, &f->param, sizeof(f->param)) ||
		 memcmp(f->canary + HCT_OFF_ATTR, &f->attr, sizeof(f->attr))) {
		f->block_violations++;
		pr_warn_ratelimited("param/attr block changed by a %s call (variant %u, ret %lld)\n",
				    hct_kind_name[c->kind], c->variant, ret);
	}
	return ret;
}

/*
 * Keep track of the tracked ids the host has open, by its answers.  An
 * OPEN that should have failed but did not is a host bug: count it, and
 * close that event at once so that it cannot disturb what follows.
 */
static void hct_track(struct hct_fuzz *f, const struct hct_call *c, s64 ret)
{
	u64 args[3] = { c->id, 0, 0 };
	unsigned int slot;

	if (ret || c->nr != PVPERF_HC_PERF_OP)
		return;
	if (c->kind == HCT_OPEN_VALID) {
		slot = hct_slot_of(c);
		f->open[slot] = true;
		f->slot_written[slot] = true;
	} else if (c->kind == HCT_ID_FUZZ && c->op == PVPERF_OP_CLOSE) {
		f->open[c->id - HCT_FUZZ_ID_BASE] = false;
	} else if (c->kind > HCT_OPEN_VALID && c->kind <= HCT_OPEN_BADID) {
		f->defect_opens++;
		f->slot_written[HCT_DEFECT_SLOT] = true;
		hct_hypercall(f->hc, PVPERF_HC_PERF_OP, PVPERF_OP_CLOSE, args,
			      -ENOSYS);
	}
}

/* Thaw the vCPU and close whatever the fuzz left open. */
static void hct_cleanup(struct hct_fuzz *f)
{
	u64 args[3] = { 0, 0, 0 };
	unsigned int slot;

	if (hct_hypercall(f->hc, PVPERF_HC_PERF_OP, PVPERF_OP_PMU_ENABLE,
			  args, -ENOSYS))
		f->cleanup_errors++;
	for (slot = 0; slot < HCT_NR_FUZZ_IDS; slot++) {
		if (!f->open[slot])
			continue;
		args[0] = HCT_FUZZ_ID_BASE + slot;
		if (hct_hypercall(f->hc, PVPERF_HC_PERF_OP, PVPERF_OP_CLOSE,
				  args, -ENOSYS))
			f->cleanup_errors++;
		f->open[slot] = false;
	}
}

/* Bytes of the canary that differ from what may be there. */
static u32 hct_canary_violations(struct hct_fuzz *f)
{
	const struct pvperf_guest_perf_event *gpe;
	size_t off, slot;
	u32 bad = 0;

	for (off = 0; off < HCT_CANARY_SIZE; off++) {
		if (off >= HCT_OFF_PARAM && off < HCT_OFF_PARAM + sizeof(f->param))
			continue;	/* checked after every call */
		if (off >= HCT_OFF_ATTR && off < HCT_OFF_ATTR + sizeof(f->attr))
			continue;
		if (off >= HCT_OFF_SLOTS &&
		    off < HCT_OFF_SLOTS + HCT_NR_SLOTS * HCT_SLOT_SIZE &&
		    f->slot_written[(off - HCT_OFF_SLOTS) / HCT_SLOT_SIZE])
			continue;	/* checked below */
		bad += f->canary[off] != hct_pattern(off);
	}
	/* A slot the host wrote: zeroed at OPEN, then only count changes. */
	for (slot = 0; slot < HCT_NR_SLOTS; slot++) {
		gpe = (void *)(f->canary + HCT_OFF_SLOTS + slot * HCT_SLOT_SIZE);
		if (f->slot_written[slot] && (gpe->overflows || gpe->lost))
			bad++;
	}
	return bad;
}

static void hct_print_hist(const char *prefix, const struct hct_hist *h)
{
	char buf[256];
	int len = 0;
	u32 i;

	buf[0] = 0;
	for (i = 0; i < h->used; i++)
		len += scnprintf(buf + len, sizeof(buf) - len, "%s%lld:%u",
				 i ? "," : "", h->ret[i], h->n[i]);
	if (h->other)
		len += scnprintf(buf + len, sizeof(buf) - len, ",other:%u",
				 h->other);
	pr_info("%s n=%u rets=%s\n", prefix, h->total, buf);
}

static void hct_report(struct hct_fuzz *f, struct hct_rng *g, u32 canary_bad)
{
	char prefix[64];
	u32 k;

	for (k = 0; k < HCT_NR_KINDS; k++) {
		snprintf(prefix, sizeof(prefix), "fuzz kind=%s",
			 hct_kind_name[k]);
		hct_print_hist(prefix, &f->hist[k]);
	}
	pr_info("fuzz n=%u seed=%llu ok=%u errors=%u canary_violations=%u block_violations=%u defect_opens=%u cleanup_errors=%u hash=%#llx prng=%#llx\n",
		f->count, f->seed, f->ok, f->errors, canary_bad,
		f->block_violations,
		f->defect_opens, f->cleanup_errors, f->hash, g->state);
	hct_print_hist("fuzz all", &f->all);
}

static void hct_fuzz_run(struct hct_fuzz *f)
{
	struct hct_call c;
	struct hct_rng g;
	unsigned int i;
	s64 ret;

	hct_seed(&g, f->seed);
	f->hash = HCT_FNV_OFFSET;
	/* One vCPU for the whole sequence: the Python model assumes it. */
	migrate_disable();
	for (i = 0; i < f->count; i++) {
		hct_gen_next(&g, &c);
		ret = hct_call(f, &c);
		hct_track(f, &c, ret);
		hct_count(&f->hist[c.kind], ret);
		hct_count(&f->all, ret);
		f->hash = hct_hash(f->hash, c.kind, ret);
		if (ret >= 0)
			f->ok++;
		else
			f->errors++;
		if (!(i % 64))
			cond_resched();
	}
	hct_cleanup(f);
	migrate_enable();
	hct_report(f, &g, hct_canary_violations(f));
}

int hct_fuzz(unsigned int count, u64 seed, unsigned int ram_mb)
{
	struct hct_fuzz *f = kzalloc(sizeof(*f), GFP_KERNEL);
	struct page *page = alloc_pages(GFP_KERNEL, HCT_CANARY_ORDER);
	int err = -ENOMEM;

	if (!f || !page)
		goto out;
	f->hc = hct_block_alloc();
	if (!f->hc)
		goto out;
	f->canary = page_address(page);
	f->canary_gpa = __pa(f->canary);
	f->count = count;
	f->seed = seed;
	f->ram_end = (u64)ram_mb << 20;
	hct_fill(f, 0, HCT_CANARY_SIZE);
	/*
	 * The param and attr blocks hold what the last OPEN put there; until
	 * the first one, the (zero) f->param and f->attr.  Without this, a
	 * sequence whose first calls are not OPENs counted the fill pattern
	 * there as a host write: one false block violation.
	 */
	memcpy(f->canary + HCT_OFF_PARAM, &f->param, sizeof(f->param));
	memcpy(f->canary + HCT_OFF_ATTR, &f->attr, sizeof(f->attr));
	hct_fuzz_run(f);
	err = 0;
out:
	if (f)
		kfree(f->hc);
	kfree(f);
	if (page)
		__free_pages(page, HCT_CANARY_ORDER);
	return err;
}
