"""The torch level of the benchmarks: torch's own torch.distributed.autograd
natively and under the torch backend (LD_PRELOAD of
build/libdistautograd_torch.so), each in its own processes, alternating.
Each process runs a one-worker RPC agent on 127.0.0.1 and times every
operation (wall clock, ns per operation); then three processes run steps of
the training job of torch_backend/tests/train_job.py (its model and remote
functions, one trainer thread) and worker 0 times them. A process times
each operation in CHUNKS runs and keeps the fastest (other load on a shared
machine only ever adds time); the figure of a side is the median over its
processes (jobs), whose figures the row keeps as its samples (the report
draws the ratio's interval from them). Rows go into build/bench.json with
level "torch" and the torch version the interpreter has ("torch": "1.13",
"2.6"; a torch other than the host's has its version in each row's label),
replacing earlier rows of that torch; the other rows stay. make bench-torch
runs it with the host's torch 1.13, then inside the Debian 13 root with its
torch 2.6 (scripts/torch-root).

usage: python3 bench/torchbench.py [--procs N]   (N processes a side, default 7)
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
BUILD = os.path.join(ROOT, "build")

CHUNKS = 3
#: This machine's torch (Debian 12's): its rows' labels are the operations alone.
HOST_TORCH = "1.13"


def fastest(fn, n):
    """ns per call of fn: the fastest of CHUNKS runs of n // CHUNKS calls,
    after a warm-up of n // 10."""
    for _ in range(n // 10):
        fn()
    k = max(1, n // CHUNKS)
    best = None
    for _ in range(CHUNKS):
        t0 = time.perf_counter_ns()
        for _ in range(k):
            fn()
        t = (time.perf_counter_ns() - t0) / k
        best = t if best is None else min(best, t)
    return best


OPS = [
    ("pass: `with context()` holding one `rpc_sync` with autograd (to itself)", 600),
    ("pass + `dist_autograd.backward` through the RPC", 300),
    ("`with context()` cycle", 5000),
    ("`_retrieve_context`", 20000),
    ("`_current_context`", 20000),
]


def worker():
    import torch
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", free_port()
    rpc.init_rpc("w0", rank=0, world_size=1)
    t = torch.ones(4, requires_grad=True)

    def rpc_pass():
        with da.context():
            rpc.rpc_sync("w0", torch.add, args=(t, t))

    def backward_pass():
        with da.context() as cid:
            y = rpc.rpc_sync("w0", torch.add, args=(t, t))
            da.backward(cid, [y.sum()])

    def cycle():
        with da.context():
            pass

    out = {}
    fns = [rpc_pass, backward_pass, cycle]
    for (name, n), fn in zip(OPS[:3], fns):
        out[name] = fastest(fn, n)
    with da.context() as cid:
        for (name, n), fn in zip(OPS[3:], (lambda: da._retrieve_context(cid), da._current_context)):
            out[name] = fastest(fn, n)
    rpc.shutdown()
    print(json.dumps(out))


TRAIN_OP = ("training step, 3 workers: nested `rpc_sync` through both peers and back, `rpc_async`, "
            "`backward`, `DistributedOptimizer.step`", 300)
JOB = os.path.join(ROOT, "torch_backend", "tests")


def train_worker(rank, port):
    # train_job's functions travel by name: every worker imports the module.
    sys.path.insert(0, JOB)
    import torch
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc
    from torch.distributed.optim import DistributedOptimizer

    import train_job as tj

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=60)
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=tj.WORLD, rpc_backend_options=opts)
    out = {}
    if rank == 0:
        near, far = "w1", "w2"
        rref1 = rpc.remote(near, tj.make_linear, args=(8, 16, 100))
        rref2 = rpc.remote(far, tj.make_linear, args=(16, 4, 200))
        local = tj.make_linear(4, 1, 300)
        params = rpc.rpc_sync(near, tj.param_rrefs, args=(rref1,)) + rpc.rpc_sync(far, tj.param_rrefs, args=(rref2,))
        params += [rpc.RRef(p) for p in local.parameters()]
        opt = DistributedOptimizer(torch.optim.SGD, params, lr=0.01)
        g = torch.Generator().manual_seed(0)
        x, target = torch.randn(5, 8, generator=g), torch.randn(5, 1, generator=g)

        def step():
            with da.context() as cid:
                h = rpc.rpc_sync(near, tj.first, args=(rref1, rref2, x, far, "w0"))
                h2 = rpc.rpc_async(far, torch.add, args=(h, 1.0)).wait()
                loss = ((local(h2) - target) ** 2).mean()
                da.backward(cid, [loss])
                opt.step(cid)

        name, n = TRAIN_OP
        out[name] = fastest(step, n)
    rpc.shutdown()
    if rank == 0:
        print(json.dumps(out))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return str(port)


def run_job(env):
    """The training job's step time, from worker 0 of three processes."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--train", str(rank), port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            return None, err
    return json.loads(outs[0][0].strip().splitlines()[-1]), ""


def main():
    import torch

    version = ".".join(torch.__version__.split(".")[:2])
    procs = 7
    if "--procs" in sys.argv:
        procs = int(sys.argv[sys.argv.index("--procs") + 1])
    results = {False: [], True: []}
    for i in range(2 * procs):
        backend = (i % 2 == 1) if (i // 2) % 2 == 0 else (i % 2 == 0)  # ABBA order
        # USE_LIBUV=0: Debian 13's torch 2.6 has no libuv for env://.
        env = dict(os.environ, GLOG_minloglevel="2", USE_LIBUV="0")
        env.pop("LD_PRELOAD", None)
        if backend:
            env["LD_PRELOAD"] = os.path.join(BUILD, "libdistautograd_torch.so")
        r = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            sys.exit("torchbench: a %s process failed:\n%s" % ("backend" if backend else "native", r.stderr))
        res = json.loads(r.stdout.strip().splitlines()[-1])
        job, err = run_job(env)
        if job is None:
            sys.exit("torchbench: a %s training job failed:\n%s" % ("backend" if backend else "native", err))
        res.update(job)
        results[backend].append(res)
    rows = []
    print("| operation | distautograd ns/op | torch ns/op | ratio |\n|---|---:|---:|---:|")
    for name, _ in OPS[:2] + [TRAIN_OP] + OPS[2:]:
        dac = [x[name] for x in results[True]]
        nat = [x[name] for x in results[False]]
        d, n = statistics.median(dac), statistics.median(nat)
        rows.append({"level": "torch", "op": name, "threads": 1, "distautograd_ns": round(d, 1),
                     "native_ns": round(n, 1), "ratio": round(d / n, 3),
                     "distautograd_samples": [round(v, 1) for v in dac],
                     "native_samples": [round(v, 1) for v in nat]})
        print("| %s | %.1f | %.1f | %.2f |" % (name, d, n, d / n))
    # build/bench.json is make bench's report (an object with "rows"): the
    # torch rows replace any earlier ones; docs/benchmarks.md and the README's
    # headline are rendered from it (go run ./bench -from build/bench.json
    # -tables docs/benchmarks.md -headline README.md).
    for r in rows:
        r["torch"] = version
        r["label"] = r["op"] if version == HOST_TORCH else "%s (torch %s)" % (r["op"], version)
        r["distautograd_call"] = "torch under the backend (distautograd-torch)"
        r["native_call"] = "torch as built (its own container)"
    path = os.path.join(BUILD, "bench.json")
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        report = {}
    if not isinstance(report, dict):
        report = {}
    report["rows"] = [r for r in report.get("rows", [])
                      if r.get("level") != "torch" or r.get("torch", HOST_TORCH) != version] + rows
    os.makedirs(BUILD, exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print("wrote %s" % path)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    elif "--train" in sys.argv:
        i = sys.argv.index("--train")
        train_worker(int(sys.argv[i + 1]), sys.argv[i + 2])
    else:
        main()
