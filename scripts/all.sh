#!/bin/sh
# The long run: every variant of the built-in specs (the exhaustive product, not the covering set that
# selftest, test_host and test_matrix run; docs/testing.md) on the host backend against the CPU reference.
#   scripts/all.sh [BUILD_DIR] [--filter TEXT]...   (BUILD_DIR: build; it is configured and built first)
# About 20,000 variants: an hour and more on 2 cores, minutes on many. Exit status 0 only when all pass.
set -eu
cd "$(dirname "$0")/.."
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    build=$1
    shift
fi
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" --target ropekv-gen
log="$build/selftest-all.log"
start=$(date +%s)
rc=0
"$build/ropekv-gen" "$@" selftest --all >"$log" || rc=$?
grep -v '^pass ' "$log" || true
echo "selftest --all: $(($(date +%s) - start)) s on $(nproc) CPUs (every line in $log)"
exit $rc
