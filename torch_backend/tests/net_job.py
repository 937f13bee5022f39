"""One worker of the network-fault job (test_netfaults.py): torch RPC
training across three hosts, each in its own network namespace, driven
line by line on stdin; each command's answer is one JSON line on stdout.

usage: net_job.py RANK MASTER_ADDR PORT OUT_DIR   (TP_SOCKET_IFNAME set)

Every answer has "t", the monotonic clock when it was made.

Commands:
  passes N PEER...   N passes, each calling every PEER (workers' names) and
                     running backward and an optimizer step through them:
                     {"ok": passes that completed, "errors": [messages]}
  slow PEER...       a pass in the background that reaches every PEER, then
                     runs backward whose local part writes OUT_DIR/slow-RANK
                     and sleeps (the test acts on the host mid-backward):
                     {"started": true}
  slow_result        waits for the slow pass: {"ok": bool, "error": msg}
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
from torch import nn
from torch.distributed.optim import DistributedOptimizer

WORLD = 3
RPC_TIMEOUT_S = 2
SLOW_BACKWARD_S = 1.0

_layers = {}


def layer(name):
    # Runs on the worker that holds the layer (made on first use).
    if name not in _layers:
        g = torch.Generator().manual_seed(sum(map(ord, name)))
        lin = nn.Linear(4, 4)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(4, 4, generator=g) * 0.3)
        _layers[name] = lin
    return _layers[name]


def forward_on(name, x):
    return torch.tanh(layer(name)(x))


def layer_params(name):
    return [rpc.RRef(p) for p in layer(name).parameters()]


class SlowBackward(torch.autograd.Function):
    """Identity forward; its backward marks the file and sleeps: the moment
    the test stops, kills or cuts off this host mid-backward."""

    mark = ""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        with open(SlowBackward.mark, "w") as f:
            f.write("in backward\n")
        time.sleep(SLOW_BACKWARD_S)
        return g


def figures():
    try:
        import distautograd.torch as dt

        if dt.active():
            return dict(dt.debug_info(), active=1)
    except ImportError:
        pass
    return dict(dist_autograd._get_debug_info(), active=0)


_optimizers = {}


def optimizer(me, peers):
    """One DistributedOptimizer over the layers a set of peers holds."""
    key = tuple(peers)
    if key not in _optimizers:
        params = []
        for p in peers:
            params += rpc.rpc_sync(p, layer_params, args=("%s-%s" % (me, p),), timeout=RPC_TIMEOUT_S)
        _optimizers[key] = DistributedOptimizer(torch.optim.SGD, params, lr=0.01)
    return _optimizers[key]


def one_pass(me, peers, step):
    x = torch.full((2, 4), 0.1 * (step + 1))
    opt = optimizer(me, peers)
    with dist_autograd.context() as cid:
        h = x
        for p in peers:
            h = rpc.rpc_sync(p, forward_on, args=("%s-%s" % (me, p), h), timeout=RPC_TIMEOUT_S)
        dist_autograd.backward(cid, [(h ** 2).sum()])
        opt.step(cid)


def main():
    rank, addr, port, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    me = "w%d" % rank
    SlowBackward.mark = os.path.join(out_dir, "slow-%d" % rank)
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = port
    # Only sockets between the namespaces: TensorPipe's shared-memory and
    # cross-process channels would look for peers on this machine.
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=RPC_TIMEOUT_S,
                                           init_method="tcp://%s:%s" % (addr, port), _transports=["uv"],
                                           _channels=["basic"])
    rpc.init_rpc(me, rank=rank, world_size=WORLD, rpc_backend_options=opts)
    answer({"ready": me})
    slow = {}
    step = 0
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "passes":
            ok, errors = 0, []
            for _ in range(int(args[0])):
                step += 1
                try:
                    one_pass(me, args[1:], step)
                    ok += 1
                except Exception as e:  # noqa: BLE001 - reported to the test
                    errors.append(str(e).splitlines()[0][:300])
            answer({"ok": ok, "errors": errors})
        elif cmd == "slow":
            def run(peers=args):
                try:
                    x = torch.ones(2, 4, requires_grad=True)
                    with dist_autograd.context() as cid:
                        h = x
                        for p in peers:
                            h = rpc.rpc_sync(p, forward_on, args=("%s-%s" % (me, p), h), timeout=RPC_TIMEOUT_S)
                        dist_autograd.backward(cid, [SlowBackward.apply(h).sum()])
                    slow["result"] = {"ok": True}
                except Exception as e:  # noqa: BLE001 - reported to the test
                    slow["result"] = {"ok": False, "error": str(e).splitlines()[0][:300]}

            slow["thread"] = threading.Thread(target=run, daemon=True)
            slow["thread"].start()
            answer({"started": True})
        elif cmd == "slow_result":
            slow["thread"].join()
            answer(slow["result"])
        elif cmd == "info":
            answer(figures())
        elif cmd == "exit":
            answer({"bye": me})
            os._exit(0)
        else:
            answer({"error": "unknown command %r" % cmd})


def answer(obj):
    obj["t"] = time.monotonic()  # the machine's clock: the test compares it with its own
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
