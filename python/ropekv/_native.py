"""The eager launch's argument plans in C++ (_plans.cpp), compiled on first use against the torch this process runs.

An eager launch whose argument signature was seen before costs, in Python, mostly the reading of its tensors'
dtypes, shapes, strides and devices; _plans.cpp reads them through ATen and launches with the plan Python checked,
and for ropekv.ops.write it also keeps the variant lookup of a call seen before (its routes; see its header).
module() builds the extension once per torch and compiler, keeps it in the disk cache's torch/
directory (the library's default cache directory, ropekv_cache_dir; where there is none, as with
ROPEKV_DISABLE_CACHE=1, a private temporary directory, removed once loaded) and loads it. Whatever stops it (no
compiler, no torch or Python headers, a failed build, a cache directory that is a link, another user's or writable
by others) is one warning naming the reason, and the launches take the Python path, which does the same work.
ROPEKV_TORCH_NATIVE=0 turns it off; CXX names the compiler as for the host backend (split at blanks)."""
import contextlib
import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings

from . import _capi

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_plans.cpp")
_NAME = "ropekv._plans"  # PyInit__plans
_COMPILE_TIMEOUT_S = 600
_STALE_S = 24 * 3600  # a temporary file of a build killed midway is removed after a day

_LOCK = threading.Lock()
_STATE = []  # [module or None] once decided


def module():
    """The compiled module, or None (turned off, or it could not be built: warned once)."""
    if _STATE:
        return _STATE[0]
    with _LOCK:
        if not _STATE:
            got = None
            if _capi.env_flag("ROPEKV_TORCH_NATIVE", True):
                try:
                    got = _load()
                except (_Unavailable, OSError) as e:
                    warnings.warn("ropekv: the eager launches' C++ argument plans are not used (the Python path "
                                  "is): %s" % e, RuntimeWarning, stacklevel=3)
            _STATE.append(got)
    return _STATE[0]


@contextlib.contextmanager
def python_path():
    """Within it, module() gives None: the launches take the Python plans (what ROPEKV_TORCH_NATIVE=0 gives), for
    measuring and testing the two paths side by side in one process."""
    saved = list(_STATE)
    _STATE[:] = [None]
    try:
        yield
    finally:
        _STATE[:] = saved


class _Unavailable(Exception):
    pass


def _torch_paths(torch):
    """(include directories, library directory) of the torch in use: a pip wheel's torch/include and torch/lib; a
    distribution's headers in the compiler's own include path (Debian's libtorch-dev: /usr/include)."""
    root = os.path.dirname(os.path.abspath(torch.__file__))
    inc = [d for d in (os.path.join(root, "include"), os.path.join(root, "include", "torch", "csrc", "api", "include"))
           if os.path.isdir(d)]
    return inc, os.path.join(root, "lib")


def _command(torch, out):
    cxx = (os.environ.get("CXX") or "c++").split()
    inc, lib = _torch_paths(torch)
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return (cxx + ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w",
                   "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, "-I" + sysconfig.get_paths()["include"]] +
            ["-I" + d for d in inc] + [SOURCE, "-o", out, "-L" + lib, "-Wl,-rpath," + lib, "-ltorch_python",
                                       "-ltorch", "-ltorch_cpu", "-lc10"])


def _key(torch, cmd):
    """What the built module depends on: the source, the torch and Python it is built against, the command (cmd, made
    with the output "OUT")."""
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    for part in [torch.__version__, os.path.abspath(torch.__file__), sys.version, sys.executable,
                 sysconfig.get_config_var("EXT_SUFFIX") or ""] + cmd:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def _cache_dir():
    """The library's disk cache directory (ropekv_cache_dir, default options) and its torch/ subdirectory, or None
    where it has none (the disk cache off, no variable naming one)."""
    buf = ctypes.create_string_buffer(4096)
    if _capi.library().ropekv_cache_dir(None, buf, len(buf)) != 0:
        raise _Unavailable("the cache directory's path is longer than %d bytes" % (len(buf) - 1))
    return os.path.join(os.fsdecode(buf.value), "torch") if buf.value else None


def _own(path, what, directory):
    """Refuses path unless it is this user's (not a link), of its kind, and not writable by group or others."""
    st = os.lstat(path)
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise _Unavailable("%s %s is %s (uid %d, mode 0%03o): not used" % (
            what, path, "a link" if stat.S_ISLNK(st.st_mode) else "not a " + ("directory" if directory else "file")
            if not kind_ok else "another user's or writable by others", st.st_uid, st.st_mode & 0o7777))


def _private_dir(d):
    """d made (0700) where missing, and checked: this user's, a directory, not writable by others."""
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        raise _Unavailable("cache directory %s: %s" % (d, e.strerror or e))
    _own(os.path.dirname(d), "cache directory", True)
    _own(d, "cache directory", True)


def _import(path):
    loader = importlib.machinery.ExtensionFileLoader(_NAME, path)
    spec = importlib.util.spec_from_file_location(_NAME, path, loader=loader)
    m = importlib.util.module_from_spec(spec)
    loader.exec_module(m)
    return m


def _build(cmd_for, d):
    """Compiles into a new file of directory d and returns its path."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".so", dir=d)
    os.close(fd)
    cmd = cmd_for(tmp)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=_COMPILE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.unlink(tmp)
        raise _Unavailable("the compiler %s failed to run: %s" % (cmd[0], e))
    if r.returncode != 0:
        os.unlink(tmp)
        tail = r.stdout.decode(errors="replace").strip().splitlines()[-6:]
        raise _Unavailable("%s exited with %d building %s:\n  %s" % (cmd[0], r.returncode, SOURCE, "\n  ".join(tail)))
    return tmp


def _sweep(d):
    """Removes temporary files of builds killed midway (older than a day)."""
    now = time.time()
    for name in os.listdir(d):
        p = os.path.join(d, name)
        try:
            if name.startswith(".tmp-") and now - os.lstat(p).st_mtime > _STALE_S:
                os.unlink(p)
        except OSError:
            pass


def _load():
    try:
        import torch
    except ImportError:
        return None  # launches without torch tensors: nothing to plan here
    if not os.path.exists(SOURCE):
        raise _Unavailable("%s is missing" % SOURCE)
    key = _key(torch, _command(torch, "OUT"))
    d = _cache_dir()
    if d is None:
        d = tempfile.mkdtemp(prefix="ropekv-plans-")
        try:
            path = _build(lambda out: _command(torch, out), d)
            return _import(path)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    _private_dir(d)
    path = os.path.join(d, "plans-%s.so" % key)
    if os.path.lexists(path):
        try:
            _own(path, "cached module", False)
            return _import(path)
        except (_Unavailable, ImportError, OSError):
            os.unlink(path)  # another's, damaged or unloadable: built again below
    _sweep(d)
    tmp = _build(lambda out: _command(torch, out), d)
    os.replace(tmp, path)
    try:
        return _import(path)
    except (ImportError, OSError) as e:
        raise _Unavailable("the built module %s does not load: %s" % (path, e))
