/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * out.c - pvperf-rmap.so's state and output, below both rmap.c (the
 * plugin: options, translation, flushes) and aspace.c (the address-space
 * timeline), which write records through it: the record file, the
 * buffered TB records, logging and the counters of the summary.
 * Contexts and locks: rmap.c's head comment.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "out.h"

struct rmap_state rm = { .fd = -1 };

void rmap_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("pvperf-rmap: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void count(uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

GByteArray *thread_buf(GByteArray **buf)
{
	if (!*buf)
		*buf = g_byte_array_new();
	return *buf;
}

/* ---- output ---- */

/* Any thread, no lock: one write(2) per call on an O_APPEND descriptor,
 * so a whole record lands in one piece between other threads' records
 * (a partial write only happens on a full disk). */
void write_all(const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = write(rm.fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			count(&rm.n_write_errors);
			return;
		}
		p += w;
		n -= w;
	}
}

/* rm.lock */
void obuf_drain(void)
{
	write_all(rm.obuf->data, rm.obuf->len);
	g_byte_array_set_size(rm.obuf, 0);
}

/* rm.lock */
void obuf_append(const void *rec, size_t size)
{
	if (rm.closing)
		return;
	g_byte_array_append(rm.obuf, rec, size);
	if (rm.obuf->len >= OBUF_FLUSH)
		obuf_drain();
}

struct rmap_rec_header rec_header(uint16_t type, size_t size)
{
	return (struct rmap_rec_header){ .type = type, .size = size,
					 .monotonic_ns = now_ns() };
}
