/*
 * waitfile PATH [SIGNAL]: sleeps until PATH exists, looking every 100 ms,
 * without forking (a shell loop of `sleep` would burn guest CPU time on
 * each fork and exec): the guest side of a handshake with the host
 * through the share, idle while it waits.  SIGNAL, if given, is created
 * first, once this process runs: the host that waits for it knows the
 * guest has nothing left to do but wait (no exec, no start-up after it).
 */
#include "freestanding.h"

FREESTANDING_START

struct timespec_ { long sec, nsec; };

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	const char *path = sp[0] > 1 ? (const char *)sp[2] : "";
	struct timespec_ t = { 0, 100 * 1000 * 1000 };
	char st[256];

	if (sp[0] > 2) {
		long fd = sys3(2, sp[3], 0101, 0644);	/* open O_WRONLY|O_CREAT */

		if (fd < 0)
			sys_exit(1);
		sys3(3, fd, 0, 0);			/* close */
	}
	while (sys3(4, (long)path, (long)st, 0) < 0)	/* stat */
		sys3(35, (long)&t, 0, 0);		/* nanosleep */
	sys_exit(0);
}
