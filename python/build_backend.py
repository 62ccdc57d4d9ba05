"""The PEP 517 build backend of pyproject.toml: builds libropekv.so with CMake and writes a wheel of the
ropekv package (python/ropekv/**/*.py and _plans.cpp) with the library inside it (ropekv/libropekv.so, which the binding
loads first after $ROPEKV_LIB). Lua is built into the library, so the wheel needs nothing else at run time.

  ROPEKV_BUILD_DIR  the absolute path of a configured build directory of this repository to use (its
                    libropekv.so is brought up to date with `cmake --build DIR --target ropekv`); otherwise the repository is
                    configured (Release, no tests) and built in a temporary directory, removed afterwards.
  ROPEKV_WHEEL_BUNDLE  bundles to pack, DIR[:DIR...] (absolute paths of `ropekv-gen build --bundle DIR` outputs);
                    then those of the config setting `bundle` (pip wheel --config-settings bundle=DIR, repeatable).
                    Each is checked (_check_bundle) and packed as ropekv/bundles/<its base name>/, which the binding
                    gives every Context as read-only cache layers (docs/install.md, "Bundles in the wheel").
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
import stat
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


BUNDLE_MANIFEST = "ropekv-bundle.txt"  # what ropekv-gen build --bundle writes last (tools/cli.c, cmd_bundle)
_ENTRY = re.compile(r"[0-9a-f]{64}\.rkco")  # <sha256 of the key in hex>.rkco (docs/cache.md, "On disk")
_ENTRY_MAGIC = b"RKCACHE\0"
_ENTRY_HEADER = 88  # magic, version, reserved, key digest, payload length, payload SHA-256


def _bundle_dirs(config_settings):
    """The bundle directories asked for: $ROPEKV_WHEEL_BUNDLE, then the config setting "bundle" (a string, or a
    list when given more than once), each DIR[:DIR...]."""
    given = [os.environ.get("ROPEKV_WHEEL_BUNDLE") or ""]
    setting = (config_settings or {}).get("bundle") or []
    given += [setting] if isinstance(setting, str) else list(setting)
    return [d for g in given for d in g.split(":") if d]


def _check_entry(path, data):
    """The reason an entry file is not a whole cache entry (its header, name and checksum), or None."""
    if len(data) < _ENTRY_HEADER or data[:8] != _ENTRY_MAGIC:
        return "not a cache entry (no RKCACHE header)"
    if data[16:48].hex() != os.path.basename(path)[:64]:
        return "its key digest is not its name's"
    if int.from_bytes(data[48:56], "little") != len(data) - _ENTRY_HEADER:
        return "truncated (its payload is not the length its header gives)"
    if hashlib.sha256(data[_ENTRY_HEADER:]).digest() != data[56:88]:
        return "corrupt (its payload's SHA-256 is not its header's)"
    return None


def _check_bundle(bundle, version):
    """A bundle directory's files as (name, bytes), after checking that it is one that a runtime of this wheel finds:
    its manifest (ropekv-bundle.txt) made by this version of ropekv, every file a whole cache entry, and at least
    the entries the manifest implies (two a kernel, 32- and 64-bit, and one compiler note a target). The manifest
    names kernels by variant, not by entry, so a missing entry shows as a count short. RuntimeError naming the
    bundle and the reason otherwise."""
    def fail(why):
        raise RuntimeError("bundle %s: %s; not packed" % (bundle, why))

    # The backend runs in python/ (pip's choice), so a relative path would not mean what it says.
    if not os.path.isabs(bundle):
        fail("not an absolute path")
    if os.path.islink(bundle) or not os.path.isdir(bundle):
        fail("not a directory" + (" (a symlink)" if os.path.islink(bundle) else ""))
    try:
        with open(os.path.join(bundle, BUNDLE_MANIFEST)) as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail("no %s (%s): not a bundle of `ropekv-gen build --bundle`, or one whose build failed" %
             (BUNDLE_MANIFEST, e.strerror))
    if lines[:1] != ["ropekv-bundle 1"] or len(lines) < 2 or not lines[1].startswith("ropekv "):
        fail("%s does not start with 'ropekv-bundle 1' and the ropekv version" % BUNDLE_MANIFEST)
    if lines[1] != "ropekv " + version:
        fail("made by %s, this wheel is ropekv %s: the version is part of every cache key, so none of its entries "
             "would ever be found (make it with this build's ropekv-gen)" % (lines[1], version))
    kernels, targets = 0, set()
    for n, line in enumerate(lines[2:], 3):
        fields = line.split(" ")
        if len(fields) != 4 or fields[0] != "kernel":
            fail("%s line %d is not 'kernel KEY NAME TARGET': %r" % (BUNDLE_MANIFEST, n, line))
        kernels += 1
        targets.add(fields[3])
    if not kernels:
        fail("%s lists no kernel" % BUNDLE_MANIFEST)
    files, entries = [], 0
    for name in sorted(os.listdir(bundle)):
        path = os.path.join(bundle, name)
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or not (name == BUNDLE_MANIFEST or _ENTRY.fullmatch(name)):
            fail("%s is not a cache entry or the manifest (a bundle holds only those)" % path)
        with open(path, "rb") as f:
            data = f.read()
        if name != BUNDLE_MANIFEST:
            why = _check_entry(path, data)
            if why:
                fail("entry %s is %s" % (path, why))
            entries += 1
        files.append((name, data))
    want = 2 * kernels + len(targets)
    if entries < want:
        fail("%s lists %d kernels for %d target(s), which take %d entries (two a kernel, a compiler note a target); "
             "it holds %d" % (BUNDLE_MANIFEST, kernels, len(targets), want, entries))
    return files


def _bundles(config_settings, version):
    """(path in the wheel, bytes) of every bundle asked for, each as ropekv/bundles/<its base name>/."""
    out, seen = [], {}
    for bundle in _bundle_dirs(config_settings):
        name = os.path.basename(os.path.normpath(bundle))
        if name in seen:
            raise RuntimeError("bundles %s and %s: both would be ropekv/bundles/%s/ in the wheel; give them "
                               "different base names" % (seen[name], bundle, name))
        seen[name] = bundle
        out += [("%s/bundles/%s/%s" % (NAME, name, f), data) for f, data in _check_bundle(bundle, version)]
        print("ropekv build_backend: bundle %s packed as %s/bundles/%s/" % (bundle, NAME, name), flush=True)
    return out


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(wheel_directory, version, library, config_settings):
    tag = "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())
    dist_info = "%s-%s.dist-info" % (NAME, version)
    files = []  # (path in the wheel, bytes)
    # the Python sources, subpackages too, and the C++ argument plans the binding compiles on first use (_native.py)
    sources = glob.glob(os.path.join(HERE, NAME, "**", "*.py"), recursive=True) + [os.path.join(HERE, NAME,
                                                                                                "_plans.cpp")]
    for py in sorted(sources):
        with open(py, "rb") as f:
            files.append((NAME + "/" + os.path.relpath(py, os.path.join(HERE, NAME)).replace(os.sep, "/"), f.read()))
    with open(library, "rb") as f:
        files.append((NAME + "/libropekv.so", f.read()))
    files += _bundles(config_settings, version)
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
                            os.path.join(build_dir, "libropekv.so"), config_settings)
    tmp = tempfile.mkdtemp(prefix="ropekv-wheel-")
    try:
        build_dir = os.path.join(tmp, "build")
        return _write_wheel(wheel_directory, _build_library(build_dir, True), os.path.join(build_dir, "libropekv.so"),
                            config_settings)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
