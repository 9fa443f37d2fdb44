#!/bin/sh
# Set everything up, then run the whole test suite.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
# Test scratch space lives in the tree (build/ is ignored), not in /tmp.
mkdir -p "$top/build"
exec .venv/bin/python -m pytest -v -rs --basetemp="$top/build/pytest-tmp" "$@"
