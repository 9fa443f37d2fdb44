/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fake_ram.h - a small guest RAM for the page-walk tests of the
 * architectures that have their RAM at a base (virt): define RAM_BASE,
 * then include this; the tests build page tables in fake_ram and hand
 * read_fake to the arch's vaddr_to_gpa.
 */
#ifndef PVPERF_FAKE_RAM_H
#define PVPERF_FAKE_RAM_H

#include <stdbool.h>
#include <stdint.h>

#define RAM_PAGES 8
static uint64_t fake_ram[RAM_PAGES * 512];

static bool read_fake(uint64_t gpa, uint64_t *val)
{
	if (gpa < RAM_BASE || gpa - RAM_BASE + 8 > sizeof(fake_ram))
		return false;
	*val = fake_ram[(gpa - RAM_BASE) / 8];
	return true;
}

#endif
