#!/bin/sh
# Coverage-guided fuzzing of what takes outside input (docs/design/fuzzing.md):
#   hostfuzz   the host service's hypercall handling (atheris, Python)
#   geom       the cache/TLB option parsers and cache model (libFuzzer, C)
#   classify   the plugin's instruction decode path (libFuzzer, C)
#
#   scripts/fuzz.sh                    each harness 20 s
#   scripts/fuzz.sh --long [--seconds N] [HARNESS...]   each N s (3600)
#
# Corpora grow in build/fuzz/<harness>/; a crash is written to
# build/fuzz/crashes/ and the script exits non-zero: copy it into the
# harness's regressions/ directory (tests/fuzz/regressions/hostfuzz,
# qemu_plugin/fuzz/regressions/<harness>) once fixed.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
seconds=20
while [ $# -gt 0 ]; do
    case $1 in
    --long) seconds=3600 ;;
    --seconds) seconds=$2; shift ;;
    -*) echo "fuzz.sh: unknown option $1 (--long, --seconds N)" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
harnesses=${*:-hostfuzz geom classify}
mkdir -p build/fuzz/crashes
make -s -C qemu_plugin fuzz >/dev/null
status=0
for h in $harnesses; do
    mkdir -p "build/fuzz/$h"
    case $h in
    hostfuzz) run=".venv/bin/python tests/fuzz/hostfuzz.py"
              seeds=tests/fuzz/regressions/hostfuzz ;;
    geom|classify) run="qemu_plugin/fuzz/fuzz_$h"
              seeds="qemu_plugin/fuzz/regressions/$h" ;;
    *) echo "fuzz.sh: unknown harness $h (hostfuzz, geom, classify)" >&2
       exit 2 ;;
    esac
    echo "fuzz.sh: $h for ${seconds} s" >&2
    if $run -max_total_time="$seconds" -print_final_stats=1 \
            -artifact_prefix=build/fuzz/crashes/ "build/fuzz/$h" "$seeds" \
            > "build/fuzz/$h.log" 2>&1; then
        echo "$h: $(grep -E '^#[0-9]+[[:space:]]+DONE' "build/fuzz/$h.log" | tail -1)"
    else
        echo "$h: FAILED, see build/fuzz/$h.log and build/fuzz/crashes/" >&2
        tail -20 "build/fuzz/$h.log" >&2
        status=1
    fi
done
exit $status
