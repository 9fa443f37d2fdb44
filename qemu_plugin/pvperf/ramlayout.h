/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramlayout.h - where guest RAM sits: guest physical addresses (gpa) and
 * RAM file offsets.
 *
 * QEMU backs a machine's RAM with one memory-backend-file and maps the
 * file into guest physical memory as consecutive ranges: one from the
 * machine's RAM base, or two around a hole (a PC's RAM below its PCI
 * hole, the rest from 4 GiB; arch.h ram_hole_*).  Each range's
 * first byte is at the file offset where the previous range ended.  The
 * plugin's one gpa <-> offset mapping; pyhost/ram.py is its twin
 * (tests/unit/arch/test_ram.py runs both on the same cases).
 */
#ifndef PVPERF_RAMLAYOUT_H
#define PVPERF_RAMLAYOUT_H

#include <stdbool.h>
#include <stdint.h>

struct ram_range {
	uint64_t gpa;		/* of the range's first byte */
	uint64_t offset;	/* in the RAM file */
	uint64_t size;
};

struct ram_layout {
	unsigned n;		/* ranges in use, in rising gpa */
	struct ram_range range[2];
};

/* size bytes of RAM from gpa base, skipping [hole_start, hole_end) if
 * RAM reaches it (hole_end 0: no hole; else base < hole_start). */
void ram_layout_init(struct ram_layout *l, uint64_t base, uint64_t size,
		     uint64_t hole_start, uint64_t hole_end);
/* The file offset of [gpa, gpa + len) if it lies in one range. */
bool ram_layout_offset(const struct ram_layout *l, uint64_t gpa, uint64_t len,
		       uint64_t *offset);
/* The gpa of the file's byte at offset, if it is RAM. */
bool ram_layout_gpa(const struct ram_layout *l, uint64_t offset, uint64_t *gpa);

#endif /* PVPERF_RAMLAYOUT_H */
