/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * targets.c - the table of guest architectures (targets.h).  Adding one
 * adds its file and one entry here; nothing else names an architecture.
 */
#include <stdio.h>
#include <string.h>

#include "targets.h"

extern const struct arch arch_x86_64;
extern const struct arch arch_aarch64;
extern const struct arch arch_riscv64;

static const struct arch *const arches[] = {
	&arch_x86_64,
	&arch_aarch64,
	&arch_riscv64,
};

#define N_ARCHES (sizeof(arches) / sizeof(arches[0]))

const struct arch *arch_of_target(const char *target_name)
{
	for (size_t i = 0; i < N_ARCHES; i++)
		if (!strcmp(arches[i]->target, target_name))
			return arches[i];
	return NULL;
}

const char *known_targets(void)
{
	static char names[256];

	if (!names[0])
		for (size_t i = 0; i < N_ARCHES; i++)
			snprintf(names + strlen(names),
				 sizeof(names) - strlen(names), "%s%s",
				 i ? ", " : "", arches[i]->target);
	return names;
}
