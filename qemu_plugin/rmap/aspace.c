/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * aspace.c - pvperf-rmap.so's timeline of address spaces: the page-table
 * base each vCPU translates under, and a callback on every kernel
 * instruction that writes it (the architecture's decoder finds them,
 * arch.h), which records the new base and, with task=, the task it
 * belongs to.  Contexts as in rmap.c: translation on vCPU threads, the
 * callback on the executing vCPU thread without a lock.
 */
#include <string.h>

#include "rmap.h"

static __thread GByteArray *scratch;	/* register and memory reads */

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
 * The task this CPU switches to, if its address space is `base`: the
 * CPU's runqueues.curr (found from this CPU's per-cpu base).  A
 * kernel thread borrowing an mm, or a temporary mm (text_poke), fails
 * the mm->pgd check and stays unnamed.
 */
static bool name_task(uint64_t base, struct rmap_cr3 *c)
{
	const struct task_layout *t = &rm.task;
	uint64_t percpu, task, mm, pgd, pob;
	uint32_t tgid;

	if (!read_reg(rm.percpu, &percpu) ||
	    !read_guest_u64(percpu + t->curr, &task) || !task ||
	    !read_guest_u64(task + t->mm, &mm) || !mm ||
	    !read_guest_u64(mm + t->pgd, &pgd) ||
	    !read_guest_u64(t->page_offset_base, &pob) ||
	    ((pgd - pob) & rm.arch->aspace_mask) != base ||
	    !read_guest(task + t->tgid, &tgid, sizeof(tgid)) ||
	    !read_guest(task + t->comm, c->comm, sizeof(c->comm)))
		return false;
	c->tgid = tgid;
	return true;
}

/* ---- the address-space timeline (execution time, rare) ---- */

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
	rec.c.cr3 = val & rm.arch->aspace_mask;
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

/*
 * rm.lock: the interned site for a page-table base write at guestpc (a kernel TB is
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

void hook_cr3_write(struct qemu_plugin_insn *insn, const uint8_t *code,
		    size_t len)
{
	int gpr = rm.arch->aspace_write_gpr(code, len);
	struct cr3_site *site;

	if (gpr < 0 || !g_atomic_int_get(&rm.have_regs))
		return;
	g_mutex_lock(&rm.lock);
	site = cr3_site(qemu_plugin_insn_vaddr(insn), gpr);
	g_mutex_unlock(&rm.lock);
	qemu_plugin_register_vcpu_insn_exec_cb(insn, cr3_write,
					       QEMU_PLUGIN_CB_R_REGS, site);
}


/*
 * The page-table base of the translating vCPU.  QEMU 10.0's qemu_plugin_read_register
 * only asserts current_cpu (plugins/api.c), which tb_trans has; a QEMU
 * that restricts it to R_REGS callbacks makes this fail, and pyhost then
 * takes it from the timeline instead.
 */
bool translation_cr3(uint64_t *base)
{
	uint64_t val;

	if (!g_atomic_int_get(&rm.have_regs) || !read_reg(rm.aspace, &val))
		return false;
	*base = val & rm.arch->aspace_mask;
	return true;
}


static bool all_gprs_found(void)
{
	for (unsigned k = 0; k < rm.arch->n_gprs; k++) {
		if (!rm.gpr[k])
			return false;
	}
	return true;
}

/* rm.lock: the handles of the registers the plugin reads. */
void find_registers(void)
{
	g_autoptr(GArray) regs = qemu_plugin_get_registers();

	for (guint i = 0; i < regs->len; i++) {
		qemu_plugin_reg_descriptor *d =
			&g_array_index(regs, qemu_plugin_reg_descriptor, i);

		for (unsigned k = 0; k < rm.arch->n_gprs; k++) {
			if (!strcmp(d->name, rm.arch->gpr_names[k]))
				rm.gpr[k] = d->handle;
		}
		if (!strcmp(d->name, rm.arch->aspace_reg))
			rm.aspace = d->handle;
		else if (!strcmp(d->name, rm.arch->percpu_reg))
			rm.percpu = d->handle;
	}
	if (!rm.aspace || !rm.percpu || !all_gprs_found())
		rmap_log("register list lacks %s, %s or a general register: "
			 "no address-space timeline\n", rm.arch->aspace_reg,
			 rm.arch->percpu_reg);
	else
		g_atomic_int_set(&rm.have_regs, 1);
}

