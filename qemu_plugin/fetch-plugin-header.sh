#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# fetch-plugin-header.sh - put QEMU's qemu-plugin.h, matching the installed
# qemu-system-x86, into the pvperf cache and print its include directory.
#
# No Debian package ships qemu-plugin.h (neither 7.2 nor 10.0), so we take it
# from the Debian source package of exactly the installed version:
#
#   apt-get source --download-only qemu=<source version>
#   tar -xf qemu_<upstream>.orig.tar.xz --wildcards '*/include/qemu/qemu-plugin.h'
#
# We check that the Debian patch series does not touch this header rather
# than assume it, and refuse to guess if an upload changes it.  The registry
# may hold a backport's orig tarball but not its .dsc and .debian.tar (seen
# for 1:10.0.2+ds-2+deb13u1~bpo12+1); apt verifies the orig tarball's
# checksum before it keeps it, so we use it and say that the patch check
# could not be made.
#
# Usage: fetch-plugin-header.sh [CACHE_DIR]
#   CACHE_DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/pvperf/qemu-src
# Prints the directory to pass as -I (it contains qemu-plugin.h).

set -eu

HDR=include/qemu/qemu-plugin.h
CACHE_DIR=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/pvperf/qemu-src}

die() { echo "fetch-plugin-header: $*" >&2; exit 1; }

# The *source* version: a binNMU such as 1:7.2+dfsg-7+deb12u18+b3 is built
# from source version 1:7.2+dfsg-7+deb12u18, which is what apt-get source
# knows.
SRC_PKG=$(dpkg-query -W -f='${source:Package}' qemu-system-x86 2>/dev/null) ||
	die "qemu-system-x86 is not installed (apt-get install qemu-system-x86)"
SRC_VER=$(dpkg-query -W -f='${source:Version}' qemu-system-x86)
[ -n "$SRC_PKG" ] && [ -n "$SRC_VER" ] || die "cannot read qemu-system-x86 source version"

# An epoch's ':' is awkward in paths and make targets.
VER_DIR=$CACHE_DIR/$(printf '%s' "$SRC_VER" | tr ':' '_')
INC_DIR=$VER_DIR/include
if [ -s "$INC_DIR/qemu-plugin.h" ]; then
	echo "$INC_DIR"
	exit 0
fi

have_deb_src() {
	# One-line format (sources.list, *.list) or deb822 (*.sources).
	grep -Eqs '^[[:space:]]*deb-src[[:space:]]' /etc/apt/sources.list \
		/etc/apt/sources.list.d/*.list && return 0
	grep -Eqs '^Types:.*(^|[[:space:]])deb-src([[:space:]]|$)' \
		/etc/apt/sources.list.d/*.sources
}

enable_deb_src() {
	base=/etc/apt/sources.list.d/debian.sources
	dst=/etc/apt/sources.list.d/pvperf-deb-src.sources
	[ -r "$base" ] || die "no deb-src entry and no $base to derive one from; add a deb-src line for the Debian archive by hand"
	[ "$(id -u)" = 0 ] || die "no deb-src entry in apt's sources; as root, run: sed 's/^Types: deb\$/Types: deb-src/' $base > $dst && apt-get update"
	echo "fetch-plugin-header: enabling deb-src in $dst (derived from $base)" >&2
	sed 's/^Types: deb$/Types: deb-src/' "$base" > "$dst.tmp"
	mv "$dst.tmp" "$dst"
	apt-get update >&2
}

download() {
	# apt-get source writes into the current directory.
	(cd "$DL_DIR" && apt-get source --download-only "$SRC_PKG=$SRC_VER") >&2
}

have_deb_src || enable_deb_src

DL_DIR=$VER_DIR/download
mkdir -p "$DL_DIR"
have_orig() { ls "$DL_DIR"/*.orig.tar.* >/dev/null 2>&1; }
if ! have_orig && ! { download || have_orig; }; then
	# deb-src present but its index never fetched: update once, retry.
	[ "$(id -u)" = 0 ] || die "apt-get source $SRC_PKG=$SRC_VER failed; as root run apt-get update and retry"
	apt-get update >&2
	download || have_orig || die "apt-get source $SRC_PKG=$SRC_VER failed"
fi

ORIG=$(ls "$DL_DIR"/*.orig.tar.* | head -n 1)
DEBIAN=$(ls "$DL_DIR"/*.debian.tar.* 2>/dev/null | head -n 1 || true)
[ -n "$DEBIAN" ] ||
	echo "fetch-plugin-header: the registry has no Debian patches for $SRC_VER; using the upstream header from $(basename "$ORIG") unchecked" >&2

# Refuse if the Debian patches modify the header: the orig copy would lie.
if [ -n "$DEBIAN" ] &&
   tar -xOf "$DEBIAN" --wildcards 'debian/patches/*' 2>/dev/null |
   grep -q "^+++ b/$HDR"; then
	die "$DEBIAN patches $HDR; extracting the orig copy would not match the installed QEMU"
fi

mkdir -p "$INC_DIR"
tar -xOf "$ORIG" --wildcards "*/$HDR" > "$INC_DIR/qemu-plugin.h.tmp" ||
	die "no $HDR in $ORIG"
[ -s "$INC_DIR/qemu-plugin.h.tmp" ] || die "empty $HDR extracted from $ORIG"
mv "$INC_DIR/qemu-plugin.h.tmp" "$INC_DIR/qemu-plugin.h"
echo "$INC_DIR"
