// SPDX-License-Identifier: GPL-2.0
/*
 * hctest_hcall.c - the hypercall block of pvperf_hctest.ko and the call
 * through the driver's marker store, below both modes: hctest.c
 * (latency, module init) and hctest_fuzz.c use it, it uses neither.
 */

#define pr_fmt(fmt) "pvperf_hctest: " fmt

#include <linux/irqflags.h>
#include <linux/kernel.h>
#include <linux/printk.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "pvperf_abi.h"
#include "hctest.h"
#include "pvperf_arch.h"

/*
 * Fill the block at @blk (any address; the fuzz misplaces it on purpose)
 * and execute the driver's marker store (pvperf_arch.h: out of line, so no
 * two hypercalls share a translation block, which the plugin requires);
 * return ->ret as the host left it.  The block is filled with memcpy()
 * because it may be unaligned.
 */
s64 hct_hypercall(void *blk, u32 nr, u32 op, const u64 *args, s64 preset)
{
	struct pvperf_hcall img = {
		.nr = nr, .op = op, .ret = preset,
		.args = { args[0], args[1], args[2] },
	};
	unsigned long flags;
	s64 ret;

	local_irq_save(flags);
	memcpy(blk, &img, sizeof(img));
	pvperf_arch_marker(blk);
	memcpy(&ret, blk + offsetof(struct pvperf_hcall, ret), sizeof(ret));
	local_irq_restore(flags);
	return ret;
}

/* What the block must hold after a call: what we wrote, the magic, @ret. */
bool hct_block_intact(const void *blk, u32 nr, u32 op, const u64 *args,
		      s64 ret)
{
	struct pvperf_hcall want = {
		.marker = PVPERF_MARKER_MAGIC, .nr = nr, .op = op,
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

struct pvperf_hcall *hct_block_alloc(void)
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
