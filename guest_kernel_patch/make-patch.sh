#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# make-patch.sh [ARCH] - print the in-tree form of the pvperf guest driver
# for ARCH (x86_64, the default, aarch64 or riscv64), a git-format patch against
# Linux 6.1 that applies to 6.12 as well, on stdout.  It is generated from
# the module's own files so the two never diverge:
#
#   the .c file of each object Kbuild names for ARCH (the generic ones and
#   ARCH's pvperf_<arch>.c), and every .h here
#                 -> DIR/                                  (verbatim)
#   Kbuild's pvperf- lines for ARCH (the objects)
#                 -> DIR/Makefile
#   contracts/pvperf_abi.h
#                 -> DIR/pvperf_abi.h (verbatim; the sources include it as
#                    "pvperf_abi.h", which finds it there, and out of tree
#                    Kbuild's -I finds it in contracts/)
#   plus a Kconfig entry CONFIG_PVPERF_PMU and the line that builds DIR:
#
#   x86_64   DIR = arch/x86/events/pvperf; the entry in
#            arch/x86/events/Kconfig, the line in arch/x86/events/Makefile
#            -> 0001-x86-events-pvperf-paravirtual-PMU.patch
#   aarch64  DIR = arch/arm64/pvperf (beside arm64's other guest-side
#            paravirt code, xen/ and hyperv/); the entry in
#            drivers/perf/Kconfig's "Performance monitor support" menu,
#            where arm64's own PMU drivers are configured; the line in
#            arch/arm64/Kbuild -> 0001-arm64-pvperf-paravirtual-PMU.patch
#   riscv64  DIR = arch/riscv/pvperf; the entry and the line at the top
#            of arch/riscv/Kconfig and arch/riscv/Kbuild (their only
#            lines that 6.1.y and 6.12.y share at the same place)
#            -> 0001-riscv-pvperf-paravirtual-PMU.patch
#
# No two patches touch a file in common, so one tree can take them all
# (each architecture then builds its own copy of the generic files).
#
# Output is deterministic (fixed author and date): `make patch` rewrites
# every patch, tests/vm/test_driver_build.py checks the committed ones
# are what this script prints, and `make check-patch` dry-runs them on
# linux-source-6.1.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# Paths are relative to $here from now on.
cd "$here"

arch=${1:-x86_64}

# The Kconfig entry for the guests of $2 ($1: its depends line).
kconfig_entry() {
	printf '%s\n' "config PVPERF_PMU" \
		"	tristate \"pvperf paravirtual PMU for ${3:-}guests under QEMU TCG\"" \
		"	depends on $1" \
		"	help" \
		"	  A \"cpu\" PMU for $2 guests run by QEMU TCG, which emulates no" \
		"	  hardware PMU, on a host that runs the pvperf TCG plugin and host" \
		"	  service. Each perf event becomes a host event through paravirtual" \
		"	  hypercalls (the KVM paravirt perf ABI of 2010, carried by a marker" \
		"	  store), and the host counts the guest's instructions exactly." \
		"" \
		"	  Without a pvperf host the driver prints one line and does not" \
		"	  register. To compile it as a module, choose M here: the module" \
		"	  will be called pvperf."
}

# Per architecture, where things go: its Kbuild symbol, the patch's
# directory and subject (arch_at); the file, first line and git's
# function line of its Kconfig and its build-line hunks (kconfig_at,
# mk_at).
arch_at() {
	kbuild_config=$1 dir=$2 subject=$3
}
kconfig_at() {
	kconfig_file=$1 kconfig_line=$2 kconfig_func=$3
}
mk_at() {
	mk_file=$1 mk_line=$2 mk_func=$3
}

# Per architecture: the Kbuild symbol of its object line, where the files
# go (the ABI header with them), the patch's subject, and the two hunks on existing files (their
# context is the same, at the same lines, in Linux 6.1.y and 6.12.y).
case $arch in
x86_64)
	arch_at CONFIG_X86_64 arch/x86/events/pvperf \
		'x86/events: pvperf paravirtual PMU for guests under QEMU TCG'
	kconfig_at arch/x86/events/Kconfig 52 'config PERF_EVENTS_AMD_BRS'
	kconfig_ctx_before='	  Enable AMD Zen3 branch sampling support (BRS) which samples up to
	  16 consecutive taken branches in registers.

'
	kconfig_new="$(kconfig_entry 'X86_64 && PERF_EVENTS && TRACEPOINTS' \
		x86_64)

"
	kconfig_ctx_after='endmenu
'
	mk_at arch/x86/events/Makefile 6 \
		'obj-$(CONFIG_X86_LOCAL_APIC)            += msr.o'
	mk_ctx_before='obj-$(CONFIG_CPU_SUP_INTEL)		+= intel/
obj-$(CONFIG_CPU_SUP_CENTAUR)		+= zhaoxin/
obj-$(CONFIG_CPU_SUP_ZHAOXIN)		+= zhaoxin/
'
	mk_new='obj-$(CONFIG_PVPERF_PMU)		+= pvperf/
'
	mk_ctx_after=
	;;
aarch64)
	arch_at CONFIG_ARM64 arch/arm64/pvperf \
		'arm64: pvperf paravirtual PMU for guests under QEMU TCG'
	kconfig_at drivers/perf/Kconfig 6 ''
	kconfig_ctx_before='menu "Performance monitor support"
	depends on PERF_EVENTS

'
	# PERF_EVENTS: the menu's dependency.
	kconfig_new="$(kconfig_entry 'ARM64 && TRACEPOINTS' arm64 'arm64 ')

"
	kconfig_ctx_after='config ARM_CCI_PMU
	tristate "ARM CCI PMU driver"
	depends on (ARM && CPU_V7) || ARM64
'
	mk_at arch/arm64/Kbuild 7 \
		'subdir-ccflags-$(CONFIG_TRACE_BRANCH_PROFILING) += -DDISABLE_BRANCH_PROFILING'
	mk_ctx_before='obj-$(CONFIG_KVM)	+= kvm/
obj-$(CONFIG_XEN)	+= xen/
obj-$(subst m,y,$(CONFIG_HYPERV))	+= hyperv/
'
	mk_new='obj-$(CONFIG_PVPERF_PMU)	+= pvperf/
'
	mk_ctx_after='obj-$(CONFIG_CRYPTO)	+= crypto/

# for cleaning
'
	;;
riscv64)
	arch_at CONFIG_RISCV arch/riscv/pvperf \
		'riscv: pvperf paravirtual PMU for guests under QEMU TCG'
	# The top of arch/riscv/Kconfig and arch/riscv/Kbuild: the only
	# places whose lines are the same in 6.1.y and 6.12.y (and
	# drivers/perf/Kconfig is arm64's patch's).
	kconfig_at arch/riscv/Kconfig 4 ''
	kconfig_ctx_before='# see Documentation/kbuild/kconfig-language.rst.
#

'
	# KPROBES: the page-fault hook is a kprobe on handle_page_fault.
	kconfig_new="$(kconfig_entry \
		'RISCV && 64BIT && PERF_EVENTS && TRACEPOINTS && KPROBES' \
		riscv64 'riscv64 ')

"
	kconfig_ctx_after='config 64BIT
	bool

'
	mk_at arch/riscv/Kbuild 1 ''
	mk_ctx_before='# SPDX-License-Identifier: GPL-2.0-only

'
	mk_new='obj-$(CONFIG_PVPERF_PMU) += pvperf/
'
	mk_ctx_after='obj-y += kernel/ mm/ net/
obj-$(CONFIG_BUILTIN_DTB) += boot/dts/
'
	;;
*)
	echo "make-patch.sh: ARCH is x86_64, aarch64 or riscv64, not '$arch'" >&2
	exit 2
	;;
esac

# The object lines of Kbuild ("pvperf-... := / +=" and their continuations)
# that this architecture's kernel builds: the unconditional ones and the
# one of its own symbol; other architectures' lines stay out, with their
# files.
kbuild_objects=$(awk -v own="pvperf-\$($kbuild_config)" '/^pvperf-/ {
		more = !/^pvperf-\$\(CONFIG_/ || index($0, own) == 1 }
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

# hunk FILE LINE FUNC BEFORE NEW AFTER: a diff of FILE that inserts NEW
# between the context lines BEFORE and AFTER, BEFORE starting at LINE
# (FUNC: what git shows after the line numbers, may be empty).
hunk() {
	old=$(( $(lines "$4") + $(lines "$6") ))
	echo "diff --git a/$1 b/$1"
	echo "--- a/$1"
	echo "+++ b/$1"
	echo "@@ -$2,$old +$2,$((old + $(lines "$5"))) @@${3:+ $3}"
	prefix ' ' "$4"
	prefix + "$5"
	prefix ' ' "$6"
}

diffs() {
	hunk "$kconfig_file" "$kconfig_line" "$kconfig_func" \
		"$kconfig_ctx_before" "$kconfig_new" "$kconfig_ctx_after"
	hunk "$mk_file" "$mk_line" "$mk_func" \
		"$mk_ctx_before" "$mk_new" "$mk_ctx_after"
	printf '%s' "$pvperf_mk" | newfile "$dir/Makefile"
	for f in $sources; do
		newfile "$dir/$f" < "$f"
	done
	newfile "$dir/pvperf_abi.h" < ../contracts/pvperf_abi.h
}

# The files the patch creates, for its summary.
created() {
	echo "$dir/Makefile"
	for f in $sources; do
		echo "$dir/$f"
	done
	echo "$dir/pvperf_abi.h"
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
Subject: [PATCH] $subject

QEMU TCG emulates no hardware PMU, so perf in a guest has software events
only. Add a "cpu" PMU (type PERF_TYPE_RAW) whose events are counted by the
pvperf host, a QEMU TCG plugin and host service, through the KVM paravirt
perf hypercalls of 2010 (OPEN, ENABLE, DISABLE, READ, CLOSE; the host syncs
counts into guest memory), carried by a marker store the plugin recognises.
Samples carry the instruction the host saw overflow; page faults are
reported to the host so that retired-instruction counts stay exact.
Generic code reaches the architecture only through pvperf_arch.h,
implemented for $arch by pvperf_$arch.c.

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
