#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# build-qemu.sh - build QEMU from the Debian source package the installed
# qemu-system-x86 comes from, with symbols and frame pointers, so that a
# host profile names the emulator's functions (Debian's binaries are
# stripped and their -dbgsym packages live in another archive) and host
# callchains climb from a helper into the translated code that called it.
#
#   scripts/build-qemu.sh [TARGET...]     e.g. x86_64 aarch64 riscv64
#   .venv/bin/pvperf profile --qemu build/qemu/VERSION/build -- ./prog
#
# Opt-in: nothing else in pvperf or the default test suite runs it.  It is
# long: measured on 2 shared cores (nice'd) in docs/guide.md, "A QEMU with
# symbols".  Targets default to x86_64 (one softmmu target; name aarch64
# and riscv64 to build theirs too: configure runs again only when a target
# is new to the tree, with all of them, so they share the common objects).
#
# The source: the orig tarball fetch-plugin-header.sh already keeps in the
# cache (apt-get source of exactly the installed version), plus the Debian
# patch series when the registry has the .debian.tar (it has not for the
# bookworm backport 1:10.0.2+ds-2+deb13u1~bpo12+1: then the build is the
# upstream 10.0.2 tarball, without whatever that upload patches, and says
# so).  meson: QEMU 10.0 needs >= 1.5, and the +ds tarball drops QEMU's
# bundled wheels (meson, pycotap), so a venv under build/qemu takes them
# from PyPI.  Firmware stays the installed one (`pvperf ... --qemu DIR`
# adds the installed QEMU's -L directories: pyhost/cli/options.py).
#
# Output: build/qemu/VERSION/build/qemu-system-TARGET, and configure's and
# each target's time, binary and tree size in
# build/qemu/VERSION/build-times.txt.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(x86_64)

# Headers QEMU's configure requires for system emulation that the plugin's
# own build does not: pixman (the display core is always built), libfdt
# (device trees for aarch64 and riscv64 machines), flex/bison never (no
# dtc subproject with a system libfdt).
deps="libpixman-1-dev libfdt-dev ninja-build python3-venv xz-utils"
missing=$(for d in $deps; do
	dpkg-query -W -f='${db:Status-Abbrev}' "$d" 2>/dev/null | grep -q '^ii' || echo "$d"
done)
if [ -n "$missing" ]; then
	echo "build-qemu: apt-get install $missing"
	apt-get install -y --no-install-recommends $missing
fi

inc=$(qemu_plugin/fetch-plugin-header.sh)	# also fetches the tarball
ver_dir=$(dirname "$inc")
ver=$(basename "$ver_dir")
orig=$(ls "$ver_dir"/download/*.orig.tar.* | head -n 1)
debian=$(ls "$ver_dir"/download/*.debian.tar.* 2>/dev/null | head -n 1 || true)

out=build/qemu/$ver
src=$out/src
mkdir -p "$out"
if [ ! -e "$src/configure" ]; then
	echo "build-qemu: unpacking $(basename "$orig")"
	rm -rf "$src.tmp" && mkdir -p "$src.tmp"
	tar -xf "$orig" -C "$src.tmp" --strip-components=1
	if [ -n "$debian" ]; then
		tar -xf "$debian" -C "$src.tmp"
		while read -r p _; do
			case $p in ''|'#'*) continue ;; esac
			patch -d "$src.tmp" -p1 -s < "$src.tmp/debian/patches/$p"
		done < "$src.tmp/debian/patches/series"
		echo "build-qemu: applied the Debian patch series"
	else
		echo "build-qemu: no Debian patches for $ver in the registry: building the upstream tarball"
	fi
	# The +ds tarball drops the prebuilt firmware (Debian builds it from
	# source in other packages), but QEMU 10.0's meson.build unpacks the
	# EDK2 images whenever bzip2 is found, and fails on their absence.
	sed -i 's/^    unpack_edk2_blobs = bzip2.found()$/    unpack_edk2_blobs = false/' \
		"$src.tmp/meson.build"
	grep -q 'unpack_edk2_blobs = false$' "$src.tmp/meson.build"
	mv "$src.tmp" "$src"
fi

venv=build/qemu/venv
if [ ! -x "$venv/bin/meson" ] || ! "$venv/bin/python3" -c 'import pycotap' 2>/dev/null; then
	/usr/bin/python3 -m venv "$venv"
	"$venv/bin/pip" install -q 'meson>=1.5,<1.9' 'pycotap>=1.1'
fi

bld=$out/build
# One configured tree for every target asked for now or before (sorted, so
# that the order named does not reconfigure): its common objects (the TCG
# core, devices, block layer) are compiled once, and `build-qemu.sh x86_64`
# after a three-target build does not throw the other two away.
have=$(sed -n 's/.*--target-list=\([^ '"'"'"]*\).*/\1/p' "$bld/config.status" 2>/dev/null | tr ',' '\n' || true)
list=$( { printf '%s\n' "$have"; printf '%s-softmmu\n' "${targets[@]}"; } |
	grep . | sort -u | paste -sd, -)
if [ ! -e "$bld/build.ninja" ] || ! grep -q -- "--target-list=$list" "$bld/config.status" 2>/dev/null; then
	mkdir -p "$bld"
	start=$(date +%s)
	# Frame pointers everywhere, leaf functions too, so that perf's
	# frame-pointer unwinding (--call-graph fp) climbs from a helper
	# through its caller; -O2 -g as Debian builds it.
	(cd "$bld" && PATH="$top/$venv/bin:$PATH" ../src/configure \
		--python="$top/$venv/bin/python3" \
		--target-list="$list" \
		--enable-plugins --enable-debug-info --disable-strip \
		--disable-docs --disable-werror --disable-download \
		--disable-gtk --disable-sdl --disable-opengl --disable-vnc \
		--disable-spice --disable-xen --disable-kvm \
		--disable-capstone --disable-rust --disable-install-blobs \
		--extra-cflags="-O2 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer") \
		> "$out/configure.log" 2>&1 ||
		{ tail -30 "$out/configure.log"; echo "build-qemu: configure failed ($out/configure.log)"; exit 1; }
	printf '%s configure (tree %s): %d s\n' "$(date -Is)" "$list" \
		$(($(date +%s) - start)) | tee -a "$out/build-times.txt"
fi
# One target after the other, in the order named: each binary is usable as
# soon as it links, and each gets its own time (the first one's includes
# the common objects the later ones reuse).
for t in "${targets[@]}"; do
	echo "build-qemu: building qemu-system-$t in $bld (log $out/ninja-$t.log)"
	start=$(date +%s)
	PATH="$top/$venv/bin:$PATH" nice -n 19 ninja -C "$bld" -j "$(nproc)" \
		"qemu-system-$t" > "$out/ninja-$t.log" 2>&1 ||
		{ tail -30 "$out/ninja-$t.log"; echo "build-qemu: build failed ($out/ninja-$t.log)"; exit 1; }
	end=$(date +%s)
	"$bld/qemu-system-$t" --version | head -n 1
	size=$(du -sh "$bld" | cut -f1)
	bin=$(du -h "$bld/qemu-system-$t" | cut -f1)
	# (qemu-version.h is generated on every run: not a build)
	if ! grep -Eq '(Compiling|Linking) ' "$out/ninja-$t.log"; then
		echo "build-qemu: qemu-system-$t up to date (binary $bin, build tree $size)"
	else
		printf '%s qemu-system-%s (tree %s): %d s, %d ninja steps, binary %s, build tree %s\n' \
			"$(date -Is)" "$t" "$list" $((end - start)) \
			"$(grep -c '^\[' "$out/ninja-$t.log")" "$bin" "$size" |
			tee -a "$out/build-times.txt"
	fi
done
