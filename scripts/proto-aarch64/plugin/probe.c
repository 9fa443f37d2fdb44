/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PROTOTYPE (groundwork for the arm64 port; the real code goes behind the
 * plugin's arch seam, so this may be rewritten or dropped).
 *
 * probe.so - what a TCG plugin sees on qemu-system-aarch64:
 *   - info->target_name, system_emulation, max_vcpus (at install);
 *   - the register list of qemu_plugin_get_registers() (first vCPU init;
 *     regs=all prints every name, else the general registers and a few
 *     system registers the port may want);
 *   - the proposed arm64 doorbell, `stur w16, [x17]` (0xb8000230) at a
 *     kernel-half address (VA bit 55 set: the TTBR1 half): recognised at
 *     translation, a write memory callback gives the store's guest
 *     physical address, and x16/x17/pc are read in that callback;
 *   - an instruction-class census of executed kernel/user TBs by the
 *     arm64 encoding groups (the A64 top-level decode, no capstone).
 * Options: regs=all, verbose=on.
 */
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define DOORBELL_INSN	0xb8000230u	/* stur w16, [x17] */

static bool all_regs;
static bool printed_regs;
static struct qemu_plugin_register *reg_x16, *reg_x17, *reg_pc, *reg_ttbr0, *reg_ttbr1;
static uint64_t doorbells_translated, doorbells_executed;
static uint64_t kernel_tbs, user_tbs;

static bool vaddr_is_kernel(uint64_t vaddr)
{
	return vaddr & (1ULL << 55);	/* TTBR1 half, whatever the VA size */
}

static void list_registers(void)
{
	g_autoptr(GArray) regs = qemu_plugin_get_registers();
	GString *line = g_string_new("probe: registers:");

	for (guint i = 0; i < regs->len; i++) {
		qemu_plugin_reg_descriptor *r =
			&g_array_index(regs, qemu_plugin_reg_descriptor, i);
		if (!strcmp(r->name, "x16"))
			reg_x16 = r->handle;
		if (!strcmp(r->name, "x17"))
			reg_x17 = r->handle;
		if (!strcmp(r->name, "pc"))
			reg_pc = r->handle;
		if (!strcmp(r->name, "TTBR0_EL1"))
			reg_ttbr0 = r->handle;
		if (!strcmp(r->name, "TTBR1_EL1"))
			reg_ttbr1 = r->handle;
		if (all_regs || i < 40 || strstr(r->name, "TTBR") ||
		    strstr(r->name, "ESR") || strstr(r->name, "FAR") ||
		    strstr(r->name, "ELR") || strstr(r->name, "TPIDR") ||
		    strstr(r->name, "CONTEXTIDR"))
			g_string_append_printf(line, " %s(%s)", r->name,
					       r->feature ? r->feature : "");
	}
	g_string_append_printf(line, "\nprobe: %u registers in all\n", regs->len);
	qemu_plugin_outs(line->str);
	g_string_free(line, TRUE);
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
	if (!printed_regs) {
		printed_regs = true;
		list_registers();
	}
}

static uint64_t read_reg64(struct qemu_plugin_register *reg)
{
	g_autoptr(GByteArray) buf = g_byte_array_new();
	uint64_t v = 0;

	if (reg && qemu_plugin_read_register(reg, buf) >= 8)
		memcpy(&v, buf->data, 8);
	return v;
}

static void doorbell_mem(unsigned int vcpu, qemu_plugin_meminfo_t info,
			 uint64_t vaddr, void *udata)
{
	struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
	uint64_t gpa = hw ? qemu_plugin_hwaddr_phys_addr(hw) : ~0ULL;
	char msg[320];

	if (doorbells_executed++ < 4) {
		snprintf(msg, sizeof(msg), "probe: doorbell vcpu %u insn %#" PRIx64
			 " vaddr %#" PRIx64 " gpa %#" PRIx64 " x16 %#" PRIx64
			 " x17 %#" PRIx64 " pc %#" PRIx64 " ttbr0 %#" PRIx64
			 " ttbr1 %#" PRIx64 " size %u store %d\n",
			 vcpu, (uint64_t)(uintptr_t)udata, vaddr, gpa,
			 read_reg64(reg_x16), read_reg64(reg_x17),
			 read_reg64(reg_pc), read_reg64(reg_ttbr0),
			 read_reg64(reg_ttbr1),
			 1u << qemu_plugin_mem_size_shift(info),
			 qemu_plugin_mem_is_store(info));
		qemu_plugin_outs(msg);
	}
}

static uint32_t insn_word(struct qemu_plugin_insn *insn)
{
	uint32_t w = 0;

	qemu_plugin_insn_data(insn, &w, sizeof(w));
	return w;	/* A64 is little-endian here (Linux arm64 LE) */
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);
	bool kernel = vaddr_is_kernel(qemu_plugin_tb_vaddr(tb));

	__atomic_add_fetch(kernel ? &kernel_tbs : &user_tbs, 1, __ATOMIC_RELAXED);
	if (!kernel)
		return;
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);

		if (qemu_plugin_insn_size(insn) != 4 || insn_word(insn) != DOORBELL_INSN)
			continue;
		__atomic_add_fetch(&doorbells_translated, 1, __ATOMIC_RELAXED);
		qemu_plugin_register_vcpu_mem_cb(insn, doorbell_mem,
						 QEMU_PLUGIN_CB_R_REGS,
						 QEMU_PLUGIN_MEM_W,
						 (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn));
	}
}

static void plugin_exit(qemu_plugin_id_t id, void *p)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "probe: exit: kernel TBs %" PRIu64
		 ", user TBs %" PRIu64 ", doorbells translated %" PRIu64
		 ", executed %" PRIu64 "\n", kernel_tbs, user_tbs,
		 doorbells_translated, doorbells_executed);
	qemu_plugin_outs(msg);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	char msg[256];

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "regs=all")) {
			all_regs = true;
		} else {
			fprintf(stderr, "probe: unknown option %s\n", argv[i]);
			return -1;
		}
	}
	snprintf(msg, sizeof(msg), "probe: target_name=%s system_emulation=%d "
		 "max_vcpus=%d smp_vcpus=%d version cur=%d min=%d\n",
		 info->target_name, info->system_emulation,
		 info->system.max_vcpus, info->system.smp_vcpus,
		 info->version.cur, info->version.min);
	qemu_plugin_outs(msg);
	qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, plugin_exit, NULL);
	return 0;
}
