/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * hcall.c - the pvperf hypercall: doorbell detection at translation, the
 * doorbell's memory callback, and the vCPU's connection to the service.
 *
 * A hypercall is the store `movl $PVPERF_DOORBELL_MAGIC, (%rax)` (exactly
 * PVPERF_DOORBELL_INSN_BYTES) at a kernel-half address, %rax pointing at
 * the caller's struct pvperf_hcall (pvperf_abi.h).  User-half code is
 * never instrumented for it: a user process cannot issue a hypercall.
 * The memory callback runs after the store (tcg-op.c emits it after the
 * qemu_st op) and gives us the block's physical address.
 *
 * Guest RAM is a memory-backend-file we mmap MAP_SHARED.  On the pc
 * machine the file offset equals the guest physical address below the
 * 3 GiB hole (2 GiB on q35), and pvperf only looks at the first 2 GiB.
 * QEMU 7.2's qemu_plugin_hwaddr_phys_addr() actually returns the RAM
 * block's ram_addr offset (plugins/api.c), which is the same number as
 * long as the backend is the first RAM block, as with -machine
 * memory-backend=; tests/test_plugin.py checks it.
 *
 * PVPERF_OP_FAULT is handled here, on the vCPU, without the service
 * (count.c).  Every other op, PROBE included, is forwarded on this vCPU's
 * own SOCK_SEQPACKET connection (pvperf_proto.h) and the vCPU waits for
 * the reply, at most PVPERF_PROTO_TIMEOUT_MS; the service writes ->ret
 * itself through its own mapping of guest RAM.  If the service is absent,
 * silent or broken, the plugin writes -ENODEV or -ETIMEDOUT into ->ret,
 * declares the service dead and fails every later hypercall at once with
 * -ENODEV: a vCPU never blocks forever.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pvperf.h"

#define GUEST_PAGE_SIZE 4096

static const uint8_t doorbell_bytes[PVPERF_DOORBELL_INSN_LEN] =
	PVPERF_DOORBELL_INSN_BYTES;

/* Memory-callback udata; lives in the TB arena (count.c). */
struct pvperf_doorbell {
	uint64_t insn_vaddr;
};

/* Set once by the first vCPU that finds the service gone; read by all. */
static int service_dead;

/*
 * plugin_exit may run while vCPUs still execute (exit() called from a vCPU
 * thread, e.g. isa-debug-exit).  A vCPU counts itself in `inflight` before
 * it touches guest RAM or its socket and checks `exiting`; plugin_exit
 * sets `exiting`, then unmaps and closes only once `inflight` drains.
 * Both are sequentially consistent so that one side always sees the other.
 */
static int inflight;
static int exiting;

static bool hcall_enter(void)
{
	__atomic_add_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&exiting, __ATOMIC_SEQ_CST))
		return true;
	__atomic_sub_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
	return false;
}

static void hcall_leave(void)
{
	__atomic_sub_fetch(&inflight, 1, __ATOMIC_SEQ_CST);
}

static void set_ret(struct pvperf_hcall *blk, int64_t ret)
{
	__atomic_store_n(&blk->ret, ret, __ATOMIC_RELAXED);
}

/* ---- the service connection (vCPU thread) ---- */

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

/* Non-blocking throughout: a full listen backlog must not block a vCPU. */
static int service_connect(void)
{
	struct sockaddr_un sa;
	socklen_t len = service_addr(&sa);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		close(fd);
		return -1;
	}
	return fd;
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

/*
 * Spin this long for the answer before sleeping in poll(): a wake-up costs
 * 5-30 us on these hosts, the service usually answers within that, and the
 * vCPU can do nothing else meanwhile.
 */
#define REPLY_SPIN_US	100

static int64_t recv_reply(int fd, struct pvperf_proto_reply *reply)
{
	int64_t now = g_get_monotonic_time();
	int64_t deadline = now + PVPERF_PROTO_TIMEOUT_MS * (int64_t)1000;
	int64_t spin_until = now + REPLY_SPIN_US;

	for (;;) {
		ssize_t r = recv(fd, reply, sizeof(*reply), MSG_DONTWAIT | MSG_TRUNC);
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

static int64_t exchange(struct pvperf_vcpu *v,
			const struct pvperf_proto_hcall *msg,
			struct pvperf_proto_reply *reply)
{
	if (v->fd < 0)
		v->fd = service_connect();
	if (v->fd < 0)
		return -ENODEV;
	if (send(v->fd, msg, sizeof(*msg), MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof(*msg))
		return -ENODEV;
	return recv_reply(v->fd, reply);
}

static void service_failed(struct pvperf_vcpu *v, unsigned vcpu, int64_t err)
{
	if (v->fd >= 0) {
		close(v->fd);
		v->fd = -1;
	}
	if (!__atomic_exchange_n(&service_dead, 1, __ATOMIC_SEQ_CST))
		pvperf_log("vcpu %u: service %s %s; hypercalls now fail with -ENODEV\n",
			   vcpu, pv.sock_path,
			   err == -ETIMEDOUT ? "timed out" : "unreachable");
}

/* Returns 0 if the service answered (and wrote ->ret), else -errno. */
static int64_t forward(unsigned vcpu, uint64_t gpa, uint64_t insn_vaddr)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	struct pvperf_proto_hcall msg = {
		.magic = PVPERF_PROTO_HCALL_MAGIC,
		.vcpu = vcpu,
		.block_gpa = gpa,
		.insn_vaddr = insn_vaddr,
	};
	struct pvperf_proto_reply reply;
	uint64_t counters[PVPERF_NR_COUNTERS];
	int64_t err;

	if (!pv.sock_path || __atomic_load_n(&service_dead, __ATOMIC_RELAXED))
		return -ENODEV;
	/* Held overflows retired (this is not their FAULT): send first, so
	 * the service sees them before this hypercall (one ordered socket). */
	sample_confirm_all(vcpu);
	_Static_assert(sizeof(counters) == sizeof(msg.counters), "counters");
	count_snapshot(vcpu, counters);
	memcpy(msg.counters, counters, sizeof(msg.counters));
	err = exchange(v, &msg, &reply);
	if (err) {
		service_failed(v, vcpu, err);
		return err;
	}
	sample_arm(vcpu, &reply);
	pvperf_request_mode(reply.flags & PVPERF_REPLY_SAMPLING ? MODE_SAMPLE :
			    reply.flags & PVPERF_REPLY_COUNTING ? MODE_COUNT :
			    MODE_OFF);
	return 0;
}

/*
 * An overflow (sample.c, on the vCPU thread, from an exec callback or a
 * hypercall): one datagram, and for a PVPERF_PROTO_SYNC one an (empty)
 * reply.  A full socket buffer means the service is behind: the sample
 * is lost (counted).
 */
void hcall_send_overflow(unsigned vcpu, const struct pvperf_proto_overflow *m)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	if (!pv.sock_path || __atomic_load_n(&service_dead, __ATOMIC_RELAXED) ||
	    !hcall_enter())
		return;
	if (v->fd < 0)
		v->fd = service_connect();
	if (v->fd < 0 || send(v->fd, m, sizeof(*m), MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof(*m)) {
		v->lost++;
		pvperf_guest_log(vcpu, "overflow message not sent (%" PRIu64 " lost)\n",
				 v->lost);
	} else if (m->flags & PVPERF_PROTO_SYNC) {
		/*
		 * Wait for the service's (empty) answer: for callchain events it
		 * has raised the NMI by then, so the guest takes it at the next
		 * TB boundary, still in the frame that overflowed.
		 */
		struct pvperf_proto_reply reply;
		int64_t err = recv_reply(v->fd, &reply);

		if (err)
			service_failed(v, vcpu, err);
	}
	hcall_leave();
}

/* ---- the doorbell (memory callback, vCPU thread) ---- */

static struct pvperf_hcall *block_at(unsigned vcpu, qemu_plugin_meminfo_t info,
				     uint64_t vaddr, uint64_t *gpa)
{
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);

	if (!hw || qemu_plugin_hwaddr_is_io(hw)) {
		pvperf_guest_log(vcpu, "doorbell to I/O memory at 0x%" PRIx64 "\n", vaddr);
		return NULL;
	}
	*gpa = qemu_plugin_hwaddr_phys_addr(hw);
	/* Aligned to its size, the block never straddles a page. */
	if (*gpa % PVPERF_HCALL_ALIGN ||
	    *gpa > pv.ram_size - sizeof(struct pvperf_hcall)) {
		pvperf_guest_log(vcpu, "bad hypercall block gpa 0x%" PRIx64 "\n", *gpa);
		return NULL;
	}
	return (struct pvperf_hcall *)(pv.ram + *gpa);
}

static void dispatch(unsigned vcpu, struct pvperf_hcall *blk, uint64_t gpa,
		     uint64_t insn_vaddr)
{
	struct pvperf_hcall h;
	int64_t ret;

	memcpy(&h, blk, sizeof(h));	/* read the guest's block once */
	if (h.op == PVPERF_OP_FAULT) {
		ret = h.nr == PVPERF_HC_PERF_OP ?
		      count_fault(vcpu, h.args[0], h.args[1]) : -ENOSYS;
		set_ret(blk, ret);
		return;
	}
	ret = forward(vcpu, gpa, insn_vaddr);
	if (ret)
		set_ret(blk, ret);
}

static void doorbell_mem(unsigned int vcpu, qemu_plugin_meminfo_t info,
			 uint64_t vaddr, void *udata)
{
	const struct pvperf_doorbell *db = udata;
	struct pvperf_hcall *blk;
	uint64_t gpa;

	if (vcpu >= pv.n_vcpus || !hcall_enter())
		return;
	blk = block_at(vcpu, info, vaddr, &gpa);
	if (blk)
		dispatch(vcpu, blk, gpa, db->insn_vaddr);
	hcall_leave();
}

/* ---- translation ---- */

bool hcall_is_doorbell(const uint8_t *bytes, size_t len)
{
	return len == PVPERF_DOORBELL_INSN_LEN &&
	       !memcmp(bytes, doorbell_bytes, PVPERF_DOORBELL_INSN_LEN);
}

static bool is_doorbell(struct qemu_plugin_insn *insn)
{
	return hcall_is_doorbell(qemu_plugin_insn_data(insn),
				 qemu_plugin_insn_size(insn));
}

/* tb_trans: instrument kernel-half doorbell stores, counting on or off. */
void hcall_tb(struct qemu_plugin_tb *tb, size_t n)
{
	if (!pv.ram || !vaddr_is_kernel(qemu_plugin_tb_vaddr(tb)))
		return;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		struct pvperf_doorbell *db;

		if (!is_doorbell(insn))
			continue;
		db = arena_alloc(sizeof(*db));
		db->insn_vaddr = qemu_plugin_insn_vaddr(insn);
		qemu_plugin_register_vcpu_mem_cb(insn, doorbell_mem,
						 QEMU_PLUGIN_CB_NO_REGS,
						 QEMU_PLUGIN_MEM_W, db);
	}
}

/* ---- setup and teardown ---- */

static int map_ram(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!pv.ram_size)
		pv.ram_size = st.st_size;
	if (pv.ram_size > (uint64_t)st.st_size) {
		pvperf_log("ramsize=%" PRIu64 " exceeds %s (%lld bytes)\n",
			   pv.ram_size, pv.ram_path, (long long)st.st_size);
		return -EINVAL;
	}
	if (pv.ram_size > PVPERF_MAX_RAM || pv.ram_size < GUEST_PAGE_SIZE) {
		pvperf_log("guest RAM of %" PRIu64 " bytes: pvperf needs 4 KiB..2 GiB"
			   " (pass ramsize= to use only the first 2 GiB)\n", pv.ram_size);
		return -EINVAL;
	}
	pv.ram = mmap(NULL, pv.ram_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pv.ram == MAP_FAILED) {
		pv.ram = NULL;
		return -errno;
	}
	return 0;
}

/* At install: map guest RAM (QEMU created the backend file before it
 * loads plugins: softmmu/vl.c qemu_create_late_backends). */
int hcall_init(void)
{
	int fd, err;

	if (!pv.ram_path) {
		if (pv.sock_path)
			pvperf_log("sock= without ram=: hypercalls are ignored\n");
		return 0;
	}
	fd = open(pv.ram_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		pvperf_log("ram=%s: %s\n", pv.ram_path, strerror(errno));
		return -1;
	}
	err = map_ram(fd);
	close(fd);
	if (err && err != -EINVAL)
		pvperf_log("ram=%s: %s\n", pv.ram_path, strerror(-err));
	return err ? -1 : 0;
}

/* vCPU exit callback: drop that vCPU's connection. */
void hcall_vcpu_exit(unsigned vcpu)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];

	if (v->fd >= 0) {
		close(v->fd);
		v->fd = -1;
	}
}

static bool drain_inflight(void)
{
	for (int i = 0; i < 100; i++) {
		if (!__atomic_load_n(&inflight, __ATOMIC_SEQ_CST))
			return true;
		g_usleep(1000);
	}
	return false;
}

void hcall_exit(void)
{
	__atomic_store_n(&exiting, 1, __ATOMIC_SEQ_CST);
	if (!drain_inflight()) {
		/* A vCPU is still waiting for the service: leave the mapping
		 * and sockets to the process teardown rather than pull them
		 * from under it. */
		return;
	}
	for (unsigned i = 0; i < pv.n_vcpus; i++)
		hcall_vcpu_exit(i);
	if (pv.ram)
		munmap(pv.ram, pv.ram_size);
	pv.ram = NULL;
}
