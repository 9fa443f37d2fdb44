#!/bin/bash
# Set pvperf up on a Debian 12 or 13 machine, idempotently (re-running is
# cheap: what is there is kept):
#
#   scripts/setup.sh --tier main   what `pvperf run` uses (scripts/demo.sh):
#                                  QEMU 10, pvperf in .venv, the TCG plugin,
#                                  the guest PMU driver, the default image
#   scripts/setup.sh [--tier test] main plus what the test suite uses
#                                  (scripts/test.sh): valgrind, gdb, clang,
#                                  the kernel build's tools, pytest, Ray...
#
# Each step says what it does and how long it took.  apt comes first; pip,
# the plugin, the driver and the guest programs then build side by side
# (each step's output in build/setup/STEP.log, shown if it fails); the
# guest image last, since it carries the driver.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# Debian packages, one list per purpose; a tier names the purposes it
# installs.  (A guest architecture adds its own list, its QEMU and cross
# compiler, named by the tier that needs it: aarch64's by the tests.)
declare -A APT=(
    [python]="python3 python3-venv"
    # Debian 12: from bookworm-backports (below).  qemu-system-x86 10.0:
    # bookworm's 7.2 lacks the plugin API's scoreboards and conditional
    # callbacks.
    [qemu]="qemu-system-x86"
    # The plugin; xz-utils unpacks QEMU's source tarball for qemu-plugin.h
    # (qemu_plugin/fetch-plugin-header.sh).
    [plugin]="gcc make pkg-config libglib2.0-dev libcapstone-dev xz-utils"
    # The driver, built against Debian's unpacked headers packages
    # (guest_kernel_patch/fetch-kbuild.sh): their prebuilt objtool needs
    # libelf1 (not libelf-dev) and the kernel's own gcc.
    [driver]="gcc make libelf1"
    # The image copies the host's perf and binutils' objdump and addr2line
    # into the guest (images/x86_64/recipe.json); zstd unpacks the
    # bzImage of Debian's 6.12 kernel (images/linux-6.12).
    [image]="linux-perf binutils zstd"
    # Test references and tools: valgrind (exact counts), gdb (a soak test
    # shuts a socket down inside pvperf with it), patch (the in-tree patch
    # dry run), cpio and kmod (image and driver checks).
    [tests]="valgrind gdb patch cpio kmod"
    # libFuzzer harnesses and the sanitizers' runtimes (qemu_plugin/fuzz/);
    # clang also builds a guest test program (calltree-fp).
    [fuzz]="clang libclang-rt-dev"
    # The opt-in in-tree kernel build (guest_kernel_patch/
    # build-intree-kernel.sh, PVPERF_SLOW=1 tests/vm/test_intree_kernel.py).
    [kernel]="flex bison bc libelf-dev libssl-dev"
    # arm64 guests (docs/architectures.md): their QEMU (bookworm-backports, the
    # same pin as qemu-system-x86) and the cross compiler that builds the
    # arm64 test programs; the guest's own packages come from a private
    # apt directory (pyhost/image/aptdir.py), not from here.
    [aarch64]="qemu-system-arm gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev-arm64-cross"
    # riscv64 guests: QEMU and OpenSBI (virt's default -bios, fw_dynamic)
    # from bookworm-backports (backports' qemu-system-riscv depends on
    # opensbi >> 1.5.1, which bookworm's 1.1 is not: the pin below covers
    # it), the cross compiler for the test programs; the guest's packages
    # come from trixie (images/riscv64).
    [riscv64]="qemu-system-riscv opensbi gcc-riscv64-linux-gnu binutils-riscv64-linux-gnu libc6-dev-riscv64-cross"
)
declare -A TIER_APT=([main]="python qemu plugin driver image")
TIER_APT[test]="${TIER_APT[main]} tests fuzz kernel aarch64 riscv64"
# pyproject.toml's extras: pytest and its helpers; Ray and pyarrow for
# `pvperf sweep`.
declare -A TIER_EXTRAS=([main]="" [test]="[test,sweep]")
# The guest test programs: the demo runs loop; the tests, all of them.
declare -A TIER_PROGRAMS=([main]="loop" [test]="all")
QEMU_MIN_MAJOR=10

tier=test
while [ $# -gt 0 ]; do
    case $1 in
    --tier) tier=${2:-}; shift $(($# > 1)) ;;
    --tier=*) tier=${1#--tier=} ;;
    *) echo "setup.sh: unknown argument $1 (--tier main|test)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$tier" ] && [ -n "${TIER_APT[$tier]:-}" ] ||
    { echo "setup.sh: unknown tier '$tier' (main, test)" >&2; exit 2; }

# Seconds since FROM (EPOCHREALTIME's radix follows the locale).
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f s", a - b }'; }
start=$(now)
say() { printf 'pvperf-setup: [%7s] %s\n' "$(since "$start")" "$*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
logs=$top/build/setup
mkdir -p "$logs"

# -- apt ---------------------------------------------------------------------

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
    local tmp
    tmp=$(mktemp)
    cat > "$tmp"
    if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    say "apt: writing $1"
    sudo_ install -m 644 "$tmp" "$1"
    rm -f "$tmp"
}

enable_deb_src() {
    # qemu-plugin.h only ships in QEMU's source package: derive a deb-src
    # entry from the machine's own deb822 sources, unless one is there.
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
    local changed=1
    stanzas_for_suite bookworm |
        sed -e 's/^Types: .*/Types: deb deb-src/' \
            -e 's/^Suites: .*/Suites: bookworm-backports/' |
        write_if_changed /etc/apt/sources.list.d/pvperf-backports.sources && changed=0
    cat <<PREF | write_if_changed /etc/apt/preferences.d/pvperf-qemu && changed=0
# pvperf: QEMU 10.0 from bookworm-backports, with the packages whose
# bookworm versions it cannot use (its BIOS, riscv64's OpenSBI firmware
# and the braille library).
Package: qemu-* seabios opensbi libbrlapi*
Pin: release n=bookworm-backports
Pin-Priority: 990
PREF
    return $changed
}

qemu_major() {
    local v
    v=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) || return 0
    v=${v#*:}
    echo "${v%%.*}"
}

missing_packages() {  # PACKAGE...: those not installed, one line
    local installed
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" \
                2>/dev/null | awk '$2 == "installed" { print $1 }' || true)
    for p in "$@"; do
        grep -qx "$p" <<<"$installed" || printf ' %s' "$p"
    done
}

# apt's machine-readable status (APT::Status-Fd) as a line per 20 %.
apt_progress() {
    awk -F: -v pre="pvperf-setup: apt: " '
        function show(what, pct,   step) {
            step = int(pct / 20) * 20
            if (what != last || step > shown) {
                printf("%s%s %d %%\n", pre, what, step) > "/dev/stderr"
                fflush("/dev/stderr"); last = what; shown = step
            }
        }
        $1 == "dlstatus" { show("downloading", $3) }
        $1 == "pmstatus" { show("installing", $3) }'
}

apt_install() {  # PACKAGE...
    local n
    n=$(apt-get -s install --no-install-recommends "$@" 2>/dev/null |
        grep -c '^Inst ' || true)
    say "apt: installing $* ($n packages with their dependencies)"
    # --force-unsafe-io: dpkg skips its fsync per unpacked file, a large
    # part of installing a hundred packages on a fresh machine; what is
    # given up is only a consistent disk after a power loss mid-install.
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
        -o APT::Status-Fd=3 "$@" \
        3>&1 >"$logs/apt.log" 2>&1 | apt_progress ||
        { tail -20 "$logs/apt.log" >&2; say "apt-get install failed"; exit 1; }
}

setup_apt() {
    local purposes=${TIER_APT[$tier]} packages="" p missing updated=""
    for p in $purposes; do packages="$packages ${APT[$p]}"; done
    # shellcheck disable=SC2086
    missing=$(missing_packages $(tr ' ' '\n' <<<"$packages" | sort -u))
    local major
    major=$(qemu_major)
    [ -n "$major" ] && [ "$major" -lt "$QEMU_MIN_MAJOR" ] &&
        missing="$missing ${APT[qemu]}"
    # Backports first: on Debian 12 its stanza carries deb-src, which is
    # where QEMU's source comes from, so the main suites' source indexes
    # (most of a fresh machine's `apt-get update`) are not needed.
    if enable_backports; then updated=1; fi
    if enable_deb_src; then updated=1; fi
    if [ -n "$updated" ] || [ -n "$missing" ]; then
        say "apt: apt-get update"
        sudo_ apt-get update -q >"$logs/apt-update.log" 2>&1 ||
            { tail -20 "$logs/apt-update.log" >&2; exit 1; }
    fi
    # shellcheck disable=SC2086
    if [ -n "$missing" ]; then apt_install $missing; fi
    major=$(qemu_major)
    if [ -z "$major" ] || [ "$major" -lt "$QEMU_MIN_MAJOR" ]; then
        say "qemu-system-x86 $(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) is older than $QEMU_MIN_MAJOR.0; the plugin needs plugin API v4"
        exit 1
    fi
    say "apt: ${tier} tier's packages installed"
}

# -- the steps after apt -----------------------------------------------------

venv_current() {  # the venv has this tier's packages (the test tier's
                  # include the main tier's) for this pyproject.toml
    local t
    for t in "$tier" test; do
        [ .venv/.pvperf-installed-$t -nt pyproject.toml ] && return 0
    done
    return 1
}

setup_venv() {
    if [ -x .venv/bin/python ] && venv_current; then
        echo "up to date"; return
    fi
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install --disable-pip-version-check \
        -e ".${TIER_EXTRAS[$tier]}"
    touch ".venv/.pvperf-installed-$tier"
}

build_plugin() { make -s -C qemu_plugin; }
build_driver() { make -s -C guest_kernel_patch; }
build_programs() { make -s -C tests/guest_programs ${TIER_PROGRAMS[$tier]}; }
# The second guest kernel (Debian's 6.12 from bookworm-backports): the
# driver against its headers, in guest_kernel_patch/linux-6.12/.
build_driver612() { make -s -C guest_kernel_patch IMAGE=linux-6.12; }

declare -A step_of=() begun=()
step() {  # NAME WHAT FUNCTION: run FUNCTION in the background
    say "$1: $2"
    "$3" >"$logs/$1.log" 2>&1 &
    step_of[$!]=$1
    begun[$1]=$(now)
}

finish_steps() {  # wait for every step, reporting each as it ends
    local pid status name failed=""
    while [ ${#step_of[@]} -gt 0 ]; do
        status=0
        wait -n -p pid "${!step_of[@]}" || status=$?
        name=${step_of[$pid]}
        unset "step_of[$pid]"
        if [ "$status" = 0 ]; then
            say "$name: done in $(since "${begun[$name]}")"
        else
            say "$name: FAILED (exit $status); the end of $logs/$name.log:"
            tail -25 "$logs/$name.log" >&2
            failed=1
        fi
    done
    [ -z "$failed" ] || exit 1
}

say "setting up the $tier tier"
setup_apt
step pip "pvperf${TIER_EXTRAS[$tier]} into .venv" setup_venv
step plugin "the TCG plugin (the first run fetches qemu-plugin.h from QEMU's source package, ~40 MB)" build_plugin
step driver "the guest PMU driver (the first run fetches the kernel's headers packages, ~14 MB)" build_driver
step programs "the guest test programs (${TIER_PROGRAMS[$tier]})" build_programs
if [ "$tier" = test ]; then
    step driver612 "the guest PMU driver for Linux 6.12 (the first run fetches its headers packages, ~16 MB)" build_driver612
fi
finish_steps
say "image: the default guest image (the first run fetches the kernel, ~70 MB, and test-boots it)"
.venv/bin/pvperf image build
if [ "$tier" = test ]; then
    # arm64 guests: the image's first build fills the private arm64 apt
    # directory, whose headers packages the arm64 driver is built
    # against; the image then takes the driver in (a second, shorter
    # build).
    say "image: the arm64 guest image and driver (the first run fetches ~130 MB of arm64 packages)"
    .venv/bin/pvperf image build --arch aarch64
    make -s -C guest_kernel_patch KARCH=arm64
    .venv/bin/pvperf image build --arch aarch64
    # riscv64 guests: trixie's riscv64 packages through a private apt
    # directory; the driver as arm64's (trixie's headers, bookworm's
    # linux-kbuild of the same kernel version: fetch-kbuild.sh).
    say "image: the riscv64 guest image and driver (the first run fetches trixie's riscv64 lists, ~50 MB of packages and ~16 MB of headers)"
    .venv/bin/pvperf image build --arch riscv64
    make -s -C guest_kernel_patch KARCH=riscv64
    .venv/bin/pvperf image build --arch riscv64
    say "image: the Linux 6.12 guest image (the first run fetches its kernel, ~106 MB, and perf 6.12 with its libraries' packages, ~48 MB, and test-boots it)"
    .venv/bin/pvperf image build --name linux-6.12
fi
say "ready"
