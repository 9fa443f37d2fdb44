/*
 * iomix PATH K: the same loop twice, K loads each: io() from the device
 * memory file PATH (a PCI BAR's sysfs resource0: each load a device
 * access the emulator handles in its device model), ram() from an
 * ordinary page.  Both retire the same instructions, so guest-instruction
 * accounting splits them evenly; host time does not.  Exits 0, or 2 if
 * PATH cannot be mapped.
 */
#include "freestanding.h"

FREESTANDING_START

#define O_RDWR		2
#define O_SYNC		04010000
#define PROT_READ	1
#define PROT_RW		3
#define MAP_SHARED	1
#define MAP_PRIVATE_ANON 0x22

__attribute__((noipa)) static unsigned io(const volatile unsigned *p, u64 k)
{
	unsigned x = 0;

	for (u64 i = 0; i < k; i++)
		x += *p;
	return x;
}

__attribute__((noipa)) static unsigned ram(const volatile unsigned *p, u64 k)
{
	unsigned x = 0;

	for (u64 i = 0; i < k; i++)
		x += *p;
	return x;
}

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	const char *path = sp[0] > 1 ? (const char *)sp[2] : "";
	u64 k = arg_u64(sp, 2, 1000);
	long fd = sys3(2, (long)path, O_RDWR | O_SYNC, 0);	/* open */
	long bar, page;

	if (fd < 0)
		sys_exit(2);
	bar = sys6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, fd, 0);
	page = sys6(SYS_mmap, 0, 4096, PROT_RW, MAP_PRIVATE_ANON, -1, 0);
	if ((bar < 0 && bar > -4096) || (page < 0 && page > -4096))
		sys_exit(2);
	io((const volatile unsigned *)bar, k);
	ram((const volatile unsigned *)page, k);
	sys_exit(0);
}
