#!/bin/sh
# A wheel that carries bundles (the ctest test `wheel_bundle`), as a node with no compiler sees it:
#   1. two host bundles (ropekv-gen build --bundle) of deepseek_v3's fp8 paged write, each with its three norms:
#      decode/ (q form zero_copy) and prefill/ (q form none), the kernels examples/mla_decode_layer.py launches
#   2. the wheel built without them and with them (ROPEKV_WHEEL_BUNDLE, and pip's --config-settings bundle=DIR),
#      both sizes printed; bundles that are not whole (no manifest, an entry missing, a corrupt entry, another
#      version's), a relative path and two of one base name fail the build, naming the bundle and the reason
#   3. installed with umask 022 into TMP/site; from /, with no ROPEKV_LIB, CXX and PATH pointing nowhere and no
#      writable cache: tests/package/wheel_bundle_check.py (zero compiles, bit for bit against ropekv.reference,
#      the layers' order, a variant not bundled and the bundles turned off failing with the named error), and
#      tests/package/bundle_kernels.py (every kernel the manifests list, by its key, from the bundles)
#   4. examples/mla_decode_layer.py run from the source checkout with only the wheel on PYTHONPATH, no compiler
#   5. installed with umask 002 (group-writable files): the layer is refused, named on stderr, until
#      `chmod -R go-w` of the bundles (docs/install.md)
# Exit status 77 (reported as skipped) when PYTHON has no pip or no torch.
#   usage: tests/package/wheel_bundle.sh ROPEKV_GEN BUILD_DIR PYTHON
set -eu
[ $# -eq 3 ] || {
    sed -n '2,17s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
root=$(cd "$(dirname "$0")/../.." && pwd)
gen=$1
build=$(cd "$2" && pwd)
py=$3
for m in pip torch; do
    if ! "$py" -c "import $m" >/dev/null 2>&1; then
        echo "SKIP: $py has no $m"
        exit 77
    fi
done
tmp=$(mktemp -d)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
umask 022

echo "== host bundles"
for q in zero_copy none; do
    [ $q = zero_copy ] && name=decode || name=prefill
    "$gen" --filter "deepseek_v3/host/fp8_e4m3/$q/pos=int64/slot=int64/layout=paged" build --target host \
        --bundle "$tmp/$name" 2>"$tmp/$name.err" || { cat "$tmp/$name.err" >&2; exit 1; }
done
echo "bundles: decode $(du -sk "$tmp/decode" | cut -f1) KiB, prefill $(du -sk "$tmp/prefill" | cut -f1) KiB"

wheel() { # wheel OUT_DIR [pip options]: pip wheel ./python offline with this build's library
    out=$1
    shift
    ROPEKV_BUILD_DIR=$build "$py" -m pip wheel -q --no-deps --no-index "$@" "$root/python" -w "$out" \
        >"$out.log" 2>&1
}
echo "== wheels without and with the bundles"
wheel "$tmp/plain" || { cat "$tmp/plain.log" >&2; exit 1; }
ROPEKV_WHEEL_BUNDLE=$tmp/decode wheel "$tmp/dist" --config-settings bundle="$tmp/prefill" ||
    { cat "$tmp/dist.log" >&2; exit 1; }
plain=$(ls "$tmp"/plain/ropekv-*.whl)
whl=$(ls "$tmp"/dist/ropekv-*.whl)
"$py" - "$whl" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for b in ("decode", "prefill"):
    mine = [n for n in names if n.startswith("ropekv/bundles/%s/" % b)]
    assert "ropekv/bundles/%s/ropekv-bundle.txt" % b in mine, names
    assert sum(n.endswith(".rkco") for n in mine) == 7, mine  # three variants' two entries, the compiler note
EOF
echo "wheel size: $(stat -c %s "$plain") bytes without bundles, $(stat -c %s "$whl") with them"

refused() { # refused BUNDLE_DIR TEXT: the build fails, naming the bundle and the reason
    if ROPEKV_WHEEL_BUNDLE=$1 wheel "$tmp/bad"; then
        echo "FAIL: a wheel was built with bundle $1" >&2
        exit 1
    fi
    if ! grep -q "bundle $1: $2" "$tmp/bad.log"; then
        cat "$tmp/bad.log" >&2
        echo "FAIL: the failed build does not say 'bundle $1: $2'" >&2
        exit 1
    fi
    echo "refused: $1: $2"
}
cp -R "$tmp/decode" "$tmp/no-manifest"
rm "$tmp/no-manifest/ropekv-bundle.txt"
refused "$tmp/no-manifest" "no ropekv-bundle.txt"
cp -R "$tmp/decode" "$tmp/short"
rm "$(ls "$tmp"/short/*.rkco | head -n 1)"
refused "$tmp/short" "ropekv-bundle.txt lists 3 kernels for 1 target(s), which take 7 entries .* it holds 6"
cp -R "$tmp/decode" "$tmp/corrupt"
entry=$(ls "$tmp"/corrupt/*.rkco | head -n 1)
printf 'X' | dd of="$entry" bs=1 seek=200 conv=notrunc 2>/dev/null
refused "$tmp/corrupt" "entry $entry is corrupt"
cp -R "$tmp/decode" "$tmp/other-version"
sed -i '2s/.*/ropekv 0.0.0/' "$tmp/other-version/ropekv-bundle.txt"
refused "$tmp/other-version" "made by ropekv 0.0.0"
refused "relative/dir" "not an absolute path"
mkdir "$tmp/again"
cp -R "$tmp/decode" "$tmp/again/decode"
if ROPEKV_WHEEL_BUNDLE=$tmp/decode:$tmp/again/decode wheel "$tmp/bad" ||
    ! grep -q "bundles $tmp/decode and $tmp/again/decode: both would be ropekv/bundles/decode/" "$tmp/bad.log"; then
    cat "$tmp/bad.log" >&2
    echo "FAIL: two bundles of one base name were not refused, named" >&2
    exit 1
fi
echo "refused: two bundles named decode"

echo "== pip install --target $tmp/site (umask 022), run from / without a compiler"
"$py" -m pip install -q --no-deps --no-index --target "$tmp/site" "$whl"
test -z "$(find "$tmp/site/ropekv/bundles" -type f ! -perm 0644)$(find "$tmp/site/ropekv/bundles" -type d ! -perm 0755)"
site=$tmp/site
nocc() { # nocc COMMAND...: only the wheel in $site, no compiler, no writable cache, no layer of the caller's
    env -u ROPEKV_LIB -u ROPEKV_CACHE_RO -u ROPEKV_NO_BUNDLE -u ROPEKV_CACHE_DIR PYTHONPATH="$site" \
        ROPEKV_DISABLE_CACHE=1 CXX=/nonexistent/c++ PATH=/nonexistent "$@"
}
(cd / && nocc "$py" "$root/tests/package/wheel_bundle_check.py" "$tmp/site")
(cd / && nocc "$py" "$root/tests/package/bundle_kernels.py" host) | tee "$tmp/kernels.out"
grep -q "^host (host): 6 kernels of 2 bundle(s): " "$tmp/kernels.out"

echo "== examples/mla_decode_layer.py from the checkout, only the wheel installed"
(cd "$root" && nocc "$py" examples/mla_decode_layer.py --device cpu --steps 2 --seqs 2 --hidden 256 --max-ctx 64)

echo "== pip install with umask 002: group-writable bundles are refused"
site=$tmp/site002
(umask 002 && "$py" -m pip install -q --no-deps --no-index --target "$site" "$whl")
layer=$site/ropekv/bundles/decode
probe='import ropekv; ropekv.Context("host").kernel("deepseek_v3", kv="fp8_e4m3", q="zero_copy", layout="paged")'
if (cd / && nocc "$py" -c "$probe") 2>"$tmp/002.err"; then
    echo "FAIL: a group-writable bundle was used" >&2
    exit 1
fi
grep -q "read-only cache layer $layer is writable by its group (mode 0775); not used" "$tmp/002.err" ||
    { cat "$tmp/002.err" >&2; exit 1; }
grep -q "ROPEKV_ERR_COMPILE" "$tmp/002.err" || { cat "$tmp/002.err" >&2; exit 1; }
chmod -R go-w "$site/ropekv/bundles"
(cd / && nocc "$py" -c "$probe")
echo "umask 002: refused, named; chmod -R go-w makes it usable"
echo "wheel_bundle: ok"
