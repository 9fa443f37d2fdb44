/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * arena.h - memory for callback udata that must live as long as the TBs
 * referring to it, freed all at once by a flush.
 */
#ifndef PVPERF_ARENA_H
#define PVPERF_ARENA_H

#include <stddef.h>

/* Any thread (translation); 8-byte aligned, zeroed: no. */
void *arena_alloc(size_t size);
/* Flush callback only (exclusive section: no TB is left). */
void arena_free_all(void);

#endif /* PVPERF_ARENA_H */
