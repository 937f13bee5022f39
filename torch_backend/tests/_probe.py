"""Small single-process programs the backend's tests run, one per argv[1];
each prints one JSON line. torch RPC with one worker on 127.0.0.1."""
import json
import os
import socket
import sys


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return str(port)


def init_one():
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = free_port()
    rpc.init_rpc("w0", rank=0, world_size=1)
    return rpc


def one_pass(rpc):
    import torch
    import torch.distributed.autograd as da

    t = torch.ones(3, requires_grad=True)
    with da.context() as cid:
        y = rpc.rpc_sync("w0", torch.mul, args=(t, 2.0))
        da.backward(cid, [y.sum()])
        return da.get_gradients(cid)[t].tolist()


def guard():
    """Native or not, torch works; says which."""
    import distautograd.torch as dt
    import torch.distributed.autograd as da

    rpc = init_one()
    grads = one_pass(rpc)
    try:
        da._retrieve_context(12345)
        err = None
    except RuntimeError as e:
        err = str(e)
    try:
        figures = sorted(dt.debug_info())
    except dt.NotServing:
        figures = "NotServing"
    out = {"grads": grads, "error": err, "active": dt.active(), "keys": sorted(da._get_debug_info()),
           "figures": figures}
    rpc.shutdown()
    return out


def one_library():
    """The package imported first, then torch: one library, one container."""
    import distautograd

    lib_path = distautograd._lib.PATH
    import torch.distributed.autograd as da

    import distautograd.torch as dt

    rpc = init_one()
    with da.context() as cid:
        seen = {"torch": da._get_debug_info()["num_autograd_contexts"], "package": distautograd._lib.debug_info()["num_autograd_contexts"],
                "package_current": distautograd._current_context()._context_id() == cid,
                "package_valid": distautograd._is_valid_context(cid) is None}
    grads = one_pass(rpc)
    maps = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "libdistautograd.so" in line:
                maps.add(os.path.realpath(line.split()[-1]))
    out = {"active": dt.active(), "lib": lib_path, "mapped": sorted(maps), "inside": seen, "grads": grads,
           "after": distautograd._lib.debug_info()["num_autograd_contexts"]}
    rpc.shutdown()
    return out


def _square(x):
    return x * x


def fork():
    """A process using the backend forks DataLoader workers (and a bare
    os.fork child) that never touch autograd: they run normally."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Squares(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.tensor([float(i)]) ** 2

    rpc = init_one()
    before = one_pass(rpc)
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    batches = [b.flatten().tolist() for b in loader]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(torch.arange(4).sum().item()).encode())
        os._exit(0)
    os.close(w)
    child_out = os.read(r, 100).decode()
    _, status = os.waitpid(pid, 0)
    after = one_pass(rpc)
    rpc.shutdown()
    return {"before": before, "batches": batches, "child": child_out, "child_status": status, "after": after}


def local_pass(t):
    """A pass of this worker alone: no RPC, whose timing could touch the
    context, only the pass's own steps."""
    import torch.distributed.autograd as da

    with da.context() as cid:
        da.backward(cid, [(t * 2.0).sum()])
        return da.get_gradients(cid)[t].tolist()


def reaped():
    """A pass idle past DISTAUTOGRAD_REAP_IDLE_MS (natively: idle 2.5 s),
    then used and ended; then new passes on the same thread and another."""
    import threading
    import time

    import distautograd.torch as dt
    import torch
    import torch.distributed.autograd as da

    rpc = init_one()
    t = torch.ones(3, requires_grad=True)
    first = {}
    try:
        with da.context() as cid:
            loss = (t * 2.0).sum()
            time.sleep(2.5)
            deadline = time.monotonic() + 60  # the reaper's thread may be slow to run on a loaded machine
            while dt.active() and da._get_debug_info()["num_autograd_contexts"] and time.monotonic() < deadline:
                time.sleep(0.05)
            da.backward(cid, [loss])
            first["grads"] = da.get_gradients(cid)[t].tolist()
    except RuntimeError as e:
        first["error"] = str(e)
        first["chained"] = e.__context__ is not None
    after = [local_pass(t), local_pass(t)]
    other = []
    th = threading.Thread(target=lambda: other.append(local_pass(t)))
    th.start()
    th.join()
    out = {"active": dt.active(), "first": first, "after": after, "other": other,
           "contexts": da._get_debug_info()["num_autograd_contexts"]}
    rpc.shutdown()
    return out


def settings():
    """The backend's first container call, with the settings of the
    environment: what it took (its stderr says what it refused)."""
    import signal

    import torch.distributed.autograd as da

    import distautograd.torch as dt

    da._init(0)
    # The signals with a handler, as the kernel has them (Python's
    # signal.getsignal only knows its own).
    with open("/proc/self/status") as f:
        caught = int(next(ln for ln in f if ln.startswith("SigCgt:")).split()[1], 16)
    return {"active": dt.active(), "max_contexts": dt.debug_info()["max_contexts"],
            "usr1": bool(caught >> (signal.SIGUSR1 - 1) & 1), "usr2": bool(caught >> (signal.SIGUSR2 - 1) & 1)}


def versions():
    """Which implementation the backend mapped for this torch, and torch's
    _get_debug_info() with 0, 1, 2 then 0 contexts (the second in another
    thread: a thread has one current context)."""
    import threading

    import torch
    import torch.distributed.autograd as da

    import distautograd.torch as dt

    rpc = init_one()
    figures = [dict(da._get_debug_info())]
    entered, leave = threading.Event(), threading.Event()

    def other():
        with da.context():
            entered.set()
            leave.wait()

    with da.context():
        figures.append(dict(da._get_debug_info()))
        t = threading.Thread(target=other)
        t.start()
        entered.wait()
        figures.append(dict(da._get_debug_info()))
        leave.set()
        t.join()
    figures.append(dict(da._get_debug_info()))
    impls = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "libdistautograd_torch_impl" in line:
                impls.add(os.path.realpath(line.split()[-1]))
    out = {"active": dt.active(), "torch": torch.__version__, "impls": sorted(impls), "figures": figures}
    rpc.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(globals()[sys.argv[1]]()), flush=True)
