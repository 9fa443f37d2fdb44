/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * translate.h - what the plugin does to each TB QEMU translates.
 */
#ifndef PVPERF_TRANSLATE_H
#define PVPERF_TRANSLATE_H

#include <qemu-plugin.h>

/* The tb_trans callback's work (translate.c: the pipeline, in order). */
void translate_tb(struct qemu_plugin_tb *tb);

#endif /* PVPERF_TRANSLATE_H */
