/*
 * devread PATH K: maps the device memory file PATH (a PCI BAR's sysfs
 * resource0) and reads its first 32-bit register K times, each a load
 * from device memory (one MMIO access).  Exits 0 if the register reads
 * as QEMU's edu device's identification (0x010000ed: version 1.0, edu's
 * docs/specs/edu.rst), 3 if not, 2 if the file cannot be mapped: the
 * analytic reference is K accesses.
 */
#include "freestanding.h"

FREESTANDING_START

#define O_RDWR		2
#define O_SYNC		04010000
#define PROT_READ	1
#define MAP_SHARED	1
#define EDU_IDENT	0x010000edU

__attribute__((noreturn, used)) void main_sp(long *sp)
{
	const char *path = sp[0] > 1 ? (const char *)sp[2] : "";
	u64 k = arg_u64(sp, 2, 1000);
	long fd = sys3(2, (long)path, O_RDWR | O_SYNC, 0);	/* open */
	long addr;
	unsigned ident = 0;

	if (fd < 0)
		sys_exit(2);
	addr = sys6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (addr < 0 && addr > -4096)
		sys_exit(2);
	for (u64 i = 0; i < k; i++)
		ident = *(volatile unsigned *)addr;
	sys_exit(k && ident != EDU_IDENT ? 3 : 0);
}
