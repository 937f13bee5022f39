"""The Python-level benchmark: one implementation per process.

    python3 bench/pybench.py --impl distautograd|torch [--sample-ms 50] [--reps 1] [--n N] [--ops a,b] [--clock cpu|wall]

prints one JSON object: {"impl": ..., "results": {op: [ns per op, one per
rep]}, ...}. The driver (bench/main.go, ``make bench``) runs it for the two
implementations in alternation, in fresh processes, and takes the medians.

``torch`` is torch.distributed.autograd with a one-worker
torch.distributed.rpc agent running (init_rpc on 127.0.0.1, a free port,
world_size=1), so that its release takes its real path: with no agent,
torch's release raises and logs inside, on every call. ``distautograd`` is
this repository's package (PYTHONPATH=python_bindings, the library from
$DISTAUTOGRAD_LIBRARY or build/).

Every operation runs as a plain loop over local names, the way a training
loop calls them; the loop itself (about 10-20 ns an iteration) is in both
sides' figures. Loops are timed by the thread's CPU time (--clock cpu, the
default: time descheduled on a shared machine is not counted) or the wall
clock (--clock wall).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Tuple


#: The clock loops are timed with; main sets it from --clock.
_now = time.thread_time_ns


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(impl: str) -> Tuple[Any, Callable[[], None]]:
    """Returns the module under test, initialized for worker 0, and what
    shuts it down."""
    if impl == "distautograd":
        import distautograd as dist_autograd

        dist_autograd._init(0)
        return dist_autograd, lambda: None
    if impl == "torch":
        import torch.distributed.autograd as dist_autograd
        import torch.distributed.rpc as rpc

        opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % free_port(), num_worker_threads=4)
        rpc.init_rpc("bench0", rank=0, world_size=1, rpc_backend_options=opts)
        return dist_autograd, rpc.shutdown
    raise SystemExit("pybench: unknown --impl %r (distautograd or torch)" % impl)


# Each op is a function of (module, n) that runs n iterations and returns the
# elapsed nanoseconds, its fixtures set up outside the timed loop.


def op_with_context(m: Any, n: int) -> int:
    context = m.context
    rng = range(n)
    t0 = _now()
    for _ in rng:
        with context():
            pass
    return _now() - t0


def op_retrieve(m: Any, n: int) -> int:
    retrieve = m._retrieve_context
    rng = range(n)
    with m.context() as cid:
        t0 = _now()
        for _ in rng:
            retrieve(cid)
        return _now() - t0


def op_current(m: Any, n: int) -> int:
    current = m._current_context
    rng = range(n)
    with m.context():
        t0 = _now()
        for _ in rng:
            current()
        return _now() - t0


def op_new_release(m: Any, n: int) -> int:
    new, release = m._new_context, m._release_context
    rng = range(n)
    t0 = _now()
    for _ in rng:
        release(new()._context_id())
    return _now() - t0


def op_is_valid(m: Any, n: int) -> int:
    is_valid = m._is_valid_context
    rng = range(n)
    with m.context() as cid:
        t0 = _now()
        for _ in rng:
            is_valid(cid)
        return _now() - t0


def op_max_id(m: Any, n: int) -> int:
    get_max_id = m._get_max_id
    rng = range(n)
    t0 = _now()
    for _ in rng:
        get_max_id()
    return _now() - t0


def op_empty_loop(m: Any, n: int) -> int:
    rng = range(n)
    t0 = _now()
    for _ in rng:
        pass
    return _now() - t0


#: key -> (table label, function); the order of the table.
OPS: Dict[str, Tuple[str, Callable[[Any, int], int]]] = {
    "with_context": ("`with context()` cycle", op_with_context),
    "retrieve_context": ("_retrieve_context", op_retrieve),
    "current_context": ("_current_context", op_current),
    "new_release_context": ("_new_context + _release_context", op_new_release),
    "is_valid_context": ("_is_valid_context", op_is_valid),
    "get_max_id": ("floor: _get_max_id", op_max_id),
    "empty_loop": ("floor: the empty loop", op_empty_loop),
}


def calibrate(fn: Callable[[Any, int], int], m: Any, sample_ns: float) -> int:
    n = 64
    while True:
        elapsed = fn(m, n)
        if elapsed >= sample_ns / 4 or n >= 1 << 26:
            return max(16, int(n * sample_ns / max(elapsed, 1)))
        n *= 8


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", required=True, choices=("distautograd", "torch"))
    p.add_argument("--sample-ms", type=float, default=50.0)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--n", type=int, default=0, help="iterations per sample (0: calibrate to --sample-ms)")
    p.add_argument("--ops", default="", help="comma-separated op keys (default: all)")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"), help="time by the thread's CPU time or the wall clock")
    a = p.parse_args(argv)
    global _now
    _now = time.thread_time_ns if a.clock == "cpu" else time.perf_counter_ns
    keys = [k for k in a.ops.split(",") if k] or list(OPS)
    for k in keys:
        if k not in OPS:
            raise SystemExit("pybench: unknown op %r (one of %s)" % (k, ", ".join(OPS)))
    t_load = time.perf_counter()
    m, shutdown = load(a.impl)
    t_load = time.perf_counter() - t_load
    results: Dict[str, List[float]] = {}
    iterations: Dict[str, int] = {}
    for k in keys:
        fn = OPS[k][1]
        fn(m, 64)  # warm: first-call costs stay out
        n = a.n or calibrate(fn, m, a.sample_ms * 1e6)
        iterations[k] = n
        results[k] = [fn(m, n) / n for _ in range(a.reps)]
    leftover = m._get_debug_info()["num_autograd_contexts"]
    shutdown()
    json.dump(
        {
            "impl": a.impl,
            "python": sys.version.split()[0],
            "load_seconds": round(t_load, 3),
            "labels": {k: OPS[k][0] for k in keys},
            "iterations": iterations,
            "results": results,
            "leftover_contexts": leftover,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main(sys.argv[1:]))
