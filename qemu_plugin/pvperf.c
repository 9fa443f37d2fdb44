/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvperf.c - the pvperf TCG plugin for qemu-system-x86_64 (QEMU 7.2):
 * exact per-vCPU retired instruction and branch counts, and the transport
 * of pvperf hypercalls from the guest kernel to the pvperf host service.
 *
 *   qemu-system-x86_64 ... \
 *     -object memory-backend-file,id=ram,size=1G,mem-path=/dev/shm/NAME,share=on \
 *     -machine memory-backend=ram \
 *     -plugin qemu_plugin/pvperf.so,sock=@NAME,ram=/dev/shm/NAME
 *
 * Options: sock=PATH (service socket; '@' = abstract namespace), ram=PATH
 * (the guest RAM file), ramsize=BYTES, count=on|off, verbose=on|off.
 * See README.md for the design; pvperf.h for the file layout.
 */
#include <errno.h>
#include <glib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "pvperf.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* Guest-triggerable log lines allowed per vCPU (habit: rate-limit). */
#define GUEST_LOG_BUDGET 16

struct pvperf_state pv;

/*
 * Counting on/off, switched at the service's request (PVPERF_REPLY_COUNTING)
 * by qemu_plugin_reset(), which flushes every TB inside an exclusive
 * section and unregisters all our callbacks (plugins/loader.c
 * plugin_flush_destroy); reset_done() re-registers them.  QEMU 7.2.18
 * fixed a double lock in that path (plugin_reset_destroy), so older 7.2
 * builds deadlock on the second reset.
 *
 * counting_desired: what the service asked for last.  Written by any vCPU
 *   thread in a doorbell callback, read in reset_done; atomic.
 * counting_applied: what tb_trans instruments and count_fault assumes.
 *   Written only in reset_done, inside the exclusive section (no vCPU runs,
 *   no TB is being translated), so every TB in the code cache agrees with
 *   it; read (atomically) by tb_trans and the FAULT handler.
 * reset_pending: a reset is in flight.  QEMU ignores a second
 *   qemu_plugin_reset while one is pending, so a request that finds one
 *   pending only updates counting_desired, which reset_done reads when it
 *   finally runs.  Set by the requesting vCPU thread, cleared in
 *   reset_done; atomic.
 *
 * Why counts stay exact across a switch: the service turns counting on at
 * an event's OPEN and off after the last CLOSE, and an event counts only
 * between its ENABLE and DISABLE, which are later hypercalls.  QEMU enters
 * the exclusive section as soon as the current TB ends (every vCPU is
 * kicked out of its TB chain first), so the flush happens before this vCPU
 * runs another TB, and any later hypercall runs in a TB translated with
 * the new setting.  Only the rest of the doorbell's own TB runs with the
 * old instrumentation: the guest must not put two hypercalls in one TB
 * (any branch ends a TB; the driver's hypercall helper returns with ret).
 * Per-vCPU counters are never reset, the service works with differences.
 */
static int counting_desired;	/* enum pvperf_mode */
static int counting_applied;	/* enum pvperf_mode */
static int reset_pending;

void pvperf_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("pvperf: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Log something a guest can trigger at will: verbose only, rate-limited. */
void pvperf_guest_log(unsigned vcpu, const char *fmt, ...)
{
	struct pvperf_vcpu *v = &pv.vcpu[vcpu];
	va_list ap;

	if (!pv.verbose || !v->log_budget)
		return;
	v->log_budget--;
	va_start(ap, fmt);
	fprintf(stderr, "pvperf: vcpu %u: ", vcpu);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (!v->log_budget)
		fprintf(stderr, "pvperf: vcpu %u: further guest errors not logged\n", vcpu);
}

bool pvperf_counting(void)
{
	return __atomic_load_n(&counting_applied, __ATOMIC_RELAXED) != MODE_OFF;
}

bool pvperf_sampling(void)
{
	return __atomic_load_n(&counting_applied, __ATOMIC_RELAXED) == MODE_SAMPLE;
}

/* ---- callbacks ---- */

static void register_callbacks(qemu_plugin_id_t id);

/* Exclusive section, all our callbacks gone: apply the latest request. */
static void reset_done(qemu_plugin_id_t id)
{
	int want = __atomic_load_n(&counting_desired, __ATOMIC_SEQ_CST);

	/*
	 * No TB is left, so no inline add runs any more: fold them for good
	 * (callbacks may own the counters from now on) and let the sampling
	 * fast path see the counters as they really are.
	 */
	count_fold();
	for (unsigned i = 0; i < pv.n_vcpus; i++)
		sample_update_room(i);
	__atomic_store_n(&counting_applied, want, __ATOMIC_SEQ_CST);
	register_callbacks(id);
	__atomic_store_n(&reset_pending, 0, __ATOMIC_SEQ_CST);
	if (pv.verbose)
		pvperf_log("counting %s\n", want == MODE_SAMPLE ? "on, sampling" :
			   want ? "on" : "off");
}

/*
 * Retranslate everything in the current mode (count.c, when two TBs
 * disagree on what a faulting instruction would take back).  Any thread.
 */
void pvperf_request_flush(void)
{
	if (__atomic_exchange_n(&reset_pending, 1, __ATOMIC_SEQ_CST))
		return;		/* the pending reset flushes too */
	qemu_plugin_reset(pv.id, reset_done);
}

/* Doorbell callback (vCPU thread): the service's reply flags. */
void pvperf_request_mode(enum pvperf_mode mode)
{
	__atomic_store_n(&counting_desired, mode, __ATOMIC_SEQ_CST);
	if ((int)mode == __atomic_load_n(&counting_applied, __ATOMIC_SEQ_CST))
		return;
	pvperf_request_flush();	/* reset_done applies counting_desired */
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	hcall_tb(tb, n);
	if (pvperf_counting())
		count_tb(tb, n);
}

/* Exclusive section (accel/tcg/tb-maint.c do_tb_flush): no TB is left. */
static void flush(qemu_plugin_id_t id)
{
	count_flush();
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
	pv.vcpu[vcpu].log_budget = GUEST_LOG_BUDGET;
}

static void vcpu_exit(qemu_plugin_id_t id, unsigned int vcpu)
{
	hcall_vcpu_exit(vcpu);
}

static void report(void)
{
	count_fold();
	for (unsigned i = 0; i < pv.n_vcpus; i++) {
		const uint64_t *c = pv.vcpu[i].ctr;

		pvperf_log("vcpu %u: insn k=%" PRIu64 " u=%" PRIu64
			   " branch k=%" PRIu64 " u=%" PRIu64 "\n", i,
			   c[PVPERF_CTR_INSN_KERNEL], c[PVPERF_CTR_INSN_USER],
			   c[PVPERF_CTR_BRANCH_KERNEL], c[PVPERF_CTR_BRANCH_USER]);
	}
}

/*
 * atexit.  Runs in the thread that called exit(), possibly while other
 * vCPUs still run: the arena, branch sets and capstone handles may be in
 * use by them and are left to the process teardown; hcall_exit() closes
 * sockets and unmaps guest RAM once no hypercall is in flight.
 */
static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	if (pv.verbose)
		report();
	hcall_exit();
}

static void register_callbacks(qemu_plugin_id_t id)
{
	qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
	qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
	qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
	qemu_plugin_register_flush_cb(id, flush);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
}

/* ---- options ---- */

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!*s || *s == '-')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 0);
	return !errno && !*end;
}

static bool sock_path_ok(const char *path)
{
	struct sockaddr_un sa;

	/* A filesystem path needs its NUL; an abstract name ('@...') not. */
	return path[0] && strlen(path) <= sizeof(sa.sun_path) - (path[0] != '@');
}

static int parse_option(const char *arg)
{
	g_auto(GStrv) kv = g_strsplit(arg, "=", 2);
	const char *key = kv[0], *val = kv[1];
	bool ok;

	if (!val) {
		pvperf_log("option '%s' needs a value (name=value)\n", arg);
		return -1;
	}
	if (!strcmp(key, "sock")) {
		ok = sock_path_ok(val);
		pv.sock_path = g_strdup(val);
	} else if (!strcmp(key, "ram")) {
		ok = *val != '\0';
		pv.ram_path = g_strdup(val);
	} else if (!strcmp(key, "ramsize")) {
		ok = parse_u64(val, &pv.ram_size) && pv.ram_size;
	} else if (!strcmp(key, "count")) {
		ok = qemu_plugin_bool_parse(key, val, &pv.count_at_start);
	} else if (!strcmp(key, "verbose")) {
		ok = qemu_plugin_bool_parse(key, val, &pv.verbose);
	} else {
		pvperf_log("unknown option '%s' (known: sock, ram, ramsize, count, verbose)\n",
			   key);
		return -1;
	}
	if (!ok)
		pvperf_log("bad value in option '%s'\n", arg);
	return ok ? 0 : -1;
}

static int setup_vcpus(void)
{
	int n = qemu_plugin_n_max_vcpus();

	if (n < 1)
		return -1;
	pv.n_vcpus = n;
	pv.use_inline = n == 1;
	pv.vcpu = g_aligned_alloc0(n, sizeof(*pv.vcpu), 64);
	for (int i = 0; i < n; i++) {
		pv.vcpu[i].fd = -1;
		pv.vcpu[i].log_budget = GUEST_LOG_BUDGET;
		pv.vcpu[i].prng = 0x9e3779b97f4a7c15ULL * (i + 1);
	}
	return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	if (!info->system_emulation || strcmp(info->target_name, "x86_64")) {
		pvperf_log("needs qemu-system-x86_64 (got %s%s)\n",
			   info->target_name,
			   info->system_emulation ? "" : " user mode");
		return -1;
	}
	pv.id = id;
	for (int i = 0; i < argc; i++) {
		if (parse_option(argv[i]))
			return -1;
	}
	if (setup_vcpus()) {
		pvperf_log("cannot size per-vCPU state\n");
		return -1;
	}
	count_init();
	if (hcall_init())
		return -1;
	counting_desired = counting_applied =
		pv.count_at_start ? MODE_COUNT : MODE_OFF;
	register_callbacks(id);
	if (pv.verbose)
		pvperf_log("%u vCPU(s), %s counting, counting %s, service %s\n",
			   pv.n_vcpus, pv.use_inline ? "inline" : "callback",
			   pv.count_at_start ? "on" : "off",
			   pv.sock_path ? pv.sock_path : "none");
	return 0;
}
