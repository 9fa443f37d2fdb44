#!/bin/sh
# Set up everything the tests use (scripts/setup.sh --tier test: the main
# tier plus valgrind, gdb, clang, the kernel build's tools, pytest, Ray),
# then run the whole test suite.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --tier test
cd "$top"
# Test scratch space lives in the tree (build/ is ignored), not in /tmp.
# The 25 slowest tests are listed at the end: where the suite's time goes.
mkdir -p "$top/build"
exec .venv/bin/python -m pytest -v -rs --durations=25 \
    --basetemp="$top/build/pytest-tmp" "$@"
