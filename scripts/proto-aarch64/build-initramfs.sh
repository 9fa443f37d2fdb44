#!/bin/sh
# PROTOTYPE (groundwork for the arm64 port; pyhost/image/ will build arm64
# images on its arch seam, so this script may be rewritten or dropped).
#
# A minimal arm64 initramfs from unpacked Debian arm64 .debs:
#   build-initramfs.sh OUT.cpio INIT ROOT KMOD_ROOT [extra guest paths...]
# ROOT      .debs unpacked with dpkg-deb -x (busybox-static, linux-perf, ...)
# KMOD_ROOT the unpacked linux-image-*-arm64 after `depmod -b KMOD_ROOT KVER`
# MODULES   (env) module names to include, dependencies added from modules.dep
# PROGRAMS  (env) guest paths of dynamically linked programs: each is copied
#           with its shared-library closure (elf-closure.py)
# EXTRA_DIRS (env) guest directories copied whole (e.g. /usr/libexec/valgrind)
# FILES     (env) HOST=GUEST pairs copied as they are (test programs, .ko)
# The cpio is uncompressed: the arm64 Image has no self-decompressor and
# gzip inflation costs boot time under TCG.
set -eu
OUT=$(realpath -m "$1"); INIT=$2; ROOT=$3; KROOT=$4
HERE=$(dirname "$(realpath "$0")")
KVER=$(ls "$KROOT/lib/modules")
S=$(mktemp -d "$(dirname "$OUT")/.stage.XXXXXX")
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/bin" "$S/sbin" "$S/usr/bin" "$S/usr/sbin" "$S/proc" "$S/sys" \
         "$S/dev" "$S/tmp" "$S/run" "$S/etc" "$S/root" "$S/lib/modules/$KVER"
cp "$ROOT/bin/busybox" "$S/bin/busybox"
ln -s busybox "$S/bin/sh"
cp "$INIT" "$S/init"; chmod 755 "$S/init"
# modules: roots + their modules.dep dependencies, in load order (deps first)
: > "$S/lib/modules/load-order"
for m in ${MODULES:-}; do
	line=$(grep -E "/$m\.ko:" "$KROOT/lib/modules/$KVER/modules.dep")
	deps=${line#*:}
	for d in $(echo $deps | tr ' ' '\n' | tac) ${line%%:*}; do
		grep -qx "$d" "$S/lib/modules/load-order" && continue
		mkdir -p "$S/lib/modules/$KVER/$(dirname "$d")"
		cp "$KROOT/lib/modules/$KVER/$d" "$S/lib/modules/$KVER/$d"
		echo "$d" >> "$S/lib/modules/load-order"
	done
done
copy() {  # guest path, preserving symlinks
	mkdir -p "$S$(dirname "$1")"
	cp -P "$ROOT$1" "$S$1"
}
if [ -n "${PROGRAMS:-}" ]; then
	for p in $("$HERE/elf-closure.py" "$ROOT" $PROGRAMS); do copy "$p"; done
fi
for d in ${EXTRA_DIRS:-}; do mkdir -p "$S$(dirname "$d")"; cp -a "$ROOT$d" "$S$d"; done
for f in ${FILES:-}; do
	mkdir -p "$S$(dirname "${f#*=}")"; cp "${f%%=*}" "$S${f#*=}"
done
(cd "$S" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$OUT"
