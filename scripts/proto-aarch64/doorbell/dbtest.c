// SPDX-License-Identifier: GPL-2.0
/*
 * PROTOTYPE (groundwork for the arm64 port; may be rewritten): rings the
 * proposed arm64 doorbell `stur w16, [x17]` (0xb8000230; w16 = "PVPF",
 * x17 = the block) three times on a 64-byte aligned kmalloc'd block and
 * prints the block's virtual and physical address, so a plugin run can
 * compare them with the gpa its memory callback reports.
 */
#include <linux/io.h>
#include <linux/module.h>
#include <linux/slab.h>

static noinline void pvperf_doorbell(void *block)
{
	register void *x17 asm("x17") = block;

	asm volatile("movz	w16, #0x5650\n\t"
		     "movk	w16, #0x4650, lsl #16\n\t"
		     "stur	w16, [x17]"
		     : : "r" (x17) : "x16", "memory");
}

static int __init dbtest_init(void)
{
	u32 *block = kzalloc(64, GFP_KERNEL);
	int i;

	if (!block)
		return -ENOMEM;
	pr_info("dbtest: block va %px pa %#llx doorbell at %px\n", block,
		(unsigned long long)virt_to_phys(block), pvperf_doorbell);
	for (i = 0; i < 3; i++)
		pvperf_doorbell(block);
	pr_info("dbtest: block[0] = %#x after the doorbells\n", block[0]);
	kfree(block);
	return 0;
}
static void __exit dbtest_exit(void) { }
module_init(dbtest_init);
module_exit(dbtest_exit);
MODULE_LICENSE("GPL");
