/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * hcall.h - the pvperf hypercall: marker stores and their dispatch.
 */
#ifndef PVPERF_HCALL_H
#define PVPERF_HCALL_H

#include <stddef.h>
#include <qemu-plugin.h>

void hcall_tb(struct qemu_plugin_tb *tb, size_t n);

#endif /* PVPERF_HCALL_H */
