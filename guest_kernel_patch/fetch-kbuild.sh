#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# fetch-kbuild.sh - make a Debian kernel build tree for out-of-tree modules
# without installing anything: download linux-headers-KVER, its -common
# package and linux-kbuild-X.Y with `apt-get download`, unpack them with
# `dpkg -x` under the cache, and point the absolute paths in them (the
# headers Makefile's `include /usr/src/...`, the lib/modules build and
# source symlinks) at the unpacked copies, by relative paths.
#
#   fetch-kbuild.sh          make sure the tree exists; print its KDIR
#   fetch-kbuild.sh --kver   print the KVER that would be used
#
# KARCH=arm64 makes the tree for arm64 guests instead (default amd64): the
# headers come from the private arm64 apt directory the image builder keeps
# (${XDG_CACHE_HOME:-~/.cache}/pvperf/apt/arm64, pyhost/image/aptdir.py;
# `pvperf image build --arch aarch64` fills its lists), linux-kbuild from
# the host's apt, since its fixdep and modpost run on the host.  Build with
# ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- (the Makefile does).
#
# KARCH=riscv64: the headers from the private riscv64 apt directory
# (apt/riscv64-trixie or riscv64-trixie+sid: bookworm has no riscv64
# port, the image recipe takes trixie's, and some packages from sid).
# Their linux-kbuild-V+deb13 is not usable: fixdep and modpost run on the
# host, and trixie's amd64 build of them is linked
# against trixie's glibc 2.41, which this bookworm host lacks (its riscv64
# build, what the headers depend on, does not run here at all).
# bookworm's own linux-kbuild-V+deb12 (the same
# upstream V, the 6.12 kernel bookworm-security carries) is built from
# the same kernel source for this host, so it is taken instead, and the
# headers' links to /usr/lib/linux-kbuild-V+deb13 are pointed at it.
# (Building fixdep and modpost from the headers' scripts/ sources would
# need more: the headers ship no scripts/mod/*.c.)  The headers name
# gcc-14, trixie's compiler; the host's cross gcc is 12, which the
# Makefile passes as CC (what differs: docs in the Makefile).
#
# KVER defaults to what linux-image-amd64 depends on, the same resolution
# the images/ builder uses for the guest kernel, so the module's vermagic
# matches the booted image.  Override with KVER=6.1.0-NN-amd64.
#
# IMAGE=NAME resolves KVER as the image recipe images/NAME/recipe.json
# does: its kernel.package, from its kernel.release when it names one
# (apt's default release for that look-up, e.g. bookworm-backports for
# images/linux-6.12).
# The tree lives in ${XDG_CACHE_HOME:-~/.cache}/pvperf/kbuild/KVER/root.
# Idempotent: a finished tree is reused without touching apt (the .debs
# are not kept).
set -eu

die() {
	echo "fetch-kbuild.sh: $*" >&2
	exit 1
}

karch=${KARCH:-amd64}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pvperf
# apt options selecting the guest architecture's packages (none: the host's).
guest_apt=""
# The private apt directory (pyhost/image/aptdir.py) and the pvperf
# architecture whose image build fills it.
case "$karch" in
amd64)	d="" ;;
arm64)	d=$cache/apt/arm64 parch=aarch64 ;;
# The riscv64 directory is named by the recipe's suites: riscv64-trixie,
# or riscv64-trixie+sid when it takes packages from sid too
# (package_suites); either has trixie's lists, and trixie is the release
# the kernel is taken from (the image builder's default release).
riscv64) parch=riscv64 rv_release=trixie
	for d in "$cache"/apt/riscv64-trixie "$cache"/apt/riscv64-trixie+*; do
		ls "$d"/lists/*_Packages* >/dev/null 2>&1 && break
	done ;;
*)	die "KARCH=$karch: amd64, arm64 or riscv64" ;;
esac
if [ -n "$d" ]; then
	ls "$d"/lists/*_Packages* >/dev/null 2>&1 ||
		die "no $karch package lists in $d" \
			"(run pvperf image build --arch $parch once)"
	guest_apt="-o APT::Architectures::=$karch -o APT::Architecture=$karch
		-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$d/sources
		-o Dir::State=$d/state -o Dir::State::Lists=$d/lists
		-o Dir::State::status=$d/state/status -o Dir::Cache=$d/cache
		-o Debug::NoLocking=true"
fi

# The kernel (meta)package, and the apt release it is taken from ("": the
# candidate), of the image recipe IMAGE names; else linux-image-KARCH.
kmeta=linux-image-$karch
krelease=${rv_release:-}
if [ -n "${IMAGE:-}" ]; then
	recipe=$(cd "$(dirname "$0")/.." && pwd)/images/$IMAGE/recipe.json
	[ -f "$recipe" ] || die "IMAGE=$IMAGE: no $recipe"
	k=$(python3 -c 'import json, sys
k = json.load(open(sys.argv[1]))["kernel"]
print(k["package"], k.get("release", ""))' "$recipe") ||
		die "$recipe: no kernel package"
	kmeta=${k%% *} krelease=${k#* }
fi

# The first "Depends:" of the guest architecture's package $1 that matches
# the sed pattern $2 (the candidate of the release $krelease, if one).
depends_on() {
	# shellcheck disable=SC2086 # word splitting of the options is wanted
	apt-cache $guest_apt ${krelease:+-o APT::Default-Release=$krelease} \
		depends "$1" 2>/dev/null |
		sed -n "s/^ *Depends: \($2\)\$/\1/p" | head -n 1
}

resolve_kver() {
	[ -n "${KVER:-}" ] && { echo "$KVER"; return; }
	img=$(depends_on "$kmeta" 'linux-image-[0-9].*')
	[ -n "$img" ] || die "cannot resolve $kmeta${krelease:+/$krelease} with apt-cache" \
		"(run apt-get update, or set KVER=6.1.0-NN-$karch)"
	echo "${img#linux-image-}"
}

kver=$(resolve_kver)
if [ "${1:-}" = "--kver" ]; then
	echo "$kver"
	exit 0
fi

cache=$cache/kbuild
top=$cache/$kver
root=$top/root
kdir=$root/usr/src/linux-headers-$kver
stamp=$root/.pvperf-kbuild-ready

# A finished tree is one with the stamp whose paths are all relative:
# trees made before (absolute paths into whichever cache made them) break
# when the cache is reached by another path, e.g. a second XDG_CACHE_HOME
# whose kbuild/ is a link to this one, and are made again.
tree_ready() {
	[ -e "$stamp" ] && ! grep -q '^include /' "$kdir/Makefile" 2>/dev/null
}

if tree_ready; then
	echo "$kdir"
	exit 0
fi

mkdir -p "$cache"
# Serialise concurrent builds (the images/ builder may run one too).
exec 9>"$cache/.lock"
flock 9
if tree_ready; then
	echo "$kdir"
	exit 0
fi

headers=linux-headers-$kver
common=$(depends_on "$headers" 'linux-headers-.*-common')
kbuild=$(depends_on "$headers" 'linux-kbuild-.*')
[ -n "$common" ] && [ -n "$kbuild" ] ||
	die "cannot resolve the dependencies of $headers with apt-cache" \
		"(run apt-get update; is KVER=$kver right?)"
# The host's kbuild tools for trixie's headers (see the top): bookworm's
# build of the same upstream version.
guest_kbuild=$kbuild
case "$kbuild" in
*+deb13)
	kbuild=${kbuild%+deb13}+deb12
	apt-cache show "$kbuild" >/dev/null 2>&1 ||
		die "$headers needs $guest_kbuild, whose tools do not run on" \
			"this host, and the host's apt has no $kbuild (the same" \
			"kernel version built for bookworm): run apt-get update" ;;
esac

tmp=$top/tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/debs" "$tmp/root"
# As root, apt drops to _apt to download and warns that _apt cannot write
# into a directory under root's home: download as root instead.
# shellcheck disable=SC2086 # word splitting of the options is wanted
(cd "$tmp/debs" &&
	apt-get $guest_apt download -q -o APT::Sandbox::User=root \
		"$headers" "$common" >&2 &&
	apt-get download -q -o APT::Sandbox::User=root "$kbuild" >&2) ||
	die "apt-get download $headers $common $kbuild failed"
for deb in "$tmp"/debs/*.deb; do
	dpkg -x "$deb" "$tmp/root"
done
if [ "$kbuild" != "$guest_kbuild" ]; then
	ln -sfn "$kbuild" "$tmp/root/usr/lib/$guest_kbuild"
fi

# Absolute paths inside the packages name the installed locations; make
# them name the unpacked tree instead, relative to where they are read, so
# the tree works wherever its cache is reached from (never the absolute
# path of the cache that made it).  The headers Makefile's include is
# taken relative to the Makefile itself (make -C puts nothing else there).
hdr_mk=$tmp/root/usr/src/$headers/Makefile
grep -q '^include /usr/src/' "$hdr_mk" ||
	die "$hdr_mk has no 'include /usr/src/...' line: package layout changed"
sed -i 's|^include /usr/src/|include $(dir $(lastword $(MAKEFILE_LIST)))../|' \
	"$hdr_mk"
find "$tmp/root" -type l | while read -r link; do
	target=$(readlink "$link")
	case "$target" in
	/*)	[ -e "$tmp/root$target" ] && ln -sfn "$(realpath -m \
			--relative-to="$(dirname "$link")" "$tmp/root$target")" "$link" ;;
	esac
done

# The headers' .kernelvariables sets CC to gcc-12 (or whatever built the
# kernel): it must be on the host, as must libelf for objtool.
cc=$(sed -n 's/^CC = .*\$(CROSS_COMPILE)\(gcc-[0-9]*\)$/\1/p' \
	"$tmp/root/usr/src/$headers/.kernelvariables")
case "$karch" in
arm64)	cc=${cc:+aarch64-linux-gnu-$cc} ;;
# gcc-14 named; the Makefile builds with the host's gcc-12 (CC=)
riscv64) cc=riscv64-linux-gnu-gcc-12 ;;
esac
[ -z "$cc" ] || command -v "$cc" >/dev/null ||
	die "$headers builds with $cc: install the package that has it"

touch "$tmp/root/.pvperf-kbuild-ready"
rm -rf "$root"
mv "$tmp/root" "$root"
echo "$kdir"
