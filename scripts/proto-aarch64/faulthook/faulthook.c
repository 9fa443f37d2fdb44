// SPDX-License-Identifier: GPL-2.0
/*
 * PROTOTYPE (groundwork for the arm64 port; may be rewritten): the page
 * fault hook without x86's exceptions:page_fault_* tracepoints.  A kernel
 * counter on the software event PERF_COUNT_SW_PAGE_FAULTS, period 1, on
 * every CPU: arm64's do_page_fault() calls perf_sw_event() with the
 * faulting context's pt_regs, so the overflow handler sees the faulting
 * instruction (regs->pc) and whether it was user or kernel mode.  Prints
 * the first `show` faults of the process named `comm` and a count.
 */
#include <linux/module.h>
#include <linux/perf_event.h>
#include <linux/percpu.h>
#include <linux/sched.h>

static char *comm = "memwalk";
module_param(comm, charp, 0444);
static int show = 8;
module_param(show, int, 0444);

static struct perf_event *events[NR_CPUS];
static atomic_t seen = ATOMIC_INIT(0);

static void fault_overflow(struct perf_event *event,
			   struct perf_sample_data *data, struct pt_regs *regs)
{
	if (strcmp(current->comm, comm))
		return;
	if (atomic_inc_return(&seen) <= show)
		pr_info("faulthook: %s pc %#llx %s addr %#llx\n", current->comm,
			regs->pc, user_mode(regs) ? "user" : "kernel",
			data->addr);
}

static int __init faulthook_init(void)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_PAGE_FAULTS,
		.sample_period = 1,
		.sample_type = PERF_SAMPLE_ADDR,
	};
	int cpu;

	for_each_online_cpu(cpu) {
		struct perf_event *e = perf_event_create_kernel_counter(&attr,
					cpu, NULL, fault_overflow, NULL);
		if (IS_ERR(e)) {
			pr_err("faulthook: cpu %d: %ld\n", cpu, PTR_ERR(e));
			continue;
		}
		events[cpu] = e;
	}
	pr_info("faulthook: armed for %s\n", comm);
	return 0;
}

static void __exit faulthook_exit(void)
{
	int cpu;

	for_each_online_cpu(cpu)
		if (events[cpu])
			perf_event_release_kernel(events[cpu]);
	pr_info("faulthook: %d faults of %s\n", atomic_read(&seen), comm);
}
module_init(faulthook_init);
module_exit(faulthook_exit);
MODULE_LICENSE("GPL");
