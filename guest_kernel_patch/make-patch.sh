#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# make-patch.sh - print the in-tree form of the pvperf guest driver, a
# git-format patch against Linux 6.1, on stdout.  It is generated from the
# module's own files so the two never diverge:
#
#   the .c file of each object Kbuild names, and every .h here
#                 -> arch/x86/events/pvperf/              (verbatim)
#   Kbuild's pvperf- lines (the objects)
#                 -> arch/x86/events/pvperf/Makefile
#   pvperf_abi.h  -> arch/x86/include/asm/pvperf_abi.h     (verbatim)
#   plus a Kconfig entry CONFIG_PVPERF_PMU and its line in
#   arch/x86/events/Makefile.
#
# Output is deterministic (fixed author and date): `make patch` rewrites
# 0001-x86-events-pvperf-paravirtual-PMU.patch, tests/vm/test_driver_build.py
# checks the committed patch is what this script prints, and `make
# check-patch` dry-runs it on linux-source-6.1.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# Paths are relative to $here from now on.
cd "$here"

# The context of the two hunks on existing files, as in Linux 6.1.y.
kconfig_ctx_before='	  Enable AMD Zen3 branch sampling support (BRS) which samples up to
	  16 consecutive taken branches in registers.
'
kconfig_new='config PVPERF_PMU
	tristate "pvperf paravirtual PMU for guests under QEMU TCG"
	depends on X86_64 && PERF_EVENTS && TRACEPOINTS
	help
	  A "cpu" PMU for x86_64 guests run by QEMU TCG, which emulates no
	  hardware PMU, on a host that runs the pvperf TCG plugin and host
	  service. Each perf event becomes a host event through paravirtual
	  hypercalls (the KVM paravirt perf ABI of 2010, carried by a marker
	  store), and the host counts the guest'"'"'s instructions exactly.

	  Without a pvperf host the driver prints one line and does not
	  register. To compile it as a module, choose M here: the module
	  will be called pvperf.
'
events_mk_ctx='obj-$(CONFIG_CPU_SUP_INTEL)		+= intel/
obj-$(CONFIG_CPU_SUP_CENTAUR)		+= zhaoxin/
obj-$(CONFIG_CPU_SUP_ZHAOXIN)		+= zhaoxin/
'
events_mk_new='obj-$(CONFIG_PVPERF_PMU)		+= pvperf/
'
# The object lines of Kbuild ("pvperf-... := / +=" and their continuations)
# that an x86 kernel builds: the patch goes under arch/x86, so other
# architectures' lines (pvperf-$(CONFIG_ARM64)) stay out, with their files.
kbuild_objects=$(awk '/^pvperf-/ { more = !/^pvperf-\$\(CONFIG_/ || /CONFIG_X86_64/ }
	more { print; more = /\\$/ }' Kbuild)
pvperf_mk="# SPDX-License-Identifier: GPL-2.0
obj-\$(CONFIG_PVPERF_PMU)	+= pvperf.o
$kbuild_objects
"
# The driver's files: the .c of every object Kbuild names, and the headers.
sources=$( (printf '%s\n' "$kbuild_objects" | grep -o '[A-Za-z0-9_]*\.o' |
	sed 's/\.o$/.c/'; ls -- *.h) | LC_ALL=C sort -u)

lines() {
	printf '%s' "$1" | wc -l | tr -d ' '
}

prefix() {
	printf '%s' "$2" | sed "s/^/$1/"
}

# newfile PATH: a "new file" diff of stdin.
newfile() {
	content=$(cat; echo x)
	content=${content%x}
	echo "diff --git a/$1 b/$1"
	echo "new file mode 100644"
	echo "--- /dev/null"
	echo "+++ b/$1"
	echo "@@ -0,0 +1,$(lines "$content") @@"
	prefix + "$content"
}

kconfig_diff() {
	ctx=$(lines "$kconfig_ctx_before")
	old=$((ctx + 2))
	new=$((old + $(lines "$kconfig_new") + 1))
	echo "diff --git a/arch/x86/events/Kconfig b/arch/x86/events/Kconfig"
	echo "--- a/arch/x86/events/Kconfig"
	echo "+++ b/arch/x86/events/Kconfig"
	echo "@@ -52,$old +52,$new @@ config PERF_EVENTS_AMD_BRS"
	prefix ' ' "$kconfig_ctx_before"
	echo ' '
	prefix + "$kconfig_new"
	echo '+'
	echo ' endmenu'
}

events_mk_diff() {
	echo "diff --git a/arch/x86/events/Makefile b/arch/x86/events/Makefile"
	echo "--- a/arch/x86/events/Makefile"
	echo "+++ b/arch/x86/events/Makefile"
	echo "@@ -6,3 +6,4 @@ obj-\$(CONFIG_X86_LOCAL_APIC)            += msr.o"
	prefix ' ' "$events_mk_ctx"
	prefix + "$events_mk_new"
}

diffs() {
	kconfig_diff
	events_mk_diff
	printf '%s' "$pvperf_mk" | newfile arch/x86/events/pvperf/Makefile
	for f in $sources; do
		newfile "arch/x86/events/pvperf/$f" < "$f"
	done
	newfile arch/x86/include/asm/pvperf_abi.h < ../contracts/pvperf_abi.h
}

# The files the patch creates, for its summary.
created() {
	echo arch/x86/events/pvperf/Makefile
	for f in $sources; do
		echo "arch/x86/events/pvperf/$f"
	done
	echo arch/x86/include/asm/pvperf_abi.h
}

body=$(diffs; echo x)
body=${body%x}
# Every "+" line, less one "+++ b/..." header per file (two changed).
files=$(( $(created | wc -l) + 2 ))
added=$(( $(printf '%s' "$body" | grep -c '^+') - files ))

cat <<EOF
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: pvperf <pvperf@localhost>
Date: Sat, 21 Nov 2026 00:00:00 +0000
Subject: [PATCH] x86/events: pvperf paravirtual PMU for guests under QEMU TCG

QEMU TCG emulates no hardware PMU, so perf in a guest has software events
only. Add a "cpu" PMU (type PERF_TYPE_RAW) whose events are counted by the
pvperf host, a QEMU TCG plugin and host service, through the KVM paravirt
perf hypercalls of 2010 (OPEN, ENABLE, DISABLE, READ, CLOSE; the host syncs
counts into guest memory), carried by a marker store the plugin recognises.
Samples carry the instruction the host saw overflow; page faults are
reported to the host so that retired-instruction counts stay exact.
Generic code reaches the architecture only through pvperf_arch.h,
implemented for x86_64 by pvperf_x86_64.c.

Generated by pvperf guest_kernel_patch/make-patch.sh from the module
source; do not edit, change the module and regenerate.

Signed-off-by: pvperf <pvperf@localhost>
---
 $files files changed, $added insertions(+)
$(created | sed 's/^/ create mode 100644 /')

EOF
printf '%s' "$body"
echo "-- "
echo "pvperf"
echo
