/*
 * freestanding_args.h - argument parsing of the freestanding programs,
 * the same on every architecture (included by each freestanding.h after
 * its u64 typedef; main_sp gets the initial stack: argc, argv...).
 */
#ifndef FREESTANDING_ARGS_H
#define FREESTANDING_ARGS_H

static inline u64 parse_u64(const char *s)
{
	u64 v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (u64)(*s++ - '0');
	return v;
}

/* The n-th argument as a number, or dflt. */
static inline u64 arg_u64(long *sp, int n, u64 dflt)
{
	return sp[0] > n ? parse_u64((const char *)sp[1 + n]) : dflt;
}

#endif
