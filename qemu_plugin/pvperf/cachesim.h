/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cachesim.h - a set-associative, write-allocate, LRU cache as cachegrind
 * models one, and its geometry as cachegrind spells it ("SIZE,ASSOC,LINE"
 * in bytes).  No QEMU dependency (unit-tested natively, ../tests/).
 */
#ifndef PVPERF_CACHESIM_H
#define PVPERF_CACHESIM_H

#include <stdbool.h>
#include <stdint.h>

struct cache_geom {
	uint32_t size;		/* bytes */
	uint32_t assoc;		/* ways */
	uint32_t line;		/* bytes */
};

/*
 * One cache.  Each set holds the block numbers (address >> line_bits) of
 * its lines, most recently used first; CACHE_EMPTY marks an empty way.
 */
struct cache {
	uint64_t *blocks;	/* [n_sets * assoc] */
	uint64_t set_mask;	/* n_sets - 1 (n_sets is a power of two) */
	unsigned line_bits;
	unsigned assoc;
};

#define CACHE_EMPTY UINT64_MAX

/*
 * Parse "SIZE,ASSOC,LINE" and check it as cachegrind does; returns NULL
 * or a one-line reason (static string).
 */
const char *cache_geom_parse(const char *text, struct cache_geom *g);
const char *cache_geom_check(const struct cache_geom *g);

/*
 * A TLB is a cache of pages: parse "ENTRIES,ASSOC,PAGE" (cachegrind-style
 * order: entries, ways, page bytes) into the geometry of that cache.
 */
#define TLB_MIN_PAGE 4096u
#define TLB_MAX_PAGE (1u << 30)
const char *tlb_geom_parse(const char *text, struct cache_geom *g);

void cache_init(struct cache *c, const struct cache_geom *g);
void cache_destroy(struct cache *c);
void cache_reset(struct cache *c);	/* every way empty: a cold cache */

bool cache_ref_set(uint64_t *set, unsigned assoc, uint64_t block);

/* Look block up in its set and make it the most recent; true if absent.
 * Inline: the common case, the set's most recent block again, changes
 * nothing, and the models take it on every access. */
static inline bool cache_ref_block(struct cache *c, uint64_t block)
{
	uint64_t *set = &c->blocks[(block & c->set_mask) * c->assoc];

	if (__builtin_expect(set[0] == block, 1))
		return false;
	return cache_ref_set(set, c->assoc, block);
}

/* Whether [addr, addr + size) is its sets' most recent: a reference
 * would change nothing. */
static inline bool cache_is_mru(const struct cache *c, uint64_t addr,
				unsigned size)
{
	uint64_t first = addr >> c->line_bits;
	uint64_t last = (addr + size - 1) >> c->line_bits;

	return c->blocks[(first & c->set_mask) * c->assoc] == first &&
	       c->blocks[(last & c->set_mask) * c->assoc] == last;
}

/*
 * Reference [addr, addr + size): true if it missed.  An access that
 * straddles two lines is one access, touching both; it misses if either
 * does (cachegrind's rule).  size <= the line size (checked by callers).
 */
static inline bool cache_ref(struct cache *c, uint64_t addr, unsigned size)
{
	uint64_t first = addr >> c->line_bits;
	uint64_t last = (addr + size - 1) >> c->line_bits;
	bool miss = cache_ref_block(c, first);

	/* Both lines are referenced, whatever the first one did. */
	if (__builtin_expect(last != first, 0))
		miss |= cache_ref_block(c, last);
	return miss;
}

#endif /* PVPERF_CACHESIM_H */
