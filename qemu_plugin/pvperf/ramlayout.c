/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramlayout.c - guest physical addresses <-> RAM file offsets
 * (ramlayout.h).  No QEMU dependency: the twin test builds it alone.
 */
#include "ramlayout.h"

void ram_layout_init(struct ram_layout *l, uint64_t base, uint64_t size,
		     uint64_t hole_start, uint64_t hole_end)
{
	uint64_t low = size;

	if (hole_end && hole_start - base < size)
		low = hole_start - base;
	l->n = 0;
	if (low)
		l->range[l->n++] = (struct ram_range){ base, 0, low };
	if (low < size)
		l->range[l->n++] = (struct ram_range){ hole_end, low, size - low };
}

bool ram_layout_offset(const struct ram_layout *l, uint64_t gpa, uint64_t len,
		       uint64_t *offset)
{
	for (unsigned i = 0; i < l->n; i++) {
		const struct ram_range *r = &l->range[i];

		/* written so that no sum can wrap: gpa and len are the guest's */
		if (gpa >= r->gpa && len <= r->size &&
		    gpa - r->gpa <= r->size - len) {
			*offset = r->offset + (gpa - r->gpa);
			return true;
		}
	}
	return false;
}

bool ram_layout_gpa(const struct ram_layout *l, uint64_t offset, uint64_t *gpa)
{
	for (unsigned i = 0; i < l->n; i++) {
		const struct ram_range *r = &l->range[i];

		if (offset >= r->offset && offset - r->offset < r->size) {
			*gpa = r->gpa + (offset - r->offset);
			return true;
		}
	}
	return false;
}
