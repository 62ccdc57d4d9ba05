#!/bin/sh
# The Python wheel, as a user with only the wheel sees it (the ctest test `wheel`):
#   1. pip wheel --no-deps --no-index ./python: the in-tree backend (python/build_backend.py), offline,
#      taking libropekv.so from BUILD_DIR (ROPEKV_BUILD_DIR) instead of building it again
#   2. pip install --no-deps --no-index --target TMP/site of that wheel
#   3. from /, with no ROPEKV_LIB and no build directory on any path: import ropekv, which loads the
#      wheel's own libropekv.so; a host context; a DeepSeek-V3 kernel built on it; the version
# It checks the wheel's name and ropekv.__version__ against VERSION (project(VERSION)), and that the
# installed libropekv.so needs no Lua library and resolves every library it needs.
# Exit status 77 (reported as skipped) when PYTHON has no pip.
#   usage: tests/package/wheel.sh BUILD_DIR PYTHON VERSION
set -eu
[ $# -eq 3 ] || {
    sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
py=$2
version=$3
if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "SKIP: $py has no pip (Debian: apt-get install python3-pip)"
    exit 77
fi
tmp=$(mktemp -d)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1
trap 'rm -rf "$tmp"' EXIT

echo "== pip wheel ./python (ROPEKV_BUILD_DIR=$build)"
ROPEKV_BUILD_DIR=$build "$py" -m pip wheel -q --no-deps --no-index "$root/python" -w "$tmp/dist"
wheel=$(ls "$tmp/dist"/ropekv-*.whl)
case $(basename "$wheel") in
"ropekv-$version-py3-none-"*.whl) ;;
*) echo "wheel $wheel: want ropekv-$version-py3-none-<platform>.whl" >&2; exit 1 ;;
esac

echo "== pip install --target $tmp/site $(basename "$wheel")"
"$py" -m pip install -q --no-deps --no-index --target "$tmp/site" "$wheel"
lib=$tmp/site/ropekv/libropekv.so
if ldd "$lib" | grep -i -e lua -e 'not found'; then
    echo "$lib needs a Lua library or a library that is not found (above)" >&2
    exit 1
fi

echo "== import ropekv from /"
cd /
got=$(env -u ROPEKV_LIB PYTHONPATH="$tmp/site" ROPEKV_CACHE_DIR="$tmp/cache" "$py" -c '
import sys, ropekv
ctx = ropekv.Context("host")
k = ctx.kernel("deepseek_v3")
assert ropekv.library_path() == sys.argv[1], ropekv.library_path()
assert k.info.name.startswith("rk_L512_R64_"), k.info.name
print(ropekv.__version__)
' "$lib")
if [ "$got" != "$version" ]; then
    echo "ropekv.__version__ is '$got', the build's is '$version'" >&2
    exit 1
fi
echo "wheel: ok (ropekv $got from $(basename "$wheel"))"
