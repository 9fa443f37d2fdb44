/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hct_gen.h - the call sequence of pvperf_hctest's fuzz mode (hctest_fuzz.c).
 *
 * Plain C over <linux/types.h> and pvperf_abi.h (include that first), so
 * that it builds both in the guest module and on the host:
 * tests/vm/test_robustness.py compiles it with the host gcc and checks that
 * tests/hcfuzz.py, the Python twin that predicts every answer of the host,
 * generates exactly the same calls: one deterministic PRNG on both sides,
 * so the host's expected answers are computed, not written down.
 *
 * Each call draws exactly four numbers: one picks the kind (by weight) and
 * its variant, three more (v[0..2]) feed ids, garbage arguments and the
 * choice of bad address.  This file decides nr, op, the event id and the
 * arguments that are not guest addresses; the module turns the variant
 * into addresses (it alone knows where its buffers are) and attrs.
 *
 * Event ids (see pvperf_abi.h for the index space):
 *   [HCT_FUZZ_ID_BASE, +HCT_NR_FUZZ_IDS)   opened, enabled, closed at
 *                                           random: the model tracks them
 *   [HCT_UNUSED_ID_BASE, PVPERF_MAX_EVENT_ID)  every OPEN with such an id
 *                                           has exactly one defect, so they
 *                                           are never open
 * The guest driver (pvperf.ko) allocates ids from 0 and has none open
 * while the fuzz runs.
 */
#ifndef HCT_GEN_H
#define HCT_GEN_H

#define HCT_FUZZ_ID_BASE	50000u
#define HCT_NR_FUZZ_IDS		16u
#define HCT_UNUSED_ID_BASE	60000u

/* The kinds of call, in the order of hct_weight[] (and hcfuzz.KINDS). */
enum hct_kind {
	HCT_PROBE,		/* PROBE with garbage args: ABI version */
	HCT_BADNR,		/* nr != PVPERF_HC_PERF_OP, any op: -ENOSYS */
	HCT_BADOP,		/* op that no ABI version has: -EINVAL */
	HCT_FAULT,		/* FAULT, garbage ip; mode valid or garbage */
	HCT_PMU,		/* PMU_DISABLE / PMU_ENABLE storm: 0 */
	HCT_ID_UNKNOWN,		/* ENABLE/DISABLE/READ/CLOSE, never-open id */
	HCT_ID_FUZZ,		/* the same on the tracked ids: state */
	HCT_OPEN_VALID,		/* valid OPEN of a tracked id: 0 / -EEXIST */
	HCT_OPEN_ATTR,		/* valid addresses, one attr defect */
	HCT_OPEN_PARAM_ADDR,	/* args[0] (param gpa) bad: -EFAULT */
	HCT_OPEN_ATTR_ADDR,	/* param.attr_addr bad: -EFAULT */
	HCT_OPEN_EVENT_ADDR,	/* param.guest_event_addr bad: -EFAULT */
	HCT_OPEN_BADID,		/* id >= PVPERF_MAX_EVENT_ID: -EINVAL */
	HCT_BADBLOCK,		/* block misaligned or across a page: ignored */
	HCT_NR_KINDS
};

static const __u8 hct_weight[HCT_NR_KINDS] = {
	[HCT_PROBE] = 2,	[HCT_BADNR] = 6,	[HCT_BADOP] = 6,
	[HCT_FAULT] = 6,	[HCT_PMU] = 8,		[HCT_ID_UNKNOWN] = 8,
	[HCT_ID_FUZZ] = 16,	[HCT_OPEN_VALID] = 8,	[HCT_OPEN_ATTR] = 10,
	[HCT_OPEN_PARAM_ADDR] = 6, [HCT_OPEN_ATTR_ADDR] = 6,
	[HCT_OPEN_EVENT_ADDR] = 6, [HCT_OPEN_BADID] = 4, [HCT_BADBLOCK] = 4,
};

#define HCT_WEIGHT_TOTAL	96u

static const __u8 hct_nr_variants[HCT_NR_KINDS] = {
	[HCT_PROBE] = 1,	[HCT_BADNR] = 2,	[HCT_BADOP] = 2,
	[HCT_FAULT] = 2,	[HCT_PMU] = 2,		[HCT_ID_UNKNOWN] = 3,
	[HCT_ID_FUZZ] = 1,	[HCT_OPEN_VALID] = 3,	[HCT_OPEN_ATTR] = 10,
	[HCT_OPEN_PARAM_ADDR] = 6, [HCT_OPEN_ATTR_ADDR] = 5,
	[HCT_OPEN_EVENT_ADDR] = 5, [HCT_OPEN_BADID] = 1, [HCT_BADBLOCK] = 4,
};

/* HCT_OPEN_ATTR variants: the one defect of the attr. */
enum hct_attr_defect {
	HCT_ATTR_TYPE,		/* type not HARDWARE/HW_CACHE/RAW: -ENOENT */
	HCT_ATTR_HW_CACHE,	/* HW_CACHE, any config: -ENOENT */
	HCT_ATTR_HW_CONFIG,	/* HARDWARE config >= 16: -ENOENT */
	HCT_ATTR_RAW_BITS,	/* RAW config beyond event|umask: -EINVAL */
	HCT_ATTR_RAW_UNKNOWN,	/* RAW 0xffff, no such event: -ENOENT */
	HCT_ATTR_FLAGS,		/* a flag outside PVPERF_ATTR_KNOWN: -EINVAL */
	HCT_ATTR_BP_TYPE,	/* breakpoint fields set: -EINVAL */
	HCT_ATTR_BP_ADDR,
	HCT_ATTR_BP_LEN,
	HCT_ATTR_NO_MODE,	/* exclude user and kernel: -EINVAL */
};

/* Bad-address variants of HCT_OPEN_{PARAM,ATTR,EVENT}_ADDR. */
enum hct_bad_addr {
	HCT_ADDR_HUGE,		/* >= 1 TiB */
	HCT_ADDR_STRADDLE,	/* starts in RAM, ends past its end */
	HCT_ADDR_RAM_END,	/* exactly the end of RAM */
	HCT_ADDR_TOP,		/* 2^64 - 8: gpa + size wraps */
	HCT_ADDR_UNALIGNED,	/* in the canary buffer, not 8-aligned */
	HCT_ADDR_CANARY,	/* param only: 8-aligned in the canary, */
				/* its attr_addr reads as >= 2^63 */
};

/* HCT_BADBLOCK variants: where the hypercall block is (in the canary). */
enum hct_bad_block {
	HCT_BLOCK_ALIGN8,	/* 8- but not 64-aligned: the service refuses */
	HCT_BLOCK_ALIGN4,	/* 4-aligned: the plugin refuses */
	HCT_BLOCK_ODD,		/* odd address */
	HCT_BLOCK_CROSS,	/* 8-aligned, crosses a page: plugin refuses */
};

static const __u32 hct_ops[] = {
	PVPERF_OP_OPEN, PVPERF_OP_CLOSE, PVPERF_OP_ENABLE, PVPERF_OP_DISABLE,
	PVPERF_OP_READ, PVPERF_OP_PROBE, PVPERF_OP_FAULT,
	PVPERF_OP_PMU_DISABLE, PVPERF_OP_PMU_ENABLE,
};

#define HCT_NR_OPS	(sizeof(hct_ops) / sizeof(hct_ops[0]))

static const __u32 hct_id_ops[] = {
	PVPERF_OP_ENABLE, PVPERF_OP_DISABLE, PVPERF_OP_READ, PVPERF_OP_CLOSE,
};

struct hct_rng {
	__u64 state;
};

struct hct_call {
	__u32 kind;		/* enum hct_kind */
	__u32 variant;		/* < hct_nr_variants[kind] */
	__u32 nr, op;
	__u64 id;		/* event id, for the kinds that name one */
	__u64 args[3];		/* args[0] of OPEN/BADBLOCK: set by the module */
	__u64 v[3];		/* the raw draws */
};

/*
 * xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
 * generators, scrambled", 2016): shifts 12/25/27, then a multiply.
 */
static inline void hct_seed(struct hct_rng *g, __u64 seed)
{
	g->state = seed ? seed : 0x9e3779b97f4a7c15ULL;	/* never 0 */
}

static inline __u64 hct_rand(struct hct_rng *g)
{
	__u64 x = g->state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	g->state = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static inline __u64 hct_unused_id(__u64 v)
{
	return HCT_UNUSED_ID_BASE + v % (PVPERF_MAX_EVENT_ID - HCT_UNUSED_ID_BASE);
}

/* Ids above the range; param.id is 32 bits wide. */
static inline __u64 hct_big_id(__u64 v)
{
	return PVPERF_MAX_EVENT_ID + v % (0x100000000ULL - PVPERF_MAX_EVENT_ID);
}

static inline void hct_gen_ids(struct hct_call *c)
{
	const __u64 *v = c->v;

	switch (c->kind) {
	case HCT_ID_UNKNOWN:
		c->op = hct_id_ops[v[0] % 4];
		if (c->variant == 0)
			c->id = hct_unused_id(v[1]);
		else if (c->variant == 1)
			c->id = v[1] | (1ULL << 32);
		else
			c->id = hct_big_id(v[1]);
		c->args[0] = c->id;
		c->args[1] = v[2];
		break;
	case HCT_ID_FUZZ:
		c->op = hct_id_ops[v[0] % 4];
		c->id = HCT_FUZZ_ID_BASE + v[1] % HCT_NR_FUZZ_IDS;
		c->args[0] = c->id;
		c->args[1] = v[2];
		break;
	case HCT_OPEN_VALID:
		c->id = HCT_FUZZ_ID_BASE + v[0] % HCT_NR_FUZZ_IDS;
		break;
	case HCT_OPEN_BADID:
		c->id = hct_big_id(v[0]);
		break;
	default:			/* the other OPENs */
		c->id = hct_unused_id(v[0]);
		break;
	}
}

static inline void hct_gen_next(struct hct_rng *g, struct hct_call *c)
{
	__u64 r = hct_rand(g);
	__u32 pick = (__u32)(r % HCT_WEIGHT_TOTAL);
	__u32 k = 0;

	while (pick >= hct_weight[k])
		pick -= hct_weight[k++];
	c->kind = k;
	c->variant = (__u32)((r >> 32) % hct_nr_variants[k]);
	c->v[0] = hct_rand(g);
	c->v[1] = hct_rand(g);
	c->v[2] = hct_rand(g);
	c->nr = PVPERF_HC_PERF_OP;
	c->op = PVPERF_OP_OPEN;
	c->id = 0;
	c->args[0] = c->v[0];
	c->args[1] = c->v[1];
	c->args[2] = c->v[2];

	switch (k) {
	case HCT_PROBE:
		c->op = PVPERF_OP_PROBE;
		break;
	case HCT_BADNR:
		c->nr = (__u32)c->v[0];
		if (c->nr == PVPERF_HC_PERF_OP)
			c->nr = ~c->nr;
		c->op = c->variant ? (__u32)c->v[1] : hct_ops[c->v[1] % HCT_NR_OPS];
		break;
	case HCT_BADOP:
		/*
		 * Never an op of any ABI version: the 2010 KVM interface's
		 * are 1..5 and the extensions are allocated upwards from
		 * 0x100 (PROBE), so stay out of [1, 5] and [0x100, 0xffff].
		 */
		c->op = (__u32)(c->v[0] % 0xfa);
		if (c->variant)
			c->op = c->op ? c->op + 5 : 0;
		else
			c->op = (__u32)c->v[0] | 0x10000;
		break;
	case HCT_FAULT:
		c->op = PVPERF_OP_FAULT;
		if (!c->variant)
			c->args[1] = c->v[1] & 1;	/* a valid PVPERF_MODE_* */
		break;
	case HCT_PMU:
		c->op = c->variant ? PVPERF_OP_PMU_ENABLE : PVPERF_OP_PMU_DISABLE;
		break;
	case HCT_BADBLOCK:
		c->op = PVPERF_OP_PROBE;
		c->args[0] = 0;
		c->args[1] = 0;
		c->args[2] = 0;
		break;
	default:			/* ids and OPENs */
		c->args[1] = c->v[2];
		c->args[2] = ~c->v[2];
		hct_gen_ids(c);
		break;
	}
}

/* The sequence's digest: FNV-1a-style over (kind, ret) of every call. */
#define HCT_FNV_OFFSET	0xcbf29ce484222325ULL
#define HCT_FNV_PRIME	0x100000001b3ULL

static inline __u64 hct_hash(__u64 h, __u32 kind, __s64 ret)
{
	h = (h ^ kind) * HCT_FNV_PRIME;
	return (h ^ (__u64)ret) * HCT_FNV_PRIME;
}

#endif /* HCT_GEN_H */
