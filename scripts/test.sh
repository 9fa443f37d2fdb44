#!/bin/sh
# Set up everything the tests use (scripts/setup.sh --tier test: the main
# tier plus valgrind, gdb, clang, the kernel build's tools, pytest, Ray),
# then run the whole test suite in two phases:
#  1. on every core (pytest-xdist; PVPERF_TEST_WORKERS=N to choose): most
#     VM tests run a 1-vCPU TCG guest, one host core, so one pytest
#     leaves the others idle.  A worker runs a module's tests of one guest
#     whole (conftest.py), so that their boot is shared as before;
#  2. alone: the tests marked host_timing (they compare host time, which
#     another test's guest on the next core would disturb) or exclusive
#     (they rebuild what other tests use).
# Both phases print their results; the exit status is the first failure's.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --tier test
cd "$top"
# Test scratch space lives in the tree (build/ is ignored), not in /tmp.
# The 25 slowest tests are listed at the end: where the suite's time goes.
mkdir -p "$top/build"
workers=${PVPERF_TEST_WORKERS:-$(nproc)}
serial="host_timing or exclusive"
pytest() {
    .venv/bin/python -m pytest -v -rs --durations=25 "$@"
}
# 5: every test of a phase deselected (a narrow run of the other kind).
phase_rc() { [ "$1" -eq 5 ] && echo 0 || echo "$1"; }
set +e
pytest -n "$workers" --dist loadgroup --no-loadscope-reorder \
    -m "not ($serial)" --basetemp="$top/build/pytest-tmp" "$@"
parallel=$(phase_rc $?)
pytest -m "$serial" --basetemp="$top/build/pytest-tmp-serial" "$@"
alone=$(phase_rc $?)
echo "pvperf-test: parallel phase rc=$parallel, serial phase rc=$alone"
[ "$parallel" -ne 0 ] && exit "$parallel"
exit "$alone"
