/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * targets.c - the architectures pvperf-rmap.so knows: one entry each,
 * filled in by the file named after it.
 */
#include <stddef.h>

#include "arch.h"

extern const struct rmap_arch rmap_arch_x86_64;
extern const struct rmap_arch rmap_arch_aarch64;

const struct rmap_arch *const rmap_arches[] = {
	&rmap_arch_x86_64,
	&rmap_arch_aarch64,
	NULL,
};
