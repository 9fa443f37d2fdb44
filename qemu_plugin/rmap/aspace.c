/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * aspace.c - pvperf-rmap.so's timeline of address spaces: the page-table
 * base each vCPU translates under, and a callback on every kernel
 * instruction that writes it (the architecture's decoder finds them,
 * ../arch/arch.h), which records the new base and, with task=, the task it
 * belongs to.  Contexts as in rmap.c: translation on vCPU threads, the
 * callback on the executing vCPU thread without a lock.
 */
#include <string.h>

#include "aspace.h"
#include "out.h"

/* One page-table base write in guest kernel code: the callback's udata. */
struct aspace_site {
	uint64_t guestpc;
	unsigned gpr;
};

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

/* The task this CPU switches to: the task= path from the task register. */
static bool next_task(uint64_t *task)
{
	const struct task_layout *t = &rm.task;
	uint64_t v;

	if (!read_reg(rm.task_reg, &v))
		return false;
	for (unsigned i = 0; i < t->n_path; i++) {
		if (!read_guest_u64(v + t->path[i], &v) || !v)
			return false;
	}
	*task = v;
	return true;
}

/* The linear map's base: the physical address of a kernel pointer p
 * into it is p - base. */
static bool linear_base(uint64_t *base)
{
	if (!rm.task.linear_indirect) {
		*base = rm.task.linear;
		return true;
	}
	return read_guest_u64(rm.task.linear, base);
}

/* The gpa of the top-level table a REG_PAGE_TABLE value names. */
static uint64_t table_gpa(uint64_t val)
{
	return (val & rm.arch->aspace_mask) << rm.arch->aspace_shift;
}

/*
 * The task this CPU switches to, if its address space is `base` (this
 * CPU's rq->curr, which __schedule sets before context_switch; the path
 * to it is the architecture's).  A kernel thread
 * borrowing an mm, or a temporary mm (text_poke), fails the mm->pgd
 * check and stays unnamed.
 */
static bool name_task(uint64_t base, struct rmap_aspace *c)
{
	const struct task_layout *t = &rm.task;
	uint64_t task, mm, pgd, lin;
	uint32_t tgid;

	if (!next_task(&task) ||
	    !read_guest_u64(task + t->mm, &mm) || !mm ||
	    !read_guest_u64(mm + t->pgd, &pgd) || !linear_base(&lin) ||
	    table_gpa((pgd - lin) >> rm.arch->aspace_shift) != base ||
	    !read_guest(task + t->tgid, &tgid, sizeof(tgid)) ||
	    !read_guest(task + t->comm, c->comm, sizeof(c->comm)))
		return false;
	c->tgid = tgid;
	return true;
}

/* ---- the address-space timeline (execution time, rare) ---- */

static void aspace_write(unsigned int vcpu_index, void *udata)
{
	const struct aspace_site *site = udata;
	struct {
		struct rmap_rec_header h;
		struct rmap_aspace c;
	} rec = {
		.h = rec_header(RMAP_REC_ASPACE, sizeof(rec)),
		.c = { .guestpc = site->guestpc, .vcpu = vcpu_index,
		       .tgid = RMAP_NO_PID },
	};
	uint64_t val;

	count(&rm.n_aspace_writes);
	if (!read_reg(rm.gpr[site->gpr], &val)) {
		count(&rm.n_reg_errors);
		return;
	}
	rec.c.page_table_base = table_gpa(val);
	if (rm.task.valid) {
		if (name_task(rec.c.page_table_base, &rec.c)) {
			count(&rm.n_named);
		} else {
			memset(rec.c.comm, 0, sizeof(rec.c.comm));
			count(&rm.n_unnamed);
		}
	}
	write_all(&rec, sizeof(rec));
	__atomic_add_fetch(&rm.aspace_ns, now_ns() - rec.h.monotonic_ns,
			   __ATOMIC_RELAXED);
}

/*
 * rm.lock: the interned site for a page-table base write at guestpc (a kernel TB is
 * translated again after every flush).  Sites are never freed: TBs in the
 * code cache hold them; new code at the same address (a module reloaded)
 * gets a new site.
 */
static struct aspace_site *aspace_site(uint64_t guestpc, unsigned gpr)
{
	struct aspace_site *s = g_hash_table_lookup(rm.sites, &guestpc);

	if (!s || s->gpr != gpr) {
		s = g_new(struct aspace_site, 1);
		s->guestpc = guestpc;
		s->gpr = gpr;
		g_hash_table_insert(rm.sites, &s->guestpc, s);
	}
	return s;
}

void hook_aspace_write(struct qemu_plugin_insn *insn, const uint8_t *code,
		    size_t len)
{
	int gpr = rm.arch->aspace_write_gpr(code, len);
	struct aspace_site *site;

	if (gpr < 0 || !g_atomic_int_get(&rm.have_regs))
		return;
	g_mutex_lock(&rm.lock);
	site = aspace_site(qemu_plugin_insn_vaddr(insn), gpr);
	g_mutex_unlock(&rm.lock);
	qemu_plugin_register_vcpu_insn_exec_cb(insn, aspace_write,
					       QEMU_PLUGIN_CB_R_REGS, site);
}


/*
 * The page-table base of the translating vCPU.  QEMU 10.0's qemu_plugin_read_register
 * only asserts current_cpu (plugins/api.c), which tb_trans has; a QEMU
 * that restricts it to R_REGS callbacks makes this fail, and pyhost then
 * takes it from the timeline instead.
 */
bool translation_page_table(uint64_t *base)
{
	uint64_t val;

	if (!g_atomic_int_get(&rm.have_regs) || !read_reg(rm.aspace, &val))
		return false;
	*base = table_gpa(val);
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
		if (!strcmp(d->name, rm.arch->reg_names[REG_PAGE_TABLE]))
			rm.aspace = d->handle;
		else if (!strcmp(d->name, rm.arch->task_reg))
			rm.task_reg = d->handle;
	}
	if (!rm.aspace || !rm.task_reg || !all_gprs_found())
		rmap_log("register list lacks %s, %s or a general register: "
			 "no address-space timeline\n",
			 rm.arch->reg_names[REG_PAGE_TABLE],
			 rm.arch->task_reg);
	else
		g_atomic_int_set(&rm.have_regs, 1);
}

