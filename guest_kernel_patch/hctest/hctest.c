// SPDX-License-Identifier: GPL-2.0
/*
 * hctest.c - pvperf_hctest.ko, raw pvperf hypercalls from inside the guest: latency
 * and fuzzing.  A test module, never part of the image: the tests copy it
 * into the share and insmod it from /mnt/host.
 *
 *   insmod pvperf_hctest.ko mode=latency count=N
 *	N PROBEs, each timed with ktime_get_ns() with IRQs off, then one line
 *	pvperf_hctest: latency n=N p50_ns=.. p90_ns=.. p99_ns=.. max_ns=..
 *	followed by min_ns, clock_p50_ns (two back-to-back ktime_get_ns():
 *	the clock's own cost, included in every sample), errors (PROBEs that
 *	did not return PVPERF_ABI_VERSION) and last_bad_ret.
 *
 *   insmod pvperf_hctest.ko mode=fuzz count=N seed=S [ram_mb=1024]
 *	N malformed (and some valid) hypercalls from hct_gen.h's sequence,
 *	then one line per kind of call with its histogram of ->ret,
 *	pvperf_hctest: fuzz kind=NAME n=.. rets=RET:COUNT,...
 *	a summary,
 *	pvperf_hctest: fuzz n=N seed=S ok=.. errors=.. canary_violations=..
 *	  block_violations=.. defect_opens=.. cleanup_errors=.. hash=0x..
 *	  prng=0x..
 *	(hash: hct_hash() over every (kind, ret); prng: the generator's final
 *	state) and the histogram of all rets, "pvperf_hctest: fuzz all n=..
 *	rets=..".  ok counts rets >= 0, errors the others.
 *	ram_mb must be the guest's RAM size (pvperf's --mem; 1G by default):
 *	the addresses that straddle the end of RAM are computed from it.
 *
 * The test runs in module init; the result is only ever the dmesg lines.
 * Init then returns 0 and the module stays loaded, holding nothing:
 * `rmmod pvperf_hctest` before inserting it again.  (Returning -EAGAIN
 * once done, as crypto/tcrypt.c does, would run every test twice in the
 * guest: busybox's insmod retries a failed finit_module() with
 * init_module().)  Bad parameters give -EINVAL.
 *
 * It has its own hypercall block (kmalloc(64): naturally aligned), issues
 * the doorbell with the driver's own architecture code (pvperf_arch.h,
 * linked in) with IRQs off, and does not need pvperf.ko (only a host: without one every ret stays
 * -ENOSYS).  It does not touch the driver's events: the fuzz uses event
 * ids far above the driver's (see hct_gen.h) and should run while no
 * perf event is open.
 *
 * The canary.  Every guest address the fuzz hands the host lies in one
 * 4-page buffer filled with a pattern whose every byte is >= 0x80 (so any
 * 8 bytes of it, read as a gpa, lie beyond 2^63).  The host may write only
 * ->ret of the module's block and the pvperf_guest_perf_event slots of
 * OPENs that returned 0.  The block, the param and the attr are compared
 * with what the module wrote after every call, the whole canary once at
 * the end; any other difference is a violation.
 *
 * Layout of the canary (offsets):
 *   0x040  struct pvperf_guest_perf_param   (rewritten before each OPEN)
 *   0x080  struct pvperf_guest_perf_attr
 *   0x100  pvperf_guest_perf_event slots: one per tracked id, then the
 *          "defect" slot used by OPENs that must fail
 *   0x1000..0x4000  untouched pattern: bad pointers and misplaced blocks
 */

#define pr_fmt(fmt) "pvperf_hctest: " fmt

#include <linux/errno.h>
#include <linux/gfp.h>
#include <linux/irqflags.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/perf_event.h>
#include <linux/preempt.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>

#include <asm/pvperf_abi.h>
#include "hct_gen.h"
#include "pvperf_arch.h"

static char *mode = "latency";
module_param(mode, charp, 0);
MODULE_PARM_DESC(mode, "latency or fuzz");
static unsigned int count = 1000;
module_param(count, uint, 0);
MODULE_PARM_DESC(count, "number of hypercalls (1..1000000)");
static unsigned long long seed = 1;
module_param(seed, ullong, 0);
MODULE_PARM_DESC(seed, "fuzz: xorshift64* seed (0 means the default state)");
static unsigned int ram_mb = 1024;
module_param(ram_mb, uint, 0);
MODULE_PARM_DESC(ram_mb, "fuzz: the guest's RAM in MiB (pvperf run --mem)");

#define HCT_MAX_COUNT		1000000u
#define HCT_WARMUP		100u

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

/* ----------------------------------------------------------------------
 * The doorbell
 */

/*
 * Fill the block at @blk (any address; the fuzz misplaces it on purpose)
 * and ring the driver's doorbell (pvperf_arch.h: out of line, so no two
 * hypercalls share a translation block, which the plugin requires);
 * return ->ret as the host left it.  The block is filled with memcpy()
 * because it may be unaligned.
 */
static s64 hct_hypercall(void *blk, u32 nr, u32 op, const u64 *args,
			 s64 preset)
{
	struct pvperf_hcall img = {
		.nr = nr, .op = op, .ret = preset,
		.args = { args[0], args[1], args[2] },
	};
	unsigned long flags;
	s64 ret;

	local_irq_save(flags);
	memcpy(blk, &img, sizeof(img));
	pvperf_arch_doorbell(blk);
	memcpy(&ret, blk + offsetof(struct pvperf_hcall, ret), sizeof(ret));
	local_irq_restore(flags);
	return ret;
}

/* What the block must hold after a call: what we wrote, the magic, @ret. */
static bool hct_block_intact(const void *blk, u32 nr, u32 op, const u64 *args,
			     s64 ret)
{
	struct pvperf_hcall want = {
		.doorbell = PVPERF_DOORBELL_MAGIC, .nr = nr, .op = op,
		.ret = ret, .args = { args[0], args[1], args[2] },
	};

	if (!memcmp(blk, &want, sizeof(want)))
		return true;
	/* The first few, byte for byte: what changed, and where. */
	pr_warn_ratelimited("block %px not as left: nr %u op %u ret %lld\n",
			    blk, nr, op, ret);
	print_hex_dump(KERN_WARNING, "pvperf_hctest: have ", DUMP_PREFIX_OFFSET,
		       16, 8, blk, sizeof(want), false);
	print_hex_dump(KERN_WARNING, "pvperf_hctest: want ", DUMP_PREFIX_OFFSET,
		       16, 8, &want, sizeof(want), false);
	return false;
}

static struct pvperf_hcall *hct_block_alloc(void)
{
	struct pvperf_hcall *hc = kzalloc(sizeof(*hc), GFP_KERNEL);

	if (hc && !IS_ALIGNED((unsigned long)hc, sizeof(*hc))) {
		pr_err("kmalloc(%zu) is not %zu-aligned\n", sizeof(*hc),
		       sizeof(*hc));
		kfree(hc);
		return NULL;
	}
	return hc;
}

/* ----------------------------------------------------------------------
 * mode=latency
 */

static int hct_cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static u64 hct_pct(const u64 *v, unsigned int n, unsigned int pct)
{
	return v[(u64)(n - 1) * pct / 100];
}

static u64 hct_time_probe(struct pvperf_hcall *hc, s64 *ret)
{
	static const u64 args[3];
	unsigned long flags;
	u64 t0, t1;

	local_irq_save(flags);
	t0 = ktime_get_ns();
	*ret = hct_hypercall(hc, PVPERF_HC_PERF_OP, PVPERF_OP_PROBE, args,
			     -ENOSYS);
	t1 = ktime_get_ns();
	local_irq_restore(flags);
	return t1 - t0;
}

static u64 hct_clock_p50(u64 *ns, unsigned int n)
{
	unsigned long flags;
	unsigned int i;
	u64 t0;

	for (i = 0; i < n; i++) {
		local_irq_save(flags);
		t0 = ktime_get_ns();
		ns[i] = ktime_get_ns() - t0;
		local_irq_restore(flags);
	}
	sort(ns, n, sizeof(*ns), hct_cmp_u64, NULL);
	return hct_pct(ns, n, 50);
}

static int hct_latency(void)
{
	struct pvperf_hcall *hc = hct_block_alloc();
	unsigned int i, errors = 0;
	u64 *ns, p50, p90, p99, slowest, fastest, clock;
	s64 ret, bad = 0;

	ns = kvmalloc_array(count, sizeof(*ns), GFP_KERNEL);
	if (!hc || !ns) {
		kfree(hc);
		kvfree(ns);
		return -ENOMEM;
	}
	for (i = 0; i < HCT_WARMUP + count; i++) {
		u64 t = hct_time_probe(hc, &ret);

		if (ret != PVPERF_ABI_VERSION) {
			errors++;
			bad = ret;
		}
		if (i >= HCT_WARMUP)
			ns[i - HCT_WARMUP] = t;
		if (!(i % 256))
			cond_resched();
	}
	sort(ns, count, sizeof(*ns), hct_cmp_u64, NULL);
	p50 = hct_pct(ns, count, 50);
	p90 = hct_pct(ns, count, 90);
	p99 = hct_pct(ns, count, 99);
	slowest = ns[count - 1];
	fastest = ns[0];
	clock = hct_clock_p50(ns, min(count, 1000u));	/* reuses ns[] */
	pr_info("latency n=%u p50_ns=%llu p90_ns=%llu p99_ns=%llu max_ns=%llu min_ns=%llu clock_p50_ns=%llu errors=%u last_bad_ret=%lld\n",
		count, p50, p90, p99, slowest, fastest, clock, errors, bad);
	kvfree(ns);
	kfree(hc);
	return 0;
}

/* ----------------------------------------------------------------------
 * mode=fuzz
 */

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
		count, seed, f->ok, f->errors, canary_bad, f->block_violations,
		f->defect_opens, f->cleanup_errors, f->hash, g->state);
	hct_print_hist("fuzz all", &f->all);
}

static void hct_fuzz_run(struct hct_fuzz *f)
{
	struct hct_call c;
	struct hct_rng g;
	unsigned int i;
	s64 ret;

	hct_seed(&g, seed);
	f->hash = HCT_FNV_OFFSET;
	/* One vCPU for the whole sequence: the Python model assumes it. */
	migrate_disable();
	for (i = 0; i < count; i++) {
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

static int hct_fuzz(void)
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

static int __init hct_init(void)
{
	int err;

	if (!count || count > HCT_MAX_COUNT || ram_mb < 64) {
		pr_err("need 1 <= count <= %u and ram_mb >= 64\n", HCT_MAX_COUNT);
		return -EINVAL;
	}
	if (!strcmp(mode, "latency")) {
		err = hct_latency();
	} else if (!strcmp(mode, "fuzz")) {
		err = hct_fuzz();
	} else {
		pr_err("mode=%s: want latency or fuzz\n", mode);
		return -EINVAL;
	}
	return err;
}

/* Nothing to undo: init frees everything it allocated. */
static void __exit hct_exit(void)
{
}

module_init(hct_init);
module_exit(hct_exit);

MODULE_DESCRIPTION("pvperf: raw hypercall latency and fuzz test (not for the image)");
MODULE_LICENSE("GPL");
