/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ring.c - samples delivered by the plugin itself, so that an overflow
 * reaches the guest without a round trip through the service.
 *
 * Once the service has handed a vCPU's sample ring over (a hypercall's
 * reply, pvperf_proto.h "Plugin-written samples": only when this vCPU's
 * plugin holds its doorbell eventfd), every overflow of that vCPU is
 * delivered here, on the vCPU's thread, in the overflow's callback: the
 * struct pvperf_sample goes into guest RAM at head % capacity, then head
 * (release: the guest driver reads head with acquire, then the records),
 * and the interrupt is raised by writing the vCPU's doorbell.  The
 * service hears of it afterwards, in the overflow message, and accounts
 * (the PMU model's threshold, guest_perf_event.overflows, the head it
 * mirrors for the next handover); no sample waits for Python any more.
 *
 * What the service did before is done the same way here: a full ring (or
 * a tail the guest garbled) loses the sample, counted in the ring's lost
 * and the event's; a buffered event raises the interrupt only at the
 * watermark; no interrupt is raised while the last one is unanswered
 * (the guest has not consumed up to the head it announced), unless that
 * was more than PVPERF_IRQ_RETRY_US ago.  A SYNC overflow (callchain events, whose
 * stack the guest reads in its handler; flow control's every 64th) waits
 * until QEMU has taken the eventfd, the new ring or the outstanding one:
 * the interrupt then lands at the vCPU's next block boundary, in the
 * frame that overflowed.
 *
 * Every gpa is the guest's, checked by the service; guest_ram_block
 * checks it against RAM again.  tail is read once and only compared.
 *
 * Context: the vCPU thread that owns the ring; no locks.
 */
#include <fcntl.h>
#include <glib.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "guest.h"
#include "host_timer.h"
#include "ring.h"

static uint64_t ring_bytes(uint32_t capacity)
{
	return sizeof(struct pvperf_sample_buf) +
	       (uint64_t)capacity * sizeof(struct pvperf_sample);
}

void ring_take(unsigned vcpu, const struct pvperf_proto_ring *r)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_ring *g = &v->ring;
	struct pvperf_sample_buf *buf;

	memset(g, 0, sizeof(*g));
	host_timer_set_ticks(vcpu, NULL);
	buf = r->gpa && r->capacity ? guest_ram_block(r->gpa,
						      ring_bytes(r->capacity)) : NULL;
	if (!buf || r->watermark > r->capacity || v->doorbell_fd < 0)
		return;		/* the service writes (it rings as before) */
	host_timer_set_ticks(vcpu, &buf->ticks);
	*g = (struct pvperf_ring){
		.gpa = r->gpa,
		.capacity = r->capacity,
		.watermark = r->watermark,
		.head = r->head,
		.lost = r->lost,
		.notified = r->notified,
		.notified_us = (r->flags & PVPERF_RING_NOTIFIED) ?
			       g_get_monotonic_time() : 0,
	};
}

/* In a TICK: the guest drains the ring when the hypercall returns. */
static __thread bool quiet;

void ring_quiet(bool on)
{
	quiet = on;
}

bool ring_owned(unsigned vcpu)
{
	return pv.vcpu[vcpu].ring.gpa != 0;
}

/*
 * Until QEMU has taken the doorbell.  It acknowledges nothing: taken = no
 * longer readable and its main loop back in its poll (it reads the
 * eventfd and raises the vector in one handler: main_loop_polling).  Yield, never spin: the main loop needs a CPU, and on
 * a small host this thread holds one; and past YIELD_US, sleep, longer
 * each time: yielding to nobody is a spin, and it cost the vCPU's thread
 * 54 us of CPU per callchain sample (127 us when the service wrote),
 * against a p50 wait of ~40 us on a quiet host and several ms on a
 * loaded one.  A late interrupt costs a callchain's
 * accuracy, never correctness: give up after DOORBELL_WAIT_US.
 */
#define DOORBELL_WAIT_US	100000
#define YIELD_US		20
#define SLEEP_MIN_US		20	/* doubled each time, up to: */
#define SLEEP_MAX_US		320

/*
 * Whether QEMU's main loop sleeps in its poll.  It reads a doorbell's
 * eventfd and then, in the same handler, raises the MSI-X vector: an
 * empty eventfd alone leaves a window in which the vCPU, going on, could
 * pass the next block boundary before the interrupt is pending, and a
 * deterministic run would take it at another instruction.  The main loop
 * seen back in ppoll() after the eventfd was read has left that handler.
 * The main loop is the process's first thread; its syscall is in /proc
 * ("running" while it runs).  Cannot tell: true (the eventfd alone).
 */
static bool main_loop_polling(void)
{
	static gsize once;
	static int fd = -1;
	char buf[32], *end;
	ssize_t n;
	long nr;

	if (g_once_init_enter(&once)) {
		g_autofree char *path =
			g_strdup_printf("/proc/self/task/%d/syscall", getpid());

		fd = open(path, O_RDONLY | O_CLOEXEC);
		g_once_init_leave(&once, 1);
	}
	if (fd < 0)
		return true;
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	nr = strtol(buf, &end, 10);
#ifdef SYS_poll
	if (end != buf && nr == SYS_poll)
		return true;
#endif
	return end != buf && nr == SYS_ppoll;
}

/* Taken: the eventfd read and the main loop back in its poll. */
static bool doorbell_taken(struct pollfd *p)
{
	return p->fd < 0 || (poll(p, 1, 0) == 0 && main_loop_polling());
}

static void doorbell_wait(struct pvperf_vcpu *v)
{
	struct pollfd p = { .fd = v->doorbell_fd, .events = POLLIN };
	int64_t t0 = g_get_monotonic_time(), now = t0;
	uint64_t cpu0 = pv.verbose ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
	unsigned sleep_us = SLEEP_MIN_US;

	while (!doorbell_taken(&p) && now - t0 < DOORBELL_WAIT_US) {
		if (now - t0 < YIELD_US) {
			sched_yield();
		} else {
			g_usleep(sleep_us);
			sleep_us = MIN(sleep_us * 2, SLEEP_MAX_US);
		}
		now = g_get_monotonic_time();
	}
	if (pv.verbose)
		v->wait_cpu_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
}

void ring_doorbell(struct pvperf_vcpu *v, bool write)
{
	if (!write || doorbell_write(v->doorbell_fd))
		doorbell_wait(v);
}

/* The event's guest_perf_event.lost + 1 (the driver reports it). */
static void count_lost(const struct pvperf_sample_slot *sl)
{
	struct pvperf_guest_perf_event *e =
		guest_ram_block(sl->event_gpa, sizeof(*e));

	if (sl->event_gpa && e)
		__atomic_fetch_add(&e->lost, 1, __ATOMIC_RELAXED);
}

static void write_record(struct pvperf_sample_buf *buf, struct pvperf_ring *g,
			 const struct pvperf_sample_slot *sl,
			 const struct pvperf_proto_overflow *m)
{
	struct pvperf_sample rec = {
		.event_id = m->event_id,
		.mode = m->mode,
		.flags = (m->flags & PVPERF_PROTO_REGS) ? PVPERF_SAMPLE_REGS : 0,
		.ip = m->ip,
		.data_addr = m->data_addr,
		.period = sl->sample_period,
	};

	_Static_assert(sizeof(rec.regs) == sizeof(m->regs), "regs");
	if (m->flags & PVPERF_PROTO_REGS)
		memcpy(rec.regs, m->regs, sizeof(rec.regs));
	memcpy(&buf->rec[g->head % g->capacity], &rec, sizeof(rec));
	g->head++;
	__atomic_store_n(&buf->head, g->head, __ATOMIC_RELEASE);
}

/* The interrupt for the records up to head, unless one is outstanding;
 * PVPERF_PROTO_RANG if raised. */
static unsigned raise_irq(struct pvperf_vcpu *v, uint32_t tail, bool wait)
{
	struct pvperf_ring *g = &v->ring;
	int64_t now = g_get_monotonic_time();
	uint32_t unanswered = g->notified - tail;

	bool outstanding = g->notified_us && unanswered &&
			   unanswered <= g->capacity &&
			   now - g->notified_us < PVPERF_IRQ_RETRY_US;

	if (!outstanding) {
		g->notified = g->head;
		g->notified_us = now;
		doorbell_write(v->doorbell_fd);
	}
	if (wait)
		doorbell_wait(v);	/* the new one, or the outstanding one */
	return outstanding ? 0 : PVPERF_PROTO_RANG;
}

unsigned ring_deliver(unsigned vcpu, const struct pvperf_sample_slot *sl,
		      const struct pvperf_proto_overflow *m, bool wait)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_ring *g = &v->ring;
	struct pvperf_sample_buf *buf = guest_ram_block(g->gpa,
							ring_bytes(g->capacity));
	int64_t t0 = g_get_monotonic_time();
	uint32_t tail, used;
	unsigned out, rang;

	if (!buf)
		return 0;
	tail = __atomic_load_n(&buf->tail, __ATOMIC_ACQUIRE);
	used = g->head - tail;
	if (used >= g->capacity) {	/* full, or a tail the guest garbled */
		g->lost++;
		__atomic_store_n(&buf->lost, g->lost, __ATOMIC_RELAXED);
		count_lost(sl);
		out = PVPERF_PROTO_LOST;
	} else {
		write_record(buf, g, sl, m);
		used++;
		out = PVPERF_PROTO_WRITTEN;
	}
	if (quiet || ((sl->deliver_flags & PVPERF_DELIVER_BUFFERED) &&
		      used < g->watermark))
		return out;
	rang = raise_irq(v, tail, wait);
	if (wait)
		ring_note_wait(v, g_get_monotonic_time() - t0);
	return out | rang;
}

/* SYNC overflows whose wait the verbose report keeps, per vCPU. */
#define WAITS_KEPT	65536

void ring_note_wait(struct pvperf_vcpu *v, int64_t us)
{
	if (!pv.verbose || v->n_sync >= WAITS_KEPT)
		return;
	if (!v->sync_us)
		v->sync_us = g_new(uint32_t, WAITS_KEPT);
	v->sync_us[v->n_sync++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Verbose, at exit: overflow -> interrupt raised, for SYNC overflows. */
void ring_report(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	unsigned n = v->n_sync;

	if (!n)
		return;
	qsort(v->sync_us, n, sizeof(*v->sync_us), cmp_u32);
	pvperf_log("vcpu %u: %u SYNC overflows held the vCPU until their interrupt was raised: p50 %u us, p99 %u us, %" PRIu64 " us of its CPU each waiting (%s)\n",
		   vcpu, n, v->sync_us[n / 2], v->sync_us[(uint64_t)n * 99 / 100],
		   v->wait_cpu_ns / 1000 / n,
		   v->ring.gpa ? "plugin-written" :
		   v->doorbell_fd >= 0 ? "doorbell" : "service");
}
