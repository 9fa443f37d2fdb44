// SPDX-License-Identifier: GPL-2.0
/*
 * hctest.c - pvperf_hctest.ko, raw pvperf hypercalls from inside the guest:
 * latency, and fuzzing (hctest_fuzz.c), both through hctest_hcall.c.  A
 * test module, never part of the image: the tests copy it into the share
 * and insmod it from /mnt/host.
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
 * the marker store with the driver's own architecture code (pvperf_arch.h,
 * linked in; hctest_hcall.c) with IRQs off, and does not need pvperf.ko
 * (only a host: without one every ret stays -ENOSYS).  It does not touch
 * the driver's events: the fuzz uses event ids far above the driver's (see
 * hct_gen.h) and should run while no perf event is open.
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
#include <linux/irqflags.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>

#include "pvperf_abi.h"
#include "hctest.h"

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
		err = hct_fuzz(count, seed, ram_mb);
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
