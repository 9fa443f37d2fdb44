/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * target_check.h - what the classifier tests share: the check of an arch's
 * cond_target (whether an instruction is a direct conditional branch, and
 * its taken target; 1, saying why, on a mismatch) and the expected classes
 * of a cross-assembled listing.
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

/*
 * The expected classes of a listing's instructions (the .expect section,
 * one byte each, objcopy -O binary), or NULL, saying why, when they do not
 * match the listing's n_insns instructions one for one.
 */
static inline gchar *load_expectations(const char *listing, guint n_insns,
				       const char *expect_path)
{
	gchar *expect = NULL;
	gsize n_expect = 0;

	if (g_file_get_contents(expect_path, &expect, &n_expect, NULL) &&
	    n_insns > 0 && n_insns == n_expect)
		return expect;
	printf("FAIL %s: %u instructions, %s: %zu expectations\n",
	       listing, n_insns, expect_path, (size_t)n_expect);
	g_free(expect);
	return NULL;
}

#endif /* PVPERF_TARGET_CHECK_H */
