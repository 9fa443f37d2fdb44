/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hctest.h - the units of pvperf_hctest.ko, each using only those below:
 *   hctest.c        module init, mode=latency
 *   hctest_fuzz.c   mode=fuzz
 *   hctest_hcall.c  the hypercall block and the marker store
 */
#ifndef HCTEST_H
#define HCTEST_H

#include <linux/types.h>

#include "pvperf_abi.h"

/* hctest_hcall.c */
s64 hct_hypercall(void *blk, u32 nr, u32 op, const u64 *args, s64 preset);
bool hct_block_intact(const void *blk, u32 nr, u32 op, const u64 *args,
		      s64 ret);
struct pvperf_hcall *hct_block_alloc(void);

/*
 * hctest_fuzz.c.  mode=fuzz: @count calls of the sequence @seed; @ram_mb:
 * the guest's RAM.
 */
int hct_fuzz(unsigned int count, u64 seed, unsigned int ram_mb);

#endif /* HCTEST_H */
