/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * guest.c - guest RAM, physical addresses and registers.
 *
 * RAM.  Guest RAM is a memory-backend-file (share=on) that we map
 * MAP_SHARED read-write at install (QEMU creates the backend before it
 * loads plugins: system/vl.c qemu_create_late_backends).  Where its bytes
 * sit in guest physical memory is the machine's RAM layout (ramlayout.h,
 * from arch.h's ram_base and ram_hole; the architecture's file says why
 * that holds on the machine pvperf boots): every gpa <-> offset here
 * goes through it.
 *
 * Physical addresses of code.  System-mode TBs are PC-relative
 * (CF_PCREL): one TB serves every process that maps its physical page, at whatever
 * virtual address.  What identifies an instruction across processes is
 * its gpa.  qemu_plugin_insn_haddr() gives QEMU's host pointer to the
 * instruction's bytes; QEMU's own mapping of the same RAM file, found
 * once in /proc/self/maps, turns it into the file offset.
 *
 * Page walk.  A FAULT hypercall names a virtual ip of the faulting
 * process; its gpa comes from the architecture's walk of the page tables
 * at that vCPU's page-table root, read from our mapping.  Anything outside RAM, not present
 * or malformed ends the walk with GPA_NONE: the guest only hurts its own
 * counts.
 *
 * Registers.  qemu_plugin_get_registers() hands out handles from a vCPU
 * context; the names (the architecture's) are the same on every vCPU, so
 * the first vCPU's are kept.  Values come in target (little-endian) order.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "guest.h"
#include "ramlayout.h"

static uint8_t *ram;		/* our mapping, or NULL */
static uint64_t ram_size;
static struct ram_layout ram_layout;
static char *ram_real_path;	/* for QEMU's mapping in /proc/self/maps */
/* QEMU's host address of the RAM file's first byte, or UINTPTR_MAX. */
static uintptr_t qemu_ram_base = UINTPTR_MAX;

static int map_ram(int fd, const char *path, uint64_t *size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!*size)
		*size = st.st_size;
	if (*size > (uint64_t)st.st_size) {
		pvperf_log("ramsize=%" PRIu64 " exceeds %s (%lld bytes)\n",
			   *size, path, (long long)st.st_size);
		return -EINVAL;
	}
	if (*size > (uint64_t)PVPERF_MAX_RAM_MB << 20 || *size < GUEST_PAGE_SIZE) {
		pvperf_log("guest RAM of %" PRIu64 " bytes: pvperf needs 4 KiB..%u MiB"
			   " (pass ramsize= to use only the first part)\n",
			   *size, PVPERF_MAX_RAM_MB);
		return -EINVAL;
	}
	ram = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ram == MAP_FAILED) {
		ram = NULL;
		return -errno;
	}
	ram_size = *size;
	ram_layout_init(&ram_layout, pv.arch->ram_base, ram_size,
			pv.arch->ram_hole_start, pv.arch->ram_hole_end);
	return 0;
}

/* QEMU's mapping of the RAM file at offset 0, from /proc/self/maps. */
static uintptr_t find_qemu_ram_base(void)
{
	g_autofree char *maps = NULL;
	g_auto(GStrv) lines = NULL;

	if (!ram_real_path || !g_file_get_contents("/proc/self/maps", &maps, NULL, NULL))
		return UINTPTR_MAX;
	lines = g_strsplit(maps, "\n", -1);
	for (char **l = lines; *l; l++) {
		unsigned long start, end, off;
		int path_at = 0;

		if (sscanf(*l, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &off,
			   &path_at) < 3 || !path_at)
			continue;
		/* pvperf unlinks the file once QEMU runs: " (deleted)". */
		if (off == 0 && (uintptr_t)ram != start &&
		    g_str_has_prefix(*l + path_at, ram_real_path) &&
		    (!(*l)[path_at + strlen(ram_real_path)] ||
		     g_str_equal(*l + path_at + strlen(ram_real_path), " (deleted)")))
			return start;
	}
	return UINTPTR_MAX;
}

/* At install: map the RAM file; *size 0 means all of it. */
int guest_ram_init(const char *path, uint64_t *size)
{
	int fd = open(path, O_RDWR | O_CLOEXEC), err;

	if (fd < 0) {
		pvperf_log("ram=%s: %s\n", path, strerror(errno));
		return -1;
	}
	err = map_ram(fd, path, size);
	close(fd);
	if (err && err != -EINVAL)
		pvperf_log("ram=%s: %s\n", path, strerror(-err));
	ram_real_path = realpath(path, NULL);
	/* QEMU mapped the backend before loading plugins (see above). */
	qemu_ram_base = find_qemu_ram_base();
	if (!err && qemu_ram_base == UINTPTR_MAX)
		pvperf_log("ram=%s: QEMU's own mapping not found; fault tails are"
			   " keyed by virtual address\n", path);
	return err ? -1 : 0;
}

/* atexit, once no callback can use the mapping any more. */
void guest_ram_exit(void)
{
	if (ram)
		munmap(ram, ram_size);
	ram = NULL;
}

/* [gpa, gpa + len) inside RAM: our pointer to it, else NULL. */
void *guest_ram_block(uint64_t gpa, uint64_t len)
{
	uint64_t off;

	if (!ram || !ram_layout_offset(&ram_layout, gpa, len, &off))
		return NULL;
	return ram + off;
}

/* tb_trans: the gpa of a translated instruction, or GPA_NONE. */
uint64_t guest_insn_gpa(const struct qemu_plugin_insn *insn)
{
	uintptr_t h = (uintptr_t)qemu_plugin_insn_haddr(insn);
	uintptr_t base = qemu_ram_base;
	uint64_t gpa;

	if (base == UINTPTR_MAX || !h || h < base ||
	    !ram_layout_gpa(&ram_layout, h - base, &gpa))
		return GPA_NONE;
	return gpa;
}

static bool read_ram_u64(uint64_t gpa, uint64_t *val)
{
	uint64_t *p = guest_ram_block(gpa, sizeof(*p));

	if (!p)
		return false;
	*val = __atomic_load_n(p, __ATOMIC_RELAXED);
	return true;
}

/* The gpa of vaddr in the address space of that page-table root, or
 * GPA_NONE (a FAULT hypercall's page walk). */
uint64_t guest_vaddr_to_gpa(uint64_t page_table, uint64_t vaddr)
{
	return pv.arch->vaddr_to_gpa(page_table, vaddr, read_ram_u64);
}

static struct qemu_plugin_register *reg_handle[N_GUEST_REGS];
static GOnce regs_once = G_ONCE_INIT;

static gpointer find_regs(gpointer unused)
{
	g_autoptr(GArray) regs = qemu_plugin_get_registers();

	for (guint i = 0; regs && i < regs->len; i++) {
		qemu_plugin_reg_descriptor *d =
			&g_array_index(regs, qemu_plugin_reg_descriptor, i);

		for (int r = 0; r < N_GUEST_REGS; r++)
			if (pv.arch->reg_names[r] &&
			    !strcmp(d->name, pv.arch->reg_names[r]))
				reg_handle[r] = d->handle;
	}
	for (int r = 0; r < N_GUEST_REGS; r++)
		if (pv.arch->reg_names[r] && !reg_handle[r])
			pvperf_log("QEMU offers no register '%s' to plugins\n",
				   pv.arch->reg_names[r]);
	return NULL;
}

/* vcpu_init callback (a vCPU context, as qemu_plugin_get_registers needs). */
void guest_regs_init(void)
{
	g_once(&regs_once, find_regs, NULL);
}

bool guest_read_reg(enum guest_reg reg, uint64_t *val)
{
	static __thread GByteArray *buf;

	if (!reg_handle[reg])
		return false;
	if (!buf)
		buf = g_byte_array_sized_new(16);
	g_byte_array_set_size(buf, 0);
	if (qemu_plugin_read_register(reg_handle[reg], buf) < 8 || buf->len < 8)
		return false;
	memcpy(val, buf->data, 8);
	return true;
}

/* The general-purpose registers in pvperf_sample order, 0 in the slots
 * the architecture does not use (no name); false if any cannot be read
 * (then out is incomplete). */
bool guest_read_gprs(uint64_t out[PVPERF_NR_REGS])
{
	for (int r = 0; r < PVPERF_NR_REGS; r++) {
		out[r] = 0;
		if (pv.arch->reg_names[r] &&
		    !guest_read_reg((enum guest_reg)r, &out[r]))
			return false;
	}
	return true;
}

uint64_t guest_runtime_delta(uint64_t tb_vaddr, bool kernel)
{
	uint64_t pc;

	if (kernel || !guest_read_reg(REG_PC, &pc))
		return 0;
	return (pc - tb_vaddr) & GUEST_PAGE_MASK;
}
