#!/bin/sh
# Installs the Debian 12 packages ropekv needs (run as root or with sudo).
#   scripts/setup.sh          to build and run `ropekv-gen selftest`: cmake, g++, pkg-config, cmocka
#   scripts/setup.sh --tests  also what the test suite needs (what CI installs):
#     tests:           valgrind (CI runs the CLI under memcheck); python3-pip (the wheel test builds and
#                      installs the Python wheel with pip, offline); python3-torch (Debian's PyTorch 1.13, CPU
#                      only: the binding, operator and example-layer tests on the host backend), with
#                      libtorch-dev and pybind11-dev (the headers the eager launches' C++ argument plans build with)
#     AMD backends:    hiprtc (ROCm 5.2.3 in libamdhip64) and clang-22/llvm-22 for offline AMD builds and ISA
#     fuzzing:         libclang-rt-22-dev (libFuzzer and the sanitizer runtimes for clang-22, scripts/fuzz.sh)
#     formatting:      clang-format (version 14, scripts/format.sh)
# CUDA (nvrtc) is optional: it is used when /usr/local/cuda or libnvrtc is present.
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="cmake make g++ pkg-config libcmocka-dev"
case "${1:-}" in
"") ;;
--tests)
    PKGS="$PKGS python3-pip python3-torch libtorch-dev pybind11-dev hipcc libamdhip64-dev libhiprtc-builtins5 rocm-device-libs
          libamd-comgr-dev clang-22 llvm-22 lld-22 libclang-rt-22-dev valgrind clang-format"
    ;;
*)
    echo "usage: scripts/setup.sh [--tests]" >&2
    exit 2
    ;;
esac
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
