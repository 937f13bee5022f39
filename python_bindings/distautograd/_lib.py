"""The low level of the bindings: finding and loading libdistautograd, the
error type, and the argument checks that run before any call reaches C.

Nothing here is part of the torch-compatible surface; ``distautograd``
re-exports what users need (``DistAutogradError``, ``Status``).
"""
from __future__ import annotations

import atexit
import ctypes
import json
import operator
import os
from typing import Any, Dict, List, NoReturn, Optional

from . import _process
from ._abi import PROTOTYPES, Status

#: The environment variable that names the library file to load; when set it
#: must name an existing file (a typo is an error, never a silent fallback).
LIBRARY_ENV = "DISTAUTOGRAD_LIBRARY"

#: File names looked for in a folder, in order.
LIBRARY_NAMES = ("libdistautograd.so", "libdistautograd.so.0")

_HERE = os.path.dirname(os.path.abspath(__file__))

#: Where ``make`` puts the library in a checkout (python_bindings/../build).
CHECKOUT_BUILD = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir, "build"))

#: The functions the package calls; a library without one of them is too old.
REQUIRED = (
    "dac_version",
    "dac_last_error",
    "dac_status_string",
    "dac_init",
    "dac_max_id",
    "dac_num_contexts",
    "dac_debug_info",
    "dac_context_new",
    "dac_context_new_id",
    "dac_context_current",
    "dac_context_current_id",
    "dac_context_retrieve",
    "dac_context_retrieve_if_present",
    "dac_context_get_or_create",
    "dac_context_is_valid",
    "dac_context_release",
    "dac_context_release_if_present",
    "dac_context_unref_many",
    "dac_context_add_known_worker_id",
    "dac_context_known_worker_ids",
    "dac_context_send_functions",
    "dac_context_recv_functions",
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


class DistAutogradError(RuntimeError):
    """A failed call into libdistautograd.

    ``str(error)`` is the library's message, byte for byte the one torch
    raises where torch raises one (code matching on torch's RuntimeError
    messages keeps working); ``error.status`` is the C status code, a
    :class:`Status` (or a plain int for a code newer than this package).
    """

    status: int

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0] if self.args else "", self.status))


DistAutogradError.__module__ = "distautograd"
Status.__module__ = "distautograd"


def candidates() -> List[str]:
    """Returns the paths the loader tries, in order (without the env var)."""
    paths = [os.path.join(_HERE, n) for n in LIBRARY_NAMES]
    paths += [os.path.join(CHECKOUT_BUILD, n) for n in LIBRARY_NAMES]
    return paths


def find_library() -> str:
    """Returns the path of the library to load, or raises ImportError saying
    what it looked for. One library per process comes first: a
    libdistautograd already loaded (by the torch backend) is the one, and in
    a process running under the backend, the library beside its shim (which
    the backend loads, or will). Else $DISTAUTOGRAD_LIBRARY if set, else the
    package's own folder (an installed package carries its .so), else the
    checkout's build/.
    """
    loaded = _process.loaded_library()
    if loaded:
        return loaded
    shim = _process.shim_path()
    if shim:
        beside = os.path.join(os.path.dirname(shim), _process.SONAME)
        if os.path.isfile(beside):
            return beside
    env = os.environ.get(LIBRARY_ENV)
    if env:
        if os.path.isfile(env):
            return env
        raise ImportError(
            "distautograd: %s=%r does not name a file; unset it to use the library "
            "in the package folder or in the checkout's build/" % (LIBRARY_ENV, env)
        )
    tried = candidates()
    for path in tried:
        if os.path.isfile(path):
            return path
    raise ImportError(
        "distautograd: libdistautograd.so not found. Looked for $%s (not set), then:\n  %s\n"
        "Run `make` in the distautograd checkout, install the package with pip, or set %s "
        "to the library's path." % (LIBRARY_ENV, "\n  ".join(tried), LIBRARY_ENV)
    )


def load(path: str) -> ctypes.CDLL:
    """Loads the library at path and types its functions from PROTOTYPES.

    Entries for functions the library lacks are left alone unless the package
    needs them (REQUIRED): then the library is older than the package.
    CDLL (not PyDLL) releases the GIL during each call: the library calls
    back into the host on its own threads (the cleanup sender, the log hook),
    and some calls wait for those threads.
    """
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError("distautograd: cannot load %s: %s" % (path, e)) from e
    missing = []
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    lacking = [n for n in REQUIRED if n in missing or n not in PROTOTYPES]
    if lacking:
        raise ImportError(
            "distautograd: %s lacks %s: it is older than this package; rebuild it with `make`"
            % (path, ", ".join(lacking))
        )
    return lib


PATH = find_library()
LIB = load(PATH)

_last_error = LIB.dac_last_error


def error(status: int) -> DistAutogradError:
    """Returns the error of the calling thread's call that just failed with status."""
    msg = _last_error()
    return DistAutogradError(msg.decode("utf-8", "replace") if msg else "", status)


def _number_check(value: object) -> bool:
    """CPython's PyNumber_Check: has __index__, __int__ or __float__, or is complex."""
    t = type(value)
    return hasattr(t, "__index__") or hasattr(t, "__int__") or hasattr(t, "__float__") or isinstance(value, complex)


def to_int64(value: object) -> Optional[int]:
    """Returns value as an int in int64 range, or None if pybind11 (which
    torch 1.13 uses to convert int64_t arguments) would refuse it.

    pybind11 refuses floats, takes ints, bools and whatever has __index__,
    then falls back on int(value) for any other number (a Decimal, a
    Fraction, an object with __int__), truncating; anything out of int64
    range is refused.
    """
    if isinstance(value, float):
        return None
    try:
        v = operator.index(value)
        if INT64_MIN <= v <= INT64_MAX:
            return int(v)
    except Exception:
        pass
    if not _number_check(value):
        return None
    try:
        v = int(value)  # type: ignore[call-overload]
    except Exception:
        return None
    if INT64_MIN <= v <= INT64_MAX:
        return int(v)
    return None


def incompatible(name: str, signature: str, args: tuple) -> NoReturn:
    """Raises the TypeError torch's pybind11 raises for arguments it refuses."""
    raise TypeError(
        "%s(): incompatible function arguments. The following argument types are supported:\n"
        "    1. %s\n\nInvoked with: %s" % (name, signature, ", ".join(repr(a) for a in args))
    )


# References of collected DistAutogradContext objects, dropped in one call
# per UNREF_BATCH of them (dac_context_unref_many): a ctypes call costs about
# half a microsecond, a whole torch lookup less. Until then a context released
# meanwhile stays alive a little longer (at most UNREF_BATCH - 1 of them);
# flush_unrefs drops them at once, and debug_info and interpreter exit flush.
UNREF_BATCH = 64
_unrefs: List[int] = []


def drop_reference(handle: int, _unrefs: List[int] = _unrefs) -> None:
    """Queues the drop of one reference (a handle's); GC-safe: no lock, so a
    __del__ run by a collection inside a flush cannot deadlock."""
    _unrefs.append(handle)
    if len(_unrefs) >= UNREF_BATCH:
        flush_unrefs()


def flush_unrefs(_unrefs: List[int] = _unrefs) -> None:
    """Drops every queued reference now. Each is taken off the queue by one
    list.pop (atomic under the GIL), so two threads flushing at once never
    drop one twice."""
    batch = []
    try:
        while True:
            batch.append(_unrefs.pop())
    except IndexError:
        pass
    if batch:
        LIB.dac_context_unref_many((ctypes.c_void_p * len(batch))(*batch), len(batch))


def _forget_unrefs_in_child() -> None:
    # The child cannot use the library (ERR_FORKED): its copy of the queue
    # names the parent's references.
    del _unrefs[:]


os.register_at_fork(after_in_child=_forget_unrefs_in_child)
atexit.register(flush_unrefs)


def debug_info() -> Dict[str, int]:
    """Returns the library's whole debug information (dac_debug_info): more
    keys than torch's _get_debug_info, live_handles and the cleanup counters
    among them. References queued for dropping are dropped first."""
    flush_unrefs()
    length = ctypes.c_size_t()
    cap = 512
    while True:
        buf = ctypes.create_string_buffer(cap)
        rc = LIB.dac_debug_info(buf, cap, length)
        if rc:
            raise error(rc)
        if length.value < cap:
            return json.loads(buf.value.decode("utf-8"))
        cap = length.value + 1
