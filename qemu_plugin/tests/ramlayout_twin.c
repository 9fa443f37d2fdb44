/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramlayout_twin.c - the plugin's RAM layout (pvperf/ramlayout.c, from
 * the architecture tables) on cases read from stdin, for
 * tests/unit/arch/test_ram.py to compare with pyhost/ram.py.
 *
 *   in:  TARGET SIZE GPA LEN OFFSET   (numbers in hex)
 *   out: OFF GPA'                     (hex, or - when not RAM)
 * where OFF is the file offset of [GPA, GPA + LEN) and GPA' the gpa of
 * the file's byte at OFFSET.
 */
#include <inttypes.h>
#include <stdio.h>

#include "ramlayout.h"
#include "targets.h"

int main(void)
{
	char target[32];
	uint64_t size, gpa, len, offset, out;

	while (scanf("%31s %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64,
		     target, &size, &gpa, &len, &offset) == 5) {
		const struct arch *a = arch_of_target(target);
		struct ram_layout l;

		if (!a) {
			fprintf(stderr, "unknown target %s\n", target);
			return 1;
		}
		ram_layout_init(&l, a->ram_base, size, a->ram_hole_start,
				a->ram_hole_end);
		if (ram_layout_offset(&l, gpa, len, &out))
			printf("%" PRIx64, out);
		else
			printf("-");
		if (ram_layout_gpa(&l, offset, &out))
			printf(" %" PRIx64 "\n", out);
		else
			printf(" -\n");
	}
	return 0;
}
