/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap.c - pvperf-rmap.so, a TCG plugin for qemu-system-* (QEMU 10.0,
 * plugin API v4) that records what QEMU's own -jitdump lacks for mapping
 * host samples in the code cache back to guest code and guest processes.
 *
 *   qemu-system-ARCH ... -jitdump -plugin qemu_plugin/pvperf-rmap.so,out=F
 *
 * Options:
 *   out=PATH          the record file (format: rmap_format.h); required
 *   task=PATH:TGID:COMM:MM:PGD:LINEAR
 *                     how to name the task an address-space switch goes to
 *                     (numbers hex or decimal, from the guest kernel's BTF
 *                     and System.map: pyhost/profile/kernel_layout.py and
 *                     the architecture's pyhost/arch file): PATH offsets
 *                     O1/O2/... from the architecture's task register to
 *                     the task switched to (v = *(v + O1), ...: this
 *                     CPU's rq->curr, by the arch's way), TGID/COMM/MM
 *                     offsets in task_struct, PGD the offset in mm_struct,
 *                     LINEAR the linear map's base (a table's physical
 *                     address is pgd - base) or @ADDR where the kernel
 *                     keeps it (@ a variable's address).  Without it
 *                     switch records carry RMAP_NO_PID.
 *   counts=on|off     count each TB's executions (an inline add at its
 *                     start: counts.c) and write them at exit, for the
 *                     translation table's guest instructions per function
 *   verbose=on|off    a summary on stderr at exit
 *
 * Division of labour.  QEMU writes one jitdump JIT_CODE_LOAD record per TB
 * (tcg/perf.c perf_report_code, called by tb_gen_code after the host code
 * is generated and before the TB is linked): host code address and size,
 * the guest vaddr as the name "guest-0x...", the translating thread and a
 * CLOCK_MONOTONIC time.  This plugin adds, at translation only:
 *   - per TB: guest vaddr, instruction sizes and bytes (the symbolizer
 *     checks them against ELF bytes, which keeps apart two processes'
 *     different code at one user vaddr), kernel/user, the page-table base of the
 *     translating vCPU, the translating thread and the time;
 *   - the code-cache flushes (their time; addresses are reused after);
 *   - each vCPU's host thread id (host perf samples carry the tid).
 * pyhost/profile/rmap.py joins a TB record with the jitdump record of the same
 * thread and vaddr that follows it (translation on one thread is serial).
 * Nothing of this runs when TBs execute (but counts=on's inline adds).
 *
 * The one execution-time hook: system-mode TBs may be PC-relative
 * (CF_PCREL), so a TB translated while process A ran a shared page also
 * serves process B that maps the page elsewhere, and the translation-time
 * vaddr names A's address space.  To know whose code a sample ran, the
 * plugin gives pyhost a per-vCPU timeline of address spaces: at
 * translation it looks for the instruction that writes the page-table
 * base in kernel TBs (the architecture's decoder, arch.h) and registers
 * a QEMU_PLUGIN_CB_R_REGS callback on that instruction only.  It runs
 * once per address-space switch, reads the source register (the value
 * about to be written) and, with task=, the task the CPU switches to:
 * this CPU's rq->curr, reached by the architecture's path (__schedule
 * sets rq->curr = next before context_switch; at exec it is current),
 * accepted only if that task's mm->pgd is the table written.
 *
 * Contexts: tb_trans on vCPU threads (concurrently under MTTCG); the switch
 * callback on the executing vCPU thread; vcpu_init on the vCPU's thread
 * (async_run_on_cpu); flush in an exclusive section (every vCPU stopped);
 * plugin_exit in the thread calling exit(), possibly while vCPUs still
 * run.  rm.lock protects rm.obuf, rm.sites and the plain counters; the
 * switch callback takes no lock: it writes its record with one write(2) on
 * the O_APPEND file descriptor (whole records never interleave) and bumps
 * atomic counters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <qemu-plugin.h>

#include "aspace.h"
#include "counts.h"
#include "out.h"
#include "targets.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static __thread GByteArray *tb_rec;	/* the TB record being built */

/* ---- translation ---- */

static uint32_t tb_code_bytes(struct qemu_plugin_tb *tb, size_t n)
{
	uint32_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += qemu_plugin_insn_size(qemu_plugin_tb_get_insn(tb, i));
	return total;
}

/* The TB's record into `rec`; hooks its page-table base writes on the way. */
static void build_tb_record(struct qemu_plugin_tb *tb, size_t n,
			    GByteArray *rec)
{
	uint32_t n_bytes = tb_code_bytes(tb, n);
	uint32_t size = (sizeof(struct rmap_rec_header) +
			 sizeof(struct rmap_tb) + n + n_bytes + 7) & ~7u;
	struct rmap_rec_header *h;
	struct rmap_tb *r;
	uint8_t *sizes, *code;

	g_byte_array_set_size(rec, size);
	memset(rec->data, 0, size);
	h = (void *)rec->data;
	r = (void *)(h + 1);
	sizes = (uint8_t *)(r + 1);
	code = sizes + n;
	*h = rec_header(RMAP_REC_TB, size);
	r->guestpc = qemu_plugin_tb_vaddr(tb);
	r->tid = gettid();
	r->n_insns = n;
	r->n_bytes = n_bytes;
	r->flags = r->guestpc >= rm.arch->kernel_start ? RMAP_TB_KERNEL : 0;
	if (translation_page_table(&r->page_table_base))
		r->flags |= RMAP_TB_BASE_VALID;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		size_t len = qemu_plugin_insn_data(insn, code,
						   qemu_plugin_insn_size(insn));

		sizes[i] = len;
		if (r->flags & RMAP_TB_KERNEL)
			hook_aspace_write(insn, code, len);
		code += len;
	}
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	GByteArray *rec = thread_buf(&tb_rec);
	const struct rmap_rec_header *h;
	const struct rmap_tb *r;

	if (!n)
		return;
	build_tb_record(tb, n, rec);
	h = (const void *)rec->data;
	r = (const void *)(h + 1);
	g_mutex_lock(&rm.lock);
	rm.n_tbs++;
	rm.n_tb_no_base += !(r->flags & RMAP_TB_BASE_VALID);
	if (rm.counts && !rm.closing)	/* its index: TB records before it */
		counts_hook_tb(tb, rm.n_tb_recs);
	rm.n_tb_recs += !rm.closing;
	obuf_append(rec->data, rec->len);
	rm.trans_ns += now_ns() - h->monotonic_ns;	/* the record's start */
	g_mutex_unlock(&rm.lock);
}

/* Exclusive section (accel/tcg/tb-maint.c do_tb_flush, after
 * tcg_region_reset_all): code-cache addresses are free for reuse now. */
static void flush(qemu_plugin_id_t id)
{
	struct rmap_rec_header h = rec_header(RMAP_REC_FLUSH, sizeof(h));

	g_mutex_lock(&rm.lock);
	rm.n_flushes++;
	obuf_append(&h, sizeof(h));
	obuf_drain();
	g_mutex_unlock(&rm.lock);
}

/* ---- vCPUs ---- */

/* On the vCPU's own thread (plugins/core.c runs it with
 * async_run_on_cpu), so gettid() is the thread host samples name. */
static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu_index)
{
	struct {
		struct rmap_rec_header h;
		struct rmap_vcpu v;
	} rec = {
		.h = rec_header(RMAP_REC_VCPU, sizeof(rec)),
		.v = { .vcpu = vcpu_index, .tid = gettid() },
	};

	g_mutex_lock(&rm.lock);
	if (!g_atomic_int_get(&rm.have_regs))
		find_registers();
	rm.n_vcpus++;
	obuf_append(&rec, sizeof(rec));
	obuf_drain();
	g_mutex_unlock(&rm.lock);
}

/* ---- exit ---- */

static void print_summary(void)
{
	rmap_log("%" PRIu64 " TBs (%" PRIu64 " without a page-table base), %"
		 PRIu64 " flushes, %" PRIu64 " vCPUs, %u address-space switch "
		 "sites, %" PRIu64 " switches (%" PRIu64 " named, %" PRIu64
		 " unnamed, %"
		 PRIu64 " unread), %" PRIu64 " write errors; %.3f s in "
		 "tb_trans, %.3f s in switch callbacks\n",
		 rm.n_tbs, rm.n_tb_no_base, rm.n_flushes, rm.n_vcpus,
		 g_hash_table_size(rm.sites),
		 __atomic_load_n(&rm.n_aspace_writes, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_named, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_unnamed, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_reg_errors, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_write_errors, __ATOMIC_RELAXED),
		 rm.trans_ns / 1e9,
		 __atomic_load_n(&rm.aspace_ns, __ATOMIC_RELAXED) / 1e9);
}

/* atexit.  vCPUs may still run: TBs translated from now on are not
 * recorded (rm.closing); switch records still go straight to the file. */
static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	g_mutex_lock(&rm.lock);
	if (!rm.closing) {
		if (rm.counts)
			counts_write(rm.n_tb_recs);
		obuf_drain();
		rm.closing = true;
		if (rm.verbose)
			print_summary();
	}
	g_mutex_unlock(&rm.lock);
}

/* ---- options and install ---- */

static bool parse_number(const char *s, uint64_t *val)
{
	char *end;

	if (!*s)
		return false;
	errno = 0;
	*val = g_ascii_strtoull(s, &end, 0);
	return !errno && *end == '\0';
}

/* PATH of task=: O1/O2/... */
static bool parse_path(const char *val, struct task_layout *t)
{
	g_auto(GStrv) f = g_strsplit(val, "/", 0);

	t->n_path = g_strv_length(f);
	if (!t->n_path || t->n_path > TASK_PATH_MAX)
		return false;
	for (unsigned i = 0; i < t->n_path; i++) {
		if (!parse_number(f[i], &t->path[i]))
			return false;
	}
	return true;
}

/* task=PATH:TGID:COMM:MM:PGD:LINEAR (see the top of this file) */
static bool parse_task(const char *val)
{
	g_auto(GStrv) f = g_strsplit(val, ":", 0);
	struct task_layout *t = &rm.task;
	const char *linear;

	if (g_strv_length(f) != 6 || !parse_path(f[0], t) ||
	    !parse_number(f[1], &t->tgid) || !parse_number(f[2], &t->comm) ||
	    !parse_number(f[3], &t->mm) || !parse_number(f[4], &t->pgd))
		return false;
	linear = f[5];
	t->linear_indirect = *linear == '@';
	if (!parse_number(linear + t->linear_indirect, &t->linear))
		return false;
	t->valid = true;
	return true;
}

static int parse_option(const char *arg)
{
	g_auto(GStrv) kv = g_strsplit(arg, "=", 2);
	const char *key = kv[0], *val = kv[1];
	bool ok;

	if (!val) {
		rmap_log("option '%s' needs a value (name=value)\n", arg);
		return -1;
	}
	if (!strcmp(key, "out")) {
		ok = *val != '\0';
		rm.out_path = g_strdup(val);
	} else if (!strcmp(key, "task")) {
		ok = parse_task(val);
	} else if (!strcmp(key, "counts")) {
		ok = qemu_plugin_bool_parse(key, val, &rm.counts);
	} else if (!strcmp(key, "verbose")) {
		ok = qemu_plugin_bool_parse(key, val, &rm.verbose);
	} else {
		rmap_log("unknown option '%s' (known: out, task, counts, verbose)\n",
			 key);
		return -1;
	}
	if (!ok)
		rmap_log("bad value in option '%s'\n", arg);
	return ok ? 0 : -1;
}

static int open_output(void)
{
	struct rmap_file_header fh = {
		.version = RMAP_VERSION,
		.header_size = sizeof(fh),
		.flags = (rm.task.valid ? RMAP_FILE_TASKS : 0) |
			 (rm.counts ? RMAP_FILE_COUNTS : 0),
		.max_vcpus = rm.max_vcpus,
	};

	memcpy(fh.magic, RMAP_MAGIC, sizeof(fh.magic));
	rm.fd = open(rm.out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND |
		     O_CLOEXEC, 0600);
	if (rm.fd < 0) {
		rmap_log("cannot open out=%s: %s\n", rm.out_path,
			 strerror(errno));
		return -1;
	}
	write_all(&fh, sizeof(fh));
	return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	if (!info->system_emulation || !(rm.arch = arch_of_target(info->target_name))) {
		rmap_log("cannot run on target %s: needs system emulation of %s\n",
			 info->target_name, known_targets());
		return -1;
	}
	for (int i = 0; i < argc; i++) {
		if (parse_option(argv[i]))
			return -1;
	}
	if (!rm.out_path) {
		rmap_log("option out=PATH is required\n");
		return -1;
	}
	rm.max_vcpus = info->system.max_vcpus;
	rm.obuf = g_byte_array_sized_new(OBUF_FLUSH + 4096);
	rm.sites = g_hash_table_new(g_int64_hash, g_int64_equal);
	g_mutex_init(&rm.lock);
	if (open_output())
		return -1;
	qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
	qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
	qemu_plugin_register_flush_cb(id, flush);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
	return 0;
}
