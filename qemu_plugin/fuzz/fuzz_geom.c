/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_geom.c - libFuzzer harness for the model options' parsers
 * (cachesim.c: cache_geom_parse, tlb_geom_parse) and the cache model
 * they configure.  Input: one selector byte (cache or TLB), then the
 * option text.  Checked: an accepted geometry passes cache_geom_check,
 * has a power-of-two set count and round-trips through its own spelling;
 * a cache built from it answers references without touching memory
 * outside its blocks (ASan), and a repeated reference hits.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cachesim.h"

/* cache_init allocates 8 bytes per line: a user's LL=2147483648,1,16
 * asks for 1 GiB, which is theirs to ask; the harness builds only
 * caches up to this many lines (still every parsed geometry is checked). */
#define MAX_LINES (1u << 16)

static void exercise(const struct cache_geom *g, const uint8_t *p, size_t n)
{
	struct cache c;
	uint64_t lines = g->size / g->line;

	if (lines > MAX_LINES)
		return;
	cache_init(&c, g);
	for (; n >= 9; p += 9, n -= 9) {
		uint64_t addr;
		unsigned size = 1 + p[8] % g->line;

		memcpy(&addr, p, 8);
		cache_ref(&c, addr, size);
		assert(!cache_ref(&c, addr, size));	/* now most recent */
	}
	cache_destroy(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cache_geom g = { 0 }, again = { 0 };
	char text[64], spelled[64];
	size_t len;
	const char *err;
	int tlb;

	if (size < 1)
		return 0;
	tlb = data[0] & 1;
	len = size - 1 < sizeof(text) - 1 ? size - 1 : sizeof(text) - 1;
	memcpy(text, data + 1, len);
	text[len] = '\0';
	err = tlb ? tlb_geom_parse(text, &g) : cache_geom_parse(text, &g);
	if (err) {
		assert(strlen(err) > 0 && !strchr(err, '\n'));
		return 0;
	}
	assert(!cache_geom_check(&g));
	assert(g.line && (g.size / g.line / g.assoc & (g.size / g.line / g.assoc - 1)) == 0);
	if (tlb)
		snprintf(spelled, sizeof(spelled), "%u,%u,%u", g.size / g.line, g.assoc, g.line);
	else
		snprintf(spelled, sizeof(spelled), "%u,%u,%u", g.size, g.assoc, g.line);
	err = tlb ? tlb_geom_parse(spelled, &again) : cache_geom_parse(spelled, &again);
	assert(!err && !memcmp(&g, &again, sizeof(g)));
	exercise(&g, data + 1 + len, size - 1 - len);
	return 0;
}
