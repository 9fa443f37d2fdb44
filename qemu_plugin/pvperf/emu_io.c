/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emu_io.c - the host time of device emulation, charged to the device
 * access that caused it.  Only while host time is instrumented
 * (INSTRUMENT_HOST_TIME: domain cycles or emu-host-ns sampling); nothing
 * is registered otherwise.
 *
 * emu.c reads the vCPU thread's clock at points and charges each interval
 * to the point's guest pc.  A device access runs the device model on the
 * vCPU thread inside one guest instruction (a virtio kick starts a whole
 * request there), so without a point right after it, that time lands at
 * the next point: the next periodic check or hypercall, often in another
 * function.  Here each device access gets two points:
 *
 *   before  an exec callback on the instruction reads the clock and
 *           charges nothing: the interval up to it (the guest's own
 *           work, whatever ran since the last point) stays with the next
 *           ordinary point, as if the device time had not passed
 *           (charging it here gave the kick 23.5 % of the guest's
 *           domain cycles samples where pvperf profile saw 11.7 %);
 *   after   the interval from there, the device emulation, is charged to
 *           the instruction:
 *           - MMIO: QEMU 10.0.2 runs an MMIO access that is not its TB's
 *             last instruction again alone in a CF_MEMI_ONLY TB
 *             (accel/tcg/translate-all.c cpu_io_recompile: io_prepare
 *             calls it before the device is touched), where only memory
 *             callbacks run, after the access completes; every TB of one
 *             instruction gets a memory callback that charges when the
 *             access was to I/O memory (qemu_plugin_hwaddr_is_io);
 *           - an MMIO access that is its TB's last instruction, and port
 *             I/O (which always ends its TB: translator_io_start): an
 *             exec callback at the start of the TB that begins right
 *             after the instruction charges, if the vCPU's last point was
 *             that instruction's "before" (else another point came in
 *             between, an interrupt's, and took the time).
 *
 * Which instructions access devices: port I/O by its bytes at translation
 * (arch.h is_port_io); MMIO is learned at run time, in the CF_MEMI_ONLY
 * TB's memory callback (the first time, nothing is charged there, and a
 * flush is requested so that TBs holding it get their "before"
 * callback).  Instructions are keyed by guest physical
 * address (TBs are PC-relative: one TB serves every process mapping the
 * page), and charged at the pc the vCPU runs them at (sample.c's
 * runtime_delta).  Round-robin TCG: the vCPU index QEMU passes selects
 * the state, as for emu.c's points.
 */
#include <glib.h>

#include "arena.h"
#include "core.h"
#include "emu_io.h"
#include "guest.h"
#include "instrument.h"

#define KEY_GPA		(1ULL << 48)	/* above user vaddrs, below kernel */
#define KEY_NONE	0

/* A device instruction (or the code after one) as translated. */
struct io_site {
	uint64_t key;		/* code key of the device instruction */
	uint64_t vaddr;		/* its translated address */
	uint64_t tb_vaddr;	/* its TB's */
	uint64_t len;		/* its length */
	bool kernel;
	bool known;		/* a learned device instruction at translation */
	int reported;		/* learned here already (atomic) */
};

/* The last "before" point of each vCPU; touched only by its thread. */
static struct io_pending {
	uint64_t key;		/* KEY_NONE: none */
	uint64_t ip;		/* the runtime pc charged */
	uint64_t ns_at;		/* emu_point_ns() at it: no point since */
	uint64_t before;	/* the thread's CPU time at it */
	bool kernel;
} __attribute__((aligned(64))) *pend;

/*
 * Learned device instructions and the code keys right after each.
 * io_lock protects both tables; taken at translation only (never on a
 * callback of running code: those push what they learn onto `learned`,
 * a lock-free stack drained at translation).
 */
static GMutex io_lock;
static GHashTable *io_insns;	/* key -> 1 */
static GHashTable *io_next;	/* key after a device insn -> its key */

struct learned {
	uint64_t key, len;
	struct learned *next;
};
static struct learned *learned;	/* atomic: pushed by callbacks */

/* emu.c's points (set once at install). */
static void (*emu_charge_device)(unsigned vcpu, bool kernel, uint64_t ip,
				 uint64_t since);
static uint64_t (*emu_point_ns)(unsigned vcpu);
static uint64_t (*emu_now_ns)(void);

void emu_io_init(unsigned n_vcpus,
		 void (*charge_device)(unsigned vcpu, bool kernel, uint64_t ip,
				       uint64_t since),
		 uint64_t (*point_ns)(unsigned vcpu), uint64_t (*now_ns)(void))
{
	emu_charge_device = charge_device;
	emu_point_ns = point_ns;
	emu_now_ns = now_ns;
	pend = g_aligned_alloc0(n_vcpus, sizeof(*pend), 64);
	io_insns = g_hash_table_new(g_direct_hash, g_direct_equal);
	io_next = g_hash_table_new(g_direct_hash, g_direct_equal);
}

static uint64_t insn_key(const struct qemu_plugin_insn *insn)
{
	uint64_t gpa = guest_insn_gpa(insn);

	return gpa != GPA_NONE ? gpa | KEY_GPA : qemu_plugin_insn_vaddr(insn);
}

/* key + len: the code right after, if on the same page.  io_lock held. */
static void add_device_insn(uint64_t key, uint64_t len)
{
	g_hash_table_add(io_insns, (gpointer)(uintptr_t)key);
	if (((key + len) ^ key) < GUEST_PAGE_SIZE)
		g_hash_table_insert(io_next, (gpointer)(uintptr_t)(key + len),
				    (gpointer)(uintptr_t)key);
}

/* io_lock held. */
static void drain_learned(void)
{
	struct learned *l = __atomic_exchange_n(&learned, NULL,
						__ATOMIC_ACQUIRE), *next;

	for (; l; l = next) {
		next = l->next;
		add_device_insn(l->key, l->len);
		g_free(l);
	}
}

/* The pc this execution runs the instruction at (TBs are PC-relative). */
static uint64_t runtime_ip(const struct io_site *s)
{
	return s->vaddr + guest_runtime_delta(s->tb_vaddr, s->kernel);
}

/* ---- callbacks ---- */

/* Before a device instruction: the clock, nothing charged (the guest's
 * work up to here stays with the next ordinary point). */
static void io_before(unsigned vcpu, void *udata)
{
	const struct io_site *s = udata;
	struct io_pending *p = &pend[vcpu];

	p->ip = runtime_ip(s);
	p->kernel = s->kernel;
	p->key = s->key;
	p->ns_at = emu_point_ns(vcpu);
	p->before = emu_now_ns();
}

/* The device emulation, if this instruction's "before" was the vCPU's
 * last reading (no other point since); else nothing: the time lands at
 * the next point, as without these points. */
static void charge_after(unsigned vcpu, uint64_t key)
{
	struct io_pending *p = &pend[vcpu];

	if (p->key == key && p->ns_at == emu_point_ns(vcpu))
		emu_charge_device(vcpu, p->kernel, p->ip, p->before);
	p->key = KEY_NONE;
}

/* After each memory access of a TB of one instruction (a CF_MEMI_ONLY
 * TB's run after the access completed). */
static void io_after_mem(unsigned vcpu, qemu_plugin_meminfo_t info,
			 uint64_t vaddr, void *udata)
{
	struct io_site *s = udata;
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	struct learned *l;

	if (!hw || !qemu_plugin_hwaddr_is_io(hw))
		return;
	charge_after(vcpu, s->key);
	if (s->known || __atomic_exchange_n(&s->reported, 1, __ATOMIC_RELAXED))
		return;
	/* Rare (once per device instruction and translation): the TBs that
	 * hold it get their "before" callback when retranslated. */
	l = g_new(struct learned, 1);
	l->key = s->key;
	l->len = s->len;
	l->next = __atomic_load_n(&learned, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&learned, &l->next, l, true,
					    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	instrument_request_flush();
}

/* At the start of the TB right after a device instruction. */
static void io_after_exec(unsigned vcpu, void *udata)
{
	const struct io_site *s = udata;

	charge_after(vcpu, s->key);
}

/* ---- translation ---- */

static struct io_site *io_site(struct qemu_plugin_insn *insn, uint64_t key,
			       uint64_t tb_vaddr, bool kernel)
{
	struct io_site *s = arena_alloc(sizeof(*s));

	s->key = key;
	s->vaddr = qemu_plugin_insn_vaddr(insn);
	s->tb_vaddr = tb_vaddr;
	s->len = qemu_plugin_insn_size(insn);
	s->kernel = kernel;
	s->known = false;
	s->reported = 0;
	return s;
}

static bool is_port_io(struct qemu_plugin_insn *insn)
{
	uint8_t bytes[INSN_MAX_BYTES];
	size_t len;

	if (!pv.arch->is_port_io)
		return false;
	len = qemu_plugin_insn_data(insn, bytes, sizeof(bytes));
	return pv.arch->is_port_io(bytes, len);
}

/* io_lock held. */
static void instrument_insn(struct qemu_plugin_insn *insn, uint64_t tb_vaddr,
			    size_t n, bool kernel)
{
	uint64_t key = insn_key(insn);
	bool known = g_hash_table_contains(io_insns, (gpointer)(uintptr_t)key);
	struct io_site *s;

	if (!known && is_port_io(insn)) {
		add_device_insn(key, qemu_plugin_insn_size(insn));
		known = true;
	}
	if (!known && n != 1)
		return;
	s = io_site(insn, key, tb_vaddr, kernel);
	s->known = known;
	if (known)
		qemu_plugin_register_vcpu_insn_exec_cb(insn, io_before,
			QEMU_PLUGIN_CB_R_REGS, s);
	if (n == 1)
		qemu_plugin_register_vcpu_mem_cb(insn, io_after_mem,
			QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_MEM_RW, s);
}

void emu_io_tb(struct qemu_plugin_tb *tb, size_t n, bool kernel)
{
	uint64_t tb_vaddr = qemu_plugin_tb_vaddr(tb);
	struct qemu_plugin_insn *first;
	gpointer before;

	if (!n)
		return;
	first = qemu_plugin_tb_get_insn(tb, 0);
	g_mutex_lock(&io_lock);
	drain_learned();
	/* First: before emu.c's periodic check at this TB's start. */
	before = g_hash_table_lookup(io_next,
				     (gpointer)(uintptr_t)insn_key(first));
	if (before) {
		struct io_site *s = io_site(first, (uintptr_t)before, tb_vaddr,
					    kernel);

		qemu_plugin_register_vcpu_tb_exec_cb(tb, io_after_exec,
			QEMU_PLUGIN_CB_R_REGS, s);
	}
	for (size_t i = 0; i < n; i++)
		instrument_insn(qemu_plugin_tb_get_insn(tb, i), tb_vaddr, n,
				kernel);
	g_mutex_unlock(&io_lock);
}
