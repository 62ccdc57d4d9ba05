"""The PEP 517 build backend of pyproject.toml: builds libropekv.so with CMake and writes a wheel of the
ropekv package (python/ropekv/**/*.py) with the library inside it (ropekv/libropekv.so, which the binding
loads first after $ROPEKV_LIB). Lua is built into the library, so the wheel needs nothing else at run time.

  ROPEKV_BUILD_DIR  the absolute path of a configured build directory of this repository to use (its
                    libropekv.so is brought up to date with `cmake --build DIR --target ropekv`); otherwise the repository is
                    configured (Release, no tests) and built in a temporary directory, removed afterwards.
  CMAKE             the cmake to run (default: cmake).

The version is the library's single one, project(VERSION) in CMakeLists.txt, read from the build's generated
ropekv_version.h. The wheel is py3-none-<platform>: the binding is pure Python (ctypes), the library is not.
Only wheels are built (no sdist: the package is built from the repository)."""
import base64
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the repository: python/..
NAME = "ropekv"
SUMMARY = "Fused MLA RoPE + KV-cache write kernels, JIT-compiled for the GPU at hand (ctypes binding)"


def get_requires_for_build_wheel(config_settings=None):
    return []


def _run(cmd):
    print("ropekv build_backend: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _build_library(build_dir, configure):
    """Builds libropekv.so in build_dir (configuring it first if configure) and returns its version."""
    cmake = os.environ.get("CMAKE", "cmake")
    if configure:
        _run([cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF"])
    _run([cmake, "--build", build_dir, "--target", "ropekv", "-j", str(os.cpu_count() or 1)])
    header = os.path.join(build_dir, "include", "ropekv_version.h")
    with open(header) as f:
        m = re.search(r'#define ROPEKV_VERSION_STRING "([^"]+)"', f.read())
    if not m:
        raise RuntimeError("no ROPEKV_VERSION_STRING in %s" % header)
    return m.group(1)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(wheel_directory, version, library):
    tag = "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())
    dist_info = "%s-%s.dist-info" % (NAME, version)
    files = []  # (path in the wheel, bytes)
    for py in sorted(glob.glob(os.path.join(HERE, NAME, "**", "*.py"), recursive=True)):  # subpackages too
        with open(py, "rb") as f:
            files.append((NAME + "/" + os.path.relpath(py, os.path.join(HERE, NAME)).replace(os.sep, "/"), f.read()))
    with open(library, "rb") as f:
        files.append((NAME + "/libropekv.so", f.read()))
    metadata = "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.8\n" % (
        NAME, version, SUMMARY)
    wheel = "Wheel-Version: 1.0\nGenerator: ropekv build_backend\nRoot-Is-Purelib: false\nTag: %s\n" % tag
    files.append((dist_info + "/METADATA", metadata.encode()))
    files.append((dist_info + "/WHEEL", wheel.encode()))
    record = "".join(_record_line(p, d) + "\n" for p, d in files) + dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode()))

    name = "%s-%s-%s.whl" % (NAME, version, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build_dir = os.environ.get("ROPEKV_BUILD_DIR")
    if build_dir:
        # The backend runs in python/ (pip's choice), so a relative path would not mean what it says.
        if not os.path.isabs(build_dir) or not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            raise RuntimeError("ROPEKV_BUILD_DIR=%s: not the absolute path of a configured build directory "
                               "(one with a CMakeCache.txt)" % build_dir)
        return _write_wheel(wheel_directory, _build_library(build_dir, False),
                            os.path.join(build_dir, "libropekv.so"))
    tmp = tempfile.mkdtemp(prefix="ropekv-wheel-")
    try:
        build_dir = os.path.join(tmp, "build")
        return _write_wheel(wheel_directory, _build_library(build_dir, True), os.path.join(build_dir, "libropekv.so"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
