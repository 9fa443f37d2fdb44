/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * targets.h - the guest architectures the plugins know (arch.h), by
 * QEMU's target name: the one lookup of both products.
 */
#ifndef PVPERF_TARGETS_H
#define PVPERF_TARGETS_H

#include "arch.h"

/* The architecture of QEMU's info->target_name, or NULL. */
const struct arch *arch_of_target(const char *target_name);

/* Their target names, for a message: "a, b". */
const char *known_targets(void);

#endif /* PVPERF_TARGETS_H */
