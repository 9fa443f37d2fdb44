/*
 * pages N: ../pages.c for riscv64 guests, on this directory's runtime
 * (see aarch64/pages.c for how the include guard does it).
 */
#include "freestanding.h"
#include "../pages.c"
