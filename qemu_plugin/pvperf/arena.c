/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * arena.c - a bump allocator for callback udata (arena.h).
 *
 * QEMU has no TB-free callback; after a flush no TB is left, so the flush
 * callback frees everything at once.  TBs invalidated one by one
 * (self-modifying code, unmapped pages) leave garbage here until the next
 * flush; that is bounded by the code buffer, which fills and flushes.
 * Allocation happens at translation, concurrently on MTTCG vCPU threads.
 */
#include <glib.h>
#include <stdint.h>

#include "arena.h"

#define ARENA_CHUNK_BYTES (64 * 1024)

struct arena_chunk {
	struct arena_chunk *next;
	size_t used;
	uint8_t data[ARENA_CHUNK_BYTES];
};

static GMutex lock;
static struct arena_chunk *arena;	/* lock */

void *arena_alloc(size_t size)
{
	void *p;

	size = (size + 7) & ~(size_t)7;
	g_assert(size <= ARENA_CHUNK_BYTES);
	g_mutex_lock(&lock);
	if (!arena || arena->used + size > ARENA_CHUNK_BYTES) {
		struct arena_chunk *c = g_malloc(sizeof(*c));

		c->next = arena;
		c->used = 0;
		arena = c;
	}
	p = arena->data + arena->used;
	arena->used += size;
	g_mutex_unlock(&lock);
	return p;
}

void arena_free_all(void)
{
	g_mutex_lock(&lock);
	while (arena) {
		struct arena_chunk *next = arena->next;

		g_free(arena);
		arena = next;
	}
	g_mutex_unlock(&lock);
}
