"""What this process already holds: the torch backend's shim (preloaded) and
a libdistautograd already loaded, found without loading anything. Shared by
the loader (_lib), which must reuse the library the backend loaded (two Go
runtimes in one process are not supported), and distautograd.torch.
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional

#: The soname every copy of the library carries.
SONAME = "libdistautograd.so.0"
#: The backend's files (torch_backend/, built by make).
SHIM_NAME = "libdistautograd_torch.so"
#: The backend's implementations: one per torch it serves (_launch.SERVED_TORCH).
IMPL_PREFIX = "libdistautograd_torch_impl_"


def impl_name(version: str) -> str:
    """The file name of the backend's implementation for torch version."""
    return "%s%s.so" % (IMPL_PREFIX, version)


#: A symbol only torch's container (or the backend's shim) defines.
PROBE_SYMBOL = "_ZN5torch11distributed8autograd21DistAutogradContainer16currentContextIdEv"

RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 4)


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _dladdr(addr: int) -> Optional[str]:
    libc = ctypes.CDLL(None)
    fn = libc.dladdr
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    fn.restype = ctypes.c_int
    info = _DlInfo()
    if fn(addr, ctypes.byref(info)) == 0 or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def shim_path() -> Optional[str]:
    """The path of the backend's shim if it is preloaded into this process
    (torch's own library is loaded locally: only a preload is seen here)."""
    try:
        addr = ctypes.cast(getattr(ctypes.CDLL(None), PROBE_SYMBOL), ctypes.c_void_p).value
    except AttributeError:
        return None
    path = _dladdr(addr) if addr else None
    if path and os.path.basename(path) == SHIM_NAME:
        return os.path.realpath(path)
    return None


def loaded_library() -> Optional[str]:
    """The path of a libdistautograd already loaded in this process (by the
    backend, say), or None. Looked up by soname, loading nothing."""
    try:
        lib = ctypes.CDLL(SONAME, mode=RTLD_NOLOAD)
    except OSError:
        return None
    try:
        addr = ctypes.cast(lib.dac_version, ctypes.c_void_p).value
    except AttributeError:
        return None
    return _dladdr(addr) if addr else None
