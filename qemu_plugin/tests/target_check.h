/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * target_check.h - the check both architectures' classifier tests make of
 * an arch's cond_target: whether an instruction is a direct conditional
 * branch, and its taken target.  Returns 1 (and says why) on a mismatch.
 */
#ifndef PVPERF_TARGET_CHECK_H
#define PVPERF_TARGET_CHECK_H

#include <glib.h>
#include <stdbool.h>
#include <stdio.h>

#include "arch.h"

static inline int check_cond_target(const struct arch *arch, const char *name,
				    const uint8_t *bytes, size_t len,
				    uint64_t pc, bool want_direct,
				    uint64_t want_target)
{
	uint64_t target = 0;
	bool direct = arch->cond_target(bytes, len, pc, &target);

	if (direct == want_direct && (!direct || target == want_target))
		return 0;
	printf("FAIL %s: %d %#" G_GINT64_MODIFIER "x, want %d %#"
	       G_GINT64_MODIFIER "x\n", name, direct, target, want_direct,
	       want_target);
	return 1;
}

#endif /* PVPERF_TARGET_CHECK_H */
