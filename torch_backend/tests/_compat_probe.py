"""Every torch-visible surface of torch.distributed.autograd, probed in one
process: test_torch_compat.py runs it natively and under the backend and
compares the records exactly. Each probe records what a user's program can
observe: the value (with its type's module and name, and its repr with
addresses masked), or the exception (its type's module and name, and its
whole message: pybind11's TypeErrors too), the warnings raised, object
identities. The process's stderr is compared by the test.

    python3 _compat_probe.py        prints one JSON object {label: record}
"""
import json
import os
import re
import socket
import sys
import threading
import warnings

import torch
import torch.distributed.autograd as da
import torch.distributed.rpc as rpc

RECORDS = {}
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def kind(v):
    t = type(v)
    return "%s.%s" % (t.__module__, t.__qualname__)


def shape(v):
    """A JSON form of a value that a backend-neutral program could see."""
    if isinstance(v, torch.Tensor):
        return {"tensor": v.tolist(), "dtype": str(v.dtype), "requires_grad": v.requires_grad}
    if isinstance(v, dict):
        return {"dict": sorted(([shape(k), shape(x)] for k, x in v.items()), key=json.dumps)}
    if isinstance(v, (set, frozenset)):
        return {"set": sorted(shape(x) for x in v)}
    if isinstance(v, (list, tuple)):
        return [shape(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return {"object": kind(v)}


def probe(label, fn, *args, **kwargs):
    """Runs fn, records its outcome under label and returns its value (None
    if it raised)."""
    assert label not in RECORDS, label
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            v = fn(*args, **kwargs)
            rec = {"value": shape(v), "type": kind(v), "repr": _ADDRESS.sub("0x?", repr(v))}
        except BaseException as e:  # noqa: B902 - every outcome is data here
            v = None
            # The message proper; a C++ backtrace after it names frames and
            # addresses of this run (docs/torch-compat.md), so only where it
            # says it was raised is kept.
            text, _, trace = str(e).partition("\nException raised from ")
            rec = {"raises": kind(e), "message": text, "nargs": len(e.args),
                   "raised from": trace.split(" (most recent call first)")[0] or None}
    rec["warnings"] = [[kind(w.message), str(w.message)] for w in caught]
    RECORDS[label] = rec
    return v


def in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return str(port)


class Probe(torch.autograd.Function):
    """Records _get_debug_info() from inside a backward pass."""

    seen = []

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        Probe.seen.append(da._get_debug_info())
        return g


def before_init():
    probe("is_available", da.is_available)
    probe("debug before init", da._get_debug_info)
    probe("new before init", da._new_context)
    probe("current before init", da._current_context)
    probe("retrieve before init", da._retrieve_context, 1)
    probe("is_valid before init", da._is_valid_context, 1)
    probe("max_id before init", da._get_max_id)
    probe("context before init", lambda: da.context().__enter__())
    probe("backward before init", da.backward, 1, [torch.ones(1, requires_grad=True).sum()])
    probe("get_gradients before init", da.get_gradients, 1)
    probe("DistAutogradContext()", da.DistAutogradContext)


def contexts():
    probe("max_id", da._get_max_id)
    probe("debug", da._get_debug_info)
    c = probe("new", da._new_context)
    cid = c._context_id()
    probe("context_id", c._context_id)
    probe("new twice on a thread", da._new_context)
    cur = probe("current", da._current_context)
    ret = probe("retrieve", da._retrieve_context, cid)
    probe("identity: current is new", lambda: cur is c)
    probe("identity: retrieve is new", lambda: ret is c)
    probe("is_valid", da._is_valid_context, cid)
    probe("known workers (none)", c._known_worker_ids)
    probe("send functions (none)", c._send_functions)
    probe("recv functions (none)", c._recv_functions)
    probe("debug with one", da._get_debug_info)
    probe("current in another thread", in_thread, lambda: probe("current (thread)", da._current_context))
    probe("release", da._release_context, cid)
    probe("release again", da._release_context, cid)
    probe("current after release", da._current_context)
    probe("retrieve after release", da._retrieve_context, cid)
    probe("is_valid after release", da._is_valid_context, cid)
    probe("object after release: id", c._context_id)
    probe("object after release: send", c._send_functions)
    probe("get_gradients after release", da.get_gradients, cid)
    probe("backward after release", da.backward, cid, [torch.ones(1, requires_grad=True).sum()])
    probe("unknown id: retrieve", da._retrieve_context, 10**15)
    probe("unknown id: release", da._release_context, -5)
    probe("unknown id: is_valid", da._is_valid_context, 2**62)
    probe("unknown id: get_gradients", da.get_gradients, 12345)
    probe("unknown id: backward", da.backward, 12345, [torch.ones(1, requires_grad=True).sum()])
    probe("bad argument: retrieve str", da._retrieve_context, "1")
    probe("bad argument: release float", da._release_context, 1.5)
    probe("bad argument: is_valid None", da._is_valid_context, None)
    probe("bad argument: init str", da._init, "0")
    probe("bad argument: backward roots", da.backward, 1, 2)
    probe("bad argument: get_gradients none", da.get_gradients)
    probe("init again, same id", da._init, 0)
    probe("init again, other id", da._init, 1)


def context_manager():
    cm = da.context()
    cid = probe("enter", cm.__enter__)
    probe("autograd_context", lambda: cm.autograd_context._context_id() == cid)
    probe("enter nested", da.context().__enter__)
    probe("current inside", lambda: da._current_context()._context_id() == cid)
    probe("exit", cm.__exit__, None, None, None)
    probe("exit twice", cm.__exit__, None, None, None)

    def body_raises():
        with da.context():
            raise KeyError("from the body")

    probe("body raises", body_raises)
    probe("current after body raised", da._current_context)

    def released_inside():
        with da.context() as c:
            da._release_context(c)

    probe("released inside", released_inside)
    probe("debug after context manager", da._get_debug_info)


def passes():
    t = torch.ones(3, requires_grad=True)
    with da.context() as cid:
        y = probe("rpc_sync to self", rpc.rpc_sync, "w0", torch.mul, args=(t, 2.0))
        c = da._current_context()
        probe("known workers", c._known_worker_ids)
        # Message ids by their rank among the pass's ids (their values are
        # compared apart: docs/torch-compat.md).
        ids = sorted(set(c._send_functions()) | set(c._recv_functions()))
        probe("send functions", lambda: {ids.index(k): kind(v) for k, v in c._send_functions().items()})
        probe("recv functions", lambda: {ids.index(k): kind(v) for k, v in c._recv_functions().items()})
        probe("message ids (values)", lambda: ids)
        z = Probe.apply(y).sum()
        probe("backward", da.backward, cid, [z], retain_graph=True)
        probe("debug inside backward", lambda: Probe.seen[-1])
        probe("get_gradients", da.get_gradients, cid)
        probe("get_gradients keys are the leaves", lambda: [k is t for k in da.get_gradients(cid)])
        probe("backward again (retained)", da.backward, cid, [z])
        probe("get_gradients accumulated", da.get_gradients, cid)
        probe("backward a third time (freed)", da.backward, cid, [z])
        probe("backward: root without grad", da.backward, cid, [torch.ones(2).sum()])
        probe("backward: no roots", da.backward, cid, [])
        probe("backward: non-scalar root", da.backward, cid, [y])
        probe("debug in the pass", da._get_debug_info)
    probe("get_gradients after the pass", da.get_gradients, cid)
    probe("debug after the pass", da._get_debug_info)

    def remote_pass():
        w = torch.ones(2, requires_grad=True)
        with da.context() as cid:
            r = rpc.remote("w0", torch.add, args=(w, 1.0))
            loss = r.to_here().sum() + rpc.rpc_async("w0", torch.mul, args=(w, w)).wait().sum()
            da.backward(cid, [loss])
            return da.get_gradients(cid)[w]

    probe("rref and rpc_async pass", remote_pass)
    probe("pass in a thread", in_thread, remote_pass)
    probe("debug at the end", da._get_debug_info)


def another_thread():
    # Last: natively a context made on another thread takes the counter's
    # next id, which every later id of this thread would show; here it is
    # the first of the next run (docs/torch-compat.md: context ids), whose
    # value is compared apart.
    c = probe("new, before another thread's", da._new_context)
    cid = c._context_id()
    tid = in_thread(lambda: probe("new in another thread", da._new_context)._context_id())
    probe("another thread's context id (value)", lambda: [cid, tid])
    probe("another thread's context id: of this worker, after this thread's", lambda: tid >> 48 == cid >> 48 and tid > cid)
    probe("debug with two", da._get_debug_info)
    probe("release the thread's", da._release_context, tid)
    probe("release this thread's", da._release_context, cid)
    probe("debug after both", da._get_debug_info)


def main():
    before_init()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = free_port()
    probe("init_rpc", rpc.init_rpc, "w0", rank=0, world_size=1)
    contexts()
    context_manager()
    passes()
    another_thread()
    probe("shutdown", rpc.shutdown)
    probe("debug after shutdown", da._get_debug_info)
    print(json.dumps(RECORDS), flush=True)


if __name__ == "__main__":
    main()
