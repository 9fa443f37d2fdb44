/*
 * memwalk MODE N: ../memwalk.c for riscv64 guests, on this directory's
 * runtime (see aarch64/pages.c for how the include guard does it).  The
 * Makefile builds it without vectorisation or loop-to-memset rewrites
 * (and the guest's CPU has no vector unit), so every access is a 1..8-byte
 * general-register load or store that valgrind and QEMU both see.
 */
#include "freestanding.h"
#include "../memwalk.c"
