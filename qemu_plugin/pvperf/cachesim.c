/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cachesim.c - the cache model (cachesim.h).
 *
 * The rules are cachegrind's, so that pvperf's counts can be checked
 * against it exactly: write-allocate (a write miss loads the line), true
 * LRU within a set, set index = low bits of the block number, and an
 * access straddling two lines counts once and misses if either line
 * misses.  The geometry checks are cachegrind's too: the set count and
 * the line size must be powers of two, lines at least 16 bytes (an
 * instruction could otherwise straddle three), the cache larger than a
 * line and no more ways than lines.  The size itself need not be a power
 * of two (a 12 MiB, 12-way LL is valid: 16384 sets).
 */
#include <errno.h>
#include <glib.h>
#include <stdlib.h>

#include "cachesim.h"

#define MIN_LINE_SIZE 16

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

const char *cache_geom_check(const struct cache_geom *g)
{
	uint64_t way_bytes = (uint64_t)g->line * g->assoc;

	if (!g->size || !g->assoc || !g->line)
		return "size, associativity and line size must be positive";
	if (!is_pow2(g->line))
		return "line size is not a power of two";
	if (g->line < MIN_LINE_SIZE)
		return "line size is below 16 bytes";
	if (g->size <= g->line)
		return "size is not greater than the line size";
	if (g->assoc > g->size / g->line)
		return "associativity exceeds size / line size";
	if (g->size % way_bytes || !is_pow2(g->size / way_bytes))
		return "set count (size / (assoc * line)) is not a power of two";
	return NULL;
}

static bool parse_u32(const char *s, uint32_t *out)
{
	unsigned long long v;
	char *end;

	if (!g_ascii_isdigit(*s))
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return false;
	*out = v;
	return true;
}

const char *cache_geom_parse(const char *text, struct cache_geom *g)
{
	g_auto(GStrv) f = g_strsplit(text, ",", -1);

	if (g_strv_length(f) != 3 || !parse_u32(f[0], &g->size) ||
	    !parse_u32(f[1], &g->assoc) || !parse_u32(f[2], &g->line))
		return "expected SIZE,ASSOC,LINE (bytes, ways, bytes)";
	return cache_geom_check(g);
}

const char *tlb_geom_parse(const char *text, struct cache_geom *g)
{
	g_auto(GStrv) f = g_strsplit(text, ",", -1);
	uint32_t entries, page;

	if (g_strv_length(f) != 3 || !parse_u32(f[0], &entries) ||
	    !parse_u32(f[1], &g->assoc) || !parse_u32(f[2], &page))
		return "expected ENTRIES,ASSOC,PAGE (entries, ways, bytes)";
	if (page < TLB_MIN_PAGE || page > TLB_MAX_PAGE || (page & (page - 1)))
		return "page size is not a power of two from 4096 to 1 GiB";
	if (!entries || (uint64_t)entries * page > UINT32_MAX)
		return "entries * page size must be 1 .. 4 GiB - 1";
	g->size = entries * page;
	g->line = page;
	return cache_geom_check(g);
}

void cache_init(struct cache *c, const struct cache_geom *g)
{
	uint64_t n_sets = g->size / ((uint64_t)g->line * g->assoc);
	size_t n = n_sets * g->assoc;

	c->blocks = g_new(uint64_t, n);
	c->set_mask = n_sets - 1;
	c->line_bits = __builtin_ctz(g->line);
	c->assoc = g->assoc;
	cache_reset(c);
}

void cache_reset(struct cache *c)
{
	size_t n = (c->set_mask + 1) * c->assoc;

	for (size_t i = 0; i < n; i++)
		c->blocks[i] = CACHE_EMPTY;
}

void cache_destroy(struct cache *c)
{
	g_free(c->blocks);
	c->blocks = NULL;
}

/*
 * The block is not its set's most recent: find it, make it so.  One pass
 * that shifts as it searches: each way takes the block before it until
 * the block itself is met (a hit: it goes first) or the set ends (a
 * miss: the least recent falls out): no second pass and no library call
 * (memmove) for a few words.  It measured no faster on bench_models'
 * memory workload (D1 and LL misses on every eighth access), within the
 * few per cent that code layout alone moves it.
 */
bool cache_ref_set(uint64_t *set, unsigned assoc, uint64_t block)
{
	uint64_t carry = set[0];

	for (unsigned i = 1; i < assoc; i++) {
		uint64_t here = set[i];

		set[i] = carry;
		if (here == block) {
			set[0] = block;
			return false;
		}
		carry = here;
	}
	set[0] = block;
	return true;
}
