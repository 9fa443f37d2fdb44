#!/bin/sh
# Set up everything pvperf needs on a fresh Debian 12 machine, idempotently:
# apt packages (deb-src enabled by deriving it from the existing sources),
# a Python venv with pvperf, the TCG plugin, the guest driver, the guest
# test programs and the default guest image.  Re-running is cheap.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
say() { printf 'pvperf-setup: %s\n' "$*" >&2; }

APT_PACKAGES="libglib2.0-dev libcapstone-dev pkg-config \
 cpio dpkg-dev linux-perf valgrind make gcc binutils kmod xz-utils \
 flex bison bc libelf-dev libssl-dev clang libclang-rt-dev gdb"
# (flex ... libssl-dev: only the opt-in in-tree kernel build needs them;
# clang, libclang-rt-dev (libFuzzer and the sanitizers' runtimes): the
# libFuzzer harnesses, qemu_plugin/fuzz/; gdb: the soak test
# shuts a socket down inside pvperf with it.)
# QEMU comes from bookworm-backports on Debian 12 (10.0; bookworm itself has
# 7.2, whose plugin API lacks scoreboards and conditional callbacks) and from
# the distribution itself on Debian 13.
QEMU_PACKAGES="qemu-system-x86 qemu-utils"
QEMU_MIN_MAJOR=10

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

. /etc/os-release
SOURCES=/etc/apt/sources.list.d/debian.sources

# The stanzas of the machine's own deb822 sources that name SUITE itself
# (not SUITE-updates or SUITE-security), so new entries reuse its mirror and
# keyring and no host name is written here.
stanzas_for_suite() {
    awk -v RS= -v ORS='\n\n' -v suite="$1" '
        { n = split($0, lines, "\n")
          for (i = 1; i <= n; i++)
              if (lines[i] ~ /^Suites:/) {
                  m = split(lines[i], w, /[ \t]+/)
                  for (j = 2; j <= m; j++) if (w[j] == suite) { print; next }
              } }' "$SOURCES"
}

write_if_changed() {  # FILE: stdin replaces FILE unless identical
    tmp=$(mktemp)
    cat > "$tmp"
    if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    say "writing $1"
    sudo_ install -m 644 "$tmp" "$1"
    rm -f "$tmp"
}

enable_deb_src() {
    # qemu-plugin.h only ships in QEMU's source package: derive a deb-src
    # entry from the machine's own deb822 sources.
    if grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ ||
       grep -qs '^deb-src' /etc/apt/sources.list; then
        return 1
    fi
    [ -f "$SOURCES" ] || { say "no $SOURCES to derive deb-src from"; exit 1; }
    sed 's/^Types: deb$/Types: deb-src/' "$SOURCES" |
        write_if_changed /etc/apt/sources.list.d/pvperf-deb-src.sources
}

enable_backports() {
    # Debian 12 only: bookworm-backports, derived from the bookworm stanza,
    # binaries and sources (the plugin header comes from the source package).
    # apt preferences let only the QEMU packages come from there.
    [ "${VERSION_CODENAME:-}" = bookworm ] || return 1
    [ -f "$SOURCES" ] || { say "no $SOURCES to derive backports from"; exit 1; }
    changed=1
    stanzas_for_suite bookworm |
        sed -e 's/^Types: .*/Types: deb deb-src/' \
            -e 's/^Suites: .*/Suites: bookworm-backports/' |
        write_if_changed /etc/apt/sources.list.d/pvperf-backports.sources && changed=0
    cat <<PREF | write_if_changed /etc/apt/preferences.d/pvperf-qemu && changed=0
# pvperf: QEMU 10.0 from bookworm-backports, with the two packages whose
# bookworm versions it cannot use (its BIOS and the braille library).
Package: qemu-* seabios libbrlapi*
Pin: release n=bookworm-backports
Pin-Priority: 990
PREF
    return $changed
}

qemu_major() {
    v=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) || return 0
    v=${v#*:}
    echo "${v%%.*}"
}

missing=""
for p in $APT_PACKAGES $QEMU_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
major=$(qemu_major)
[ -n "$major" ] && [ "$major" -lt "$QEMU_MIN_MAJOR" ] && missing="$missing $QEMU_PACKAGES"
updated=""
if enable_deb_src; then updated=1; fi
if enable_backports; then updated=1; fi
if [ -n "$updated" ] || [ -n "$missing" ]; then
    say "apt-get update"
    sudo_ apt-get update -q >/dev/null
fi
if [ -n "$missing" ]; then
    say "installing:$missing"
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $missing >/dev/null
fi
major=$(qemu_major)
if [ -z "$major" ] || [ "$major" -lt "$QEMU_MIN_MAJOR" ]; then
    say "qemu-system-x86 $(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) is older than $QEMU_MIN_MAJOR.0; the plugin needs plugin API v4"
    exit 1
fi

if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.pvperf-installed ]; then
    say "creating .venv and installing pvperf"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test,sweep]'
    touch .venv/.pvperf-installed
fi

say "building the TCG plugin"
make -s -C qemu_plugin
say "building the guest PMU driver"
make -s -C guest_kernel_patch
say "building the guest test programs"
make -s -C tests/guest_programs
say "building the guest image"
.venv/bin/pvperf image build
say "ready"
