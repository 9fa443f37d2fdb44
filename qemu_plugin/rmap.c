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
 *                     a marker at the start of each TB only (default), also
 *                     on its last insn, or on every insn (instruction-level
 *                     host ranges; each marker costs a few host insns per
 *                     execution, see below)
 *   ram=PATH          the guest RAM file (memory-backend-file): lets the
 *                     plugin turn a TB's host pointer into guest RAM
 *                     (qemu_plugin_insn_haddr) into a gpa
 *   verbose=on|off    a summary on stderr at exit
 *
 * How a TB's host code is found: QEMU 7.2 has no -perfmap, `-d out_asm`
 * disassembles every TB into a log (hundreds of MB, far too slow to run
 * under a profile), and a plugin cannot ask where a TB's code is.  So
 * every TB gets an inline op (qemu_plugin_register_vcpu_tb_exec_inline,
 * ADD_U64 1) on its own 8-byte slot, slots[i] for the TB's marker index
 * i.  QEMU materialises the slot's address in the TB's host code as an
 * immediate (accel/tcg/plugin-gen.c append_inline_cb: mov_i64 of a
 * constant, then ld/add/st through it), and the x86-64 backend
 * (tcg/i386/tcg-target.c.inc tcg_out_movi_int) emits a 10-byte
 * `movabs $imm64,%reg` (REX.W B8+r) for it when the value neither fits in
 * 32 bits nor lies within +-2 GiB of the code; otherwise a 5/7-byte mov or
 * a rip-relative lea.  The slot array is therefore placed above 4 GiB and
 * more than 4 GiB away from every rwx mapping (the code buffer), at a
 * 4 GiB-aligned base, so every marker is exactly
 *
 *     48|49  B8+r  <imm64 = &slots[i], little-endian>
 *
 * and the plugin finds TB i's host code by scanning the code cache for an
 * 8-byte value in [slots, slots + n_used) that is a multiple of 8 past
 * `slots` and follows those two opcode bytes.  Measured on QEMU 7.2.22
 * (Debian 1:7.2+dfsg-7+deb12u18): the TB marker is always
 *     mov -0x10(%rbp),%ebx; test %ebx,%ebx; jl exit;   (icount/exit check)
 *     movabs $slot,%rbx; mov (%rbx),%r12; inc %r12; mov %r12,(%rbx)
 * with the imm64 at 13 bytes past the TB's 64-byte-aligned code start
 * (tcg/tcg.c tcg_tb_alloc aligns TB code to the icache line; 2 bytes for
 * a TB without the check, CF_NOIRQ), and %r12/%rbx may be other
 * registers (49 B8+r seen too).  A TB execution pays those four host
 * instructions, no call.
 *
 * When the code cache is scanned (every scan reads only the resident pages
 * of the rwx mappings, mincore(2), with memchr for the slot base's 6th
 * byte, chosen rare in x86 code):
 *   - in the flush callback: QEMU 7.2's do_tb_flush calls it after
 *     tcg_region_reset_all, which only resets pointers, so the old
 *     generation's code is intact; its records are written, then every
 *     marker found is overwritten with 0 (the code is dead: every vCPU is
 *     stopped in the exclusive section and no TB survives a flush) so that
 *     old code the next generation has not overwritten yet cannot be read
 *     as the next generation's markers (marker indices restart at 0);
 *   - at exit (atexit), for the live generation;
 *   - from a background thread about every second (less often if a scan
 *     is slow), so that a SIGKILLed QEMU still leaves most records.  A
 *     running code cache may hold the code of a translation QEMU is about
 *     to discard (tb_gen_code restarts, or another vCPU won the race and
 *     the code pointer is rolled back), so this thread writes a marker
 *     only once it has seen it at the same place in two scans.
 * Each marker is written once per generation (`written`).  A TB that never
 * gets a marker in the code (QEMU discarded it, or a CF_MEMI_ONLY I/O TB,
 * which gets no exec ops) is never written.  Checked against `-d out_asm`
 * (smp 1 and 2, forced flushes, hooks=last|all): every TB QEMU kept is
 * recorded at its marker; the only other records are of the partial code
 * of a TB abandoned at the end of a full buffer (no sample can be there).
 * Per-generation slot indices and the zeroing at flush keep old markers
 * from aliasing new ones.
 *
 * Contexts: tb_trans on any vCPU thread (concurrently under MTTCG); flush
 * in an exclusive section (every vCPU stopped); plugin_exit in the thread
 * calling exit(), possibly while other vCPUs still run (they may still
 * translate; rm.lock orders them, and after exit nothing more is written);
 * the scanner thread.  rm.lock protects everything but the raw reads of
 * the code cache, which the scanner does without it.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <qemu-plugin.h>

#include "rmap_format.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define KERNEL_HALF	0xffff800000000000ULL
#define GiB		(1ULL << 30)
/*
 * 128 Mi slots (1 GiB of address space, MAP_NORESERVE: only the pages of
 * used slots cost memory).  A marker is at least 20 bytes of host code and
 * QEMU 7.2 caps the x86-64 code buffer at 2 GiB, so one generation cannot
 * use more.
 */
#define SLOT_BYTES	GiB
#define MAX_SLOTS	(SLOT_BYTES / sizeof(uint64_t))
/* movabs is used only beyond +-2 GiB of the code: keep twice that. */
#define CODE_DISTANCE	(4 * GiB)
#define IMM_OFFSET	2		/* REX.W, B8+r, then the imm64 */
#define OBUF_FLUSH	(1024 * 1024)
#define SCAN_PERIOD_US	(1000 * 1000)
#define SCAN_SHARE	20		/* sleep >= 20x the last scan's time */
#define PAGE		4096UL

/*
 * Slot array bases tried, in units of 4 GiB: bits 32..47 of &slots[i] are
 * these, so the imm64's bytes 4..7 are (lo, hi, 0, 0).  `hi` is the byte
 * the scan looks for with memchr: 0x4f, 0x5a, 0x6e and 0x7b are among the
 * rarest bytes in QEMU 7.2's x86-64 code cache (measured: 1 in 5,000), all
 * far from where Linux puts mmaps (0x7f..) and PIE binaries (0x55..).
 */
static const uint16_t slot_bases[] = {
	0x4faf, 0x5aaf, 0x6eaf, 0x7baf, 0x4fa7, 0x5aa7, 0x6ea7, 0x7ba7,
};

/*
 * One marker: a TB's own (insn == 0; it is the head of struct tb_info) or
 * one on instruction `insn` > 0 of `tb` (hooks=last|all).  rm.marks[i] is
 * the marker of slot i in the current generation.
 */
struct marker {
	struct tb_info *tb;
	uint32_t insn;
	bool written;		/* its record is out (this generation) */
	uint64_t seen;		/* where the scanner last saw it, or 0 */
};

/* A TB's record, built complete at translation but for generation and
 * hostpc, which the scan that finds its marker fills in. */
struct tb_info {
	struct marker m;
	uint64_t hostpc;	/* once written */
	uint32_t size;		/* of rec[] */
	uint8_t rec[];		/* rmap_rec_header, rmap_tb, sizes, bytes */
};

struct range {
	uint64_t lo, hi;
};

/* A marker found by a scan: the imm64's address and its slot index. */
struct found {
	uint64_t pos;
	uint64_t index;
};

static struct {
	int fd;
	const char *out_path;
	const char *ram_path;
	uint32_t hooks;			/* RMAP_HOOK_* */
	bool verbose;
	unsigned n_vcpus;
	/* Guest RAM as QEMU maps it; found at the first tb_trans. */
	uint64_t ram_hostbase, ram_size;
	bool ram_looked_up;
	/* The slot array, and the imm64 bytes every marker has. */
	uint64_t *slots;
	uint8_t base_b4, base_b5;
	/* The code buffer: QEMU's rwx anonymous mappings, found at the first
	 * tb_trans (QEMU loads plugins before it sets up TCG). */
	struct range *code;
	unsigned n_code;
	/* Everything below: rm.lock. */
	GMutex lock;
	bool code_checked;		/* rm.code is set */
	GPtrArray *marks;		/* current generation, by slot index */
	uint64_t generation;		/* bumped only in flush (exclusive) */
	bool closing;			/* plugin_exit wrote the last records */
	GByteArray *obuf;
	GThread *scanner;
	GCond wake;			/* plugin_exit stops the scanner */
	uint64_t n_translated, n_markers, n_no_slot, n_flushes;
	uint64_t n_recorded, n_insn_recorded, n_unseen, n_write_errors;
	uint64_t n_scans, scan_ns, max_scan_ns, scanned_bytes;	/* atomic */
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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* ---- output (rm.lock) ---- */

static void write_all(const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(rm.fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rm.n_write_errors++;
			return;
		}
		p += w;
		n -= w;
	}
}

static void obuf_drain(void)
{
	write_all(rm.obuf->data, rm.obuf->len);
	g_byte_array_set_size(rm.obuf, 0);
}

static void obuf_append(const void *rec, size_t size)
{
	g_byte_array_append(rm.obuf, rec, size);
	if (rm.obuf->len >= OBUF_FLUSH)
		obuf_drain();
}

/* ---- placing the slot array ---- */

/* QEMU's rwx anonymous mappings: the TCG code buffer (one per region,
 * between PROT_NONE guard pages, when there are several). */
static void find_code_buffer(void)
{
	g_autofree char *maps = NULL;
	GArray *a = g_array_new(false, false, sizeof(struct range));
	char *save = NULL;

	if (g_file_get_contents("/proc/self/maps", &maps, NULL, NULL)) {
		for (char *line = strtok_r(maps, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			struct range r;
			char perms[8];
			unsigned long inode;
			int name = 0;

			if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*s %*s %lu %n",
				   &r.lo, &r.hi, perms, &inode, &name) < 4)
				continue;
			if (!strcmp(perms, "rwxp") && inode == 0 &&
			    (!name || !line[name]))
				g_array_append_val(a, r);
		}
	}
	g_free(rm.code);
	rm.n_code = a->len;
	rm.code = (struct range *)g_array_free(a, false);
}

static bool far_from_code(uint64_t base)
{
	for (unsigned i = 0; i < rm.n_code; i++) {
		if (base < rm.code[i].hi + CODE_DISTANCE &&
		    rm.code[i].lo < base + SLOT_BYTES + CODE_DISTANCE)
			return false;
	}
	return true;
}

static bool place_slots(void)
{
	for (size_t i = 0; i < G_N_ELEMENTS(slot_bases); i++) {
		uint64_t base = (uint64_t)slot_bases[i] << 32;
		void *p;

		if (!far_from_code(base))
			continue;
		p = mmap((void *)(uintptr_t)base, SLOT_BYTES,
			 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
			 MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == MAP_FAILED)
			continue;
		if ((uint64_t)(uintptr_t)p != base) {
			/* a kernel before 4.17 took it as a hint only */
			munmap(p, SLOT_BYTES);
			continue;
		}
		rm.slots = p;
		rm.base_b4 = base >> 32;
		rm.base_b5 = base >> 40;
		return true;
	}
	return false;
}

static void fatal_placement(const char *why)
{
	rmap_log("cannot record the reverse map: %s.  The plugin finds a TB's "
		 "host code by the 64-bit address of its marker slot in the "
		 "code (see rmap.c); that needs QEMU's code buffer as rwx "
		 "anonymous memory (not -accel tcg,split-wx=on) and a free "
		 "1 GiB at a 4 GiB-aligned address at least 4 GiB away from "
		 "it\n", why);
}

/*
 * At the first tb_trans (rm.lock): the code buffer exists now.  No marker
 * has been emitted yet, so the slot array can still move if it is too near
 * (it was placed at install, before QEMU mapped its code buffer).
 */
static bool check_code_buffer(void)
{
	uint64_t base = (uint64_t)(uintptr_t)rm.slots;

	rm.code_checked = true;
	find_code_buffer();
	if (!rm.n_code) {
		fatal_placement("no rwx anonymous mapping (QEMU's code buffer) "
				"in /proc/self/maps");
		return false;
	}
	if (far_from_code(base))
		return true;
	munmap(rm.slots, SLOT_BYTES);
	rm.slots = NULL;
	if (place_slots())
		return true;
	fatal_placement("no slot array base far enough from the code buffer");
	return false;
}

/* ---- scanning the code cache ---- */

/*
 * Markers in [lo, hi) (resident memory of one rwx mapping) whose index is
 * below `limit`, appended to `out` in address order.  The imm64 at q has
 * q[4] == base_b4, q[5] == base_b5, q[6] == q[7] == 0, and is preceded by
 * REX.W(+B) and B8+r.
 */
static void scan_run(const uint8_t *lo, const uint8_t *hi, uint64_t limit,
		     GArray *out)
{
	const uint64_t base = (uint64_t)(uintptr_t)rm.slots;
	const uint8_t *p = lo + IMM_OFFSET + 5;

	if (hi - lo < IMM_OFFSET + 8)
		return;
	while (p + 3 <= hi) {
		const uint8_t *q;
		uint64_t v, off;

		p = memchr(p, rm.base_b5, hi - 2 - p);
		if (!p)
			break;
		q = p - 5;
		p++;
		if (q[4] != rm.base_b4 || q[6] || q[7] ||
		    (q[-1] & 0xf8) != 0xb8 || (q[-2] & 0xfe) != 0x48)
			continue;
		memcpy(&v, q, sizeof(v));
		off = v - base;
		if ((off & 7) || (off >> 3) >= limit)
			continue;
		g_array_append_val(out, ((struct found){
			.pos = (uint64_t)(uintptr_t)q, .index = off >> 3 }));
	}
}

/* Every marker with index < limit in the resident pages of the code
 * buffer, in address order.  Needs no lock (rm.code is set once, at the
 * first tb_trans, before rm.code_checked). */
static GArray *scan_code(uint64_t limit)
{
	GArray *out = g_array_new(false, false, sizeof(struct found));
	uint64_t t0 = now_ns(), bytes = 0, dt;

	for (unsigned i = 0; i < rm.n_code; i++) {
		uint64_t lo = rm.code[i].lo, hi = rm.code[i].hi;
		size_t n_pages = (hi - lo) / PAGE;
		g_autofree unsigned char *vec = g_malloc(n_pages);
		size_t j = 0;

		if (mincore((void *)(uintptr_t)lo, hi - lo, vec)) {
			rmap_log("mincore: %s\n", strerror(errno));
			continue;
		}
		while (j < n_pages) {
			size_t k;

			if (!(vec[j] & 1)) {
				j++;
				continue;
			}
			for (k = j; k < n_pages && (vec[k] & 1); k++)
				;
			scan_run((const uint8_t *)(uintptr_t)(lo + j * PAGE),
				 (const uint8_t *)(uintptr_t)(lo + k * PAGE),
				 limit, out);
			bytes += (k - j) * PAGE;
			j = k;
		}
	}
	dt = now_ns() - t0;
	__atomic_add_fetch(&rm.n_scans, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&rm.scan_ns, dt, __ATOMIC_RELAXED);
	__atomic_add_fetch(&rm.scanned_bytes, bytes, __ATOMIC_RELAXED);
	for (uint64_t m = __atomic_load_n(&rm.max_scan_ns, __ATOMIC_RELAXED);
	     dt > m && !__atomic_compare_exchange_n(&rm.max_scan_ns, &m, dt,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);)
		;
	return out;
}

/* rm.lock.  Write marker m's record, found at pos; false if it must wait
 * (an insn marker whose TB's own marker is not out yet). */
static bool emit_marker(struct marker *m, uint64_t pos)
{
	struct tb_info *t = m->tb;

	if (m->written)
		return true;
	if (m->insn == 0) {
		struct rmap_rec_header *h = (void *)t->rec;
		struct rmap_tb *r = (void *)(h + 1);

		h->generation = rm.generation;
		r->hostpc = t->hostpc = pos;
		obuf_append(t->rec, t->size);
		rm.n_recorded++;
	} else {
		struct {
			struct rmap_rec_header h;
			struct rmap_insn r;
		} rec = {
			.h = { .type = RMAP_REC_INSN, .size = sizeof(rec),
			       .generation = rm.generation },
			.r = { .tb_hostpc = t->hostpc, .hostpc = pos,
			       .index = m->insn },
		};

		if (!t->m.written)
			return false;
		obuf_append(&rec, sizeof(rec));
		rm.n_insn_recorded++;
	}
	m->written = true;
	return true;
}

/* rm.lock: write every unwritten marker in `found` (a scan of the current
 * generation); `confirm`: only those seen at the same place before. */
static void emit_found(GArray *found, bool confirm)
{
	for (guint i = 0; i < found->len; i++) {
		struct found *f = &g_array_index(found, struct found, i);
		struct marker *m;

		if (f->index >= rm.marks->len)
			continue;
		m = g_ptr_array_index(rm.marks, f->index);
		if (m->written)
			continue;
		if (confirm && m->seen != f->pos) {
			m->seen = f->pos;
			continue;
		}
		emit_marker(m, f->pos);
	}
}

static uint64_t count_unwritten(void)
{
	uint64_t n = 0;

	for (guint i = 0; i < rm.marks->len; i++) {
		struct marker *m = g_ptr_array_index(rm.marks, i);

		n += m->insn == 0 && !m->written;
	}
	return n;
}

/* The background scanner: about once a second, at most SCAN_SHARE-th of
 * a CPU, until plugin_exit. */
static gpointer scanner_main(gpointer unused)
{
	gint64 period = SCAN_PERIOD_US;

	g_mutex_lock(&rm.lock);
	for (;;) {
		gint64 deadline = g_get_monotonic_time() + period, t0;
		uint64_t generation, limit;
		GArray *found;

		while (!rm.closing &&
		       g_cond_wait_until(&rm.wake, &rm.lock, deadline))
			;
		if (rm.closing)
			break;
		if (!rm.code_checked)
			continue;	/* nothing translated yet */
		generation = rm.generation;
		limit = rm.marks->len;
		g_mutex_unlock(&rm.lock);

		t0 = g_get_monotonic_time();
		found = scan_code(limit);
		g_mutex_lock(&rm.lock);
		/* a flush in between: these are the old generation's */
		if (!rm.closing && rm.generation == generation) {
			emit_found(found, true);
			obuf_drain();
		}
		g_array_free(found, true);
		period = MAX(SCAN_PERIOD_US,
			     SCAN_SHARE * (g_get_monotonic_time() - t0));
	}
	g_mutex_unlock(&rm.lock);
	return NULL;
}

/* ---- translation ---- */

/* Where QEMU maps the guest RAM file: its line in /proc/self/maps (the
 * file may already be unlinked: "... /dev/shm/NAME (deleted)"). */
static void lookup_ram(void)
{
	g_autofree char *maps = NULL;
	size_t plen = strlen(rm.ram_path);
	char *save = NULL;

	rm.ram_looked_up = true;
	if (!g_file_get_contents("/proc/self/maps", &maps, NULL, NULL))
		return;
	for (char *line = strtok_r(maps, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
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
	t->m.tb = t;
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
	r->vcpu = RMAP_VCPU_UNKNOWN;
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

/* rm.lock: the next slot index, with its marker. */
static uint64_t *new_slot(struct marker *m)
{
	uint64_t *slot = &rm.slots[rm.marks->len];

	g_ptr_array_add(rm.marks, m);
	rm.n_markers++;
	return slot;
}

static void add_insn_marker(struct qemu_plugin_tb *tb, struct tb_info *t,
			    size_t index)
{
	struct marker *k = g_new0(struct marker, 1);

	k->tb = t;
	k->insn = index;
	qemu_plugin_register_vcpu_insn_exec_inline(
		qemu_plugin_tb_get_insn(tb, index), QEMU_PLUGIN_INLINE_ADD_U64,
		new_slot(k), 1);
}

static void vcpu_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	size_t n_insn_markers = 0;
	struct tb_info *t;

	if (!n)
		return;
	if (rm.hooks & RMAP_HOOK_ALL)
		n_insn_markers = n - 1;
	else if ((rm.hooks & RMAP_HOOK_LAST) && n > 1)
		n_insn_markers = 1;
	g_mutex_lock(&rm.lock);
	if (rm.closing)
		goto out;
	if (!rm.code_checked && !check_code_buffer()) {
		/* loud: QEMU stops, not a profile that silently resolves
		 * nothing (plugin_exit sees `closing` and writes nothing) */
		rm.closing = true;
		g_mutex_unlock(&rm.lock);
		exit(EXIT_FAILURE);
	}
	if (rm.ram_path && !rm.ram_looked_up)
		lookup_ram();
	rm.n_translated++;
	if (rm.marks->len + 1 + n_insn_markers > MAX_SLOTS) {
		rm.n_no_slot++;
		goto out;
	}
	t = build_tb_info(tb, n);
	qemu_plugin_register_vcpu_tb_exec_inline(
		tb, QEMU_PLUGIN_INLINE_ADD_U64, new_slot(&t->m), 1);
	if (rm.hooks & RMAP_HOOK_ALL) {
		for (size_t i = 1; i < n; i++)
			add_insn_marker(tb, t, i);
	} else if (n_insn_markers) {
		add_insn_marker(tb, t, n - 1);
	}
out:
	g_mutex_unlock(&rm.lock);
}

/*
 * Exclusive section (accel/tcg/tb-maint.c do_tb_flush, after
 * tcg_region_reset_all): every TB is gone but its code is still there.
 * Write the ending generation's records, neutralise its markers, and start
 * a new generation: code-cache addresses and slot indices will be reused.
 */
static void flush(qemu_plugin_id_t id)
{
	struct {
		struct rmap_rec_header h;
		struct rmap_flush f;
	} rec = { .h = { .type = RMAP_REC_FLUSH, .size = sizeof(rec) } };
	uint64_t t = now_ns();
	GArray *found;

	g_mutex_lock(&rm.lock);
	/* every marker index ever used is < MAX_SLOTS: neutralise them all */
	found = rm.code_checked ? scan_code(MAX_SLOTS) :
		g_array_new(false, false, sizeof(struct found));
	if (!rm.closing) {
		emit_found(found, false);
		rm.n_unseen += count_unwritten();
	}
	for (guint i = 0; i < found->len; i++) {
		uint8_t *q = (uint8_t *)(uintptr_t)
			g_array_index(found, struct found, i).pos;

		memset(q, 0, sizeof(uint64_t));
	}
	g_array_free(found, true);
	g_ptr_array_set_size(rm.marks, 0);
	rm.generation++;
	rm.n_flushes++;
	if (!rm.closing) {
		rec.h.generation = rm.generation;
		rec.f.monotonic_ns = t;
		obuf_append(&rec, sizeof(rec));
		obuf_drain();
	}
	g_mutex_unlock(&rm.lock);
}

/* ---- exit ---- */

/*
 * atexit.  Other vCPUs may still run and translate: a TB translated after
 * the final scan is not recorded (rm.closing), and its marker is harmless.
 */
static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	g_mutex_lock(&rm.lock);
	if (rm.closing) {
		g_mutex_unlock(&rm.lock);
		return;
	}
	/* holding the lock: no flush, and no new TB, until it is done */
	if (rm.code_checked) {
		GArray *found = scan_code(rm.marks->len);

		emit_found(found, false);
		g_array_free(found, true);
	}
	obuf_drain();
	fsync(rm.fd);
	rm.closing = true;
	g_cond_broadcast(&rm.wake);
	if (rm.verbose)
		rmap_log("%" PRIu64 " TBs translated (%" PRIu64 " without a "
			 "slot), %" PRIu64 " markers, %" PRIu64 " TB and %"
			 PRIu64 " insn records, %" PRIu64 " TBs never found at "
			 "a flush, %" PRIu64 " flushes, %" PRIu64 " write "
			 "errors, ram %s, slots at %p, %" PRIu64 " scans of %.1f "
			 "MiB avg, %.2f ms avg, %.2f ms max\n",
			 rm.n_translated, rm.n_no_slot, rm.n_markers,
			 rm.n_recorded, rm.n_insn_recorded, rm.n_unseen,
			 rm.n_flushes, rm.n_write_errors,
			 rm.ram_hostbase ? "found" : "not found",
			 (void *)rm.slots, rm.n_scans,
			 rm.n_scans ? rm.scanned_bytes / 1048576.0 / rm.n_scans
			 : 0.0,
			 rm.n_scans ? rm.scan_ns / 1e6 / rm.n_scans : 0.0,
			 rm.max_scan_ns / 1e6);
	if (rm.n_translated && !rm.n_recorded)
		rmap_log("no marker found in the code cache: this QEMU does "
			 "not encode them as rmap.c expects (see there)\n");
	g_mutex_unlock(&rm.lock);
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
	/* Place the slots now, before QEMU's other mappings can take the
	 * spot; the code buffer may not exist yet (checked again at the
	 * first tb_trans). */
	find_code_buffer();
	if (!place_slots()) {
		fatal_placement("no free 4 GiB-aligned slot array base");
		return -1;
	}
	rm.marks = g_ptr_array_new_with_free_func(g_free);
	rm.obuf = g_byte_array_sized_new(OBUF_FLUSH + 4096);
	g_mutex_init(&rm.lock);
	g_cond_init(&rm.wake);
	if (open_output())
		return -1;
	rm.scanner = g_thread_new("pvperf-rmap", scanner_main, NULL);
	qemu_plugin_register_vcpu_tb_trans_cb(id, vcpu_tb_trans);
	qemu_plugin_register_flush_cb(id, flush);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
	return 0;
}
