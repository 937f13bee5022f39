"""The release fan-out, from Python: the cleanup sender the host's RPC layer
plugs in, its options and counters, the library's log lines, and the two
ways to clear what a dead worker left behind.

Everything here is re-exported by ``distautograd``; see
:mod:`distautograd.rpc` for a sender that delivers through
``torch.distributed.rpc``.

Threads and the GIL: the library calls the sender and the log hook on its
own threads (never on the thread that released a context), each call taking
the GIL for as long as the Python function runs. The ctypes calls into the
library release the GIL, so a sender may wait for other Python threads and
call any distautograd function. A sender should not block for long: the
library runs a few sender threads, and a slow one delays the messages queued
behind it.
"""
from __future__ import annotations

import atexit
import ctypes
import dataclasses
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Optional

from . import _abi, _lib
from ._lib import Status

__all__ = [
    "CleanupStats",
    "LOG_DEBUG",
    "LOG_ERROR",
    "LOG_INFO",
    "LOG_WARNING",
    "cleanup_flush",
    "cleanup_stats",
    "log_to_logging",
    "set_cleanup_options",
    "set_cleanup_sender",
    "set_log_hook",
    "_reap_idle_contexts",
    "_release_contexts_of_worker",
]

_L = _lib.LIB

#: The logger that :func:`log_to_logging` and the sender's failures write to.
logger = logging.getLogger("distautograd")

# The C types of dac_cleanup_sender and dac_log_hook.
_SENDER_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64)
_LOG_HOOK_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)

# The Python functions the library reaches, through one thunk each. The
# library may still be calling a sender it was just told to forget (it read
# the pointer a moment before), so the pointer it holds is always one of
# these two thunks, which live as long as the process: replacing a sender
# swaps only the Python function behind the thunk, and no C pointer ever
# dangles.
_sender: Optional[Callable[[int, int], Any]] = None
_log_hook: Optional[Callable[[int, str], Any]] = None

# Calls of the thunks in progress, for the exit handler to wait on.
_calls_lock = threading.Lock()
_calls = 0


def _enter() -> None:
    global _calls
    with _calls_lock:
        _calls += 1


def _leave() -> None:
    global _calls
    with _calls_lock:
        _calls -= 1


def _call_sender(user_data: Any, worker_id: int, context_id: int) -> int:
    # ctypes turns an exception escaping a callback into a "returned 0",
    # which the library would count as delivered: catch everything here.
    _enter()
    try:
        fn = _sender
        if fn is None:
            return 1  # unset while this call was on its way: not delivered
        try:
            fn(worker_id, context_id)
        except BaseException as e:  # noqa: B902 - a failed send, whatever it is
            try:
                logger.debug("cleanup sender: releasing context %d on worker %d failed: %r",
                             context_id, worker_id, e)
            except BaseException:
                pass
            return 1
        return 0
    finally:
        _leave()


def _call_log_hook(user_data: Any, level: int, message: Optional[bytes]) -> None:
    _enter()
    try:
        fn = _log_hook
        if fn is not None:
            fn(level, message.decode("utf-8", "replace") if message else "")
    finally:
        _leave()


_SENDER_THUNK = _SENDER_T(_call_sender)
_LOG_HOOK_THUNK = _LOG_HOOK_T(_call_log_hook)


def _check(rc: int) -> None:
    if rc:
        raise _lib.error(rc)


def set_cleanup_sender(fn: Optional[Callable[[int, int], Any]], /) -> None:
    """Sets the function that delivers cleanup messages: ``fn(worker_id,
    context_id)`` must tell worker ``worker_id`` to release its copy of the
    context (the receiver calls :func:`distautograd._release_context_if_present`).

    It is called once per known worker of every released context, on a
    library thread, never on the releasing one: releasing returns at once.
    Returning (any value) means delivered; raising anything means the
    attempt failed, and the library retries it with backoff, up to
    ``max_attempts`` (see :func:`set_cleanup_options`), then counts it as
    failed and logs it. ``None`` unsets the sender: releases then tell
    nobody and count ``skipped``, as torch does without an RPC agent. May be
    called before :func:`distautograd._init`. At interpreter exit the sender
    is unset, so that no library thread calls into a finalizing interpreter.
    """
    global _sender
    if fn is not None and not callable(fn):
        raise TypeError("set_cleanup_sender(): fn must be callable or None, not %s" % type(fn).__name__)
    _sender = fn
    _check(_L.dac_set_cleanup_sender(_SENDER_THUNK if fn is not None else None, None))


def set_log_hook(fn: Optional[Callable[[int, str], Any]], /) -> None:
    """Sets where the library's log lines go: ``fn(level, message)``, level
    one of :data:`LOG_DEBUG`, :data:`LOG_INFO`, :data:`LOG_WARNING`,
    :data:`LOG_ERROR` (the C ABI's DAC_LOG_*). Called on library threads;
    an exception from fn is reported by ctypes (``sys.unraisablehook``) and
    otherwise ignored. ``None`` restores the default: warnings and errors to
    stderr. :func:`log_to_logging` is a ready hook for the ``logging``
    module. Unset at interpreter exit, as the sender is."""
    global _log_hook
    if fn is not None and not callable(fn):
        raise TypeError("set_log_hook(): fn must be callable or None, not %s" % type(fn).__name__)
    _log_hook = fn
    _check(_L.dac_set_log_hook(_LOG_HOOK_THUNK if fn is not None else None, None))


#: Log levels of the log hook (DAC_LOG_* in distautograd.h).
LOG_DEBUG = 0
LOG_INFO = 1
LOG_WARNING = 2
LOG_ERROR = 3

_LEVELS = {LOG_DEBUG: logging.DEBUG, LOG_INFO: logging.INFO, LOG_WARNING: logging.WARNING, LOG_ERROR: logging.ERROR}


def log_to_logging(level: int, message: str, /) -> None:
    """A log hook that writes to the ``logging`` module's "distautograd"
    logger, at the matching level: ``distautograd.set_log_hook(distautograd.log_to_logging)``."""
    lv = _LEVELS.get(level, logging.ERROR)
    if logger.isEnabledFor(lv):
        logger.log(lv, "%s", message)


def _micros(name: str, seconds: Optional[float]) -> int:
    """Converts a duration in seconds to the C ABI's microseconds (None and 0:
    the library's default; a positive duration never rounds to 0)."""
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("set_cleanup_options(): %s must be a number of seconds, not %s"
                        % (name, type(seconds).__name__))
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("set_cleanup_options(): %s must be finite and >= 0, got %r" % (name, seconds))
    us = int(round(seconds * 1e6))
    if seconds > 0:
        us = max(us, 1)
    if us > _lib.INT64_MAX:
        raise ValueError("set_cleanup_options(): %s is too large: %r" % (name, seconds))
    return us


def _count(name: str, value: Optional[int], limit: int) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("set_cleanup_options(): %s must be an int, not %s" % (name, type(value).__name__))
    if not 0 <= value <= limit:
        raise ValueError("set_cleanup_options(): %s must be in [0, %d], got %d" % (name, limit, value))
    return value


def set_cleanup_options(
    *,
    max_attempts: Optional[int] = None,
    initial_backoff: Optional[float] = None,
    max_backoff: Optional[float] = None,
    max_pending: Optional[int] = None,
) -> None:
    """Tunes the fan-out, for attempts from now on (a retry already waiting
    moves earlier where the new backoffs are shorter, never later). Each
    call sets all four options; one left out (None) or 0 takes the
    library's default:

    - ``max_attempts``: attempts per message, the first included
      ({max_attempts}: torch's 20 retries);
    - ``initial_backoff``: seconds before the first retry, doubling per retry
      ({initial_backoff});
    - ``max_backoff``: the longest wait between attempts, in seconds
      ({max_backoff});
    - ``max_pending``: messages queued or awaiting a retry, past which a
      message is dropped, counted and logged ({max_pending}; at most
      {max_pending_limit}). It may grow past its current value only before
      the first message was queued; later that is a DistAutogradError
      (ERR_INVALID_ARGUMENT).
    """
    o = _abi.dac_cleanup_options(
        size=ctypes.sizeof(_abi.dac_cleanup_options),
        max_attempts=_count("max_attempts", max_attempts, _lib.INT32_MAX),
        initial_backoff_us=_micros("initial_backoff", initial_backoff),
        max_backoff_us=_micros("max_backoff", max_backoff),
        max_pending=_count("max_pending", max_pending, _lib.INT64_MAX),
    )
    _check(_L.dac_cleanup_configure(ctypes.byref(o)))


# The defaults, as the library states them (distautograd.h's DAC_CLEANUP_*,
# which _abi.py has): written into the docstring, not here.
if set_cleanup_options.__doc__:  # None under python -OO
    set_cleanup_options.__doc__ = set_cleanup_options.__doc__.format(
        max_attempts=_abi.CLEANUP_DEFAULT_MAX_ATTEMPTS,
        initial_backoff=_abi.CLEANUP_DEFAULT_INITIAL_BACKOFF_US / 1e6,
        max_backoff=_abi.CLEANUP_DEFAULT_MAX_BACKOFF_US / 1e6,
        max_pending=_abi.CLEANUP_DEFAULT_MAX_PENDING,
        max_pending_limit=_abi.CLEANUP_MAX_PENDING_LIMIT,
    )


@dataclasses.dataclass(frozen=True)
class CleanupStats:
    """The fan-out's counters of cleanup messages (one message per known
    worker of a released context), since the process started."""

    sent: int  #: delivered
    retried: int  #: attempts made after a failed one
    failed: int  #: given up on after max_attempts
    dropped: int  #: refused: the queue was full
    skipped: int  #: not sent: no sender was set
    pending: int  #: queued, being sent, or waiting for a retry, now


def cleanup_stats() -> CleanupStats:
    """Returns the fan-out's counters (a snapshot: each is read once, not all
    at one instant)."""
    c = _abi.dac_cleanup_counters(size=ctypes.sizeof(_abi.dac_cleanup_counters))
    _check(_L.dac_cleanup_stats(ctypes.byref(c)))
    return CleanupStats(sent=c.sent, retried=c.retried, failed=c.failed, dropped=c.dropped, skipped=c.skipped,
                        pending=c.pending)


def cleanup_flush(timeout: float = 10.0, /) -> int:
    """Waits up to timeout seconds for every pending cleanup message to be
    delivered or given up on, and returns how many are still pending (0:
    none). The GIL is released while waiting, so senders written in Python
    run meanwhile. Flush before shutting the RPC layer down, so the messages
    go out while the peers still listen."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or timeout < 0:
        raise ValueError("cleanup_flush(): timeout must be a finite number of seconds >= 0, got %r" % (timeout,))
    pending = ctypes.c_int64()
    rc = _L.dac_cleanup_flush(min(int(math.ceil(timeout * 1000)), _lib.INT64_MAX), pending)
    if rc and rc != Status.ERR_TIMEOUT:
        raise _lib.error(rc)
    return pending.value


def _worker(name: str, worker_id: object) -> int:
    v = _lib.to_int64(worker_id)
    if v is None:
        _lib.incompatible(name, "(arg0: int) -> int", (worker_id,))
    # One outside int32_t becomes -1, which gets the library's range error.
    return v if _lib.INT32_MIN <= v <= _lib.INT32_MAX else -1


def _release_contexts_of_worker(worker_id: int, /) -> int:
    """Releases every context that worker_id created (the top 16 bits of its
    id), as :func:`distautograd._release_context` does (so their known
    workers are told), and returns how many: the way to clear what a worker
    that died mid-pass left on this one. Out of [0, 65535]: "worker_id needs
    to be in the range [0, 65535]"."""
    n = ctypes.c_int64()
    _check(_L.dac_release_contexts_of_worker(_worker("_release_contexts_of_worker", worker_id), n))
    return n.value


def _reap_idle_contexts(max_idle_seconds: float, /) -> int:
    """Releases every context not created, retrieved or changed during the
    last max_idle_seconds seconds (the library's resolution: about 10 ms),
    as :func:`distautograd._release_context` does, and returns how many.
    Seconds, as everywhere in Python (the C ABI takes milliseconds)."""
    if isinstance(max_idle_seconds, bool) or not isinstance(max_idle_seconds, (int, float)) \
            or not math.isfinite(max_idle_seconds) or max_idle_seconds < 0:
        raise ValueError("_reap_idle_contexts(): max_idle_seconds must be a finite number >= 0, got %r"
                         % (max_idle_seconds,))
    n = ctypes.c_int64()
    _check(_L.dac_reap_idle_contexts(min(int(max_idle_seconds * 1000), _lib.INT64_MAX), n))
    return n.value


#: How long the exit handler waits, in all, for sender or log hook calls in
#: progress.
EXIT_WAIT = 5.0


def _at_exit() -> None:
    """Unsets the sender and the log hook before the interpreter finalizes:
    a library thread taking the GIL of a finalizing interpreter would be
    stopped in the middle of the library. Then waits (GIL released) for the
    calls already in progress, within EXIT_WAIT seconds in all, whatever the
    sender does: a call blocked on a dead peer is left behind (no new call
    reaches Python) and the process exits. Messages still pending are not
    sent: flush before exit (distautograd.rpc does, at shutdown)."""
    global _sender, _log_hook
    if _sender is None and _log_hook is None:
        return
    deadline = time.monotonic() + EXIT_WAIT

    def left_ms() -> int:
        return max(0, int((deadline - time.monotonic()) * 1000))

    _sender = None
    _log_hook = None
    try:
        _L.dac_set_log_hook(None, None)
        # Bounded: a call of the sender blocked for good must not hold the
        # exit up; DAC_ERR_TIMEOUT then only says it is still running.
        _L.dac_set_cleanup_sender_timeout(None, None, left_ms())
    except Exception:
        return
    # A call may have read the old pointer just before: it waits for the GIL,
    # which sleeping gives up, then finds no function and returns.
    time.sleep(0.001)
    while _calls and time.monotonic() < deadline:
        time.sleep(0.005)


atexit.register(_at_exit)

#: How long os.fork() waits for sender and log hook calls in progress. What
#: a child must not inherit is a call entering Python (making its thread
#: state takes a CPython lock, briefly, without the GIL); a call parked in
#: Python with the GIL released (a send waiting on the network) holds none,
#: and this bounds how long it holds a fork up, and every sender thread with
#: it (the library's own 2 s bound is for C hosts).
FORK_WAIT = 0.1


def _before_fork() -> None:
    """Holds the library's calls into Python back and waits for those in
    progress before os.fork(), so a child never inherits one mid-call (it
    could hang in CPython's after-fork code). ctypes releases the GIL for
    the wait, so a call that needs the GIL to finish can; the library's own
    pthread_atfork handler, which runs later with the GIL held, then finds
    nothing in flight."""
    try:
        _L.dac_fork_prepare(int(FORK_WAIT * 1000))
    except Exception:
        pass


def _after_fork_in_parent() -> None:
    try:
        _L.dac_fork_parent()
    except Exception:
        pass


def _after_fork_in_child() -> None:
    """In a child process after fork() no library thread exists (the Go
    runtime did not come along; every library call fails with ERR_FORKED):
    no call of a thunk is in progress, whatever the count copied from the
    parent says, and the exit handler must not wait for one."""
    global _sender, _log_hook, _calls, _calls_lock
    _sender = None
    _log_hook = None
    _calls = 0
    _calls_lock = threading.Lock()  # a library thread may have held the parent's


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
