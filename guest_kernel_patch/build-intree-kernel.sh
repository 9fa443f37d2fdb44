#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# build-intree-kernel.sh [PATCH] - build a Linux 6.1 kernel with the pvperf
# driver BUILT IN, from the in-tree patch, bootable by the pvperf launcher
# (`qemu-system-x86_64 -kernel vmlinux`, PVH entry) with the default
# image's initramfs.  tests/vm/test_intree_kernel.py runs it.
#
#   1. check-patch.sh unpacks Debian's linux-source-6.1 once into
#      ~/.cache/pvperf/linux-source/ (reused) and dry-runs the patch.
#   2. The tree is copied to $OUT/linux (once) and the patch applied with
#      `patch -p1`.  If the patch changed since the last build, the old one
#      (kept as $OUT/applied.patch) is reversed first, so a rebuild only
#      recompiles what the patch touches.
#   3. .config = `make x86_64_defconfig` + the options below (what the
#      image's /init needs, built in: it cannot load the image's Debian
#      modules into this kernel) + CONFIG_PVPERF_PMU=y, then olddefconfig;
#      every option is checked to have stuck.  .config is only replaced
#      when it changes, so a rerun does not rebuild everything.
#   4. `nice -n 19 make -j$JOBS vmlinux`.
#
# OUT defaults to ${XDG_CACHE_HOME:-~/.cache}/pvperf/intree-build (override
# with PVPERF_INTREE_DIR), JOBS to 2 (PVPERF_INTREE_JOBS).  A first build
# takes tens of minutes on 2 cores (see README.md); the tree is ~2.5 GB.
# The last line of output is the path of the built vmlinux.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
patch_file=$(realpath "${1:-$here/0001-x86-events-pvperf-paravirtual-PMU.patch}")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pvperf
out=${PVPERF_INTREE_DIR:-$cache/intree-build}
jobs=${PVPERF_INTREE_JOBS:-2}
tree=$out/linux

die() {
	echo "build-intree-kernel.sh: $*" >&2
	exit 1
}
step() {
	echo "build-intree-kernel.sh: $*" >&2
}

# Options on top of x86_64_defconfig.  "y" options must end up =y, "n"
# ones unset; a string is set as is.
#   boot:    PVH entry point (qemu -kernel vmlinux boots ELF kernels via
#            PVH only), initramfs
#   /init:   virtio-pci + virtio-serial (control/stdout/stderr ports),
#            9p over virtio (the share; 9P_FS selects NETFS_SUPPORT),
#            fw_cfg in sysfs (the command), devtmpfs, tmpfs, tracefs,
#            debugfs
#   driver:  perf events, tracepoints (the page-fault probes), kallsyms
#   speed:   drivers a headless -nodefaults TCG guest never sees (DRM,
#            sound, wireless, USB, PC Card) and NFS are left out: about a
#            quarter of defconfig's compile time
want_y="HYPERVISOR_GUEST PVH BLK_DEV_INITRD
PCI VIRTIO_MENU VIRTIO VIRTIO_PCI VIRTIO_CONSOLE
NET_9P NET_9P_VIRTIO 9P_FS NETFS_SUPPORT FW_CFG_SYSFS
DEVTMPFS TMPFS UNIX98_PTYS SERIAL_8250 SERIAL_8250_CONSOLE
PERF_EVENTS FTRACE TRACEPOINTS EVENT_TRACING DEBUG_FS KALLSYMS KALLSYMS_ALL
PVPERF_PMU"
want_n="DRM SOUND CFG80211 MAC80211 WLAN USB_SUPPORT PCCARD NFS_FS"
localversion=-pvperf

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# 1. the pristine source (downloaded and unpacked once) + dry run
src=$("$here/check-patch.sh" "$patch_file" | tail -n 1)
[ -f "$src/Makefile" ] || die "no kernel tree at '$src'"

# 2. the build tree, patched
fresh_tree() {
	step "copying $src to $tree"
	rm -rf "$tree" "$tree.tmp" "$out/applied.patch" "$out/.tree-ready"
	cp -a "$src" "$tree.tmp"
	mv "$tree.tmp" "$tree"
	touch "$out/.tree-ready"
}
[ -e "$out/.tree-ready" ] || fresh_tree
if [ -e "$out/applied.patch" ] && ! cmp -s "$out/applied.patch" "$patch_file"; then
	step "the patch changed: reversing the old one"
	if patch -d "$tree" -p1 -R --force -s < "$out/applied.patch"; then
		rm -f "$out/applied.patch"
	else
		step "cannot reverse the old patch: starting from a fresh tree"
		fresh_tree
	fi
fi
if [ ! -e "$out/applied.patch" ]; then
	step "applying $patch_file"
	patch -d "$tree" -p1 --forward -s < "$patch_file" ||
		die "$patch_file does not apply to $tree"
	cp "$patch_file" "$out/applied.patch"
fi

# 3. configuration, generated aside and swapped in only when it differs
cd "$tree"
new=.config.pvperf-new
rm -f "$new"
KCONFIG_CONFIG=$new make -s x86_64_defconfig >/dev/null
for o in $want_y; do scripts/config --file "$new" --enable "$o"; done
for o in $want_n; do scripts/config --file "$new" --disable "$o"; done
scripts/config --file "$new" --set-str LOCALVERSION "$localversion" \
	--disable LOCALVERSION_AUTO
KCONFIG_CONFIG=$new make -s olddefconfig >/dev/null
bad=
for o in $want_y; do
	grep -qx "CONFIG_$o=y" "$new" || bad="$bad CONFIG_$o=y"
done
for o in $want_n; do
	grep -q "^CONFIG_$o=" "$new" && bad="$bad CONFIG_$o=n"
done
[ -z "$bad" ] || die "options did not stick after olddefconfig:$bad"
if cmp -s "$new" .config; then
	rm -f "$new"
	step "configuration unchanged"
else
	mv "$new" .config
	step "configuration written ($tree/.config)"
fi

# 4. build
step "make -j$jobs vmlinux (nice -n 19)"
start=$(date +%s)
nice -n 19 make -j"$jobs" vmlinux
grep -q '^CONFIG_PVPERF_PMU=y' include/config/auto.conf ||
	die "CONFIG_PVPERF_PMU=y is not in the build's auto.conf"
[ -f arch/x86/events/pvperf/pvperf_pmu.o ] ||
	die "arch/x86/events/pvperf/pvperf_pmu.o was not built"
step "vmlinux $(cat include/config/kernel.release) built in $(($(date +%s) - start)) s"
echo "$tree/vmlinux"
