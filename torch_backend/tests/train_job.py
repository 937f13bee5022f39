"""One worker of the torch backend's training job: an unmodified torch RPC
training script (nothing here knows about distautograd but the report at
the end). Three workers on 127.0.0.1 over TensorPipe; workers 0 and 1 each
train a model split across all three: a layer on each of the other two
(created there with rpc.remote, held by RRef) and one at home. A pass sends
rpc_sync to the first remote layer, which calls the second (nested), which
calls back to the trainer; then rpc_async to the second remote worker; then
dist_autograd.backward and DistributedOptimizer.step. Each trainer runs
THREADS passes at once, in parallel threads, for STEPS steps: the forward
and backward passes run together, the optimizer steps one thread at a time
in thread order, so the result does not depend on scheduling and a run
under the backend must give bitwise the parameters of a native run.

usage: train_job.py RANK PORT OUT_DIR [kill]
Writes OUT_DIR/params-RANK.pt (the trainer's model after the last step) and
OUT_DIR/report-RANK.json. With "kill", another job: worker 2 dies inside a
pass that reached workers 0 and 1, which go on (see killed_job).
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
THREADS = 3
STEPS = 4


def make_linear(i, o, seed):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(i, o)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(o, i, generator=g) * 0.3)
        lin.bias.copy_(torch.randn(o, generator=g) * 0.1)
    return lin


def param_rrefs(module_rref):
    return [rpc.RRef(p) for p in module_rref.local_value().parameters()]


def params_of(module_rref):
    return [p.detach().clone() for p in module_rref.local_value().parameters()]


def back_home(x):
    # Runs on the trainer, called back by the second remote layer.
    return torch.tanh(x) * 2.0


def second(rref2, a, home):
    c = rref2.local_value()(a)
    return rpc.rpc_sync(home, back_home, args=(c,))


def first(rref1, rref2, x, far, home):
    a = torch.relu(rref1.local_value()(x))
    return rpc.rpc_sync(far, second, args=(rref2, a, home))


def train(rank, out_dir):
    me = "w%d" % rank
    near, far = ["w%d" % ((rank + k) % WORLD) for k in (1, 2)]
    rref1 = rpc.remote(near, make_linear, args=(8, 16, 100 + rank))
    rref2 = rpc.remote(far, make_linear, args=(16, 4, 200 + rank))
    local = make_linear(4, 1, 300 + rank)
    params = rpc.rpc_sync(near, param_rrefs, args=(rref1,)) + rpc.rpc_sync(far, param_rrefs, args=(rref2,))
    params += [rpc.RRef(p) for p in local.parameters()]
    opt = DistributedOptimizer(torch.optim.SGD, params, lr=0.05)

    barrier = threading.Barrier(THREADS)
    turn = threading.Condition()
    state = {"next": 0}
    errors = []

    def pass_(t, step):
        g = torch.Generator().manual_seed(1000 * rank + 10 * step + t)
        x = torch.randn(5, 8, generator=g)
        target = torch.randn(5, 1, generator=g)
        with dist_autograd.context() as cid:
            h = rpc.rpc_sync(near, first, args=(rref1, rref2, x, far, me))
            h2 = rpc.rpc_async(far, torch.add, args=(h, 1.0)).wait()
            loss = ((local(h2) - target) ** 2).mean()
            dist_autograd.backward(cid, [loss])
            barrier.wait()
            with turn:
                turn.wait_for(lambda: state["next"] == t)
                opt.step(cid)
                state["next"] = (t + 1) % THREADS
                turn.notify_all()
            barrier.wait()

    def run(t):
        try:
            for step in range(STEPS):
                pass_(t, step)
        except threading.BrokenBarrierError:
            pass
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError("passes failed: %s" % errors)
    if True:
        final = rpc.rpc_sync(near, params_of, args=(rref1,)) + rpc.rpc_sync(far, params_of, args=(rref2,))
        final += [p.detach().clone() for p in local.parameters()]
        torch.save(final, os.path.join(out_dir, "params-%d.pt" % rank))


_served = []


def figures():
    """distautograd's figures under the backend (distautograd.torch.debug_info),
    torch's own natively."""
    if not _served:
        try:
            import distautograd.torch

            _served.append(distautograd.torch.active())
        except ImportError:
            _served.append(False)
    if _served[0]:
        import distautograd.torch

        return distautograd.torch.debug_info()
    return dist_autograd._get_debug_info()


def wait_until_settled(deadline_s):
    """Waits (a bound, not a sleep) until no context is left and nothing is
    on its way out: the last cleanup RPCs may still be arriving, and a
    release that has just dropped the count may not have made its own sends
    yet (a context stops counting before its release hands the cleanup
    messages over, as natively), so the figures must read the same twice in a
    row, 0.1 s apart, with no context and no message pending."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        d = figures()
        if d == last and d["num_autograd_contexts"] == 0 and d.get("cleanup_pending", 0) == 0:
            return
        last = d
        time.sleep(0.1)


_orphan_seen = threading.Event()
_orphans = []


def note_orphan(t):
    # Runs here on behalf of w2's pass, whose context this worker now holds.
    _orphans.append(dist_autograd._get_debug_info()["num_autograd_contexts"])
    _orphan_seen.set()
    return t * 2


def killed_job(rank, out_dir):
    """Worker 2 starts a pass that reaches workers 0 and 1, then dies inside
    it: nobody will ever tell them to release their copies. They go on
    training with each other; the reaper clears the orphans."""
    if rank == 2:
        with dist_autograd.context():
            t = torch.ones(2, requires_grad=True)
            rpc.rpc_sync("w0", note_orphan, args=(t,))
            rpc.rpc_sync("w1", note_orphan, args=(t,))
            os._exit(17)
    report = {"rank": rank}
    if not _orphan_seen.wait(60):
        raise RuntimeError("worker 2's pass never arrived")
    report["orphans_seen"] = list(_orphans)
    peer = "w%d" % (1 - rank)
    w = torch.ones(3, requires_grad=True)
    for _ in range(5):
        with dist_autograd.context() as cid:
            y = rpc.rpc_sync(peer, torch.mul, args=(w, 3.0))
            dist_autograd.backward(cid, [y.sum()])
            assert dist_autograd.get_gradients(cid)[w].tolist() == [3.0, 3.0, 3.0]
    report["passes_after"] = 5
    wait_until_settled(60)
    report["debug_info"] = figures()
    with open(os.path.join(out_dir, "report-%d.json" % rank), "w") as f:
        json.dump(report, f)
    # The peer may still be passing; then leave without waiting for the dead one.
    rpc.shutdown(graceful=False)


def main():
    rank, port, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    kill = len(sys.argv) > 4 and sys.argv[4] == "kill"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=60)
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=WORLD, rpc_backend_options=opts)
    if kill:
        killed_job(rank, out_dir)
        return
    report = {"rank": rank}
    if rank in (0, 1):
        train(rank, out_dir)
    # Every worker is done training once all reach the shutdown barrier; the
    # cleanup RPCs of the last passes may still be in flight: wait for them
    # before reporting, then shut down.
    rpc.api._wait_all_workers(timeout=60)
    wait_until_settled(60)
    report["debug_info"] = figures()
    report["torch_debug_info"] = dist_autograd._get_debug_info()
    try:
        import distautograd
        import distautograd.torch

        report["active"] = distautograd.torch.active()
        if report["active"]:
            # One library per process: the package sees the backend's container.
            report["package_library"] = distautograd._lib.PATH
            report["package_contexts"] = distautograd._lib.debug_info()["num_autograd_contexts"]
            report["package_cleanup_sent"] = distautograd._lib.debug_info()["cleanup_sent"]
    except ImportError:
        report["active"] = False
    with open(os.path.join(out_dir, "report-%d.json" % rank), "w") as f:
        json.dump(report, f)
    rpc.shutdown()


if __name__ == "__main__":
    main()
