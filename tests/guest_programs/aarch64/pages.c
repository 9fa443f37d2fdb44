/*
 * pages N: ../pages.c for arm64 guests.  This directory's freestanding.h
 * comes first; ../pages.c's own #include "freestanding.h" (its directory's
 * x86 runtime) then finds the same include guard, FREESTANDING_H, and
 * adds nothing: the program is built on the arm64 runtime.
 */
#include "freestanding.h"
#include "../pages.c"
