"""One worker of test_rpc_multiprocess: a process on torch.distributed.rpc
(TensorPipe, 127.0.0.1) whose release fan-out goes through
distautograd.rpc. Rank 0 drives the scenario; the others serve RPCs.

Run as ``python -c "from tests import _rpc_worker; _rpc_worker.main()" RANK
WORLD PORT`` with PYTHONPATH=python_bindings, so that the RPC functions below
pickle by reference as tests._rpc_worker.* on every worker.

Rank 0 talks to the test driver through stdio: it prints lines "@@ <json>"
(events and the results) and reads one line from stdin when it waits for the
driver (to kill a worker). Nothing here asserts: rank 0 reports what it saw
and the driver judges.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
import traceback
from typing import Any, Dict, List

import torch.distributed.rpc as rpc

import distautograd as dag
import distautograd.rpc

#: Seconds every RPC of the scenario may take (the cleanup RPCs: CLEANUP_TIMEOUT).
RPC_TIMEOUT = 10.0
CLEANUP_TIMEOUT = 2.0
#: The fan-out's options: few attempts, short backoff, so failures settle fast.
MAX_ATTEMPTS = 3
BACKOFF = 0.02
#: How long a phase may wait for the contexts to settle before reporting.
SETTLE = 10.0
#: How long a gated sender waits for the release to return.
GATE_WAIT = 10.0

_finish = threading.Event()
_ready = threading.Event()


def emit(event: str, **fields: Any) -> None:
    """Reports to the driver (rank 0 only)."""
    sys.stdout.write("@@ " + json.dumps(dict(fields, event=event)) + "\n")
    sys.stdout.flush()


# ---- RPC functions (module level: torch pickles them by reference) ----


def ready() -> bool:
    return _ready.is_set()


def finish() -> None:
    _finish.set()


def installed() -> bool:
    return distautograd.rpc.installed()


def num_contexts() -> int:
    return dag._get_debug_info()["num_autograd_contexts"]


def known_workers(context_id: int) -> List[int]:
    ctx = dag._retrieve_context_if_present(context_id)
    return sorted(ctx._known_worker_ids()) if ctx is not None else []


def hop(context_id: int, path: List[int]) -> None:
    """The receiving side of one hop of a pass: this worker's copy of the
    context, and the next hop along path (recorded as a known worker first,
    as a runtime records every RPC a pass sends)."""
    ctx = dag._get_or_create_context(context_id)
    if path:
        nxt = path[0]
        ctx._add_known_worker_id(nxt)
        rpc.rpc_sync(nxt, hop, args=(context_id, path[1:]), timeout=RPC_TIMEOUT)


def originate(paths: List[List[int]]) -> int:
    """Starts a pass here that sends along each path (a chain is one path, a
    fan several of length 1) and returns its context id, leaving it in place.
    The context is made on a thread of its own, which exits and so leaves the
    calling thread's current context as it was."""
    out: Dict[str, Any] = {}

    def run() -> None:
        try:
            ctx = dag._new_context()
            cid = ctx._context_id()
            for path in paths:
                ctx._add_known_worker_id(path[0])
                rpc.rpc_sync(path[0], hop, args=(cid, path[1:]), timeout=RPC_TIMEOUT)
            out["id"] = cid
        except BaseException as e:  # reported to the caller below
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["id"]


def flush_and_stats() -> Dict[str, int]:
    pending = dag.cleanup_flush(SETTLE)
    s = dag.cleanup_stats()
    return dict(flush_pending=pending, sent=s.sent, retried=s.retried, failed=s.failed, dropped=s.dropped,
                skipped=s.skipped, pending=s.pending)


def release_contexts_of_worker(worker_id: int) -> int:
    return dag._release_contexts_of_worker(worker_id)


def reap_idle_contexts(idle: float, wait: float) -> int:
    time.sleep(wait)  # so that everything here has been idle for longer than idle
    return dag._reap_idle_contexts(idle)


# ---- rank 0: the scenario ----


class Gate:
    """Wraps the installed sender so that no attempt starts before the
    release that queued it has returned: if a release waited for its sender,
    the sender would find the gate shut and, after GATE_WAIT, count a
    timeout (instead of a deadlock)."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.open = threading.Event()
        self.open.set()
        self.timeouts = 0
        self.attempts = 0
        self.lock = threading.Lock()

    def __call__(self, worker_id: int, context_id: int) -> None:
        ok = self.open.wait(GATE_WAIT)
        with self.lock:
            self.attempts += 1
            if not ok:
                self.timeouts += 1
        self.send(worker_id, context_id)

    def release(self, context_id: int) -> float:
        """Releases context_id with the gate shut; returns the seconds it took."""
        self.open.clear()
        t = time.perf_counter()
        dag._release_context(context_id)
        took = time.perf_counter() - t
        self.open.set()
        return took


def counts(ranks: List[int]) -> Dict[int, int]:
    return {r: (num_contexts() if r == 0 else rpc.rpc_sync(r, num_contexts, timeout=RPC_TIMEOUT)) for r in ranks}


def settle(ranks: List[int], want: Dict[int, int]) -> Dict[str, Any]:
    """Polls the context counts of ranks until they are want, or SETTLE passes."""
    t = time.perf_counter()
    deadline = t + SETTLE
    while True:
        got = counts(ranks)
        if got == want or time.perf_counter() > deadline:
            return dict(counts={str(k): v for k, v in got.items()}, seconds=time.perf_counter() - t)
        time.sleep(0.02)


def known(rank: int, context_id: int) -> List[int]:
    return known_workers(context_id) if rank == 0 else rpc.rpc_sync(rank, known_workers, args=(context_id,),
                                                                     timeout=RPC_TIMEOUT)


def scenario(world: int, gate: Gate) -> Dict[str, Any]:
    everyone = list(range(world))
    for r in everyone[1:]:
        deadline = time.perf_counter() + SETTLE
        while not rpc.rpc_sync(r, ready, timeout=RPC_TIMEOUT):
            if time.perf_counter() > deadline:
                raise RuntimeError("worker %d never became ready" % r)
            time.sleep(0.02)
    res: Dict[str, Any] = {}

    # distautograd.rpc itself: installed everywhere (rank 0 wraps its sender
    # in the gate), a rank nobody has is a failed send, a bad timeout is
    # refused, and the handler pickles by reference.
    res["installed"] = [installed()] + [rpc.rpc_sync(r, installed, timeout=RPC_TIMEOUT) for r in everyone[1:]]
    try:
        distautograd.rpc.send_cleanup(world + 5, 1)
    except LookupError as e:
        res["unknown_rank"] = str(e)
    for bad in (0, -1.0, "1"):
        try:
            distautograd.rpc.install(timeout=bad)
        except ValueError:
            res.setdefault("bad_timeouts", []).append(repr(bad))
    res["handler_pickle"] = pickle.dumps(distautograd.rpc._handle_cleanup).decode("latin-1")

    # Phase 1: a chain 0->1->2->3 and a fan 0->{1,2,3}, released by the origin.
    chain = originate([[1, 2, 3]])
    fan = originate([[1], [2], [3]])
    res["spread_counts"] = {str(k): v for k, v in counts(everyone).items()}
    res["chain_known"] = {str(r): known(r, chain) for r in everyone}
    res["fan_known"] = {str(r): known(r, fan) for r in everyone}
    res["release_seconds"] = [gate.release(chain), gate.release(fan)]
    res["released"] = settle(everyone, {r: 0 for r in everyone})

    # Phase 2: passes from 0 and from 3 reach everyone; then 3 is killed.
    dead = world - 1
    alive = everyone[:-1]
    chain2 = originate([[1, 2, 3]])
    fan2 = originate([[1], [2], [3]])
    res["orphans"] = [
        rpc.rpc_sync(dead, originate, args=([[0, 1, 2]],), timeout=RPC_TIMEOUT),
        rpc.rpc_sync(dead, originate, args=([[0], [1], [2]],), timeout=RPC_TIMEOUT),
    ]
    res["before_kill_counts"] = {str(k): v for k, v in counts(everyone).items()}
    emit("kill", rank=dead)
    res["driver_says"] = sys.stdin.readline().strip()
    res["release_seconds_dead_peer"] = [gate.release(chain2), gate.release(fan2)]
    # What is left on the survivors: the two passes the dead worker started.
    res["after_release"] = settle(alive, {r: 2 for r in alive})
    res["stats_after_kill"] = {str(r): (flush_and_stats() if r == 0 else
                                        rpc.rpc_sync(r, flush_and_stats, timeout=RPC_TIMEOUT + SETTLE))
                               for r in alive}
    # Clear them: the reaper on 2 first, then explicit releases on 1 and 0,
    # in that order so that no fan-out between survivors gets there first.
    res["reaped"] = rpc.rpc_sync(2, reap_idle_contexts, args=(0.2, 0.4), timeout=RPC_TIMEOUT)
    res["released_of_dead"] = {
        "1": rpc.rpc_sync(1, release_contexts_of_worker, args=(dead,), timeout=RPC_TIMEOUT),
        "0": release_contexts_of_worker(dead),
    }
    res["cleared"] = settle(alive, {r: 0 for r in alive})
    res["final_stats"] = {str(r): (flush_and_stats() if r == 0 else
                                   rpc.rpc_sync(r, flush_and_stats, timeout=RPC_TIMEOUT + SETTLE))
                          for r in alive}
    res["gate"] = dict(attempts=gate.attempts, timeouts=gate.timeouts)
    for r in alive[1:]:
        try:
            rpc.rpc_async(r, finish, timeout=RPC_TIMEOUT).wait()
        except Exception:
            pass  # it may exit before answering
    return res


def main(argv: List[str] = sys.argv[1:]) -> None:
    rank, world, port = (int(a) for a in argv[:3])
    dag._init(rank)
    dag.set_cleanup_options(max_attempts=MAX_ATTEMPTS, initial_backoff=BACKOFF, max_backoff=BACKOFF)
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method="tcp://127.0.0.1:%d" % port,
        num_worker_threads=4,
        rpc_timeout=RPC_TIMEOUT,
        _transports=["uv"],  # TCP on loopback: no shared memory between test processes
        _channels=["basic"],
    )
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=world, rpc_backend_options=opts)
    distautograd.rpc.install(timeout=CLEANUP_TIMEOUT)
    code = 0
    if rank == 0:
        gate = Gate(distautograd.rpc.send_cleanup)
        dag.set_cleanup_sender(gate)
        _ready.set()
        try:
            emit("result", **scenario(world, gate))
        except BaseException:
            emit("error", traceback=traceback.format_exc())
            code = 1
    else:
        _ready.set()
        if not _finish.wait(120):
            code = 3
        time.sleep(0.2)  # let the answer to finish() go out
    # torch's shutdown waits for every peer, and one is dead: leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
