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
# Where the suite's time goes: the 25 slowest tests after each phase,
# every test's seconds in build/junit-{parallel,serial}.xml, and at the
# end their sums by module, by group (a boot) and by worker
# (tests/parallel.py's report).
mkdir -p "$top/build"
workers=${PVPERF_TEST_WORKERS:-$(nproc)}
serial="host_timing or exclusive"
pytest() {
    .venv/bin/python -m pytest -v -rs --durations=25 "$@"
}
# 5: every test of a phase deselected (a narrow run of the other kind).
phase_rc() { [ "$1" -eq 5 ] && echo 0 || echo "$1"; }
set +e
rm -f "$top"/build/junit-*.xml
start=$(date +%s)
pytest -n "$workers" --dist loadgroup --no-loadscope-reorder \
    -m "not ($serial)" --basetemp="$top/build/pytest-tmp" \
    --junitxml="$top/build/junit-parallel.xml" "$@"
parallel=$(phase_rc $?)
middle=$(date +%s)
pytest -m "$serial" --basetemp="$top/build/pytest-tmp-serial" \
    --junitxml="$top/build/junit-serial.xml" "$@"
alone=$(phase_rc $?)
end=$(date +%s)
.venv/bin/python tests/parallel.py "$top/build/junit-parallel.xml" \
    "$top/build/junit-serial.xml"
echo "pvperf-test: parallel phase $((middle - start)) s, serial phase" \
    "$((end - middle)) s"
echo "pvperf-test: parallel phase rc=$parallel, serial phase rc=$alone"
[ "$parallel" -ne 0 ] && exit "$parallel"
exit "$alone"
