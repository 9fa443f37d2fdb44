// SPDX-License-Identifier: GPL-2.0
/*
 * pvperf_sysfs.c - format/ and events/ of the "cpu" PMU, so that stock perf
 * can name the events.
 */

#define pr_fmt(fmt) "pvperf: " fmt

#include <linux/errno.h>
#include <linux/io.h>
#include <linux/kernel.h>
#include <linux/perf_event.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "pvperf.h"

PMU_FORMAT_ATTR(event, "config:0-7");
PMU_FORMAT_ATTR(umask, "config:8-15");

static struct attribute *pvperf_format_attrs[] = {
	&format_attr_event.attr,
	&format_attr_umask.attr,
	NULL,
};

static const struct attribute_group pvperf_format_group = {
	.name = "format",
	.attrs = pvperf_format_attrs,
};

/*
 * events/: the events the host counts, as its event table
 * (pyhost/pmu/events.py) spells them, less the hardware-cache ones that
 * perf reaches through PERF_TYPE_HW_CACHE by their legacy names:
 * PVPERF_OP_EVENTS answers a line name=event=0x..[,umask=0x..] per event.  Built at init, before
 * perf_pmu_register() creates the sysfs files; the driver keeps no event
 * table of its own, so a model added on the host shows in `perf list`.
 */
static char *pvperf_events_text;		/* the host's answer, kept */
static struct perf_pmu_events_attr *pvperf_events_ea;
static struct attribute **pvperf_events_attrs;

static struct attribute_group pvperf_events_group = {
	.name = "events",
};

/* The host is trusted, but a sysfs name is checked all the same. */
static bool pvperf_event_line_ok(const char *name, const char *val)
{
	static const char name_chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
	static const char val_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789=,";

	return *name && name[strspn(name, name_chars)] == '\0' &&
	       *val && val[strspn(val, val_chars)] == '\0';
}

void pvperf_events_free(void)
{
	kfree(pvperf_events_attrs);
	kfree(pvperf_events_ea);
	kfree(pvperf_events_text);
	pvperf_events_attrs = NULL;
	pvperf_events_ea = NULL;
	pvperf_events_text = NULL;
}

int pvperf_events_init(void)
{
	char *text, *line, *end;
	unsigned int n = 0, i = 0;
	s64 len;

	/* kmalloc memory is physically contiguous: one gpa range. */
	text = kzalloc(PVPERF_EVENTS_BUF_MAX, GFP_KERNEL);
	if (!text)
		return -ENOMEM;
	pvperf_events_text = text;
	len = pvperf_hypercall(PVPERF_OP_EVENTS, virt_to_phys(text),
			       PVPERF_EVENTS_BUF_MAX, 0);
	if (len <= 0 || len >= PVPERF_EVENTS_BUF_MAX) {
		pr_warn("host event list unusable (ret=%lld), not registering\n",
			len);
		pvperf_events_free();
		return len < 0 ? (int)len : -EIO;
	}
	text[len] = '\0';
	for (line = text; (end = strchr(line, '\n')); line = end + 1)
		n++;
	pvperf_events_ea = kcalloc(n, sizeof(*pvperf_events_ea), GFP_KERNEL);
	pvperf_events_attrs = kcalloc(n + 1, sizeof(*pvperf_events_attrs),
				      GFP_KERNEL);
	if (!pvperf_events_ea || !pvperf_events_attrs) {
		pvperf_events_free();
		return -ENOMEM;
	}
	for (line = text; (end = strchr(line, '\n')); line = end + 1) {
		struct perf_pmu_events_attr *ea = &pvperf_events_ea[i];
		char *eq;

		*end = '\0';
		eq = strchr(line, '=');
		if (eq)
			*eq = '\0';
		if (!eq || !pvperf_event_line_ok(line, eq + 1)) {
			pr_warn("host event line \"%s\" ignored\n", line);
			continue;
		}
		sysfs_attr_init(&ea->attr.attr);
		ea->attr.attr.name = line;
		ea->attr.attr.mode = 0444;
		ea->attr.show = perf_event_sysfs_show;
		ea->event_str = eq + 1;
		pvperf_events_attrs[i++] = &ea->attr.attr;
	}
	pvperf_events_group.attrs = pvperf_events_attrs;
	return 0;
}

const struct attribute_group *pvperf_attr_groups[] = {
	&pvperf_format_group,
	&pvperf_events_group,
	NULL,
};
