/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * link.c - the vCPU's connection to the pvperf host service.
 *
 * One SOCK_SEQPACKET connection per vCPU, used only by that vCPU's thread.
 * All are opened at install (link_init), before any vCPU runs: pvperf then
 * removes the service's socket and its private directory, so that nothing
 * is left to connect to; a vCPU whose connect failed there tries once more
 * at its first message.  A hypercall is one message and
 * one reply, which the vCPU waits for at most PVPERF_PROTO_TIMEOUT_MS; an
 * overflow is one message and, for PVPERF_PROTO_SYNC ones, an empty reply.
 * If the service is absent, silent or broken, the first vCPU to notice
 * declares it dead and every later hypercall fails at once with -ENODEV:
 * a vCPU never blocks forever.  Sockets are non-blocking throughout (a
 * full listen backlog must not block a vCPU in connect).
 *
 * Doorbell.  A reply may carry, by SCM_RIGHTS, the eventfd of this vCPU's
 * ivshmem-doorbell vector (pvperf_proto.h, PVPERF_REPLY_RING): the answer
 * to a SYNC overflow then says whether to write it, and the vCPU waits
 * until QEMU's main loop has taken it, so that the interrupt is raised
 * before the vCPU goes on, with no further trip through the service.
 *
 * Exit.  plugin_exit may run while vCPUs still execute (exit() called
 * from a vCPU thread, e.g. isa-debug-exit).  A vCPU counts itself in
 * `inflight` before it touches guest RAM or its socket and checks
 * `exiting`; link_exit sets `exiting` and reports whether `inflight`
 * drained, so that the caller unmaps and closes only then.  Both are
 * sequentially consistent so that one side always sees the other.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "core.h"
#include "link.h"

/* Set once by the first vCPU that finds the service gone; read by all. */
static int service_dead;
static int inflight;
static int exiting;

/*
 * Spin this long for the answer before sleeping in poll(): a wake-up costs
 * 5-30 us on these hosts, the service usually answers within that, and the
 * vCPU can do nothing else meanwhile.
 */
#define REPLY_SPIN_US	100

bool link_enter(void)
{
	__atomic_add_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&exiting, __ATOMIC_SEQ_CST))
		return true;
	__atomic_sub_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
	return false;
}

void link_leave(void)
{
	__atomic_sub_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
}

static bool link_usable(void)
{
	return pv.sock_path && !__atomic_load_n(&service_dead, __ATOMIC_RELAXED);
}

static socklen_t service_addr(struct sockaddr_un *sa)
{
	const char *path = pv.sock_path;
	size_t len = strlen(path);

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, len);	/* length checked at install */
	if (path[0] == '@')			/* Linux abstract namespace */
		sa->sun_path[0] = '\0';
	return offsetof(struct sockaddr_un, sun_path) + len + (path[0] != '@');
}

static int vcpu_socket(struct pvperf_vcpu *v)
{
	struct sockaddr_un sa;
	socklen_t len;
	int fd;

	if (v->fd >= 0)
		return v->fd;
	len = service_addr(&sa);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, len) < 0) {
		close(fd);
		fd = -1;
	}
	return v->fd = fd;
}

/* At install, in QEMU's main thread: connect every vCPU now. */
void link_init(void)
{
	if (!pv.sock_path)
		return;
	for (unsigned i = 0; i < pv.n_vcpus; i++) {
		if (vcpu_socket(&pv.vcpu[i]) < 0) {
			pvperf_log("vcpu %u: cannot connect to the service %s: %s\n",
				   i, pv.sock_path, strerror(errno));
			return;
		}
	}
}

static int64_t wait_readable(int fd, int64_t deadline_us)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (;;) {
		int64_t left_us = deadline_us - g_get_monotonic_time();
		int r;

		if (left_us <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((left_us + 999) / 1000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -ENODEV;
	}
}

/* A descriptor passed with the reply: the vCPU's doorbell (see top). */
static void take_doorbell(struct pvperf_vcpu *v, struct msghdr *mh)
{
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	int fd;

	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)))
		return;
	memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	if (v->doorbell_fd >= 0)
		close(v->doorbell_fd);
	v->doorbell_fd = fd;
}

static ssize_t recv_one(int fd, struct pvperf_proto_reply *reply,
			struct pvperf_vcpu *v)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = reply, .iov_len = sizeof(*reply) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);

	if (r >= 0 && mh.msg_controllen)
		take_doorbell(v, &mh);
	return r;
}

static int64_t recv_reply(int fd, struct pvperf_proto_reply *reply,
			  struct pvperf_vcpu *v)
{
	int64_t now = g_get_monotonic_time();
	int64_t deadline = now + PVPERF_PROTO_TIMEOUT_MS * (int64_t)1000;
	int64_t spin_until = now + REPLY_SPIN_US;

	for (;;) {
		ssize_t r = recv_one(fd, reply, v);
		int64_t err;

		if (r == sizeof(*reply))
			return reply->magic == PVPERF_PROTO_REPLY_MAGIC ? 0 : -ENODEV;
		if (r >= 0 || (errno != EAGAIN && errno != EINTR))
			return -ENODEV;		/* EOF, bad size, error */
		if (g_get_monotonic_time() < spin_until) {
			__builtin_ia32_pause();
			continue;
		}
		err = wait_readable(fd, deadline);
		if (err)
			return err;
	}
}

static void service_failed(unsigned vcpu, int64_t err)
{
	link_vcpu_exit(vcpu);
	if (!__atomic_exchange_n(&service_dead, 1, __ATOMIC_SEQ_CST))
		pvperf_log("vcpu %u: service %s %s; hypercalls now fail with -ENODEV\n",
			   vcpu, pv.sock_path,
			   err == -ETIMEDOUT ? "timed out" : "unreachable");
}

/* A hypercall to the service.  0: it answered (and wrote ->ret). */
int64_t link_exchange(unsigned vcpu, const struct pvperf_proto_hcall *msg,
		      struct pvperf_proto_reply *reply)
{
	int fd;
	int64_t err = -ENODEV;

	if (!link_usable())
		return -ENODEV;
	fd = vcpu_socket(&pv.vcpu[vcpu]);
	if (fd >= 0 && send(fd, msg, sizeof(*msg), MSG_NOSIGNAL | MSG_DONTWAIT) ==
	    (ssize_t)sizeof(*msg))
		err = recv_reply(fd, reply, &pv.vcpu[vcpu]);
	if (err)
		service_failed(vcpu, err);
	return err;
}

/* SYNC overflows whose wait the verbose report keeps, per vCPU. */
#define LINK_WAITS	65536

static void note_sync(struct pvperf_vcpu *v, int64_t us)
{
	if (!pv.verbose || v->n_sync >= LINK_WAITS)
		return;
	if (!v->sync_us)
		v->sync_us = g_new(uint32_t, LINK_WAITS);
	v->sync_us[v->n_sync++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Verbose, at exit: overflow -> interrupt raised, for SYNC overflows. */
void link_report(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	unsigned n = v->n_sync;

	if (!n)
		return;
	qsort(v->sync_us, n, sizeof(*v->sync_us), cmp_u32);
	pvperf_log("vcpu %u: %u SYNC overflows held the vCPU until their interrupt was raised: p50 %u us, p99 %u us (%s)\n",
		   vcpu, n, v->sync_us[n / 2], v->sync_us[(uint64_t)n * 99 / 100],
		   v->doorbell_fd >= 0 ? "doorbell" : "service");
}

/*
 * How long a vCPU waits for QEMU's main loop to take its doorbell: a
 * late interrupt costs a callchain's accuracy, never correctness.
 */
#define DOORBELL_WAIT_US	100000

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

/*
 * After a SYNC overflow's answer: write the doorbell if the service says
 * an interrupt is due, then wait until QEMU has raised it: its main loop
 * has read the eventfd and is back in its poll.  Yield, never spin: the
 * main loop needs a CPU, and on a small host this thread holds one.
 */
static void ring_doorbell(struct pvperf_vcpu *v, uint32_t reply_flags)
{
	struct pollfd p = { .fd = v->doorbell_fd, .events = POLLIN };
	uint64_t one = 1;
	int64_t deadline;

	if (v->doorbell_fd < 0)
		return;
	if ((reply_flags & PVPERF_REPLY_RING) &&
	    write(v->doorbell_fd, &one, sizeof(one)) != sizeof(one))
		return;
	deadline = g_get_monotonic_time() + DOORBELL_WAIT_US;
	while (poll(&p, 1, 0) > 0 && g_get_monotonic_time() < deadline)
		sched_yield();
	while (!main_loop_polling() && g_get_monotonic_time() < deadline)
		sched_yield();
}

/*
 * Flow control: every PVPERF_OVERFLOW_CREDIT-th overflow of a vCPU is sent
 * PVPERF_PROTO_SYNC, whatever its slot says.  A vCPU overflowing faster
 * than the service writes records and QEMU raises NMIs (perf record -c
 * 1000: ~10^5 overflows per second) would otherwise fill the socket
 * buffer and then the guest's sample ring (~400 records), and samples
 * would be lost.  The answer comes once the service has handled every
 * earlier message of this vCPU and the NMI that drains the ring is
 * raised, so neither ever holds much more than this many.
 */
#define PVPERF_OVERFLOW_CREDIT	64

/*
 * An overflow (sample.c, on the vCPU thread): one datagram, and for a
 * PVPERF_PROTO_SYNC one the (empty) answer, given once the service has
 * raised the NMI, so that the guest takes it at the next TB boundary,
 * still in the frame that overflowed.  A full socket buffer means the
 * service is behind: the sample is lost (counted).
 */
void link_send_overflow(unsigned vcpu, const struct pvperf_proto_overflow *m)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_proto_overflow msg = *m;
	struct pvperf_proto_reply reply;
	int64_t err, t0 = g_get_monotonic_time();
	int fd;

	if (!link_usable() || !link_enter())
		return;
	if (++v->unanswered >= PVPERF_OVERFLOW_CREDIT)
		msg.flags |= PVPERF_PROTO_SYNC;
	fd = vcpu_socket(v);
	if (fd < 0 || send(fd, &msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof(msg)) {
		v->lost++;
		pvperf_guest_log(vcpu, "overflow message not sent (%" PRIu64 " lost)\n",
				 v->lost);
	} else if (msg.flags & PVPERF_PROTO_SYNC) {
		v->unanswered = 0;
		err = recv_reply(fd, &reply, v);
		if (err)
			service_failed(vcpu, err);
		else
			ring_doorbell(v, reply.flags);
		note_sync(v, g_get_monotonic_time() - t0);
	}
	link_leave();
}

/* vCPU exit callback, or a failed service: drop that vCPU's connection. */
void link_vcpu_exit(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	if (v->fd >= 0) {
		close(v->fd);
		v->fd = -1;
	}
	if (v->doorbell_fd >= 0) {
		close(v->doorbell_fd);
		v->doorbell_fd = -1;
	}
}

/*
 * atexit: stop new messages and wait for those in flight.  False if a
 * vCPU is still waiting for the service: then the caller leaves guest
 * RAM and the sockets to the process teardown.
 */
bool link_exit(void)
{
	__atomic_store_n(&exiting, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 100; i++) {
		if (!__atomic_load_n(&inflight, __ATOMIC_SEQ_CST)) {
			for (unsigned c = 0; c < pv.n_vcpus; c++)
				link_vcpu_exit(c);
			return true;
		}
		g_usleep(1000);
	}
	return false;
}
