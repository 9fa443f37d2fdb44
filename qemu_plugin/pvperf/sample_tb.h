/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sample_tb.h - what sampling generates in a chunk at translation
 * (sample_tb.c); count.c cuts the chunks.
 */
#ifndef PVPERF_SAMPLE_TB_H
#define PVPERF_SAMPLE_TB_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "instrument.h"
#include "sample.h"

/* The descriptor of a chunk of n instructions (insn[0..n), their classes
 * cls[0..n), n_branches of them branches) of the TB at tb_vaddr, in the
 * TB arena, with capture points as at says. */
struct sample_chunk *sample_describe_chunk(const struct tb_insn *insn,
					   const uint8_t *cls, uint32_t n,
					   uint32_t n_branches, bool kernel,
					   uint64_t tb_vaddr, enum capture_at at);

/* After the chunk's instruction add: its countdown callback and its
 * capture points. */
void sample_emit_chunk(const struct tb_insn *insn, struct sample_chunk *c);

#endif /* PVPERF_SAMPLE_TB_H */
