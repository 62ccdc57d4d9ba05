#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz (the fuzz preset: build-fuzz/, clang, ASan, UBSan), runs them.
#   usage: scripts/fuzz.sh TARGET|all [SECONDS] [extra libFuzzer arguments...]
#   TARGET: spec | render | cache | args | amdmeta | dump; SECONDS per target (default 15).
# Each target starts from tests/fuzz/corpus/<t> and tests/fuzz/regressions/<t> (read only); what it
# finds goes to build-fuzz/corpus/<t>, crashes to build-fuzz/artifacts/<t>/, its log to
# build-fuzz/logs/<t>.log (with -jobs=N also build-fuzz/run/<t>/fuzz-<job>.log, one per job).
# Ends with one line per target: seconds, executions (all jobs), exec/s, coverage.
# Examples: scripts/fuzz.sh all 15; scripts/fuzz.sh spec 600 -jobs=2 -workers=2; scripts/fuzz.sh
# render 300 -runs=10000000 (stops at whichever limit comes first).
# Exit status 0 only when no target found a crash, a leak or a timeout.
# A crash is kept as a regression: copy the artifact to tests/fuzz/regressions/<t>/ (the fuzz_replay_<t>
# CTest test replays it), reproduce with build-fuzz/tests/fuzz/fuzz_<t> ARTIFACT.
# Environment: FUZZ_CC (default clang-22, the preset's), FUZZ_BUILD (default build-fuzz, the preset's).
set -eu
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,4s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
[ $# -ge 1 ] || usage
what=$1
shift
secs=15
if [ $# -ge 1 ]; then
    secs=$1
    shift
fi
case $what in
all) targets="spec render cache args amdmeta dump" ;;
spec | render | cache | args | amdmeta | dump) targets=$what ;;
*) usage ;;
esac
case $secs in
'' | *[!0-9]*) usage ;;
esac

root=$(pwd)
cc=${FUZZ_CC:-clang-22}
bdir=${FUZZ_BUILD:-build-fuzz}
command -v "$cc" >/dev/null || {
    echo "fuzz.sh: $cc not found (scripts/setup.sh --tests installs clang-22 and libclang-rt-22-dev)" >&2
    exit 2
}

cmake --preset fuzz -B "$bdir" -DCMAKE_C_COMPILER="$cc" >"$bdir.configure.log" 2>&1 || {
    cat "$bdir.configure.log" >&2
    exit 1
}
rm -f "$bdir.configure.log"
tnames=""
for t in $targets; do tnames="$tnames fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$bdir" -j"$(nproc)" --target $tnames >/dev/null

# Input size limits: specs and templates are small text files; the corpus's
# cache entries are at most a few hundred bytes (the format's limits are tested on headers); an args
# draw is 2 + 21 * 8 + 8 bytes; small AMDGPU code objects are a few KiB.
max_len() {
    case $1 in
    spec) echo 8192 ;;
    render) echo 4096 ;;
    cache) echo 2048 ;;
    args) echo 256 ;;        # a draw is 178 bytes
    amdmeta) echo 16384 ;;   # the seed code objects are 2-12 KiB
    dump) echo 16384 ;;      # the seed dumps are 3-16 KiB
    esac
}

mkdir -p "$bdir/logs"
case $bdir in /*) abs=$bdir ;; *) abs=$root/$bdir ;; esac
summary=""
failed=0
for t in $targets; do
    mkdir -p "$bdir/corpus/$t" "$bdir/artifacts/$t" "$bdir/run/$t"
    rm -f "$bdir/run/$t"/fuzz-*.log
    log="$abs/logs/$t.log"
    seeds="$root/tests/fuzz/corpus/$t"
    [ -d "tests/fuzz/regressions/$t" ] && seeds="$seeds $root/tests/fuzz/regressions/$t"
    [ "$t" = spec ] && seeds="$seeds $root/specs" # the real specs, read in place
    dict=""
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=$root/tests/fuzz/$t.dict"
    echo "fuzz_$t: ${secs} s" >&2
    rc=0
    start=$(date +%s)
    # From build-fuzz/run/<t>: with -jobs, libFuzzer writes fuzz-<job>.log into the current directory.
    # shellcheck disable=SC2086
    (cd "$abs/run/$t" && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
        "$abs/tests/fuzz/fuzz_$t" "$abs/corpus/$t" $seeds $dict \
        -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=5 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$abs/artifacts/$t/" "$@" >"$log" 2>&1) || rc=$?
    took=$(($(date +%s) - start))
    # with -jobs the main log repeats the job logs: count the job logs only
    logs=$(ls "$abs/run/$t"/fuzz-*.log 2>/dev/null | tr '\n' ' ')
    [ -n "$logs" ] || logs=$log
    # shellcheck disable=SC2086
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' $logs | awk '{n += $1} END {print n + 0}')
    rate=$((execs / (took > 0 ? took : 1)))
    # shellcheck disable=SC2086
    cov=$(grep -hE '^#[0-9]+[[:space:]].*cov: ' $logs |
        sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/\1 \2 \3/p' |
        sort -n -k1,1 -k2,2 | tail -n 1 | awk '{printf "cov: %s ft: %s corp: %s", $1, $2, $3}')
    status=ok
    if [ "$rc" -ne 0 ]; then
        status="FAILED (exit $rc)"
        failed=1
        # shellcheck disable=SC2086
        tail -n 60 $logs >&2
    fi
    line=$(printf '%-8s %6s s %12s execs %8s exec/s  %-34s %s' "$t" "$took" "$execs" "$rate" "$cov" "$status")
    summary="$summary$line
"
done
echo "fuzz summary (logs in $bdir/logs):"
printf '%s' "$summary"
exit $failed
