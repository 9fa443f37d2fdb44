/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rmap.c - pvperf-rmap.so, a TCG plugin for qemu-system-x86_64 (QEMU 7.2)
 * that records the binary-translation reverse map: for every translation
 * block, where its host code lies in QEMU's code cache and which guest
 * instructions it translates.  A host profiler's samples in the code cache
 * can then be mapped back to guest PCs (pyhost/rmap.py).
 *
 *   qemu-system-x86_64 ... -plugin qemu_plugin/pvperf-rmap.so,out=FILE
 *
 * Options:
 *   out=PATH          the record file (format: rmap_format.h); required
 *   hooks=first|last|all
 *                     exec callbacks on the first insn of each TB only
 *                     (default), also on its last insn, or on every insn
 *   ram=PATH          the guest RAM file (memory-backend-file): lets the
 *                     plugin turn a TB's host pointer into guest RAM
 *                     (qemu_plugin_insn_haddr) into a gpa
 *   verbose=on|off    a summary on stderr at exit
 *
 * Why a callback: QEMU 7.2 has no -perfmap and `-d out_asm` prints only
 * offsets; but a plugin exec callback is a direct call from the TB's host
 * code, so its __builtin_return_address(0) is an address inside that TB.
 *
 * Contexts: tb_trans on any vCPU thread (concurrently under MTTCG); exec
 * callbacks on the vCPU thread running the TB; flush in an exclusive
 * section (every vCPU stopped); plugin_exit in the thread calling exit(),
 * possibly while other vCPUs still run.
 */
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

#include "rmap_format.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define KERNEL_HALF	0xffff800000000000ULL
#define VBUF_SIZE	(256 * 1024)
#define EXIT_SPIN_NS	(100 * 1000 * 1000)

/*
 * One TB's record, built complete at translation; the first execution
 * fills in generation, hostpc and vcpu and copies it out.  `done` is set
 * by the first executor (atomic exchange: under MTTCG two vCPUs may enter
 * a fresh TB at once); later executions only load it.
 */
struct tb_info {
	int done;
	uint32_t size;		/* of rec[] */
	uint8_t rec[];		/* rmap_rec_header, rmap_tb, sizes, bytes */
};

/* A hook on insn `index` > 0 (hooks=last|all). */
struct insn_hook {
	int done;		/* as tb_info.done */
	uint32_t index;
	struct tb_info *tb;
};

/*
 * Per-vCPU output buffer.  Only its vCPU thread appends (exec callbacks,
 * vcpu_exit).  `busy` brackets an append so that plugin_exit, which may
 * run in another thread, can wait for it; `closing` tells appenders to
 * drop records from then on.  Both seq_cst (Dekker-style handshake).
 */
struct vbuf {
	uint8_t *data;
	size_t len;
	int busy;
} __attribute__((aligned(64)));

static struct {
	int fd;
	const char *out_path;
	const char *ram_path;
	uint32_t hooks;			/* RMAP_HOOK_* */
	bool verbose;
	unsigned n_vcpus;
	struct vbuf *vbuf;		/* [n_vcpus] */
	uint64_t generation;		/* written only in flush (exclusive) */
	int closing;
	/* Guest RAM as QEMU maps it; found at the first tb_trans. */
	uint64_t ram_hostbase, ram_size;
	bool ram_looked_up;
	/*
	 * arena_lock protects arena (the tb_info/insn_hook allocations of the
	 * current generation) and the statistics: taken in tb_trans and
	 * flush, never on the exec path.
	 */
	GMutex arena_lock;
	GPtrArray *arena;
	uint64_t n_translated, n_flushes;
	uint64_t n_recorded, n_dropped;	/* atomic */
} rm = { .fd = -1 };

static void rmap_log(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static void rmap_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("pvperf-rmap: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* ---- output ---- */

static void write_all(const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(rm.fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			__atomic_add_fetch(&rm.n_dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		p += w;
		n -= w;
	}
}

/* vCPU thread.  O_APPEND makes each write(2) land whole at the end of the
 * file, so vCPUs need no lock between them. */
static void vbuf_drain(struct vbuf *b)
{
	write_all(b->data, b->len);
	b->len = 0;
}

static void vbuf_append(unsigned vcpu, const void *rec, size_t size)
{
	struct vbuf *b = &rm.vbuf[vcpu];

	__atomic_store_n(&b->busy, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&rm.closing, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&rm.n_dropped, 1, __ATOMIC_RELAXED);
	} else {
		if (b->len + size > VBUF_SIZE)
			vbuf_drain(b);
		memcpy(b->data + b->len, rec, size);
		b->len += size;
	}
	__atomic_store_n(&b->busy, 0, __ATOMIC_SEQ_CST);
}

/* ---- exec callbacks: the hot path is one load and a branch ---- */

static void emit_tb(unsigned vcpu, struct tb_info *t, uint64_t hostpc)
{
	struct rmap_rec_header *h = (void *)t->rec;
	struct rmap_tb *r = (void *)(h + 1);

	h->generation = rm.generation;
	r->hostpc = hostpc;
	r->vcpu = vcpu;
	vbuf_append(vcpu, t->rec, t->size);
	__atomic_add_fetch(&rm.n_recorded, 1, __ATOMIC_RELAXED);
}

static void tb_first_exec(unsigned int vcpu, void *udata)
{
	struct tb_info *t = udata;

	if (__builtin_expect(__atomic_load_n(&t->done, __ATOMIC_RELAXED), 1))
		return;
	if (__atomic_exchange_n(&t->done, 1, __ATOMIC_ACQ_REL))
		return;
	emit_tb(vcpu, t, (uint64_t)(uintptr_t)__builtin_return_address(0));
}

static void insn_first_exec(unsigned int vcpu, void *udata)
{
	struct insn_hook *k = udata;
	struct {
		struct rmap_rec_header h;
		struct rmap_insn r;
	} rec;

	if (__builtin_expect(__atomic_load_n(&k->done, __ATOMIC_RELAXED), 1))
		return;
	if (__atomic_exchange_n(&k->done, 1, __ATOMIC_ACQ_REL))
		return;
	memset(&rec, 0, sizeof(rec));
	rec.h.type = RMAP_REC_INSN;
	rec.h.size = sizeof(rec);
	rec.h.generation = rm.generation;
	/* The TB's own hook ran first (it precedes insn 0), so hostpc is set. */
	rec.r.tb_hostpc = ((struct rmap_tb *)(k->tb->rec +
			   sizeof(struct rmap_rec_header)))->hostpc;
	rec.r.hostpc = (uint64_t)(uintptr_t)__builtin_return_address(0);
	rec.r.index = k->index;
	vbuf_append(vcpu, &rec, sizeof(rec));
}

/* ---- translation ---- */

/* Where QEMU maps the guest RAM file: its line in /proc/self/maps (the
 * file may already be unlinked: "... /dev/shm/NAME (deleted)"). */
static void lookup_ram(void)
{
	g_autofree char *maps = NULL;
	size_t plen = strlen(rm.ram_path);

	rm.ram_looked_up = true;
	if (!g_file_get_contents("/proc/self/maps", &maps, NULL, NULL))
		return;
	for (char *line = strtok(maps, "\n"); line; line = strtok(NULL, "\n")) {
		uint64_t lo, hi, off;
		char *path = strchr(line, '/');

		if (!path || strncmp(path, rm.ram_path, plen) ||
		    (path[plen] && path[plen] != ' '))
			continue;
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64,
			   &lo, &hi, &off) == 3 && off == 0) {
			rm.ram_hostbase = lo;
			rm.ram_size = hi - lo;
			return;
		}
	}
}

static uint64_t haddr_to_gpa(const void *haddr)
{
	uint64_t h = (uint64_t)(uintptr_t)haddr;

	if (!haddr || !rm.ram_hostbase || h < rm.ram_hostbase ||
	    h - rm.ram_hostbase >= rm.ram_size)
		return RMAP_NO_GPA;
	return h - rm.ram_hostbase;
}

static uint32_t tb_code_bytes(struct qemu_plugin_tb *tb, size_t n)
{
	uint32_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += qemu_plugin_insn_size(qemu_plugin_tb_get_insn(tb, i));
	return total;
}

static struct tb_info *build_tb_info(struct qemu_plugin_tb *tb, size_t n)
{
	uint32_t n_bytes = tb_code_bytes(tb, n);
	uint32_t size = sizeof(struct rmap_rec_header) + sizeof(struct rmap_tb)
			+ n + n_bytes;
	struct tb_info *t;
	struct rmap_rec_header *h;
	struct rmap_tb *r;
	uint8_t *sizes, *code;

	size = (size + 7) & ~7u;
	t = g_malloc0(sizeof(*t) + size);
	t->size = size;
	h = (void *)t->rec;
	r = (void *)(h + 1);
	sizes = (uint8_t *)(r + 1);
	code = sizes + n;
	h->type = RMAP_REC_TB;
	h->size = size;
	r->guestpc = qemu_plugin_tb_vaddr(tb);
	r->n_insns = n;
	r->n_bytes = n_bytes;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		size_t len = qemu_plugin_insn_size(insn);

		sizes[i] = len;
		memcpy(code, qemu_plugin_insn_data(insn), len);
		code += len;
	}
	r->gpa = haddr_to_gpa(qemu_plugin_insn_haddr(
				qemu_plugin_tb_get_insn(tb, 0)));
	r->flags = (r->guestpc >= KERNEL_HALF ? RMAP_TB_KERNEL : 0) |
		   (r->gpa != RMAP_NO_GPA ? RMAP_TB_GPA_VALID : 0);
	return t;
}

static void add_insn_hook(struct qemu_plugin_tb *tb, struct tb_info *t,
			  size_t index)
{
	struct insn_hook *k = g_new0(struct insn_hook, 1);

	k->index = index;
	k->tb = t;
	g_ptr_array_add(rm.arena, k);
	qemu_plugin_register_vcpu_insn_exec_cb(
		qemu_plugin_tb_get_insn(tb, index), insn_first_exec,
		QEMU_PLUGIN_CB_NO_REGS, k);
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	struct tb_info *t;

	if (!n)
		return;
	g_mutex_lock(&rm.arena_lock);
	if (rm.ram_path && !rm.ram_looked_up)
		lookup_ram();
	t = build_tb_info(tb, n);
	g_ptr_array_add(rm.arena, t);
	rm.n_translated++;
	qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_first_exec,
					     QEMU_PLUGIN_CB_NO_REGS, t);
	if (rm.hooks & RMAP_HOOK_ALL) {
		for (size_t i = 1; i < n; i++)
			add_insn_hook(tb, t, i);
	} else if ((rm.hooks & RMAP_HOOK_LAST) && n > 1) {
		add_insn_hook(tb, t, n - 1);
	}
	g_mutex_unlock(&rm.arena_lock);
}

/* Exclusive section (accel/tcg/tb-maint.c do_tb_flush): every TB is gone,
 * so nothing refers to the arena any more, and code-cache addresses will
 * be reused: a new generation starts. */
static void flush(qemu_plugin_id_t id)
{
	struct {
		struct rmap_rec_header h;
		struct rmap_flush f;
	} rec = { .h = { .type = RMAP_REC_FLUSH, .size = sizeof(rec) } };
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	g_mutex_lock(&rm.arena_lock);
	g_ptr_array_set_size(rm.arena, 0);
	rm.generation++;
	rec.h.generation = rm.generation;
	rec.f.monotonic_ns = ts.tv_sec * 1000000000ULL + ts.tv_nsec;
	/* Every vCPU is stopped: writing directly cannot interleave with an
	 * append; records still buffered are of older generations, which the
	 * reader tells apart by their own generation field. */
	write_all((const uint8_t *)&rec, sizeof(rec));
	rm.n_flushes++;
	g_mutex_unlock(&rm.arena_lock);
}

/* ---- exit ---- */

static void vcpu_exit(qemu_plugin_id_t id, unsigned int vcpu)
{
	struct vbuf *b = &rm.vbuf[vcpu];

	__atomic_store_n(&b->busy, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&rm.closing, __ATOMIC_SEQ_CST))
		vbuf_drain(b);
	__atomic_store_n(&b->busy, 0, __ATOMIC_SEQ_CST);
}

/* Wait (bounded) until no vCPU is inside vbuf_append; a vCPU still busy
 * after that keeps its buffer (its records are lost, counted). */
static bool wait_idle(struct vbuf *b)
{
	gint64 deadline = g_get_monotonic_time() + EXIT_SPIN_NS / 1000;

	while (__atomic_load_n(&b->busy, __ATOMIC_SEQ_CST)) {
		if (g_get_monotonic_time() > deadline)
			return false;
		g_usleep(100);
	}
	return true;
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	__atomic_store_n(&rm.closing, 1, __ATOMIC_SEQ_CST);
	for (unsigned i = 0; i < rm.n_vcpus; i++) {
		if (wait_idle(&rm.vbuf[i]))
			vbuf_drain(&rm.vbuf[i]);
	}
	fsync(rm.fd);
	if (rm.verbose)
		rmap_log("%" PRIu64 " TBs translated, %" PRIu64 " recorded, %"
			 PRIu64 " flushes, %" PRIu64 " dropped, ram %s\n",
			 rm.n_translated, rm.n_recorded, rm.n_flushes,
			 rm.n_dropped, rm.ram_hostbase ? "found" : "not found");
}

/* ---- options and install ---- */

static int parse_hooks(const char *val)
{
	if (!strcmp(val, "first"))
		rm.hooks = 0;
	else if (!strcmp(val, "last"))
		rm.hooks = RMAP_HOOK_LAST;
	else if (!strcmp(val, "all"))
		rm.hooks = RMAP_HOOK_ALL;
	else
		return -1;
	return 0;
}

static int parse_option(const char *arg)
{
	g_auto(GStrv) kv = g_strsplit(arg, "=", 2);
	const char *key = kv[0], *val = kv[1];
	bool ok = true;

	if (!val) {
		rmap_log("option '%s' needs a value (name=value)\n", arg);
		return -1;
	}
	if (!strcmp(key, "out")) {
		ok = *val != '\0';
		rm.out_path = g_strdup(val);
	} else if (!strcmp(key, "ram")) {
		ok = *val == '/';
		rm.ram_path = g_strdup(val);
	} else if (!strcmp(key, "hooks")) {
		ok = !parse_hooks(val);
	} else if (!strcmp(key, "verbose")) {
		ok = qemu_plugin_bool_parse(key, val, &rm.verbose);
	} else {
		rmap_log("unknown option '%s' (known: out, hooks, ram, verbose)\n",
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
		.flags = rm.hooks,
		.n_vcpus = rm.n_vcpus,
	};

	memcpy(fh.magic, RMAP_MAGIC, sizeof(fh.magic));
	rm.fd = open(rm.out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND |
		     O_CLOEXEC, 0600);
	if (rm.fd < 0) {
		rmap_log("cannot open out=%s: %s\n", rm.out_path,
			 strerror(errno));
		return -1;
	}
	write_all((const uint8_t *)&fh, sizeof(fh));
	return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	int n = qemu_plugin_n_max_vcpus();

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
	if (n < 1)
		return -1;
	rm.n_vcpus = n;
	rm.vbuf = g_aligned_alloc0(n, sizeof(*rm.vbuf), 64);
	for (int i = 0; i < n; i++)
		rm.vbuf[i].data = g_malloc(VBUF_SIZE);
	rm.arena = g_ptr_array_new_with_free_func(g_free);
	g_mutex_init(&rm.arena_lock);
	if (open_output())
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
	qemu_plugin_register_flush_cb(id, flush);
	qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
	return 0;
}
