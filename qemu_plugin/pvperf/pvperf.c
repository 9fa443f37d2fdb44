/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pvperf.c - the pvperf TCG plugin for QEMU's system emulators of the
 * guest architectures in ../arch/targets.c (QEMU >= 10.0, plugin API
 * v4): exact per-vCPU retired instruction and branch counts,
 * overflow at the exact instruction, and the transport of pvperf
 * hypercalls from the guest kernel to the pvperf host service.
 *
 *   qemu-system-$TARGET ... \
 *     -object memory-backend-file,id=ram,size=1G,mem-path=/dev/shm/NAME,share=on \
 *     -machine memory-backend=ram \
 *     -plugin qemu_plugin/pvperf.so,sock=@NAME,ram=/dev/shm/NAME
 *
 * Options: sock=PATH (service socket, connected once per vCPU at install;
 * '@' = abstract namespace), ram=PATH
 * (the guest RAM file), ramsize=BYTES, count=on|off, verbose=on|off,
 * state_in=PATH and state_out=PATH (checkpoints: state.c);
 * the models': I1=, D1=, LL=SIZE,ASSOC,LINE (cachegrind's spelling),
 * iTLB=, dTLB=ENTRIES,ASSOC,PAGE, penalty_l1=, penalty_ll=, penalty_tlb=,
 * penalty_br=CYCLES (the timing model) and compat=on|off (user code only,
 * as cachegrind sees it).
 * See ../README.md for the design and the units.
 */
#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "core.h"
#include "counters.h"
#include "count.h"
#include "emu.h"
#include "guest.h"
#include "hcall.h"
#include "host_timer.h"
#include "instrument.h"
#include "link.h"
#include "model_config.h"
#include "models.h"
#include "ring.h"
#include "sample.h"
#include "state.h"
#include "targets.h"
#include "translate.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* ---- callbacks ---- */

/* The translation pipeline: translate.c. */
static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	translate_tb(tb);
}

/* Exclusive section (accel/tcg/tb-maint.c do_tb_flush): no TB is left. */
static void flush(qemu_plugin_id_t id)
{
	emu_flush();
	models_flush();
	count_flush();
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
	core_vcpu_init(vcpu);
	models_vcpu_init(vcpu);
	guest_regs_init();
	state_restore_vcpu(vcpu);
	emu_vcpu_init(vcpu);	/* from the counts restored */
}

static void vcpu_exit(qemu_plugin_id_t id, unsigned int vcpu)
{
	link_vcpu_exit(vcpu);
}

static void report(void)
{
	for (unsigned i = 0; i < pv.n_vcpus && i < (unsigned)qemu_plugin_num_vcpus(); i++) {
		uint64_t c[PVPERF_NR_INLINE_COUNTERS];

		counters_inline(i, c);

		pvperf_log("vcpu %u: insn k=%" PRIu64 " u=%" PRIu64
			   " branch k=%" PRIu64 " u=%" PRIu64 "\n", i,
			   c[PVPERF_CTR_INSN_KERNEL], c[PVPERF_CTR_INSN_USER],
			   c[PVPERF_CTR_BRANCH_KERNEL], c[PVPERF_CTR_BRANCH_USER]);
		ring_report(i);
	}
}

/*
 * atexit.  Runs in the thread that called exit(), possibly while other
 * vCPUs still run: the arena, tables and decoder handles may be in use
 * by them and are left to the process teardown; guest RAM is unmapped
 * and the sockets closed only once no hypercall is in flight.
 */
static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	host_timer_exit();	/* its waiter writes guest RAM */
	if (pv.verbose)
		report();
	if (pv.state_out)
		state_save(pv.state_out);
	if (link_exit())
		guest_ram_exit();
}

static void register_callbacks(qemu_plugin_id_t id)
{
	qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
	qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
	qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
	qemu_plugin_register_flush_cb(id, flush);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
}

/* Inside an instrumentation switch's exclusive section: the host-time
 * checks and the countdowns (which pace them) start afresh, the packed
 * counts (core.h) from 0 (no kernel chunk folds them while sampling). */
static void instrumentation_settled(void)
{
	emu_settled();
	for (unsigned i = 0; i < pv.n_vcpus && i < (unsigned)qemu_plugin_num_vcpus(); i++) {
		counters_fold(i);
		sample_update_room(i);
	}
	models_flush();
	if (pv.verbose)
		pvperf_log("counting %s%s%s%s\n", instrument_counting() ? "on" : "off",
			   instrument_branches() ? ", branches" : "",
			   instrument_sampling() ? ", sampling" : "",
			   (const char *[]){ "", ", frame registers",
					     ", all registers" }[instrument_capture()]);
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
	} else if (!strcmp(key, "state_in") || !strcmp(key, "state_out")) {
		ok = *val != '\0';
		*(key[6] == 'i' ? &pv.state_in : &pv.state_out) = g_strdup(val);
	} else if (!strcmp(key, "verbose")) {
		ok = qemu_plugin_bool_parse(key, val, &pv.verbose);
	} else {
		int r = model_config_option(key, val);

		if (r)
			return r > 0 ? 0 : -1;	/* logged there */
		pvperf_log("unknown option '%s' (known: sock, ram, ramsize, count, "
			   "verbose, state_in, state_out, I1, D1, LL, iTLB, dTLB, penalty_l1, "
			   "penalty_ll, penalty_tlb, penalty_br, compat)\n", key);
		return -1;
	}
	if (!ok)
		pvperf_log("bad value in option '%s'\n", arg);
	return ok ? 0 : -1;
}

/* Sampling's countdown paces the host-time checks (emu.c). */
static const struct sample_pacer host_time_pacer = {
	.room = emu_host_time_room,
	.run = emu_host_time_check,
};

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	uint32_t reply_flags = 0;

	if (!info->system_emulation) {
		pvperf_log("needs system emulation (qemu-system-%s), not user"
			   " mode\n", info->target_name);
		return -1;
	}
	pv.arch = arch_of_target(info->target_name);
	if (!pv.arch) {
		pvperf_log("cannot run on target %s: pvperf knows %s\n",
			   info->target_name, known_targets());
		return -1;
	}
	pv.id = id;
	for (int i = 0; i < argc; i++) {
		if (parse_option(argv[i]))
			return -1;
	}
	if (core_init(info->system.max_vcpus)) {
		pvperf_log("cannot size per-vCPU state\n");
		return -1;
	}
	if (!counters_init(pv.n_vcpus)) {
		pvperf_log("%u vCPUs: at most %u\n", pv.n_vcpus,
			   COUNTERS_MAX_VCPUS);
		return -1;
	}
	count_init();
	models_init(pv.n_vcpus);
	emu_init(pv.n_vcpus);
	if (pv.ram_path && !host_timer_init(pv.n_vcpus))
		pvperf_log("no host-time timer thread: host-time sampling "
			   "uses the countdown\n");
	sample_init(&host_time_pacer);
	if (pv.ram_path && guest_ram_init(pv.ram_path, &pv.ram_size))
		return -1;
	if (!pv.ram_path && pv.sock_path)
		pvperf_log("sock= without ram=: hypercalls are ignored\n");
	if (pv.state_in && state_load(pv.state_in, &reply_flags))
		return -1;
	link_init();
	instrument_init(id, pv.state_in ? reply_instrumentation(reply_flags) :
		  pv.count_at_start ? INSTRUMENT_COUNT | INSTRUMENT_BRANCHES : INSTRUMENT_NONE,
		  register_callbacks, instrumentation_settled);
	register_callbacks(id);
	if (pv.verbose)
		pvperf_log("%u vCPU(s), counting %s, service %s\n", pv.n_vcpus,
			   pv.count_at_start ? "on" : "off",
			   pv.sock_path ? pv.sock_path : "none");
	return 0;
}
