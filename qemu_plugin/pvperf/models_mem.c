/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * models_mem.c - the models' data accesses: a memory callback per access
 * (models.c says what the models see of them), and the address-space
 * switches that empty the TLBs.
 */
#include "cachesim.h"
#include "core.h"
#include "instrument.h"
#include "model_config.h"
#include "models_int.h"

/* The second 16 bytes of a split 32-byte access: the lines it touches,
 * but no second access, and a miss only if the first half had none. */
static void second_half(struct model_vcpu *m, uint64_t vaddr, bool store,
			bool kernel, struct event_at at)
{
	unsigned acc = store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ;

	m->half_site = 0;
	/* its lines and pages are now the most recent: in a cache of one
	 * set, the first half's no longer is */
	m->last_dblock = CACHE_EMPTY;
	if (instrument_tlb() && cache_ref(&m->dtlb, vaddr, 16) && !m->half_tlb_miss)
		bump(m, store ? PVPERF_M_DTLB_WRITE_MISS :
				PVPERF_M_DTLB_READ_MISS, kernel, at);
	if (!instrument_cache() || !cache_ref(&m->d1, vaddr, 16))
		return;
	if (!m->half_d1_miss)
		bump(m, acc + 1, kernel, at);
	if (ll_ref(vaddr, 16) && !m->half_ll_miss)
		bump(m, store ? PVPERF_M_LL_WRITE_MISS : PVPERF_M_LL_READ_MISS,
		     kernel, at);
}

/* A D1 miss (and the LL behind it): out of line, the rarer case. */
static void __attribute__((noinline))
d1_miss(struct model_vcpu *m, uint64_t vaddr, unsigned size, bool store,
	bool kernel, struct event_at at)
{
	m->half_d1_miss = true;
	bump(m, (store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ) + 1, kernel,
	     at);
	if (ll_ref(vaddr, size)) {
		m->half_ll_miss = true;
		bump(m, store ? PVPERF_M_LL_WRITE_MISS : PVPERF_M_LL_READ_MISS,
		     kernel, at);
	}
}

static void __attribute__((noinline))
dtlb_miss(struct model_vcpu *m, bool store, bool kernel, struct event_at at)
{
	m->half_tlb_miss = true;
	bump(m, store ? PVPERF_M_DTLB_WRITE_MISS : PVPERF_M_DTLB_READ_MISS,
	     kernel, at);
}

#define ACCESS_KIND_KEY	((1ull << 33) - 1)
#define ACCESS_KIND_SHIFT	40

static inline uint64_t mem_kind_key(qemu_plugin_meminfo_t info)
{
	_Static_assert(sizeof(info) == sizeof(uint32_t), "meminfo is 32 bits");
	return (uint64_t)info + 1;
}

/*
 * The accesses that are not new ones, or not wholly: a faulted load seen
 * again, the second half of a split 32-byte access, the store of a
 * modify.  True if the access is done with.
 */
static bool __attribute__((noinline))
mem_access_repeat(struct model_vcpu *m, uint64_t site, uint64_t vaddr,
		  unsigned size, bool store, bool kernel, struct event_at at)
{
	if (!store && m->refault_site) {
		bool again = m->refault_site == site &&
			     m->load_addr == vaddr && m->load_size == size;

		m->refault_site = 0;
		if (again)
			return true;	/* counted before the fault */
	}
	m->refault_site = 0;
	if (size == 16 && m->half_site == site && m->half_end == vaddr &&
	    m->half_store == store) {
		second_half(m, vaddr, store, kernel, at);
		return true;
	}
	if (store && m->load_site == site && m->load_addr == vaddr &&
	    m->load_size == size) {
		m->load_site = 0;	/* a modify: counted as its load */
		m->half_site = 0;
		return true;
	}
	return false;
}

/* One access as the instruction set counts it: the access count with its
 * overflow check, the dTLB and D1 (and LL) references. */
static void count_access(struct model_vcpu *m, const struct mem_site *ms,
			 uint64_t vaddr, unsigned size, bool store,
			 struct event_at at)
{
	uint64_t first = vaddr >> m->d1.line_bits;
	bool kernel = ms->kernel;

	at.addr = vaddr;
	/* an access stalls nothing: add, not bump */
	counters_add(store ? PVPERF_M_D1_WRITE : PVPERF_M_D1_READ, 1, kernel,
		     at);
	if (size == 16 && ms->shape == MEM_HALVES) {
		/* perhaps the first half of an AVX access */
		m->half_site = ms->vaddr;
		m->half_end = vaddr + 16;
		m->half_store = store;
		m->half_d1_miss = m->half_ll_miss = m->half_tlb_miss = false;
	}
	m->last_dblock = first == (vaddr + size - 1) >> m->d1.line_bits ?
			 first : CACHE_EMPTY;
	if (instrument_tlb() && cache_ref(&m->dtlb, vaddr, size))
		dtlb_miss(m, store, kernel, at);
	if (instrument_cache() && cache_ref(&m->d1, vaddr, size))
		d1_miss(m, vaddr, size, store, kernel, at);
}

/*
 * A data access, the whole of it: the repeats, then the access, or a
 * pair's two (MEM_PAIR: each register's half, as cachegrind counts).
 */
static void __attribute__((noinline))
mem_access_full(unsigned vcpu, const struct mem_site *ms, uint64_t vaddr,
		unsigned size, bool store, bool regs)
{
	struct model_vcpu *m = &mv[vcpu];
	uint64_t site = ms->vaddr;
	bool kernel = ms->kernel;
	struct event_at at = { vcpu, site + m->delta[!kernel], vaddr, regs };

	if (ignored(m) ||
	    mem_access_repeat(m, site, vaddr, size, store, kernel, at))
		return;
	m->refault_site = 0;
	m->load_site = store ? 0 : site;
	m->load_addr = vaddr;
	m->load_size = size;
	m->half_site = 0;
	if (ms->shape == MEM_PAIR) {
		count_access(m, ms, vaddr, size / 2, store, at);
		count_access(m, ms, vaddr + size / 2, size / 2, store, at);
	} else {
		count_access(m, ms, vaddr, size, store, at);
	}
}

/* The first access of an instruction of this kind: learn its size. */
static void __attribute__((noinline))
mem_access_new_kind(unsigned vcpu, qemu_plugin_meminfo_t info,
		    uint64_t vaddr, struct mem_site *ms, bool store, bool regs)
{
	unsigned shift = qemu_plugin_mem_size_shift(info);

	/* A pair's kind stays unknown, so that each of its accesses comes
	 * here and on to the full path, which splits it (not the fast path,
	 * which books one access). */
	if (ms->shape != MEM_PAIR)
		__atomic_store_n(&ms->kind[store], (uint64_t)shift <<
				 ACCESS_KIND_SHIFT | mem_kind_key(info),
				 __ATOMIC_RELAXED);
	mem_access_full(vcpu, ms, vaddr, 1u << shift, store, regs);
}

/*
 * A data access; store and regs are constants of each callback below,
 * into which it is inlined.  The common case, a plain access within the
 * last one's D1 block with no slot on it, only books it (a few stores);
 * anything else goes to mem_access_full, in tail position, and the
 * common case calls nothing (gcc 12 then saves two registers, not four).
 */
static inline __attribute__((always_inline)) void
mem_access_at(unsigned vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr,
	      void *udata, bool store, bool regs)
{
	struct mem_site *ms = udata;
	uint64_t kind = __atomic_load_n(&ms->kind[store], __ATOMIC_RELAXED);
	struct model_vcpu *m = &mv[vcpu];
	struct counters_vcpu *cv = counters_of(vcpu);
	uint64_t site = ms->vaddr;
	unsigned size = 1u << (kind >> ACCESS_KIND_SHIFT);
	unsigned ctr = PVPERF_CTR_MODEL(store ? PVPERF_M_D1_WRITE :
					PVPERF_M_D1_READ, !ms->kernel);
	uint64_t block = m->last_dblock;

	if (__builtin_expect((kind & ACCESS_KIND_KEY) != mem_kind_key(info), 0))
		return mem_access_new_kind(vcpu, info, vaddr, ms, store, regs);
	if (__builtin_expect(ignored(m) || m->refault_site || size == 16 ||
			     (store && m->load_site == site) ||
			     (cv->armed & (1ull << ctr)) ||
			     vaddr >> m->d1.line_bits != block ||
			     (vaddr + size - 1) >> m->d1.line_bits != block, 0))
		return mem_access_full(vcpu, ms, vaddr, size, store, regs);
	m->load_site = store ? 0 : site;
	m->load_addr = vaddr;
	m->load_size = size;
	m->half_site = 0;
	cv->ev[ctr - PVPERF_NR_INLINE_COUNTERS]++;
}

/* The memory callbacks: loads and stores apart (which one an access is
 * is known at registration), each also with R_REGS, registered while the
 * service asks for captures. */
#define MEM_CALLBACK(name, store, regs)					\
	void name(unsigned vcpu, qemu_plugin_meminfo_t info,	\
			 uint64_t vaddr, void *udata)			\
	{								\
		mem_access_at(vcpu, info, vaddr, udata, store, regs);	\
	}
MEM_CALLBACK(mem_read, false, false)
MEM_CALLBACK(mem_write, true, false)
MEM_CALLBACK(mem_read_regs, false, true)
MEM_CALLBACK(mem_write_regs, true, true)

/* A write to the page-table root: another address space, with no
 * address-space tags kept in the TLBs (docs/events.md). */
void aspace_exec(unsigned vcpu, void *udata)
{
	cache_reset(&mv[vcpu].itlb);
	cache_reset(&mv[vcpu].dtlb);
	mv[vcpu].last_dblock = CACHE_EMPTY;
	fast_empty_mirrors(fast_of(vcpu));
	fast_unsteady(vcpu, &mv[vcpu]);
}
