#!/bin/sh
# The installed package, as a consumer sees it (the ctest test `package`):
#   1. cmake --install BUILD --prefix TMP/prefix
#   2. this directory's consumer project, configured with CMAKE_PREFIX_PATH=TMP/prefix: find_package(ropekv)
#      links consumer (ropekv::ropekv) and consumer_static (ropekv::ropekv_static), and
#      ropekv_add_kernels() emits, compiles and bundles (host target) the kernels of my_model.lua; the
#      consumer runs again from the bundle alone (no compiler, no writable cache)
#   3. consumer.c compiled by hand with `pkg-config ropekv` and `pkg-config ropekv-static`
# Every program runs consumer.c's checks on my_model.lua: the shared ones with LD_LIBRARY_PATH naming
# only the prefix's lib directory, the static ones with none.
#   usage: tests/package/run.sh BUILD_DIR [C_COMPILER]
# CFLAGS and LDFLAGS apply to every consumer build (a sanitizer build's library needs its flags).
set -eu
[ $# -ge 1 ] || {
    sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
build=$1
cc=${2:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
spec=$here/my_model.lua
export ROPEKV_CACHE_DIR="$tmp/cache"
unset ROPEKV_LIB

step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
    cat "$tmp/install.log"
    exit 1
}
libdir=$(dirname "$(find "$prefix" -name libropekv.so -print | head -n 1)")
for f in include/ropekv.h include/ropekv_version.h bin/ropekv-gen; do
    [ -f "$prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
for f in libropekv_static.a cmake/ropekv/ropekvConfig.cmake cmake/ropekv/ropekvKernels.cmake \
    pkgconfig/ropekv.pc pkgconfig/ropekv-static.pc; do
    [ -f "$libdir/$f" ] || { echo "not installed: $libdir/$f" >&2; exit 1; }
done
if ldd "$libdir/libropekv.so" | grep -i lua; then
    echo "libropekv.so needs a Lua library at run time (above)" >&2
    exit 1
fi

step "find_package(ropekv): configure, build and run the consumer project"
cmake -S "$here" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" || {
    cat "$tmp/configure.log"
    exit 1
}
cmake --build "$tmp/consumer" -j2
[ -f "$tmp/consumer/my_kernels/manifest.json" ] && ls "$tmp/consumer/my_kernels/"my_model.rk_L128_R32_*_host.hip >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/consumer/consumer" "$spec"
env -u LD_LIBRARY_PATH "$tmp/consumer/consumer_static" "$spec"
step "the bundle ropekv_add_kernels(BUNDLE) made: the consumer with no compiler and no writable cache"
[ -f "$tmp/consumer/my_bundle/ropekv-bundle.txt" ]
LD_LIBRARY_PATH=$libdir ROPEKV_CACHE_RO="$tmp/consumer/my_bundle" ROPEKV_DISABLE_CACHE=1 CXX=/nonexistent/c++ \
    PATH=/nonexistent "$tmp/consumer/consumer" "$spec"

step "pkg-config: ropekv and ropekv-static"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
"$cc" ${CFLAGS-} -o "$tmp/pc_shared" "$here/consumer.c" $(pkg-config --cflags --libs ropekv) ${LDFLAGS-}
# shellcheck disable=SC2046
"$cc" ${CFLAGS-} -o "$tmp/pc_static" "$here/consumer.c" $(pkg-config --cflags --libs ropekv-static) ${LDFLAGS-}
LD_LIBRARY_PATH=$libdir "$tmp/pc_shared" "$spec"
env -u LD_LIBRARY_PATH "$tmp/pc_static" "$spec"
if ldd "$tmp/pc_static" | grep ropekv; then
    echo "the static consumer needs a shared ropekv (above)" >&2
    exit 1
fi
echo "package: ok"
