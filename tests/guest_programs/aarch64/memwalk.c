/*
 * memwalk MODE N: ../memwalk.c for arm64 guests, on this directory's
 * runtime (see pages.c here for how the include guard does it).  The
 * Makefile builds it without vectorisation or loop-to-memset rewrites,
 * so every access is a 1..8-byte general-register load or store (or an
 * ldp/stp pair) that valgrind and QEMU both see.
 */
#include "freestanding.h"
#include "../memwalk.c"
