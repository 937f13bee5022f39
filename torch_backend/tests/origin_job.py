"""One worker of the dead-origin job (test_dead_origins.py): three torch
RPC workers on loopback with a short RPC timeout, driven line by line on
stdin; each command's answer is one JSON line on stdout, with "t", the
monotonic clock when it was made (the same clock in every process of the
machine, so the test can compare it with when it killed or stopped one).

usage: origin_job.py RANK PORT [TRANSPORT]   (RPC_TIMEOUT_S: the agent's timeout)

Commands (worker w0 opens the passes; w1 forwards them to w2):
  hold               a pass in the background: its forward reaches w1, which
                     forwards to w2 (so w1's copy knows w2), then it holds its
                     context until `release`: {"context": id}
  release            ends the held pass (its release tells w1): {"released": true}
  idle_pass SECONDS  a whole pass whose context stays idle SECONDS between its
                     forward and its backward: {"ok": bool, "grads": [...]}
                     or {"ok": false, "error": message}
  contexts [ID]      what this worker holds: {"count": n, "contexts": [...]}
                     (distautograd.torch.contexts() under the backend, else
                     null: native torch has only its count); with ID, also
                     "torch_known", the known workers of torch's own context
  peer_contexts W [ID]  the same asked of worker W through an RPC
  flush SECONDS      distautograd.torch.flush(SECONDS) under the backend:
                     {"pending": n, "took": seconds}; natively {"pending": null}
  info               the container's figures: distautograd.torch.debug_info()
                     under the backend, torch's _get_debug_info() natively
  exit               leaves at once, without waiting for peers
"""
import json
import os
import sys
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

WORLD = 3
RPC_TIMEOUT_S = 3


def backend():
    try:
        import distautograd.torch as dt
    except ImportError:
        return None
    return dt if dt.active() else None


def forward_on(x, peers):
    """A layer of this worker's, then the rest of the pass on peers."""
    y = torch.tanh(x * 2.0 + 1.0)
    if peers:
        y = rpc.rpc_sync(peers[0], forward_on, args=(y, peers[1:]))
    return y


def held_contexts(cid=None):
    """What this worker holds; with cid, also the known workers torch's own
    context of that id has (what torch's Python reads, natively too)."""
    dt = backend()
    out = {"count": dist_autograd._get_debug_info()["num_autograd_contexts"],
           "contexts": dt.contexts() if dt else None}
    if cid is not None:
        out["torch_known"] = sorted(dist_autograd._retrieve_context(cid)._known_worker_ids())
    return out


def answer(obj):
    obj["t"] = time.monotonic()
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    rank, port = int(sys.argv[1]), sys.argv[2]
    transport = sys.argv[3] if len(sys.argv) > 3 else None
    opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=RPC_TIMEOUT_S, init_method="tcp://127.0.0.1:%s" % port)
    if transport:
        opts = rpc.TensorPipeRpcBackendOptions(rpc_timeout=RPC_TIMEOUT_S, init_method="tcp://127.0.0.1:%s" % port,
                                               _transports=[transport], _channels=["basic"])
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=WORLD, rpc_backend_options=opts)
    answer({"ready": "w%d" % rank})
    hold = {"go": threading.Event(), "done": threading.Event()}
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "hold":
            started = threading.Event()

            def run():
                x = torch.ones(2, requires_grad=True)
                with dist_autograd.context() as cid:
                    hold["context"] = cid
                    rpc.rpc_sync("w1", forward_on, args=(x, ["w2"]))
                    started.set()
                    hold["go"].wait()
                hold["done"].set()

            threading.Thread(target=run, daemon=True).start()
            started.wait()
            answer({"context": hold["context"]})
        elif cmd == "release":
            hold["go"].set()
            hold["done"].wait()
            answer({"released": True})
        elif cmd == "idle_pass":
            x = torch.tensor([0.5, -0.25], requires_grad=True)
            try:
                with dist_autograd.context() as cid:
                    y = rpc.rpc_sync("w1", forward_on, args=(x, ["w2"]))
                    time.sleep(float(args[0]))
                    dist_autograd.backward(cid, [(y ** 2).sum()])
                    grads = dist_autograd.get_gradients(cid)[x].tolist()
                answer({"ok": True, "grads": grads})
            except Exception as e:  # noqa: BLE001 - reported to the test
                answer({"ok": False, "error": str(e).splitlines()[0][:300]})
        elif cmd == "contexts":
            answer(held_contexts(*map(int, args)))
        elif cmd == "peer_contexts":
            answer(rpc.rpc_sync(args[0], held_contexts, args=tuple(map(int, args[1:]))))
        elif cmd == "flush":
            dt = backend()
            start = time.monotonic()
            pending = dt.flush(float(args[0])) if dt else None
            answer({"pending": pending, "took": time.monotonic() - start})
        elif cmd == "info":
            dt = backend()
            answer(dict(dt.debug_info(), active=1) if dt else dict(dist_autograd._get_debug_info(), active=0))
        elif cmd == "exit":
            sys.stdout.flush()
            os._exit(0)
        else:
            answer({"error": "unknown command %r" % cmd})


if __name__ == "__main__":
    main()
