#!/bin/sh
# ropekv-gen build --bundle for the host target, then tests/bundle_check.c with every compiler made
# unavailable (no $CXX, an empty PATH) and the bundle as the only cache: a read-only layer. Then bundles for
# sm_90 and gfx90a on this machine without their GPUs (compile-only contexts), where their compilers are.
# A bundle whose write of one entry fails must fail the build, naming the entry.
# usage: bundle.sh ROPEKV_GEN BUNDLE_CHECK
set -eu
gen=$1 check=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ropekv-bundle-XXXXXX")
trap 'rm -rf "$dir"' EXIT
umask 022
host=deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/layout=paged
"$gen" --filter $host build --target host --bundle "$dir/b"
grep -q '^kernel deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/layout=paged .* host$' "$dir/b/ropekv-bundle.txt"
grep -q '^kernel deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/layout=paged/norm=rms_out .* host$' \
    "$dir/b/ropekv-bundle.txt"
# the filter takes the variant and its two fused-norm variants: two entries each and the compiler note
test "$(ls "$dir/b" | grep -c '\.rkco$')" -eq 7
! ls "$dir/b" | grep -q '\.lock$'
# readable by every user: the directory 0755, its files 0644 (the umask's bits taken away)
test "$(stat -c %a "$dir/b")" = 755
test -z "$(find "$dir/b" -type f ! -perm 0644)"
chmod 0555 "$dir/b"
env -u ROPEKV_CACHE_DIR ROPEKV_CACHE_RO="$dir/b" ROPEKV_DISABLE_CACHE=1 CXX=/nonexistent/c++ PATH=/nonexistent \
    "$check"
chmod 0755 "$dir/b"

# Variants of specs that render the same code are each bundled (build, unlike list --all, keeps them): a runtime
# keys a kernel by its own spec's variant key. deepseek_v32's and glm5's rms_out kernels are deepseek_v3's code.
same=host/bf16/absorbed/pos=int64/slot=int64/layout=paged/norm=rms_out
test "$("$gen" --filter $same list --all 2>/dev/null | grep -c -e '^deepseek_v32/' -e '^glm5/')" -eq 0
"$gen" --filter $same build --target host --bundle "$dir/same" 2>"$dir/same.err" || { cat "$dir/same.err" >&2; exit 1; }
for spec in deepseek_v3 deepseek_v32 glm5; do grep -q "^kernel $spec/$same " "$dir/same/ropekv-bundle.txt"; done
n=$(grep -c '^kernel ' "$dir/same/ropekv-bundle.txt")
test "$(ls "$dir/same" | grep -c '\.rkco$')" -eq $((2 * n + 1))
echo "a bundle holds the $n variants of $same, those whose code another spec's renders too"

# A write that fails (a directory in an entry's place: the runtime's rename fails, a warning only) leaves
# the entry out: the bundle read back as a read-only layer lacks it, and the build fails naming it.
entry=$(grep -l ELF "$dir"/b/*.rkco | head -n 1)
rm "$entry"
mkdir -p "$entry/in-the-way"
if "$gen" --filter $host build --target host --bundle "$dir/b" 2>"$dir/broken.err"; then
    cat "$dir/broken.err" >&2
    echo "FAIL: a bundle lacking $entry was built" >&2
    exit 1
fi
grep -q "entry of $host.* does not read back: corrupt cache entry $entry: a directory" "$dir/broken.err"
grep -q "$dir/b lacks 1 of the 7 entries made for host\$" "$dir/broken.err"
test "$(grep -c 'variants bundled' "$dir/broken.err")" -eq 0
echo "a bundle with an entry missing fails the build"

# GPU targets need no device, only their compiler (a compile-only context): nvrtc for sm_90, hiprtc for
# gfx90a, when this machine has them (each is skipped with its reason otherwise). The keys are a device
# context's: a bundle made here is found by a runtime on the GPU (docs/cache.md).
# An AMD target id may carry the device's feature flags: its own context, entries and compiler note.
for t in sm_90 gfx90a gfx90a:sramecc+:xnack-; do
    row=${t%%:*}
    if "$gen" --filter "deepseek_v3/$row/fp8_e4m3/absorbed/pos=int64/slot=int64/layout=paged" build --target "$t" \
        --bundle "$dir/$t" 2>"$dir/$t.err"; then
        grep -q "^kernel deepseek_v3/$row/fp8_e4m3/absorbed/pos=int64/slot=int64/layout=paged .* $t\$" \
            "$dir/$t/ropekv-bundle.txt"
        test "$(ls "$dir/$t" | grep -c '\.rkco$')" -eq 7 # three variants (norm none, rms, rms_out) and the note
        echo "bundle for $t made without a device"
    elif grep -q "no .* backend for target $t here" "$dir/$t.err"; then
        echo "skipped the $t bundle: its compiler is not on this machine"
    else
        cat "$dir/$t.err" >&2
        exit 1
    fi
done
