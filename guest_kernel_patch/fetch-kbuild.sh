#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# fetch-kbuild.sh - make a Debian kernel build tree for out-of-tree modules
# without installing anything: download linux-headers-KVER, its -common
# package and linux-kbuild-X.Y with `apt-get download`, unpack them with
# `dpkg -x` under the cache, and point the absolute paths in them (the
# headers Makefile's `include /usr/src/...`, the lib/modules build and
# source symlinks) at the unpacked copies.
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
case "$karch" in
amd64)	;;
arm64)	d=$cache/apt/arm64
	ls "$d"/lists/*_Packages* >/dev/null 2>&1 ||
		die "no arm64 package lists in $d" \
			"(run pvperf image build --arch aarch64 once)"
	guest_apt="-o APT::Architectures::=arm64 -o APT::Architecture=arm64
		-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$d/sources
		-o Dir::State=$d/state -o Dir::State::Lists=$d/lists
		-o Dir::State::status=$d/state/status -o Dir::Cache=$d/cache
		-o Debug::NoLocking=true" ;;
*)	die "KARCH=$karch: amd64 or arm64" ;;
esac

# The kernel (meta)package, and the apt release it is taken from ("": the
# candidate), of the image recipe IMAGE names; else linux-image-KARCH.
kmeta=linux-image-$karch
krelease=""
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

if [ -e "$stamp" ]; then
	echo "$kdir"
	exit 0
fi

mkdir -p "$cache"
# Serialise concurrent builds (the images/ builder may run one too).
exec 9>"$cache/.lock"
flock 9
if [ -e "$stamp" ]; then
	echo "$kdir"
	exit 0
fi

headers=linux-headers-$kver
common=$(depends_on "$headers" 'linux-headers-.*-common')
kbuild=$(depends_on "$headers" 'linux-kbuild-.*')
[ -n "$common" ] && [ -n "$kbuild" ] ||
	die "cannot resolve the dependencies of $headers with apt-cache" \
		"(run apt-get update; is KVER=$kver right?)"

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

# Absolute paths inside the packages name the installed locations; make
# them name the final unpacked tree instead.
hdr_mk=$tmp/root/usr/src/$headers/Makefile
grep -q '^include /usr/src/' "$hdr_mk" ||
	die "$hdr_mk has no 'include /usr/src/...' line: package layout changed"
sed -i "s|^include /usr/src/|include $root/usr/src/|" "$hdr_mk"
find "$tmp/root" -type l | while read -r link; do
	target=$(readlink "$link")
	case "$target" in
	/*)	[ -e "$tmp/root$target" ] && ln -sfn "$root$target" "$link" ;;
	esac
done

# The headers' .kernelvariables sets CC to gcc-12 (or whatever built the
# kernel): it must be on the host, as must libelf for objtool.
cc=$(sed -n 's/^CC = .*\$(CROSS_COMPILE)\(gcc-[0-9]*\)$/\1/p' \
	"$tmp/root/usr/src/$headers/.kernelvariables")
[ "$karch" = amd64 ] || cc=${cc:+aarch64-linux-gnu-$cc}
[ -z "$cc" ] || command -v "$cc" >/dev/null ||
	die "$headers builds with $cc: install the package that has it"

touch "$tmp/root/.pvperf-kbuild-ready"
rm -rf "$root"
mv "$tmp/root" "$root"
echo "$kdir"
