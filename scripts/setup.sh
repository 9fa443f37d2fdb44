#!/bin/sh
# Set up everything pvperf needs on a fresh Debian 12 machine, idempotently:
# apt packages (deb-src enabled by deriving it from the existing sources),
# a Python venv with pvperf, the TCG plugin, the guest driver, the guest
# test programs and the default guest image.  Re-running is cheap.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
say() { printf 'pvperf-setup: %s\n' "$*" >&2; }

APT_PACKAGES="qemu-system-x86 qemu-utils libglib2.0-dev libcapstone-dev pkg-config \
 cpio dpkg-dev linux-perf valgrind make gcc binutils kmod xz-utils \
 flex bison bc libelf-dev libssl-dev"
# (flex ... libssl-dev: only the opt-in in-tree kernel build needs them.)

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

enable_deb_src() {
    # qemu-plugin.h only ships in QEMU's source package: derive a deb-src
    # entry from the machine's own deb822 sources (no host name written here).
    if grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ ||
       grep -qs '^deb-src' /etc/apt/sources.list; then
        return 1
    fi
    src=/etc/apt/sources.list.d/debian.sources
    [ -f "$src" ] || { say "no $src to derive deb-src from"; exit 1; }
    say "enabling deb-src (derived from $src)"
    sed 's/^Types: deb$/Types: deb-src/' "$src" |
        sudo_ tee /etc/apt/sources.list.d/pvperf-deb-src.sources >/dev/null
}

missing=""
for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
if enable_deb_src || [ -n "$missing" ]; then
    say "apt-get update"
    sudo_ apt-get update -q >/dev/null
fi
if [ -n "$missing" ]; then
    say "installing:$missing"
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $missing >/dev/null
fi

if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.pvperf-installed ]; then
    say "creating .venv and installing pvperf"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
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
