#!/bin/sh
# PROTOTYPE (groundwork for the arm64 port; pyhost/image/ will do this in
# Python on the arch seam, so this script may be rewritten or dropped).
#
# apt for arm64 packages in a private directory: the host's own apt state
# (lists, cache, dpkg status) is never touched.  The sources are the
# host's own deb entries (bookworm, bookworm-updates, bookworm-security
# from debian.sources, bookworm-backports from pvperf-backports.sources),
# copied without their deb-src types so `update` fetches Packages only.
#
#   apt-arm64.sh DIR update
#   apt-arm64.sh DIR download PKG...                # into DIR/debs
#   apt-arm64.sh DIR closure PKG...                 # names+versions of the
#                                                   # dependency closure
#   apt-arm64.sh DIR apt-cache ARGS...              # any apt-cache query
#
# The closure uses an EMPTY private dpkg status file: apt then resolves
# every dependency down to libc6, as if installing on a bare arm64 system
# (`apt-get install --download-only` with `-s` prints the Inst lines).
set -eu
DIR=$(realpath -m "$1"); shift
cmd=$1; shift
mkdir -p "$DIR/lists/partial" "$DIR/cache/archives/partial" "$DIR/sources" \
         "$DIR/state" "$DIR/debs"
[ -e "$DIR/state/status" ] || : > "$DIR/state/status"
for f in /etc/apt/sources.list.d/debian.sources \
         /etc/apt/sources.list.d/pvperf-backports.sources; do
	sed 's/^Types:.*/Types: deb/' "$f" > "$DIR/sources/$(basename "$f")"
done
APT_OPTS="-o APT::Architectures::=arm64 -o APT::Architecture=arm64
 -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$DIR/sources
 -o Dir::State=$DIR/state -o Dir::State::Lists=$DIR/lists
 -o Dir::State::status=$DIR/state/status -o Dir::Cache=$DIR/cache
 -o Debug::NoLocking=1"
# $APT_OPTS is split on purpose (DIR has no blanks: checked below).
case $DIR in *[[:space:]]*) echo "DIR must not contain blanks" >&2; exit 2;; esac
case $cmd in
update)    exec apt-get $APT_OPTS update ;;
download)  cd "$DIR/debs" && exec apt-get $APT_OPTS download "$@" ;;
closure)   apt-get $APT_OPTS -s install --no-install-recommends "$@" |
           awk '$1 == "Inst" { v = $3; gsub(/[()]/, "", v); print $2, v }' ;;
apt-cache) exec apt-cache $APT_OPTS "$@" ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
