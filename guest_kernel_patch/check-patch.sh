#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# check-patch.sh [PATCH] - dry-run the in-tree patch on Debian's
# linux-source-6.1 tree: `patch --dry-run -p1`, nothing is changed.
#
# The first run downloads linux-source-6.1 (~140 MB, `apt-get download`)
# and unpacks its tarball into ${XDG_CACHE_HOME:-~/.cache}/pvperf/
# linux-source/linux-source-6.1 (~1.3 GB, ~15 s); later runs reuse it.
# Prints the tree's path on the last line.
#
# Another tree: LINUX_SOURCE_PKG=linux-source-6.12 and, for the one the
# linux-6.12 image's kernel comes from, LINUX_SOURCE_RELEASE=
# bookworm-backports (apt-get download PKG/RELEASE; Debian 12's security
# suite has a newer linux-source-6.12 of its own).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
patch_file=${1:-$here/0001-x86-events-pvperf-paravirtual-PMU.patch}
pkg=${LINUX_SOURCE_PKG:-linux-source-6.1}
release=${LINUX_SOURCE_RELEASE:-}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pvperf/linux-source
tree=$cache/$pkg
stamp=$cache/.$pkg-ready

die() {
	echo "check-patch.sh: $*" >&2
	exit 1
}

if [ ! -e "$stamp" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
fi
if [ ! -e "$stamp" ]; then
	tmp=$cache/tmp.$$
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp"
	# As root, keep apt from dropping to _apt, which cannot write here.
	(cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root \
		"$pkg${release:+/$release}" >&2) ||
		die "apt-get download $pkg${release:+/$release} failed (run apt-get update?)"
	dpkg -x "$tmp"/"$pkg"_*.deb "$tmp/x"
	tar -C "$tmp" -xf "$tmp/x/usr/src/$pkg.tar.xz"
	rm -rf "$tree"
	mv "$tmp/$pkg" "$tree"
	touch "$stamp"
fi

patch -d "$tree" -p1 --dry-run --force < "$patch_file" ||
	die "$patch_file does not apply to $tree"
echo "$tree"
