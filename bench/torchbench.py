"""The torch level of the benchmarks: torch's own torch.distributed.autograd
natively and under the torch backend (LD_PRELOAD of
build/libdistautograd_torch.so), each in its own processes, alternating.
Each process runs a one-worker RPC agent on 127.0.0.1 and times every
operation (wall clock, ns per operation); the figure of a side is the median
over its processes. Rows go into build/bench.json with level "torch"
(replacing earlier torch rows; the other levels' rows stay).

usage: /usr/bin/python3 bench/torchbench.py [--procs N]
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

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(s.getsockname()[1])
    s.close()
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
        for _ in range(n // 10):
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter_ns() - t0) / n
    with da.context() as cid:
        for (name, n), fn in zip(OPS[3:], (lambda: da._retrieve_context(cid), da._current_context)):
            for _ in range(n // 10):
                fn()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            out[name] = (time.perf_counter_ns() - t0) / n
    rpc.shutdown()
    print(json.dumps(out))


def main():
    procs = 5
    if "--procs" in sys.argv:
        procs = int(sys.argv[sys.argv.index("--procs") + 1])
    results = {False: [], True: []}
    for i in range(2 * procs):
        backend = (i % 2 == 1) if (i // 2) % 2 == 0 else (i % 2 == 0)  # ABBA order
        env = dict(os.environ, GLOG_minloglevel="2")
        env.pop("LD_PRELOAD", None)
        if backend:
            env["LD_PRELOAD"] = os.path.join(BUILD, "libdistautograd_torch.so")
        r = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            sys.exit("torchbench: a %s process failed:\n%s" % ("backend" if backend else "native", r.stderr))
        results[backend].append(json.loads(r.stdout.strip().splitlines()[-1]))
    rows = []
    print("| operation | distautograd ns/op | torch ns/op | ratio |\n|---|---:|---:|---:|")
    for name, _ in OPS:
        d = statistics.median(x[name] for x in results[True])
        n = statistics.median(x[name] for x in results[False])
        rows.append({"level": "torch", "op": name, "threads": 1, "distautograd_ns": round(d, 1),
                     "native_ns": round(n, 1), "ratio": round(d / n, 3)})
        print("| %s | %.1f | %.1f | %.2f |" % (name, d, n, d / n))
    path = os.path.join(BUILD, "bench.json")
    try:
        with open(path) as f:
            old = [r for r in json.load(f) if r.get("level") != "torch"]
    except (OSError, ValueError):
        old = []
    os.makedirs(BUILD, exist_ok=True)
    with open(path, "w") as f:
        json.dump(old + rows, f, indent=1)
        f.write("\n")
    print("wrote %s" % path)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        main()
