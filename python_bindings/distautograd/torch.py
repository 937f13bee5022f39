"""PyTorch's own distributed autograd, served by distautograd.

``distautograd-torch CMD ARGS...`` (or ``python -m distautograd.torch CMD
ARGS...``) runs CMD with the torch backend preloaded: every process it
starts that loads a torch the backend serves (``SERVED_TORCH``) keeps its
distributed autograd contexts in distautograd (``dist_autograd.backward``, the send/recv functions of every
RPC, the cleanup RPCs, ``torch.distributed.autograd.context()``), with no
change to the script. It works in front of ``torchrun`` too::

    distautograd-torch /usr/bin/python3 train.py --epochs 3
    distautograd-torch torchrun --nproc_per_node 4 --redirects 2 --tee 2 train.py

(Debian's torchrun for torch 1.13 on Python 3.11 parses only 1 and 2 for
``--redirects`` and ``--tee``, whose default is 0, with or without the
backend.)

The launcher judges the command before it runs it (``_launch``): the
Python that command runs must have a served torch, else it says which
Python has one and runs nothing.

Debian 13's torch 2.6 is built without libuv, which its TCPStore uses by
default from 2.4 on: ``init_rpc`` through ``env://`` (MASTER_ADDR and
MASTER_PORT) fails there natively too, unless ``USE_LIBUV=0``. The launcher
sets ``USE_LIBUV=0`` for the command when torch is 2.x and it is unset.

Inside, :func:`active` says whether torch's container is distautograd,
:func:`debug_info` gives distautograd's figures (the fan-out's counters, the
libtorch context objects made and alive...), :func:`contexts` what this
worker holds, and :func:`flush` waits until the cleanup messages this
process sent have reached their workers.
``torch.distributed.autograd._get_debug_info()`` stays torch's own: its two
keys, with torch's meaning. Processes that never use distributed autograd
never load more than a few kilobytes of the backend.
"""
from __future__ import annotations

import math
import os
import sys
import json
from typing import Any, Dict, List, Optional, Tuple

from . import _launch, _process
from ._launch import SERVED_TORCH, UsageError, library_path

__all__ = ["active", "state", "debug_info", "contexts", "flush", "NotServing", "library_path", "main", "SERVED_TORCH"]


def _instead() -> str:
    return "`distautograd-torch %s script.py`" % _launch.SYSTEM_PYTHON


class NotServing(RuntimeError):
    """:func:`debug_info` in a process where the backend does not serve
    torch's distributed autograd container; the message says why."""


def _serving() -> Tuple[Any, str]:
    """(the backend's implementation if it serves torch's distributed
    autograd container in this process, else None; why not and what to
    run, or what serves). Under the backend it makes torch's first
    container call if none was made, so it imports torch."""
    shim = _process.shim_path()
    if shim is None:
        try:
            library_path()
        except UsageError as e:
            return None, "not preloaded in this process, and %s" % e
        try:
            _, version = _launch.probe(sys.executable, dict(os.environ))
        except UsageError:
            version = None
        if version is None:
            return None, ("not preloaded in this process, and this Python (%s) has no torch: run the script "
                           "as %s" % (sys.executable, _instead()))
        if not _launch.served(version):
            return None, ("not preloaded in this process, and this Python's torch %s is not one the backend "
                           "serves (%s): run the script as %s" % (version, _launch.served_text(), _instead()))
        return None, ("not preloaded in this process: run the script as `distautograd-torch %s script.py`"
                       % sys.executable)
    import ctypes

    try:
        import torch
    except ImportError as e:
        return None, ("preloaded (%s), but torch does not import in this Python (%s: %s): run the script as %s"
                       % (shim, sys.executable, e, _instead()))
    version = getattr(torch, "__version__", "unknown")
    if not _launch.served(version):
        return None, ("preloaded, but torch %s is not one the backend serves (%s): torch keeps its own "
                       "container; run it without distautograd-torch, or as %s"
                       % (version, _launch.served_text(), _instead()))
    import torch.distributed.autograd  # noqa: F401  (loads libtorch: the backend can decide)

    entry = getattr(ctypes.CDLL(None), _process.PROBE_SYMBOL)
    entry.restype = ctypes.c_int64
    entry.argtypes = []
    entry()  # currentContextId: harmless either way, and it makes the backend decide
    # The implementation the shim loaded, if any (one per torch served).
    serving = None
    for path in _launch.impl_files(os.path.dirname(shim)):
        try:
            impl = ctypes.CDLL(path, mode=_process.RTLD_NOLOAD)
        except OSError:
            continue
        if impl.dat_impl_active():
            serving = impl
    if serving is None:
        return None, ("preloaded, but the backend refused this torch %s on its first container call (its "
                       "reason went to stderr once: \"distautograd-torch: ... NOT in use\")" % version)
    return serving, "torch %s, %s" % (version, shim)


def state() -> Tuple[bool, str]:
    """(whether torch's distributed autograd container is distautograd in
    this process, why not and what to run). Under the backend it makes
    torch's first container call if none was made, so it imports torch."""
    impl, why = _serving()
    return impl is not None, why


def active() -> bool:
    """Whether torch's distributed autograd container is distautograd in this
    process: the backend is preloaded and serves this torch (see state)."""
    if _process.shim_path() is None:
        return False
    return state()[0]


def _impl_json(impl, name: str) -> Any:
    """What the implementation's function name writes: JSON, into a buffer
    grown until it fits (its length comes back however small the buffer)."""
    import ctypes

    fn = getattr(impl, name)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    length = ctypes.c_size_t()
    cap = 4096
    while True:
        buf = ctypes.create_string_buffer(cap)
        rc = fn(buf, cap, ctypes.byref(length))
        if rc == 1:
            raise NotServing("the torch backend does not serve torch's container in this process")
        if rc == 3:  # not initialized: the library's message, torch's words
            from . import _lib

            raise RuntimeError(_lib.LIB.dac_last_error().decode("utf-8"))
        if rc != 0:
            raise RuntimeError("%s failed (%d)" % (name, rc))
        if length.value < cap:
            return json.loads(buf.value.decode("utf-8"))
        cap = length.value + 1


def debug_info() -> Dict[str, int]:
    """distautograd's figures for torch's distributed autograd in this process,
    which the backend serves: a dict of ints, keys sorted. (torch's own
    ``torch.distributed.autograd._get_debug_info()`` has torch's two keys
    only, as natively.)

    torch's figures, as ``_get_debug_info()`` gives them:

    - ``num_autograd_contexts``: contexts in the container (distautograd's).
    - ``num_current_backward_passes``: backward passes torch's engine is
      running.

    libdistautograd's, from its C function dac_debug_info (include/distautograd.h):

    - ``cleanup_sent``: cleanup messages (one per known worker of a released
      context) handed to torch's RPC agent; ``cleanup_retried``: attempts
      after one the agent could not take (no agent running yet, say);
      ``cleanup_failed``: given up on after the last attempt;
      ``cleanup_dropped``: refused, the queue being full;
      ``cleanup_skipped``: not sent, no sender set; ``cleanup_pending``:
      queued or awaiting a retry, now.
    - ``max_contexts``: the cap (``DISTAUTOGRAD_MAX_CONTEXTS``; 0: none);
      ``refused_contexts``: creations refused by it.
    - ``live_handles``: references to contexts held through the C ABI now;
      ``uncounted_handles``: those held uncounted.
    - ``go_heap_bytes``: the library's Go heap, live bytes at the last
      collection.
    - ``go_runtime_<change>``: 1 for each change of Go's runtime the
      library was built with, 0 for each it was not (one key per change of
      scripts/go-runtime-overlay; docs/go-runtime.md).

    The backend's own:

    - ``torch_cleanup_handed``: cleanup messages torch's agent accepted (as
      ``cleanup_sent``); ``torch_cleanup_delivered``: those the receiving
      worker acknowledged; ``torch_cleanup_failed``: those whose send torch
      finally reported failed (each also logged on stderr, as natively).
      The rest are still being sent (torch retries a failed send 20 times,
      backing off from 1 s): ``torch_cleanup_outstanding``, what
      :func:`flush` waits for.
    - ``torch_contexts_made``: libtorch context objects built;
      ``torch_contexts_alive``: those not yet destroyed (held by a live
      context, or by torch: its engine, a Python object).
    - ``torch_native_contexts``: what libtorch's own container map holds
      (0: every context is distautograd's).
    - ``torch_origin_probes``: checks sent to the origin worker of a
      context idle for the RPC timeout; ``torch_workers_gone``: workers
      found gone (dead: a check or a cleanup message to it found its
      connection ended); ``torch_orphans_released``: the contexts of their
      passes released here; ``torch_cleanup_gone``: cleanup messages to a
      gone worker, dropped (DISTAUTOGRAD_DEAD_WORKERS, docs/torch.md). Every
      message handed is delivered, failed, gone or outstanding.

    The three groups are read one after another, not as one snapshot.
    Raises :class:`NotServing` (a RuntimeError) when the backend does not
    serve torch's container in this process (not preloaded, or torch kept
    native: the message says which), and torch's RuntimeError when
    distributed autograd is not initialized, as ``_get_debug_info()`` does.
    It imports torch.
    """
    impl, why = _serving()
    if impl is None:
        raise NotServing(why)
    import torch.distributed.autograd as dist_autograd

    from . import _lib

    info = dict(dist_autograd._get_debug_info())
    for key, value in _lib.debug_info().items():
        info.setdefault(key, value)
    info.update(_impl_json(impl, "dat_impl_debug_info"))
    return dict(sorted(info.items()))


def _serving_impl() -> Any:
    impl, why = _serving()
    if impl is None:
        raise NotServing(why)
    return impl


def contexts() -> List[Dict[str, Any]]:
    """Every context torch's distributed autograd holds in this process
    now, one dict each, sorted by id: ``id``, ``origin_worker`` (the worker
    whose pass it is), ``known_workers`` (sorted: the workers torch's
    engine sent this pass's RPCs to, which its release tells), ``age_s`` and
    ``idle_s`` (seconds since it was stored here, and since it was last
    used). What native torch does not show (it gives two counters). Plain
    data, so a peer's can be asked through RPC::

        rpc.rpc_sync("worker1", distautograd.torch.contexts)

    A running job's contexts can also be seen without changing its script:
    ``kill -USR2 PID`` has the backend print them on that process's stderr
    (DISTAUTOGRAD_CONTEXTS_SIGNAL, docs/torch.md). Raises
    :class:`NotServing` where the backend does not serve, and torch's
    RuntimeError before distributed autograd is initialized."""
    return _impl_json(_serving_impl(), "dat_impl_contexts")


def flush(timeout: Optional[float] = None) -> int:
    """Waits until every cleanup message this process handed to torch's RPC
    agent (one per known worker of each context released here) has been
    answered by its worker, which released its copy then, or has finally
    failed (torch retries a send 20 times, backing off from 1 s); at most
    timeout seconds (None: no bound). Returns how many are still pending: 0,
    every one answered or given up on. What torch offers no way to wait for
    (pytorch issue 34359). Raises :class:`NotServing` where the backend does
    not serve."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout < 0):
        raise ValueError("flush(): timeout must be None or a finite number of seconds >= 0, got %r" % (timeout,))
    import ctypes

    fn = _serving_impl().dat_impl_flush
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    pending = ctypes.c_int64()
    ms = -1 if timeout is None else min(int(math.ceil(timeout * 1000)), 2**63 - 1)
    rc = fn(ms, ctypes.byref(pending))  # the GIL is released while it waits
    if rc == 1:
        raise NotServing("the torch backend does not serve torch's container in this process")
    if rc not in (0, 13):
        raise RuntimeError("dat_impl_flush failed (%d)" % rc)
    return pending.value


def main(argv: Optional[List[str]] = None) -> int:
    return _launch.main(argv)


if __name__ == "__main__":
    sys.exit(main())
