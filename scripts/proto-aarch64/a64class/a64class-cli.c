/* PROTOTYPE: reads hex instruction words (one per line, first token),
 * prints "word class-bits" for the checker. */
#include <stdio.h>
#include <stdlib.h>
#include "a64class.h"

int main(void)
{
	char line[512];

	while (fgets(line, sizeof(line), stdin)) {
		unsigned long w = strtoul(line, NULL, 16);
		printf("%08lx %u\n", w, a64_classify((uint32_t)w));
	}
	return 0;
}
