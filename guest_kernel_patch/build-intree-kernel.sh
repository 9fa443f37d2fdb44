#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# build-intree-kernel.sh [PATCH] - build a Linux 6.1 kernel with the pvperf
# driver BUILT IN, from the in-tree patch, bootable by the pvperf launcher
# with the default image's initramfs: for x86_64 `qemu-system-x86_64
# -kernel vmlinux` (PVH entry), tests/vm/test_intree_kernel.py; with
# PVPERF_INTREE_ARCH=aarch64 an arm64 Image, cross-compiled
# (ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-) from the arm64 patch and
# booted by `qemu-system-aarch64 -M virt -kernel Image`,
# tests/vm/test_intree_kernel_aarch64.py.
#
#   1. check-patch.sh unpacks Debian's linux-source-6.1 once into
#      ~/.cache/pvperf/linux-source/ (reused) and dry-runs the patch.
#   2. The tree is copied to $OUT/linux (once) and the patch applied with
#      `patch -p1`.  If the patch changed since the last build, the old one
#      (kept as $OUT/applied.patch) is reversed first, so a rebuild only
#      recompiles what the patch touches.
#   3. .config = `make x86_64_defconfig` (arm64: `defconfig`, without the
#      SoC platforms, ARCH_*, none of which QEMU's virt machine is) + the
#      options below (what the image's /init needs, built in: it cannot
#      load the image's Debian modules into this kernel) +
#      CONFIG_PVPERF_PMU=y, then olddefconfig;
#      every option is checked to have stuck.  .config is only replaced
#      when it changes, so a rerun does not rebuild everything.
#   4. `nice -n 19 make -j$JOBS vmlinux` (arm64: `Image`).
#
# OUT defaults to ${XDG_CACHE_HOME:-~/.cache}/pvperf/intree-build
# (intree-build-aarch64 for arm64; override with PVPERF_INTREE_DIR), JOBS
# to 2 (PVPERF_INTREE_JOBS).  A first build takes tens of minutes on 2
# cores (see README.md); the tree is ~2.5 GB. The last line of output is
# the path of the built vmlinux (arm64: arch/arm64/boot/Image).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
arch=${PVPERF_INTREE_ARCH:-x86_64}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pvperf
jobs=${PVPERF_INTREE_JOBS:-2}

die() {
	echo "build-intree-kernel.sh: $*" >&2
	exit 1
}
step() {
	echo "build-intree-kernel.sh: $*" >&2
}

# x86_64: options on top of x86_64_defconfig.  "y" options must end up =y,
# "n" ones unset.
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
x86_want_y="HYPERVISOR_GUEST PVH BLK_DEV_INITRD
PCI VIRTIO_MENU VIRTIO VIRTIO_PCI VIRTIO_CONSOLE
NET_9P NET_9P_VIRTIO 9P_FS NETFS_SUPPORT FW_CFG_SYSFS
DEVTMPFS TMPFS UNIX98_PTYS SERIAL_8250 SERIAL_8250_CONSOLE
PERF_EVENTS FTRACE TRACEPOINTS EVENT_TRACING DEBUG_FS KALLSYMS KALLSYMS_ALL
PVPERF_PMU"
x86_want_n="DRM SOUND CFG80211 MAC80211 WLAN USB_SUPPORT PCCARD NFS_FS"
# arm64: on top of defconfig, the same for QEMU's virt machine (-kernel
# Image boots it directly, no PVH):
#   /init:   the generic PCIe host (virtio-pci devices sit behind it), the
#            PL011 UART as console; the rest as for x86_64
#   speed:   as for x86_64, plus what defconfig builds in for boards and
#            that virt does not have or /init does not use: the SoC
#            platforms' drivers (every ARCH_* of Kconfig.platforms, turned
#            off below), KVM, ACPI (virt boots -kernel with a device tree),
#            storage (SCSI, ATA, MMC, MTD), ethernet, I2C, SPI, regulators,
#            thermal, watchdogs, IIO, PWM, FPGA, DMA engines, mailboxes,
#            remoteprocs, interconnects, crypto engines, staging: ~1,290
#            options =y instead of ~1,700
arm64_want_y="BLK_DEV_INITRD PCI PCI_HOST_GENERIC
VIRTIO_MENU VIRTIO VIRTIO_PCI VIRTIO_CONSOLE
NET_9P NET_9P_VIRTIO 9P_FS NETFS_SUPPORT FW_CFG_SYSFS
DEVTMPFS TMPFS SERIAL_AMBA_PL011 SERIAL_AMBA_PL011_CONSOLE
PERF_EVENTS FTRACE TRACEPOINTS EVENT_TRACING DEBUG_FS KALLSYMS KALLSYMS_ALL
PVPERF_PMU"
arm64_want_n="DRM SOUND CFG80211 MAC80211 WLAN USB_SUPPORT PCCARD NFS_FS
MEDIA_SUPPORT VIRTUALIZATION ACPI WIRELESS MTD SCSI ATA MMC ETHERNET
I2C SPI REGULATOR THERMAL WATCHDOG IIO PWM FPGA DMADEVICES MAILBOX
REMOTEPROC INTERCONNECT CRYPTO_HW STAGING"

case $arch in
x86_64)
	default_patch=0001-x86-events-pvperf-paravirtual-PMU.patch
	default_out=intree-build
	make_arch=
	defconfig=x86_64_defconfig
	want_y=$x86_want_y
	want_n=$x86_want_n
	target=vmlinux
	driver_dir=arch/x86/events/pvperf
	;;
aarch64)
	default_patch=0001-arm64-pvperf-paravirtual-PMU.patch
	default_out=intree-build-aarch64
	make_arch="ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-"
	defconfig=defconfig
	want_y=$arm64_want_y
	want_n=$arm64_want_n
	target=Image
	driver_dir=arch/arm64/pvperf
	;;
*)
	die "PVPERF_INTREE_ARCH is x86_64 or aarch64, not '$arch'"
	;;
esac
patch_file=$(realpath "${1:-$here/$default_patch}")
out=${PVPERF_INTREE_DIR:-$cache/$default_out}
tree=$out/linux

# make with the architecture's ARCH= and CROSS_COMPILE= ($make_arch is
# unquoted on purpose: empty or two words).
kmake() {
	# shellcheck disable=SC2086
	make $make_arch "$@"
}

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
KCONFIG_CONFIG=$new kmake -s $defconfig >/dev/null
for o in $want_y; do scripts/config --file "$new" --enable "$o"; done
for o in $want_n; do scripts/config --file "$new" --disable "$o"; done
if [ "$arch" = aarch64 ]; then
	for o in $(sed -n 's/^config \(ARCH_[A-Z0-9_]*\)$/\1/p' \
			arch/arm64/Kconfig.platforms); do
		scripts/config --file "$new" --disable "$o"
	done
fi
scripts/config --file "$new" --set-str LOCALVERSION "$localversion" \
	--disable LOCALVERSION_AUTO
KCONFIG_CONFIG=$new kmake -s olddefconfig >/dev/null
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
step "make${make_arch:+ $make_arch} -j$jobs $target (nice -n 19)"
start=$(date +%s)
# shellcheck disable=SC2086
nice -n 19 make $make_arch -j"$jobs" $target
grep -q '^CONFIG_PVPERF_PMU=y' include/config/auto.conf ||
	die "CONFIG_PVPERF_PMU=y is not in the build's auto.conf"
[ -f $driver_dir/pvperf_pmu.o ] ||
	die "$driver_dir/pvperf_pmu.o was not built"
step "$target $(cat include/config/kernel.release) built in $(($(date +%s) - start)) s"
case $target in
Image) echo "$tree/arch/arm64/boot/Image" ;;
*) echo "$tree/vmlinux" ;;
esac
