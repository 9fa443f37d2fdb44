/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap.c - pvperf-rmap.so, a TCG plugin for qemu-system-x86_64 (QEMU 10.0,
 * plugin API v4) that records what QEMU's own -jitdump lacks for mapping
 * host samples in the code cache back to guest code and guest processes.
 *
 *   qemu-system-x86_64 ... -jitdump -plugin qemu_plugin/pvperf-rmap.so,out=F
 *
 * Options:
 *   out=PATH          the record file (format: rmap_format.h); required
 *   task=CURR:TGID:COMM:MM:PGD:POB
 *                     how to name the task a CR3 write switches to (hex or
 *                     decimal, from the guest kernel's BTF and System.map,
 *                     see pyhost/profile/kernel_layout.py): CURR the per-cpu offset
 *                     of runqueues.curr, TGID/COMM/MM offsets in
 *                     task_struct, PGD the offset in mm_struct, POB the
 *                     address of page_offset_base.  Without it CR3 records
 *                     carry RMAP_NO_PID.
 *   verbose=on|off    a summary on stderr at exit
 *
 * Division of labour.  QEMU writes one jitdump JIT_CODE_LOAD record per TB
 * (tcg/perf.c perf_report_code, called by tb_gen_code after the host code
 * is generated and before the TB is linked): host code address and size,
 * the guest vaddr as the name "guest-0x...", the translating thread and a
 * CLOCK_MONOTONIC time.  This plugin adds, at translation only:
 *   - per TB: guest vaddr, instruction sizes and bytes (the symbolizer
 *     checks them against ELF bytes, which keeps apart two processes'
 *     different code at one user vaddr), kernel/user, the CR3 of the
 *     translating vCPU, the translating thread and the time;
 *   - the code-cache flushes (their time; addresses are reused after);
 *   - each vCPU's host thread id (host perf samples carry the tid).
 * pyhost/profile/rmap.py joins a TB record with the jitdump record of the same
 * thread and vaddr that follows it (translation on one thread is serial).
 * Nothing of this runs when TBs execute.
 *
 * The one execution-time hook: x86 system-mode TBs are PC-relative
 * (CF_PCREL), so a TB translated while process A ran a shared page also
 * serves process B that maps the page elsewhere, and the translation-time
 * vaddr names A's address space.  To know whose code a sample ran, the
 * plugin gives pyhost a per-vCPU timeline of address spaces: at
 * translation it looks for `mov %reg,%cr3` in kernel TBs (a hand decoder
 * below: one opcode) and registers a QEMU_PLUGIN_CB_R_REGS callback on
 * that instruction only.  It runs once per address-space switch (in Linux
 * 6.1: switch_mm_irqs_off, exec, temporary mms and TLB flushes that
 * reload CR3), reads the source register (the value about to be written)
 * and, with task=, the task the CPU switches to: runqueues.curr of this
 * CPU (__schedule sets rq->curr = next before context_switch; at exec it
 * is current), accepted only if that task's mm->pgd is the CR3 written.
 *
 * Contexts: tb_trans on vCPU threads (concurrently under MTTCG); the CR3
 * callback on the executing vCPU thread; vcpu_init on the vCPU's thread
 * (async_run_on_cpu); flush in an exclusive section (every vCPU stopped);
 * plugin_exit in the thread calling exit(), possibly while vCPUs still
 * run.  rm.lock protects rm.obuf, rm.sites and the plain counters; the
 * CR3 callback takes no lock: it writes its record with one write(2) on
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

#include "pvperf_abi.h"
#include "rmap_format.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* CR3 bits 12..51: the top-level table; below are PCID/PWT/PCD, above
 * the no-flush bit 63 (and LAM bits in later CPUs). */
#define CR3_ADDR_MASK	0x000ffffffffff000ULL
#define OBUF_FLUSH	(64 * 1024)
#define N_GPRS		16

/* GPR names in the gdb register list, in x86 encoding order (ModRM.rm
 * with REX.B), which is not the gdb order (rax, rbx, rcx, ...). */
static const char *const gpr_names[N_GPRS] = {
	"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
};

/* Where the kernel keeps the running task and its address space. */
struct task_layout {
	bool valid;
	uint64_t curr;		/* per-cpu offset of runqueues.curr */
	uint64_t tgid, comm, mm;	/* offsets in task_struct */
	uint64_t pgd;		/* offset in mm_struct */
	uint64_t page_offset_base;	/* its address */
};

/* One `mov %reg,%cr3` in guest kernel code: the callback's udata. */
struct cr3_site {
	uint64_t guestpc;
	unsigned gpr;
};

static struct {
	int fd;
	const char *out_path;
	bool verbose;
	unsigned max_vcpus;
	struct task_layout task;
	/* Register handles: set once, at the first vcpu_init (every vCPU
	 * has the same gdb register list); read without the lock after. */
	struct qemu_plugin_register *gpr[N_GPRS], *cr3, *gs_base;
	gint have_regs;			/* atomic: handles are set */
	/* Everything below but the atomics: rm.lock. */
	GMutex lock;
	GByteArray *obuf;
	GHashTable *sites;		/* guestpc -> struct cr3_site */
	bool closing;
	uint64_t n_tbs, n_tb_no_cr3, n_flushes, n_vcpus;
	uint64_t trans_ns;		/* time spent in tb_trans */
	uint64_t n_cr3_writes, n_named, n_unnamed, n_reg_errors;  /* atomic */
	uint64_t n_write_errors, cr3_ns;			  /* atomic */
} rm = { .fd = -1 };

static __thread GByteArray *scratch;	/* register and memory reads */
static __thread GByteArray *tb_rec;	/* the TB record being built */

static void rmap_log(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static void rmap_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("pvperf-rmap: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void count(uint64_t *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

static GByteArray *thread_buf(GByteArray **buf)
{
	if (!*buf)
		*buf = g_byte_array_new();
	return *buf;
}

/* ---- output ---- */

/* Any thread, no lock: one write(2) per call on an O_APPEND descriptor,
 * so a whole record lands in one piece between other threads' records
 * (a partial write only happens on a full disk). */
static void write_all(const void *buf, size_t n)
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
static void obuf_drain(void)
{
	write_all(rm.obuf->data, rm.obuf->len);
	g_byte_array_set_size(rm.obuf, 0);
}

/* rm.lock */
static void obuf_append(const void *rec, size_t size)
{
	if (rm.closing)
		return;
	g_byte_array_append(rm.obuf, rec, size);
	if (rm.obuf->len >= OBUF_FLUSH)
		obuf_drain();
}

static struct rmap_rec_header rec_header(uint16_t type, size_t size)
{
	return (struct rmap_rec_header){ .type = type, .size = size,
					 .monotonic_ns = now_ns() };
}

/* ---- reading guest state (vCPU thread, current_cpu set) ---- */

static bool read_reg(struct qemu_plugin_register *reg, uint64_t *val)
{
	GByteArray *buf = thread_buf(&scratch);

	g_byte_array_set_size(buf, 0);
	if (!reg || qemu_plugin_read_register(reg, buf) != 8)
		return false;
	memcpy(val, buf->data, 8);	/* target order: little-endian */
	return true;
}

static bool read_guest(uint64_t vaddr, void *out, size_t len)
{
	GByteArray *buf = thread_buf(&scratch);

	if (!qemu_plugin_read_memory_vaddr(vaddr, buf, len))
		return false;
	memcpy(out, buf->data, len);
	return true;
}

static bool read_guest_u64(uint64_t vaddr, uint64_t *val)
{
	return read_guest(vaddr, val, sizeof(*val));
}

/*
 * The task this CPU switches to, if its address space is `cr3`: the
 * CPU's runqueues.curr (kernel GS base = this CPU's per-cpu base).  A
 * kernel thread borrowing an mm, or a temporary mm (text_poke), fails
 * the mm->pgd check and stays unnamed.
 */
static bool name_task(uint64_t cr3, struct rmap_cr3 *c)
{
	const struct task_layout *t = &rm.task;
	uint64_t gs, task, mm, pgd, pob;
	uint32_t tgid;

	if (!read_reg(rm.gs_base, &gs) ||
	    !read_guest_u64(gs + t->curr, &task) || !task ||
	    !read_guest_u64(task + t->mm, &mm) || !mm ||
	    !read_guest_u64(mm + t->pgd, &pgd) ||
	    !read_guest_u64(t->page_offset_base, &pob) ||
	    ((pgd - pob) & CR3_ADDR_MASK) != cr3 ||
	    !read_guest(task + t->tgid, &tgid, sizeof(tgid)) ||
	    !read_guest(task + t->comm, c->comm, sizeof(c->comm)))
		return false;
	c->tgid = tgid;
	return true;
}

/* ---- the CR3 timeline (execution time, rare) ---- */

static void cr3_write(unsigned int vcpu_index, void *udata)
{
	const struct cr3_site *site = udata;
	struct {
		struct rmap_rec_header h;
		struct rmap_cr3 c;
	} rec = {
		.h = rec_header(RMAP_REC_CR3, sizeof(rec)),
		.c = { .guestpc = site->guestpc, .vcpu = vcpu_index,
		       .tgid = RMAP_NO_PID },
	};
	uint64_t val;

	count(&rm.n_cr3_writes);
	if (!read_reg(rm.gpr[site->gpr], &val)) {
		count(&rm.n_reg_errors);
		return;
	}
	rec.c.cr3 = val & CR3_ADDR_MASK;
	if (rm.task.valid) {
		if (name_task(rec.c.cr3, &rec.c)) {
			count(&rm.n_named);
		} else {
			memset(rec.c.comm, 0, sizeof(rec.c.comm));
			count(&rm.n_unnamed);
		}
	}
	write_all(&rec, sizeof(rec));
	__atomic_add_fetch(&rm.cr3_ns, now_ns() - rec.h.monotonic_ns,
			   __ATOMIC_RELAXED);
}

static bool is_legacy_prefix(uint8_t b)
{
	switch (b) {
	case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:
	case 0x66: case 0x67: case 0xf2: case 0xf3:
		return true;
	}
	return false;
}

/*
 * The GPR (x86 encoding number, 0..15) that the 64-bit instruction in
 * code[0..len) moves into CR3, or -1: [prefixes] [REX] 0F 22 /r with
 * ModRM.reg == 3 (the mod bits are ignored: the source is always a
 * register).  REX.R would make it CR11 and LOCK (F0) CR8+reg on AMD.
 */
static int mov_to_cr3_gpr(const uint8_t *code, size_t len)
{
	size_t i = 0;
	uint8_t rex = 0, modrm;

	while (i < len && is_legacy_prefix(code[i]))
		i++;
	if (i < len && (code[i] & 0xf0) == 0x40)
		rex = code[i++];
	if (i + 3 > len || code[i] != 0x0f || code[i + 1] != 0x22)
		return -1;
	modrm = code[i + 2];
	if (((modrm >> 3) & 7) != 3 || (rex & 0x4))
		return -1;
	return (modrm & 7) | ((rex & 0x1) << 3);
}

/*
 * rm.lock: the interned site for a mov to CR3 at guestpc (a kernel TB is
 * translated again after every flush).  Sites are never freed: TBs in the
 * code cache hold them; new code at the same address (a module reloaded)
 * gets a new site.
 */
static struct cr3_site *cr3_site(uint64_t guestpc, unsigned gpr)
{
	struct cr3_site *s = g_hash_table_lookup(rm.sites, &guestpc);

	if (!s || s->gpr != gpr) {
		s = g_new(struct cr3_site, 1);
		s->guestpc = guestpc;
		s->gpr = gpr;
		g_hash_table_insert(rm.sites, &s->guestpc, s);
	}
	return s;
}

static void hook_cr3_write(struct qemu_plugin_insn *insn, const uint8_t *code,
			   size_t len)
{
	int gpr = mov_to_cr3_gpr(code, len);
	struct cr3_site *site;

	if (gpr < 0 || !g_atomic_int_get(&rm.have_regs))
		return;
	g_mutex_lock(&rm.lock);
	site = cr3_site(qemu_plugin_insn_vaddr(insn), gpr);
	g_mutex_unlock(&rm.lock);
	qemu_plugin_register_vcpu_insn_exec_cb(insn, cr3_write,
					       QEMU_PLUGIN_CB_R_REGS, site);
}

/* ---- translation ---- */

/*
 * The CR3 of the translating vCPU.  QEMU 10.0's qemu_plugin_read_register
 * only asserts current_cpu (plugins/api.c), which tb_trans has; a QEMU
 * that restricts it to R_REGS callbacks makes this fail, and pyhost then
 * takes the CR3 from the timeline instead.
 */
static bool translation_cr3(uint64_t *cr3)
{
	uint64_t val;

	if (!g_atomic_int_get(&rm.have_regs) || !read_reg(rm.cr3, &val))
		return false;
	*cr3 = val & CR3_ADDR_MASK;
	return true;
}

static uint32_t tb_code_bytes(struct qemu_plugin_tb *tb, size_t n)
{
	uint32_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += qemu_plugin_insn_size(qemu_plugin_tb_get_insn(tb, i));
	return total;
}

/* The TB's record into `rec`; hooks its CR3 writes on the way. */
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
	r->flags = r->guestpc >= PVPERF_KERNEL_HALF_START ? RMAP_TB_KERNEL : 0;
	if (translation_cr3(&r->cr3))
		r->flags |= RMAP_TB_CR3_VALID;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		size_t len = qemu_plugin_insn_data(insn, code,
						   qemu_plugin_insn_size(insn));

		sizes[i] = len;
		if (r->flags & RMAP_TB_KERNEL)
			hook_cr3_write(insn, code, len);
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
	rm.n_tb_no_cr3 += !(r->flags & RMAP_TB_CR3_VALID);
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

/* rm.lock: the handles of the registers the plugin reads. */
static void find_registers(void)
{
	g_autoptr(GArray) regs = qemu_plugin_get_registers();

	for (guint i = 0; i < regs->len; i++) {
		qemu_plugin_reg_descriptor *d =
			&g_array_index(regs, qemu_plugin_reg_descriptor, i);

		for (unsigned k = 0; k < N_GPRS; k++) {
			if (!strcmp(d->name, gpr_names[k]))
				rm.gpr[k] = d->handle;
		}
		if (!strcmp(d->name, "cr3"))
			rm.cr3 = d->handle;
		else if (!strcmp(d->name, "gs_base"))
			rm.gs_base = d->handle;
	}
	if (!rm.cr3 || !rm.gs_base || !rm.gpr[N_GPRS - 1])
		rmap_log("register list lacks cr3, gs_base or a GPR: no CR3 "
			 "timeline\n");
	else
		g_atomic_int_set(&rm.have_regs, 1);
}

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
	rmap_log("%" PRIu64 " TBs (%" PRIu64 " without cr3), %" PRIu64
		 " flushes, %" PRIu64 " vCPUs, %u cr3 write sites, %" PRIu64
		 " cr3 writes (%" PRIu64 " named, %" PRIu64 " unnamed, %"
		 PRIu64 " unread), %" PRIu64 " write errors; %.3f s in "
		 "tb_trans, %.3f s in cr3 callbacks\n",
		 rm.n_tbs, rm.n_tb_no_cr3, rm.n_flushes, rm.n_vcpus,
		 g_hash_table_size(rm.sites),
		 __atomic_load_n(&rm.n_cr3_writes, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_named, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_unnamed, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_reg_errors, __ATOMIC_RELAXED),
		 __atomic_load_n(&rm.n_write_errors, __ATOMIC_RELAXED),
		 rm.trans_ns / 1e9,
		 __atomic_load_n(&rm.cr3_ns, __ATOMIC_RELAXED) / 1e9);
}

/* atexit.  vCPUs may still run: TBs translated from now on are not
 * recorded (rm.closing); CR3 records still go straight to the file. */
static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	g_mutex_lock(&rm.lock);
	if (!rm.closing) {
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

/* task=CURR:TGID:COMM:MM:PGD:POB (see the top of this file) */
static bool parse_task(const char *val)
{
	g_auto(GStrv) f = g_strsplit(val, ":", 0);
	struct task_layout *t = &rm.task;
	uint64_t *fields[] = { &t->curr, &t->tgid, &t->comm, &t->mm, &t->pgd,
			       &t->page_offset_base };

	if (g_strv_length(f) != G_N_ELEMENTS(fields))
		return false;
	for (size_t i = 0; i < G_N_ELEMENTS(fields); i++) {
		if (!parse_number(f[i], fields[i]))
			return false;
	}
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
	} else if (!strcmp(key, "verbose")) {
		ok = qemu_plugin_bool_parse(key, val, &rm.verbose);
	} else {
		rmap_log("unknown option '%s' (known: out, task, verbose)\n",
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
		.flags = rm.task.valid ? RMAP_FILE_TASKS : 0,
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
	if (!info->system_emulation || strcmp(info->target_name, "x86_64")) {
		rmap_log("needs qemu-system-x86_64\n");
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
