#!/bin/sh
# Set everything up, then run the whole test suite.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
exec .venv/bin/python -m pytest -v -rs "$@"
