/* PROTOTYPE test program: prints the guest physical address of a page it
 * fills with a marker (from /proc/self/pagemap, root only), so the host
 * can check where that page sits in the RAM backing file; then waits (up
 * to 20 s) for the host to write "ACK" at byte 64 of that page through
 * the file, and prints what it found. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *marker = argc > 1 ? argv[1] : "PVPERF-GPA-MARKER";
	char *page = aligned_alloc(4096, 4096);
	memset(page, 0, 4096);
	strcpy(page, marker);
	mlock(page, 4096);
	uint64_t entry = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);
	pread(fd, &entry, 8, ((uintptr_t)page / 4096) * 8);
	uint64_t pfn = entry & ((1ULL << 55) - 1);
	printf("GPA %s vaddr=%p pfn=%#llx gpa=%#llx present=%d\n", marker,
	       (void *)page, (unsigned long long)pfn,
	       (unsigned long long)(pfn * 4096), (int)(entry >> 63));
	fflush(stdout);
	for (int i = 0; i < 2000 && memcmp(page + 64, "ACK", 3); i++)
		usleep(10000);
	printf("HOST-WROTE %.16s\n", page + 64);
	return 0;
}
