#!/bin/sh
# The main job: set up what `pvperf run` needs (scripts/setup.sh --tier
# main), boot the default image and show perf stat of a sample workload
# counted by the paravirtual PMU (then the same under plain TCG, where the
# events are <not supported>).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --tier main
cd "$top/tests/guest_programs"
echo "\$ pvperf run -- perf stat -e instructions,branches,cycles ./loop 1000000" >&2
"$top/.venv/bin/pvperf" run -- perf stat -e instructions,branches,cycles ./loop 1000000
# The same under plain TCG, for comparison: no PMU, <not supported>.
echo "\$ pvperf run --no-pmu -- perf stat -e instructions,branches,cycles ./loop 1000000" >&2
exec "$top/.venv/bin/pvperf" run --no-pmu -- perf stat -e instructions,branches,cycles ./loop 1000000
