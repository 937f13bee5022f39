"""One worker of the limits job (test_limits.py): two torch RPC workers on
loopback, driven line by line on stdin; each command's answer is one JSON
line on stdout.

usage: limits_job.py RANK PORT [CTX_LEFT MSG_LEFT]
       limits_job.py solo WORKER CTX_LEFT

CTX_LEFT and MSG_LEFT start this worker's context and autograd message id
counters that many ids before its max_id ((worker_id << 48) | (2^48 - 1));
0 or absent: where torch starts them (worker_id << 48). Natively the job
sets libtorch's own container's fields (Container: where torch 1.13 and 2.6
lay them out, checked first) right after init_rpc, before any context or
message; under the backend the testing
build of the library must be the one loaded (LD_LIBRARY_PATH=build/testing:
the backend's implementation finds libdistautograd.so.0 through its RUNPATH,
which LD_LIBRARY_PATH comes before), and its dactest_set_counter_offsets
sets them before init_rpc initializes the container.

`solo` is a container without RPC (dist_autograd._init(WORKER)), its
context ids started CTX_LEFT before max_id: three contexts, each on a new
thread, then one JSON line, {"max_id": id, "contexts": [outcome, ...]}.

Commands (each on this process's main thread, unless `thread` says):
  pass PEER        a pass: a context, an RPC with a tensor that requires grad
                   to PEER, the context released at the end of its `with`:
                   {"ok": true, "context": id} or {"ok": false, "error": ...}
  context          a context alone (`with dist_autograd.context()`)
  rpc PEER         an RPC of a Python function, no tensor requiring grad
                   (outside a context: no autograd)
  current          the thread's current context: {"ok": true, "context": id}
                   or its error
  thread CMD ARGS  CMD run on a new thread (the answer is CMD's)
  hold PEER        a pass held open on a thread of its own: its RPC to PEER is
                   made, then the thread keeps the context until `release`:
                   {"ok": true, "context": id} or {"ok": false, "error": ...}
                   (a failed pass's context is released at once)
  release          ends every held pass: {"released": n}
  contexts         {"count": n, "contexts": [...]} (distautograd.torch.contexts()
                   under the backend; null natively)
  info             distautograd.torch.debug_info() under the backend, torch's
                   _get_debug_info() natively
  shutdown         rpc.shutdown() on this thread: {"ok": true} or its error
  exit             leaves at once
"""
import ctypes
import json
import os
import sys
import threading

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

WORLD = 2
MASK = (1 << 48) - 1


def backend():
    try:
        import distautograd.torch as dt
    except ImportError:
        return None
    return dt if dt.active() else None


def twice(x):
    return x * 2.0


class Container:
    """libtorch's own DistAutogradContainer (native torch only), read and
    written where torch 1.13 and 2.6 lay it out (container.h: the fields
    in order, next_context_id_ first; x86-64): the offsets are checked by
    reading the values a fresh container must hold before any is written."""

    FIELDS = {"next_context_id": (0x00, ctypes.c_int64), "worker_id": (0x08, ctypes.c_int16),
              "initialized": (0x0A, ctypes.c_bool), "next_autograd_message_id": (0x30, ctypes.c_int64),
              "max_id": (0x38, ctypes.c_int64)}

    def __init__(self):
        lib = None
        for name in ("libtorch_cpu.so.1.13", "libtorch_cpu.so.2.6"):
            try:
                lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
                break
            except OSError:
                pass
        assert lib is not None, "no served libtorch_cpu is loaded"
        # A private static member, exported as every member of the class:
        # the singleton's address.
        fn = lib._ZN5torch11distributed8autograd21DistAutogradContainer19getInstanceInternalEv
        fn.restype = ctypes.c_void_p
        self.base = fn()

    def field(self, name):
        off, t = self.FIELDS[name]
        return t.from_address(self.base + off)

    def read(self):
        return {name: self.field(name).value for name in self.FIELDS}

    def layout(self, worker):
        """The fields, asserted to be those of a fresh container of worker
        (nothing issued yet): the offsets are right."""
        got = self.read()
        first = worker << 48
        want = {"next_context_id": first, "worker_id": worker, "initialized": True,
                "next_autograd_message_id": first, "max_id": first | MASK}
        assert got == want and got["max_id"] == dist_autograd._get_max_id(), (
            "libtorch's container is not laid out as expected: %r, want %r" % (got, want))
        return got


def outcome(fn):
    try:
        return dict(fn() or {}, ok=True)
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"ok": False, "type": type(e).__name__, "error": str(e)[:3000]}


def answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def held_contexts():
    dt = backend()
    return {"count": dist_autograd._get_debug_info()["num_autograd_contexts"],
            "contexts": dt.contexts() if dt else None}


class Holder:
    """Passes held open, a thread each."""

    def __init__(self):
        self.go = threading.Event()
        self.threads = []

    def hold(self, peer):
        got = {}
        started = threading.Event()

        def run():
            try:
                with dist_autograd.context() as cid:
                    got["context"] = cid
                    rpc.rpc_sync(peer, twice, args=(torch.ones(2, requires_grad=True),))
                    got["ok"] = True
                    started.set()
                    self.go.wait()
            except Exception as e:  # noqa: BLE001 - reported to the test
                got.update(ok=False, type=type(e).__name__, error=str(e)[:3000])
            started.set()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        started.wait()
        if got.get("ok"):
            self.threads.append(t)
        else:
            t.join()
        return got

    def release(self):
        self.go.set()
        for t in self.threads:
            t.join()
        n = len(self.threads)
        self.threads, self.go = [], threading.Event()
        return {"released": n}


def run_command(cmd, args, holder):
    if cmd == "pass":
        def one():
            with dist_autograd.context() as cid:
                rpc.rpc_sync(args[0], twice, args=(torch.ones(2, requires_grad=True),))
                return {"context": cid}
        return outcome(one)
    if cmd == "context":
        def one():
            with dist_autograd.context() as cid:
                return {"context": cid}
        return outcome(one)
    if cmd == "rpc":
        return outcome(lambda: {"value": rpc.rpc_sync(args[0], twice, args=(torch.ones(2),)).tolist()})
    if cmd == "current":
        return outcome(lambda: {"context": dist_autograd._current_context()._context_id()})
    if cmd == "thread":
        out = {}
        t = threading.Thread(target=lambda: out.update(run_command(args[0], args[1:], holder)))
        t.start()
        t.join()
        return out
    if cmd == "hold":
        return holder.hold(args[0])
    if cmd == "release":
        return holder.release()
    if cmd == "contexts":
        return held_contexts()
    if cmd == "info":
        dt = backend()
        return dict(dt.debug_info(), active=1) if dt else dict(dist_autograd._get_debug_info(), active=0)
    if cmd == "shutdown":
        return outcome(rpc.shutdown)
    return {"error": "unknown command %r" % cmd}


def start_library_counters(ctx_left, msg_left):
    """Under the backend: the library it will load (LD_LIBRARY_PATH), loaded
    first to start its counters, before the backend's dac_init."""
    if not os.environ.get("LD_PRELOAD") or not (ctx_left or msg_left):
        return
    lib = ctypes.CDLL("libdistautograd.so.0")
    assert lib.dactest_set_counter_offsets(ctypes.c_int64(MASK - ctx_left if ctx_left else 0),
                                           ctypes.c_int64(MASK - msg_left if msg_left else 0)) == 0


def solo(worker, ctx_left):
    start_library_counters(ctx_left, 0)
    dist_autograd._init(worker)
    out = {"max_id": dist_autograd._get_max_id()}
    if backend() is None:
        c = Container()
        out["native"] = c.layout(worker)
        c.field("next_context_id").value = out["max_id"] - ctx_left
    out["contexts"] = [run_command("thread", ["context"], None) for _ in range(3)]
    answer(out)


def main():
    if sys.argv[1] == "solo":
        solo(int(sys.argv[2]), int(sys.argv[3]))
        return
    rank, port = int(sys.argv[1]), sys.argv[2]
    ctx_left, msg_left = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (0, 0)
    ready = {"ready": "w%d" % rank, "library": None}
    start_library_counters(ctx_left, msg_left)
    opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=30, init_method="tcp://127.0.0.1:%s" % port)
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=WORLD, rpc_backend_options=opts)
    dt = backend()
    if dt is None:
        c = Container()
        ready["native"] = c.layout(rank)
        if ctx_left:
            c.field("next_context_id").value = (rank << 48 | MASK) - ctx_left
        if msg_left:
            c.field("next_autograd_message_id").value = (rank << 48 | MASK) - msg_left
    else:
        from distautograd import _process

        ready["library"] = _process.loaded_library()
    ready["max_id"] = rank << 48 | MASK
    answer(ready)
    holder = Holder()
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "exit":
            sys.stdout.flush()
            os._exit(0)
        answer(run_command(cmd, args, holder))


if __name__ == "__main__":
    main()
