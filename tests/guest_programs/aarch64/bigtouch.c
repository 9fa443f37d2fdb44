/*
 * bigtouch MIB PASSES: ../bigtouch.c for arm64 guests (the arm64 runtime:
 * see pages.c here).
 */
#include "freestanding.h"
#include "../bigtouch.c"
