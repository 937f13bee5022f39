"""The torch backend's cost inside one process: where a pass or a training
step spends the time the backend adds, member by member and thread by
thread.

make bench's torch level compares separate processes, whose placement on
the machine moves a ratio by far more than the backend does. Here one
process (three, for the training step: the job of bench/torchbench.py)
preloads the A/B build of the shim (make torch-ab; torch_backend/shim.c,
DAT_AB) and switches between torch's own container and the backend
between chunks, while no context is live: each round times a chunk on
each side, the side that goes first alternating, and the ratio is the
median of the rounds' ratios, with the interval that holds it in 90 % of
2,000 resamplings of the rounds. Everything else is held fixed: the
processes, their threads' placement, their heaps, the library loaded.

Besides the ratio it prints, per operation (a pass, a step), for each side:
- each container member torch called: how often, the wall time spent in
  it (time stamp counter ticks around the call, ab.S; a member that
  another calls counts in both) and its median call, unless --untimed;
- each class of threads: CPU time, time waiting for a CPU, and switches
  (/proc schedstat), "go" being the threads Go's runtime started (those
  blocked in the library's code when first seen).

usage: python3 bench/torchab.py [--op pass|backward|cycle|step] [--rounds N] [--batches B] [--untimed] [--json FILE]
       (make torch-ab first; FILE gets the figures printed)
"""
import argparse
import atexit
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchbench  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
BUILD = os.path.join(ROOT, "build")
SHIM = torchbench.AB_SHIM
NATIVE, BACKEND = 0, 1
SIDES = ("native", "backend")
#: Backend context ids start past every id native's side will make (and at
#: least this far), so that a late cleanup message of one side (one that
#: lands after the switch, SETTLE_S later) can never name a live context of
#: the other.
MIN_ID_GAP = 100000
#: (K calls a batch, default batches a chunk) per operation.
OPS = {"pass": (1, 40), "backward": (1, 20), "cycle": (50, 40), "step": (1, 10)}
#: A pause before each switch: every cleanup message of the chunk before is
#: answered by then.
SETTLE_S = 0.005


def ab():
    return ctypes.CDLL(SHIM)


def switch(side, timed):
    """Points this process's container at side; called on every worker."""
    if ab().dat_ab_switch(side, int(timed)) != 0:
        raise RuntimeError("the backend does not serve this process: nothing to switch")
    return 0


def take():
    """Each member's (ticks, calls, [ticks of each call]) since the last
    take."""
    lib = ab()
    buf = (ctypes.c_ulong * (2 * lib.dat_ab_take(None)))()
    n = lib.dat_ab_take(buf)
    lib.dat_ab_name.restype = ctypes.c_char_p
    lib.dat_ab_samples.restype = ctypes.c_long
    out = {}
    for i in range(n):
        calls = buf[2 * i + 1]
        got = (ctypes.c_ulong * max(calls, 1))()
        k = lib.dat_ab_samples(i, got, ctypes.c_long(calls))
        out[lib.dat_ab_name(i).decode()] = (buf[2 * i], calls, list(got[:max(k, 0)]))
    return out


def burn(n):
    """Moves the backend's next context id n past native's."""
    lib = ctypes.CDLL(os.path.join(BUILD, "libdistautograd.so.0"))
    h, cid = ctypes.c_void_p(), ctypes.c_int64()
    for _ in range(n):
        if lib.dac_context_new_id(ctypes.byref(h), ctypes.byref(cid)) != 0:
            raise RuntimeError("dac_context_new_id failed")
        lib.dac_context_unref(h)
        lib.dac_context_release(cid)
    return cid.value


_go_threads = set()


def threads():
    """This process's threads: {tid: (class, CPU ns, wait ns, switches)}."""
    lo = hi = 0
    with open("/proc/self/maps") as f:
        for line in f:
            if "libdistautograd.so" in line and " r-xp " in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    out, me = {}, str(os.getpid())
    for tid in os.listdir("/proc/self/task"):
        base = "/proc/self/task/%s/" % tid
        try:
            with open(base + "comm") as f:
                comm = f.read().strip()
            with open(base + "schedstat") as f:
                run, wait, n = map(int, f.read().split())
            with open(base + "syscall") as f:
                sc = f.read().split()
        except OSError:
            continue
        if len(sc) >= 9 and lo <= int(sc[-1], 16) < hi:
            _go_threads.add(tid)
        cls = "main" if tid == me else "go" if tid in _go_threads else "rpc/pool" if comm.startswith("python") else comm
        out[tid] = (cls, run, wait, n)
    return out


def median_ns(samples, rate):
    """The median call of a member, in ns (0 without calls)."""
    return statistics.median(samples) / rate if samples else 0.0


def ticks_per_ns():
    lib = ab()
    lib.dat_ab_ticks_per_ns.restype = ctypes.c_double
    return lib.dat_ab_ticks_per_ns()


def helper(rank, port):
    # Dies with worker 0's process, whatever ends it.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        sys.exit("torchab: worker 0 is gone")
    import torch.distributed.rpc as rpc

    torchbench.init_train_rpc(rank, port)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=sorted(OPS), default="pass")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--batches", type=int)
    ap.add_argument("--untimed", action="store_true", help="no wrappers around the members (the ratio alone)")
    ap.add_argument("--json", metavar="FILE", help="write the figures to FILE too")
    ap.add_argument("--worker", nargs=2, metavar=("RANK", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if SHIM not in os.environ.get("LD_PRELOAD", "").split():
        if not os.path.exists(SHIM):
            sys.exit("torchab: %s is missing: make torch-ab" % SHIM)
        env = dict(os.environ, LD_PRELOAD=SHIM, GLOG_minloglevel="2", USE_LIBUV="0")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if args.worker:
        helper(int(args.worker[0]), args.worker[1])
        return
    k, batches = OPS[args.op]
    batches = args.batches or batches
    timed = not args.untimed

    import torch
    import torch.distributed.rpc as rpc

    port = torchbench.free_port()
    helpers = []
    if args.op == "step":
        helpers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(r), port])
                   for r in (1, 2)]
        atexit.register(lambda: [h.kill() for h in helpers if h.poll() is None])
        fn = torchbench.training_step(torchbench.init_train_rpc(0, port))
        workers = ["w0", "w1", "w2"]
    else:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
        rpc.init_rpc("w0", rank=0, world_size=1)
        fn = torchbench.one_worker_ops()[args.op]
        workers = ["w0"]

    def on_all(f, *a):
        return {w: f(*a) if w == "w0" else rpc.rpc_sync(w, f, args=a) for w in workers}

    gap = max(MIN_ID_GAP, args.rounds * (batches + 1) * k + 1)
    for w, last in on_all(burn, gap).items():
        if last < 0:
            raise RuntimeError("%s: no ids burned" % w)
    rate = ticks_per_ns()
    clock = time.perf_counter_ns
    ratios, medians = [], {NATIVE: [], BACKEND: []}
    members = {NATIVE: {}, BACKEND: {}}
    cpu = {NATIVE: {}, BACKEND: {}}
    for r in range(args.rounds):
        got = {}
        for side in ((NATIVE, BACKEND) if r % 2 == 0 else (BACKEND, NATIVE)):
            time.sleep(SETTLE_S)
            on_all(switch, side, timed)
            for _ in range(k):
                fn()
            before = on_all(threads)
            on_all(take)
            figures = []
            for _ in range(batches):
                t0 = clock()
                for _ in range(k):
                    fn()
                figures.append((clock() - t0) / k)
            taken = on_all(take)
            after = on_all(threads)
            got[side] = statistics.median(figures)
            medians[side].append(got[side])
            for w in workers:
                for name, (ticks, calls, samples) in taken[w].items():
                    m = members[side].setdefault((w, name), [0, 0, []])
                    m[0] += ticks
                    m[1] += calls
                    m[2] += samples
                for tid, (cls, run, wait, n) in after[w].items():
                    b = before[w].get(tid, (cls, 0, 0, 0))
                    c = cpu[side].setdefault((w, cls), [0, 0, 0])
                    c[0] += run - b[1]
                    c[1] += wait - b[2]
                    c[2] += n - b[3]
        ratios.append(got[BACKEND] / got[NATIVE])
    on_all(switch, BACKEND, False)
    ops = args.rounds * batches * k
    lo, hi = torchbench.median_interval(ratios, 2000)
    print("torchab: %s, %d rounds of %d x %d, torch %s" % (args.op, args.rounds, batches, k, torch.__version__))
    print("ratio backend/native %.4f (90%%: %.4f-%.4f); native %.1f us, backend %.1f us an op"
          % (statistics.median(ratios), lo, hi,
             statistics.median(medians[NATIVE]) / 1e3, statistics.median(medians[BACKEND]) / 1e3))
    print()
    print("%-22s %10s %10s %8s | %10s %10s %8s" % ("threads (us an op)", "native CPU", "wait", "switches",
                                                    "backend", "wait", "switches"))
    for key in sorted(set(cpu[NATIVE]) | set(cpu[BACKEND])):
        a, b = cpu[NATIVE].get(key, [0, 0, 0]), cpu[BACKEND].get(key, [0, 0, 0])
        if a == [0, 0, 0] and b == [0, 0, 0]:
            continue
        print("%-22s %10.2f %10.2f %8.2f | %10.2f %10.2f %8.2f" % (
            " ".join(key) if len(workers) > 1 else key[1], a[0] / ops / 1e3, a[1] / ops / 1e3, a[2] / ops,
            b[0] / ops / 1e3, b[1] / ops / 1e3, b[2] / ops))
    if timed:
        print()
        print("%-30s %7s %10s %8s | %7s %10s %8s %10s" % ("members (an op; a call)", "calls", "native ns",
                                                          "a call", "calls", "backend ns", "a call", "difference"))
        total = {NATIVE: 0.0, BACKEND: 0.0}
        for key in sorted(set(members[NATIVE]) | set(members[BACKEND])):
            a, b = members[NATIVE].get(key, [0, 0, []]), members[BACKEND].get(key, [0, 0, []])
            if a[1] == 0 and b[1] == 0:
                continue
            an, bn = a[0] / rate / ops, b[0] / rate / ops
            if key[1] not in ("sendReleaseContextRpc", "eraseContextIdAndReset"):  # inside releases
                total[NATIVE] += an
                total[BACKEND] += bn
            print("%-30s %7.2f %10.0f %8.0f | %7.2f %10.0f %8.0f %+10.0f" % (
                " ".join(key) if len(workers) > 1 else key[1], a[1] / ops, an, median_ns(a[2], rate), b[1] / ops,
                bn, median_ns(b[2], rate), bn - an))
        print("%-30s %7s %10.0f %8s | %7s %10.0f %8s %+10.0f" % ("public members", "", total[NATIVE], "", "",
                                                               total[BACKEND], "", total[BACKEND] - total[NATIVE]))
    if args.json:
        name = (lambda key: " ".join(key) if len(workers) > 1 else key[1])
        report = {"op": args.op, "torch": torch.__version__, "rounds": args.rounds, "ratio": statistics.median(ratios),
                  "interval": [lo, hi],
                  "ns": {SIDES[s]: statistics.median(medians[s]) for s in (NATIVE, BACKEND)},
                  "threads": {SIDES[s]: {name(k): [v[0] / ops / 1e3, v[1] / ops / 1e3, v[2] / ops]
                                         for k, v in cpu[s].items()} for s in (NATIVE, BACKEND)},
                  "members": {SIDES[s]: {name(k): [v[1] / ops, v[0] / rate / ops, median_ns(v[2], rate)]
                                         for k, v in members[s].items() if v[1]}
                              for s in (NATIVE, BACKEND)} if timed else None}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    rpc.shutdown()
    for h in helpers:
        h.wait()


if __name__ == "__main__":
    main()
