"""Release fan-out through ``torch.distributed.rpc``: one call after
``rpc.init_rpc`` and every released context tells its known workers over RPC.

::

    import torch.distributed.rpc as rpc
    import distautograd
    import distautograd.rpc

    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=world_size)
    distautograd.rpc.install()          # _init(rank) + the cleanup sender
    ...
    distautograd.cleanup_flush(5.0)     # let the last cleanups out
    rpc.shutdown()

Worker ids are RPC ranks (``WorkerInfo.id``): a context's known worker ``3``
is the worker whose rank is 3, so record ``ctx._add_known_worker_id(dst.id)``
for every RPC a pass sends to ``dst``. The cleanup message is a Python RPC of
:func:`_handle_cleanup` (a module-level function, which torch pickles by
reference), run on the receiver's RPC thread pool; it calls
:func:`distautograd._release_context_if_present`, which returns at once and
queues the receiver's own fan-out to *its* known workers.

Threads and the GIL: the sender, :func:`send_cleanup`, runs on a library
thread (a few of them serve every message) and holds the GIL only while it
builds the RPC; it waits for the reply with the GIL released, up to
``timeout`` seconds. A failure (the peer is dead, unreachable, or not
initialized; the RPC timed out; RPC is shut down) raises, and the library
retries the message with backoff up to its ``max_attempts``, then counts it
as failed (:func:`distautograd.cleanup_stats`) and logs it: releasing never
waits for any of this. Keep ``timeout`` short: a dead peer holds one sender
thread for ``timeout`` seconds per attempt, delaying the messages queued
behind it. The receiver needs a free RPC thread for each cleanup; the
handler holds one only for the length of a release.

Shutdown: flush before ``rpc.shutdown()`` (messages sent after it fail and
are given up on). With a dead peer, ``rpc.shutdown(graceful=False)`` avoids
torch's wait for it. At interpreter exit distautograd unsets the sender.
"""
from __future__ import annotations

import math
import threading
from typing import Dict

import torch.distributed.rpc as _rpc

import distautograd as _dag

__all__ = ["DEFAULT_TIMEOUT", "install", "installed", "send_cleanup", "uninstall"]

#: Seconds a cleanup RPC may take before the attempt counts as failed.
DEFAULT_TIMEOUT = 5.0

_lock = threading.Lock()
_timeout = DEFAULT_TIMEOUT
_installed = False
# rank -> WorkerInfo, filled from the agent at install and on a miss.
_workers: Dict[int, _rpc.WorkerInfo] = {}


def _handle_cleanup(context_id: int) -> bool:
    """The receiving side of a cleanup message: releases this worker's copy
    of the context if it has one (a message may arrive twice), which tells
    the context's known workers in turn. Returns whether one was released."""
    return _dag._release_context_if_present(context_id)


def _refresh() -> None:
    agent = _rpc.api._get_current_rpc_agent()
    infos = {w.id: w for w in agent.get_worker_infos()}
    with _lock:
        _workers.clear()
        _workers.update(infos)


def _worker_info(worker_id: int) -> _rpc.WorkerInfo:
    with _lock:
        info = _workers.get(worker_id)
    if info is None:
        _refresh()  # a worker that joined after install
        with _lock:
            info = _workers.get(worker_id)
    if info is None:
        raise LookupError("distautograd.rpc: no RPC worker has rank %d" % worker_id)
    return info


def send_cleanup(worker_id: int, context_id: int) -> None:
    """The cleanup sender :func:`install` sets: asks the worker of rank
    worker_id, over RPC, to release its copy of context context_id, waiting
    up to the installed timeout. Raises if the message was not delivered
    (the library then retries it)."""
    _rpc.rpc_sync(_worker_info(worker_id), _handle_cleanup, args=(context_id,), timeout=_timeout)


def install(*, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Wires the release fan-out through torch.distributed.rpc: initializes
    distautograd's container for this worker's rank (``_init(rank)``; a
    no-op if done already with the same rank) and sets :func:`send_cleanup`
    as the cleanup sender, each cleanup RPC given ``timeout`` seconds. Call
    it after ``rpc.init_rpc`` on every worker. Calling it again changes the
    timeout."""
    global _timeout, _installed
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValueError("distautograd.rpc.install(): timeout must be a finite number of seconds > 0, got %r"
                         % (timeout,))
    me = _rpc.get_worker_info()
    _dag._init(me.id)
    _refresh()
    _timeout = float(timeout)
    _dag.set_cleanup_sender(send_cleanup)
    _installed = True


def uninstall() -> None:
    """Unsets the cleanup sender that :func:`install` set (releases then tell
    nobody); call it before ``rpc.shutdown()`` if messages must not be
    attempted afterwards."""
    global _installed
    _dag.set_cleanup_sender(None)
    _installed = False


def installed() -> bool:
    """Returns whether :func:`install` set the sender (and it was not unset
    since, by :func:`uninstall`)."""
    return _installed and _dag._fanout._sender is send_cleanup
