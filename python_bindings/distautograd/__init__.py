"""distautograd: the context container of ``torch.distributed.autograd``,
served by libdistautograd (Go, through a C ABI) and loaded with ctypes.

Drop-in for the container part of torch 1.13's module::

    import distautograd as dist_autograd

    dist_autograd._init(3)                      # this worker's id
    with dist_autograd.context() as context_id:
        ctx = dist_autograd._current_context()  # the pass's DistAutogradContext
        assert ctx._context_id() == context_id  # 844424930131968 == 3 << 48

Same names, same behaviour, same RuntimeError messages as torch (errors are
:class:`DistAutogradError`, a RuntimeError subclass whose ``str()`` is
torch's message). Each thread has its own current context, as in torch.

Beyond torch's module, for the runtime that delivers RPCs:
:func:`_release_context_if_present`, :func:`_get_or_create_context`,
:func:`_retrieve_context_if_present` and
:meth:`DistAutogradContext._add_known_worker_id`; the release fan-out
(:func:`set_cleanup_sender` and the rest of ``distautograd._fanout``,
:mod:`distautograd.rpc` for torch.distributed.rpc), and
:func:`_release_contexts_of_worker` / :func:`_reap_idle_contexts` to clear
what a dead worker left.

The library is found through $DISTAUTOGRAD_LIBRARY, else in this package's
folder, else in the checkout's build/ (see ``distautograd._lib``). The Go
runtime inside it does not survive fork(): import distautograd after forking,
or use the "spawn" start method of multiprocessing.
"""
from __future__ import annotations

import ctypes as _ctypes
import sys as _sys
from typing import Any, Dict, List, NoReturn, Optional, Set


def _run_as_module() -> bool:
    """Whether Python is locating a module of this package to run as
    ``python -m distautograd[.X]`` (the package is imported first): there
    a library that does not load is the diagnostic's answer, not a bug."""
    if _sys.argv[:1] != ["-m"]:  # "-m" only while the module is being located
        return False
    argv = list(getattr(_sys, "orig_argv", []))
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("-m"):
            name = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            return name == __name__ or name.startswith(__name__ + ".")
    return False


def _one_line(message: str) -> str:
    """message on one line: the items of a list (indented lines) joined by
    commas, a line after the list after a semicolon."""
    out, in_list = "", False
    for line in message.splitlines():
        text = line.strip()
        if not text:
            continue
        item = line[:1].isspace()
        out = text if not out else out + (", " if item and in_list else "; " if in_list else " ") + text
        in_list = item
    return out


try:
    from . import _lib
except ImportError as _e:
    if _run_as_module():
        raise SystemExit(_one_line(str(_e))) from None  # one line, no traceback, exit status 1
    raise
from . import _fanout
from ._fanout import *  # noqa: F401,F403  (the release fan-out: _fanout.__all__)
from ._lib import DistAutogradError, Status

__all__ = [
    "DistAutogradContext",
    "DistAutogradError",
    "Status",
    "context",
    "contexts",
    "_current_context",
    "_get_debug_info",
    "_get_max_id",
    "_get_or_create_context",
    "_init",
    "_is_valid_context",
    "_new_context",
    "_release_context",
    "_release_context_if_present",
    "_retrieve_context",
    "_retrieve_context_if_present",
]
__all__ += _fanout.__all__

_L = _lib.LIB

#: The library's version (dac_version()), which is the package's.
__version__: str = _L.dac_version().decode("ascii")

# The ctypes function objects, bound once: the hot paths below only look up
# module globals.
_dac_init = _L.dac_init
_dac_max_id = _L.dac_max_id
_dac_num_contexts = _L.dac_num_contexts
_dac_context_new = _L.dac_context_new
_dac_context_new_id = _L.dac_context_new_id
_dac_context_current_id = _L.dac_context_current_id
_dac_context_retrieve = _L.dac_context_retrieve
_dac_context_retrieve_if_present = _L.dac_context_retrieve_if_present
_dac_context_get_or_create = _L.dac_context_get_or_create
_dac_context_is_valid = _L.dac_context_is_valid
_dac_context_release = _L.dac_context_release
_dac_context_release_if_present = _L.dac_context_release_if_present
_dac_context_add_known_worker_id = _L.dac_context_add_known_worker_id
_dac_context_known_worker_ids = _L.dac_context_known_worker_ids
_dac_context_send_functions = _L.dac_context_send_functions
_dac_context_recv_functions = _L.dac_context_recv_functions

# Out-parameters are allocated per call and passed as they are (ctypes
# passes an instance by reference for a POINTER argtype): as cheap as a
# shared buffer, and the GIL is released during calls, so a shared one would
# be a race between threads.
_c_void_p = _ctypes.c_void_p
_c_int64 = _ctypes.c_int64
_c_int = _ctypes.c_int
_c_size_t = _ctypes.c_size_t
_c_int32 = _ctypes.c_int32
_c_uint64 = _ctypes.c_uint64

_error = _lib.error
_to_int64 = _lib.to_int64
_MIN = _lib.INT64_MIN
_MAX = _lib.INT64_MAX
_new_object = object.__new__

# The signatures torch's TypeErrors show.
_SIG_ID_NONE = "(arg0: int) -> None"
_SIG_ID_CTX = "(arg0: int) -> distautograd.DistAutogradContext"


def _int_arg(value: object, name: str, signature: str) -> int:
    """Converts an int64 argument as torch does, or raises torch's TypeError."""
    v = _to_int64(value)
    if v is None:
        _lib.incompatible(name, signature, (value,))
    return v


class DistAutogradContext:
    """The state of one distributed autograd pass on this worker: its id, the
    workers it sent RPCs to, and its send and recv autograd functions.

    Obtained from :func:`_new_context`, :func:`_current_context`,
    :func:`_retrieve_context` and the like, never constructed directly. It
    holds a reference to the library's context, so it stays readable after
    the context was released from the container (torch hands out shared
    pointers); the reference is dropped after the object is collected, in a
    batch with others (``distautograd._lib.flush_unrefs()`` drops them now).

    Unlike torch, two lookups of one context return two objects: compare
    :meth:`_context_id` values, not identities.
    """

    __slots__ = ("_handle", "_id", "__weakref__")

    _handle: int
    _id: int

    def __new__(cls, *args: Any, **kwargs: Any) -> "DistAutogradContext":
        raise TypeError("distautograd.DistAutogradContext: No constructor defined!")

    def __del__(
        self,
        _push: Any = _lib._unrefs.append,
        _queue: Any = _lib._unrefs,
        _flush: Any = _lib.flush_unrefs,
        _batch: int = _lib.UNREF_BATCH,
    ) -> None:
        # The reference goes in a batch (_lib.drop_reference, inlined: every
        # collected context runs this). Defaults, so that they outlive the
        # module's globals at interpreter exit.
        try:
            h = self._handle
        except AttributeError:
            return
        _push(h)
        if len(_queue) >= _batch:
            _flush()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        # Copying would duplicate the reference without taking one.
        raise TypeError("cannot pickle 'distautograd.DistAutogradContext' object")

    def _context_id(self) -> int:
        """Returns the context id."""
        return self._id

    def _known_worker_ids(self) -> Set[int]:
        """Returns the ids of the workers this pass sent an RPC to (a new set)."""
        cap = 8
        n = _c_size_t()
        while True:
            buf = (_c_int32 * cap)()
            rc = _dac_context_known_worker_ids(self._handle, buf, cap, n)
            if rc:
                raise _error(rc)
            count = n.value
            if count <= cap:
                return set(buf[:count])
            cap = count

    def _send_functions(self) -> Dict[int, int]:
        """Returns the send functions of the pass, {autograd message id: the
        host's opaque value} (a new dict; empty for a new context)."""
        return _functions(_dac_context_send_functions, self._handle)

    def _recv_functions(self) -> Dict[int, int]:
        """Returns the recv functions of the pass, {autograd message id: the
        host's opaque value} (a new dict; empty for a new context)."""
        return _functions(_dac_context_recv_functions, self._handle)

    def _add_known_worker_id(self, worker_id: int, /) -> None:
        """Records that this pass sent an RPC to worker_id, in [0, 65535], so
        that releasing the context tells that worker to release its copy.
        Adding an id twice is a no-op. Out of range: "worker_id needs to be
        in the range [0, 65535]"."""
        if type(worker_id) is not int or not -0x80000000 <= worker_id <= 0x7FFFFFFF:
            worker_id = _worker_arg(self, worker_id)
        rc = _dac_context_add_known_worker_id(self._handle, worker_id)
        if rc:
            raise _error(rc)


def _worker_arg(ctx: DistAutogradContext, value: object) -> int:
    """Converts a worker id argument as torch converts ints; one outside the
    C int32_t becomes -1, which gets the library's range error (it does not
    quote the value)."""
    v = _to_int64(value)
    if v is None:
        _lib.incompatible(
            "_add_known_worker_id", "(self: distautograd.DistAutogradContext, arg0: int) -> None", (ctx, value)
        )
    return v if -0x80000000 <= v <= 0x7FFFFFFF else -1


def _functions(fn: Any, handle: int) -> Dict[int, int]:
    cap = 8
    n = _c_size_t()
    while True:
        ids = (_c_int64 * cap)()
        fns = (_c_uint64 * cap)()
        rc = fn(handle, ids, fns, cap, n)
        if rc:
            raise _error(rc)
        count = n.value
        if count <= cap:
            return dict(zip(ids[:count], fns[:count]))
        cap = count


def _wrap(handle: int, context_id: int) -> DistAutogradContext:
    """Wraps a new reference to the context with id context_id."""
    c = _new_object(DistAutogradContext)
    c._handle = handle
    c._id = context_id
    return c


def _init(worker_id: int, /) -> None:
    """Initializes the process-wide container for worker_id, in [0, 65535].

    Out of range: "worker_id needs to be in the range [0, 65535]". A second
    call with the same id does nothing; with another, "Container is already
    initialized with worker_id: 3, cannot initialize with different
    worker_id: 4". As in torch, which stores the id as an int16, a second
    call for an id >= 32768 fails that way even with the same id. Every other
    function raises "Need to initialize distributed autograd using
    torch.distributed.autograd.init()" until this succeeds.
    """
    if type(worker_id) is not int or not _MIN <= worker_id <= _MAX:
        worker_id = _int_arg(worker_id, "_init", _SIG_ID_NONE)
    rc = _dac_init(worker_id)
    if rc:
        raise _error(rc)


def _new_context() -> DistAutogradContext:
    """Creates a context with this thread's next context id (each thread's
    come from a run of its own: dac_context_new in distautograd.h) and makes
    it this thread's current context; "Already have an autograd context id
    for this thread." if the thread has one."""
    out = _c_void_p()
    cid = _c_int64()
    rc = _dac_context_new_id(out, cid)
    if rc:
        raise _error(rc)
    return _wrap(out.value, cid.value)


def _current_context() -> DistAutogradContext:
    """Returns this thread's current context.

    None: "Current thread doesn't have a valid autograd context. Please wrap
    your code using: `with torch.distributed.autograd.context() as
    context_id` to generate a valid context". Its current id names a
    released context (released by another thread): "Couldn't find autograd
    context data for current autograd context id".
    """
    out = _c_void_p()
    cid = _c_int64()
    rc = _dac_context_current_id(out, cid)
    if rc:
        raise _error(rc)
    return _wrap(out.value, cid.value)


def _retrieve_context(context_id: int, /) -> DistAutogradContext:
    """Returns the context with id context_id; "Could not find autograd
    context with id: 12345" if there is none."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(context_id, "_retrieve_context", _SIG_ID_CTX)
    out = _c_void_p()
    rc = _dac_context_retrieve(context_id, out)
    if rc:
        raise _error(rc)
    c = _new_object(DistAutogradContext)
    c._handle = out.value
    c._id = context_id
    return c


def _retrieve_context_if_present(context_id: int, /) -> Optional[DistAutogradContext]:
    """Returns the context with id context_id, or None if there is none."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(
            context_id, "_retrieve_context_if_present", "(arg0: int) -> Optional[distautograd.DistAutogradContext]"
        )
    out = _c_void_p()
    rc = _dac_context_retrieve_if_present(context_id, out)
    if rc:
        raise _error(rc)
    handle = out.value
    if handle is None:
        return None
    return _wrap(handle, context_id)


def _get_or_create_context(context_id: int, /) -> DistAutogradContext:
    """Returns the context with id context_id, creating and storing it if
    there is none (a message from another worker names a pass this worker
    has not seen). Does not change any thread's current context."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(context_id, "_get_or_create_context", _SIG_ID_CTX)
    out = _c_void_p()
    rc = _dac_context_get_or_create(context_id, out)
    if rc:
        raise _error(rc)
    return _wrap(out.value, context_id)


def _is_valid_context(context_id: int, /) -> None:
    """Returns None if a context with id context_id is stored, else raises
    "Could not find autograd context with id: 12345"."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(context_id, "_is_valid_context", _SIG_ID_NONE)
    rc = _dac_context_is_valid(context_id)
    if rc:
        raise _error(rc)


def _release_context(context_id: int, /) -> None:
    """Releases the context with id context_id ("Could not find autograd
    context with id: 12345" if none): removes it, clears this thread's
    current id if it is context_id (other threads keep theirs, stale), and
    tells every known worker of the context to release its copy. Objects
    holding the context stay readable."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(context_id, "_release_context", _SIG_ID_NONE)
    rc = _dac_context_release(context_id)
    if rc:
        raise _error(rc)


def _release_context_if_present(context_id: int, /) -> bool:
    """As :func:`_release_context`, but a missing context is no error (a
    cleanup message may arrive twice). Returns whether one was released."""
    if type(context_id) is not int or not _MIN <= context_id <= _MAX:
        context_id = _int_arg(context_id, "_release_context_if_present", "(arg0: int) -> bool")
    released = _c_int()
    rc = _dac_context_release_if_present(context_id, released)
    if rc:
        raise _error(rc)
    return released.value != 0


def _get_max_id() -> int:
    """Returns the largest id of this worker: (worker_id << 48) | (2**48 - 1),
    in signed 64-bit arithmetic (negative for worker ids >= 32768)."""
    out = _c_int64()
    rc = _dac_max_id(out)
    if rc:
        raise _error(rc)
    return out.value


def _get_debug_info() -> Dict[str, int]:
    """Returns {'num_autograd_contexts': N, 'num_current_backward_passes': 0},
    as torch does (distautograd runs no backward passes). The library's
    fuller information is ``distautograd._lib.debug_info()``."""
    out = _c_int64()
    rc = _dac_num_contexts(out)
    if rc:
        raise _error(rc)
    return {"num_autograd_contexts": out.value, "num_current_backward_passes": 0}


def contexts() -> List[Dict[str, Any]]:
    """Every context stored in this process now, one dict each, sorted by
    id: ``id``; ``origin_worker``, the worker whose pass it is (the id's top
    16 bits); ``known_workers``, the workers its release will tell, sorted;
    ``age_s``, seconds since it was stored here; ``idle_s``, seconds since
    it was last created, retrieved or changed (what the reaper measures;
    resolution about 10 ms). Not in torch: the view of live contexts torch
    does not give. Looking does not count as a use. A plain list of
    numbers, so it can be returned from an RPC."""
    cap = 64
    while True:
        handles = (_c_void_p * cap)()
        n = _c_size_t()
        rc = _L.dac_context_list(handles, cap, n)
        if rc:
            raise _error(rc)
        if n.value <= cap:
            break
        _L.dac_context_unref_many(handles, cap)
        cap = n.value + n.value // 2
    out = []
    try:
        for i in range(n.value):
            h = handles[i]
            cid, age, idle = _c_int64(), _c_int64(), _c_int64()
            if _L.dac_context_id(h, cid) or _L.dac_context_times(h, age, idle):
                continue
            count = _c_size_t()
            ids = (_ctypes.c_int32 * 16)()
            if _L.dac_context_known_worker_ids(h, ids, 16, count):
                continue
            if count.value > 16:
                ids = (_ctypes.c_int32 * count.value)()
                if _L.dac_context_known_worker_ids(h, ids, count.value, count):
                    continue
            out.append({
                "id": cid.value,
                "origin_worker": (cid.value >> 48) & 0xFFFF,
                "known_workers": sorted(ids[:min(count.value, len(ids))]),
                "age_s": age.value / 1000,
                "idle_s": idle.value / 1000,
            })
    finally:
        _L.dac_context_unref_many(handles, n.value)
    out.sort(key=lambda c: c["id"])
    return out


class context:
    """Context object to wrap forward and backward passes when using
    distributed autograd, as torch's: ``with context() as context_id``
    creates a context (this thread's current one) on entry, gives its id,
    and releases it on exit, whether the body raised or not.

    Example::

        >>> import distautograd as dist_autograd
        >>> with dist_autograd.context() as context_id:
        ...     ctx = dist_autograd._retrieve_context(context_id)
    """

    autograd_context: DistAutogradContext

    def __enter__(self) -> int:
        """Creates the context (see :func:`_new_context`), keeps it as
        ``self.autograd_context`` and returns its id."""
        # _new_context, inlined: this is the hot path of every pass, one
        # ctypes call.
        out = _c_void_p()
        cid = _c_int64()
        rc = _dac_context_new_id(out, cid)
        if rc:
            raise _error(rc)
        ctx = _new_object(DistAutogradContext)
        ctx._handle = out.value
        ctx._id = cid = cid.value
        self.autograd_context = ctx
        return cid

    def __exit__(self, type: Any, value: Any, traceback: Any) -> None:
        """Releases the context (see :func:`_release_context`); an exception
        of the body propagates."""
        rc = _dac_context_release(self.autograd_context._id)
        if rc:
            raise _error(rc)
