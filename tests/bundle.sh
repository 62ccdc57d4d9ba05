#!/bin/sh
# ropekv-gen build --bundle for the host target, then tests/bundle_check.c with every compiler made
# unavailable (no $CXX, an empty PATH) and the bundle as the only cache: a read-only layer.
# usage: bundle.sh ROPEKV_GEN BUNDLE_CHECK
set -eu
gen=$1 check=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ropekv-bundle-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$gen" --filter deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/layout=paged build --target host \
    --bundle "$dir/b"
grep -q '^kernel deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/layout=paged ' "$dir/b/ropekv-bundle.txt"
test "$(ls "$dir/b" | grep -c '\.rkco$')" -eq 3 # the two entries and the compiler note
! ls "$dir/b" | grep -q '\.lock$'
chmod 0555 "$dir/b"
env -u ROPEKV_CACHE_DIR ROPEKV_CACHE_RO="$dir/b" ROPEKV_DISABLE_CACHE=1 CXX=/nonexistent/c++ PATH=/nonexistent \
    "$check"
chmod 0755 "$dir/b"
