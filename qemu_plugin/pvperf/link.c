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
 * ivshmem-doorbell vector (pvperf_proto.h, PVPERF_REPLY_RING), and then
 * the vCPU's sample ring: from then on the plugin delivers the samples
 * itself (ring.c) and overflow messages only tell the service.  Without
 * the ring, the answer to a SYNC overflow says whether to write the
 * doorbell, and the vCPU waits until QEMU's main loop has taken it.
 *
 * Exit.  plugin_exit may run while vCPUs still execute (exit() called
 * from a vCPU thread, e.g. isa-debug-exit).  A vCPU counts itself in
 * `inflight` before it touches guest RAM or its socket and checks
 * `exiting`; link_exit sets `exiting` and reports whether `inflight`
 * drained, so that the caller unmaps and closes only then.  Both are
 * sequentially consistent so that one side always sees the other.
 */
#include <errno.h>
#include <glib.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core.h"
#include "link.h"
#include "ring.h"

/* Set once by the first vCPU that finds the service gone; read by all. */
static int service_dead;
static int inflight;
static int exiting;
/*
 * The longest a hypercall waited for the service's answer, any vCPU
 * (atomic max; verbose report): how close a host with more vCPUs than
 * cores, whose service threads wait for a core, comes to the timeout.
 */
static int64_t hcall_wait_max_us;

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

static void note_hcall_wait(int64_t us)
{
	int64_t seen = __atomic_load_n(&hcall_wait_max_us, __ATOMIC_RELAXED);

	while (us > seen &&
	       !__atomic_compare_exchange_n(&hcall_wait_max_us, &seen, us, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* A hypercall to the service.  0: it answered (and wrote ->ret). */
int64_t link_exchange(unsigned vcpu, const struct pvperf_proto_hcall *msg,
		      struct pvperf_proto_reply *reply)
{
	int fd;
	int64_t err = -ENODEV, t0 = g_get_monotonic_time();

	if (!link_usable())
		return -ENODEV;
	fd = vcpu_socket(&pv.vcpu[vcpu]);
	if (fd >= 0 && send(fd, msg, sizeof(*msg), MSG_NOSIGNAL | MSG_DONTWAIT) ==
	    (ssize_t)sizeof(*msg))
		err = recv_reply(fd, reply, &pv.vcpu[vcpu]);
	if (err)
		service_failed(vcpu, err);
	else if (pv.verbose)
		note_hcall_wait(g_get_monotonic_time() - t0);
	return err;
}

/*
 * Flow control: every PVPERF_OVERFLOW_CREDIT-th overflow of a vCPU is sent
 * PVPERF_PROTO_SYNC, whatever its slot says.  A vCPU overflowing faster
 * than the service takes messages and QEMU raises interrupts (perf record
 * -c 1000: ~10^5 overflows per second) would otherwise fill the socket
 * buffer and then the guest's sample ring (~400 records), and samples
 * would be lost.  The answer comes once the service has handled every
 * earlier message of this vCPU, and the vCPU goes on once the interrupt
 * that drains the ring is raised, so neither ever holds much more than
 * this many.
 */
#define PVPERF_OVERFLOW_CREDIT	64

bool link_credit_spent(unsigned vcpu)
{
	return ++pv.vcpu[vcpu].unanswered >= PVPERF_OVERFLOW_CREDIT;
}

/*
 * An overflow (sample.c, on the vCPU thread): one datagram, and for a
 * PVPERF_PROTO_SYNC one the (empty) answer.  For a sample the service
 * writes (no _WRITTEN or _LOST), that answer comes once it has written
 * the record and the interrupt is due or raised, and the vCPU goes on
 * once it is raised (ring.c), so that the guest takes it at the next TB
 * boundary, still in the frame that overflowed.  A full socket buffer
 * means the service is behind: the message is lost (counted).
 */
void link_send_overflow(unsigned vcpu, const struct pvperf_proto_overflow *m)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_proto_reply reply;
	bool delivered = m->flags & (PVPERF_PROTO_WRITTEN | PVPERF_PROTO_LOST);
	int64_t err, t0 = g_get_monotonic_time();
	int fd;

	if (!link_usable() || !link_enter())
		return;
	fd = vcpu_socket(v);
	if (fd < 0 || send(fd, m, sizeof(*m), MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof(*m)) {
		v->lost++;
		pvperf_guest_log(vcpu, "overflow message not sent (%" PRIu64 " lost)\n",
				 v->lost);
	} else if (m->flags & PVPERF_PROTO_SYNC) {
		v->unanswered = 0;
		err = recv_reply(fd, &reply, v);
		if (err)
			service_failed(vcpu, err);
		else if (!delivered)
			ring_doorbell(v, reply.flags & PVPERF_REPLY_RING);
		if (!delivered)
			ring_note_wait(v, g_get_monotonic_time() - t0);
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
	if (pv.verbose)
		pvperf_log("hypercalls waited for the service %" PRId64 " us at the longest (timeout %d ms)\n",
			   __atomic_load_n(&hcall_wait_max_us, __ATOMIC_RELAXED),
			   PVPERF_PROTO_TIMEOUT_MS);
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
