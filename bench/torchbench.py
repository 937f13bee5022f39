"""The torch level of the benchmarks: torch's own torch.distributed.autograd
natively and under the torch backend (LD_PRELOAD of
build/libdistautograd_torch.so), in interleaved pairs of processes.

A pair is a native process and a backend process, started together, each
running a one-worker RPC agent on 127.0.0.1 (for the training step: a
native job and a backend job, three processes each, the model and remote
functions of torch_backend/tests/train_job.py). Only one side of a pair
runs at a time: the other is stopped (SIGSTOP; torch's TensorPipe agent
busy-polls a core even when idle, and this machine has two). A round times
every operation once on each side, in a chunk of a few milliseconds, the
side that goes first alternating round by round; the round's ratio is
distautograd's chunk over native's. So both sides of a ratio ran within
milliseconds of each other, under the same load from the rest of the
machine: the drift of a shared machine's load, which moves separate
processes far apart, falls out of the ratio.

A chunk is BATCHES batches of K calls, after K warm-up calls (the side was
stopped a moment ago); its figure is the median over its batches of the
batch's wall time / K (the slow operations, K = 1: a median per call).
A pair's ratio is the median of its rounds' ratios; a row's ratio is the
median of its pairs' ratios (the pair, a placement of processes on the
machine, is what varies independently: the report's interval resamples
pairs). The training job's medians move most from run to run, so it
gets the most pairs. distautograd_ns and native_ns are the medians of
each side's chunk figures.

Rows go into build/bench.json with level "torch" and the torch version the
interpreter has ("torch": "1.13", "2.6"; a torch other than the host's has
its version in each row's label), replacing earlier rows of that torch;
the other rows stay. make bench-torch runs it with the host's torch 1.13,
then inside the Debian 13 root with its torch 2.6 (scripts/torch-root).

With --aa, the method's zero: the "backend" side preloads the A/B build
of the shim (make torch-ab) with every member pointed back at libtorch,
so that a pair is native against native with the library loaded and Go's
runtime started; its ratios show what the placement of processes and the
library's mere presence move, and nothing is written to build/bench.json.

usage: python3 bench/torchbench.py [--aa] [--pairs N] [--rounds R] [--job-pairs M] [--job-rounds S]
       (N pairs of one-process sides of R rounds; M pairs of training jobs
       of S rounds; -h prints the defaults, COUNTS)
"""
import contextlib
import ctypes
import json
import os
import random
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
BUILD = os.path.join(ROOT, "build")
JOB = os.path.join(ROOT, "torch_backend", "tests")
#: The A/B build of the shim (make torch-ab): bench/torchab.py's, and --aa's.
AB_SHIM = os.path.join(BUILD, "libdistautograd_torch_ab.so")
#: The flag of the method's zero (the docstring), passed on to the sides.
AA = "--aa"

#: This machine's torch (Debian 12's): its rows' labels are the operations alone.
HOST_TORCH = "1.13"
#: How long a side may take to start or to answer before the run fails.
TIMEOUT_S = 300

# (label, key, K calls a batch, batches a chunk): chunks of 3-30 ms.
OPS = [
    ("pass: `with context()` holding one `rpc_sync` with autograd (to itself)", "pass", 1, 40),
    ("pass + `dist_autograd.backward` through the RPC", "backward", 1, 20),
    ("`with context()` cycle", "cycle", 50, 40),
    ("`_retrieve_context`", "retrieve", 500, 40),
    ("`_current_context`", "current", 500, 40),
]
#: The default of each count flag (the usage line in the docstring).
COUNTS = {"--pairs": 24, "--rounds": 8, "--job-pairs": 48, "--job-rounds": 6}

TRAIN_OP = ("training step, 3 workers: nested `rpc_sync` through both peers and back, `rpc_async`, "
            "`backward`, `DistributedOptimizer.step`", "step", 1, 10)


def serve(fns, out):
    """A side's loop: reads "KEY K BATCHES" lines from stdin, answers each
    with the chunk's figure (ns per call) on out, until stdin closes.
    fns[KEY] is (the operation, what the chunk runs inside)."""
    clock = time.perf_counter_ns
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        key, k, batches = line.split()
        (fn, within), k, batches = fns[key], int(k), int(batches)
        with within():
            for _ in range(k):
                fn()
            figures = []
            for _ in range(batches):
                t0 = clock()
                for _ in range(k):
                    fn()
                figures.append((clock() - t0) / k)
        out.write("%r\n" % statistics.median(figures))
        out.flush()


def check_served(backend):
    """Fails the side whose container is not the one it is meant to time.
    The native side only reads its maps: importing distautograd would load
    the library into it. --aa's "backend" side points every member back at
    libtorch (the A/B build refuses where the backend does not serve)."""
    if backend and AA in sys.argv:
        import torch.distributed.autograd as da

        if ctypes.CDLL(AB_SHIM).dat_ab_switch(0, 0) != 0:
            sys.exit("torchbench: --aa: the A/B build does not serve this process")
        # The library the backend loaded (the same object, not a second).
        lib, n = ctypes.CDLL(os.path.join(BUILD, "libdistautograd.so.0")), ctypes.c_int64(-1)
        with da.context():
            if lib.dac_num_contexts(ctypes.byref(n)) != 0 or n.value != 0:
                sys.exit("torchbench: --aa: a context went to the library, not to libtorch")
        return
    if backend:
        sys.path.insert(0, os.path.join(ROOT, "python_bindings"))
        import distautograd.torch

        served, why = distautograd.torch.state()
    else:
        with open("/proc/self/maps") as f:
            served, why = "libdistautograd" in f.read(), "a distautograd library is mapped"
    if served != backend:
        sys.exit("torchbench: the %s side is %s by distautograd: %s"
                 % ("backend" if backend else "native", "served" if served else "not served", why))


def one_worker_ops():
    """The operations of a one-worker agent "w0" (started): {key: function}
    for the pass, pass + backward and the cycle (bench/torchab.py times
    them too)."""
    import torch
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc

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

    return {"pass": rpc_pass, "backward": backward_pass, "cycle": cycle}


def init_train_rpc(rank, port):
    """Starts worker rank's agent of the training job (train_job.py, which
    it returns: its functions travel by name, so every worker imports it)."""
    sys.path.insert(0, JOB)
    import torch.distributed.rpc as rpc

    import train_job as tj

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=60)
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=tj.WORLD, rpc_backend_options=opts)
    return tj


def training_step(tj):
    """Worker 0's training step (the job's agents started): sets up the
    model across the three workers and returns the step's function."""
    import torch
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc
    from torch.distributed.optim import DistributedOptimizer

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

    return step


def worker(backend):
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", free_port()
    rpc.init_rpc("w0", rank=0, world_size=1)
    check_served(backend)
    ops = one_worker_ops()
    held = []

    @contextlib.contextmanager
    def a_context():
        with da.context() as cid:
            held[:] = [cid]
            yield

    serve({"pass": (ops["pass"], contextlib.nullcontext), "backward": (ops["backward"], contextlib.nullcontext),
           "cycle": (ops["cycle"], contextlib.nullcontext), "retrieve": (lambda: da._retrieve_context(held[0]), a_context),
           "current": (da._current_context, a_context)}, sys.stdout)
    rpc.shutdown()


def train_worker(backend, rank, port):
    import torch.distributed.rpc as rpc

    tj = init_train_rpc(rank, port)
    check_served(backend)
    if rank == 0:
        serve({"step": (training_step(tj), contextlib.nullcontext)}, sys.stdout)
    rpc.shutdown()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return str(port)


class PortTaken(Exception):
    """A side did not start because another process bound its rendezvous
    port between free_port() and torch's bind (the port is only free when
    it is picked): the pair is started again on new ports."""


#: How many times a pair is started before a taken port fails the run.
START_TRIES = 3


class Side:
    """One side of a pair: its processes (the first takes the commands),
    stopped whenever the other side runs."""

    #: Every side started and not closed: a failure ends them all, so that
    #: no process is left behind stopped.
    live = []
    #: The script each process runs (bench/torchmem.py's sides run it).
    script = os.path.abspath(__file__)
    prog = "torchbench"
    #: --aa (the docstring): the "backend" side is libtorch's, the library loaded.
    aa = False

    def __init__(self, backend, argvs):
        self.backend = backend
        self.name = "backend" if backend else "native"
        # USE_LIBUV=0: Debian 13's torch 2.6 has no libuv for env://.
        env = dict(os.environ, GLOG_minloglevel="2", USE_LIBUV="0")
        env.pop("LD_PRELOAD", None)
        if backend:
            env["LD_PRELOAD"] = AB_SHIM if self.aa else os.path.join(BUILD, "libdistautograd_torch.so")
        flags = [AA] if backend and self.aa else []
        self.errs = [tempfile.TemporaryFile(mode="w+") for _ in argvs]
        self.procs = [subprocess.Popen([sys.executable, self.script] + argv + flags + [self.name], env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
                      for argv, err in zip(argvs, self.errs)]
        self.lead = self.procs[0]
        Side.live.append(self)

    def _read(self):
        """The lead's next line, and whether it answered in time ("" at
        its end)."""
        ready, _, _ = select.select([self.lead.stdout], [], [], TIMEOUT_S)
        return (self.lead.stdout.readline() if ready else ""), bool(ready)

    def _line(self):
        line, ready = self._read()
        if not line:
            self.fail("no answer in %d s" % TIMEOUT_S if not ready else "its process ended")
        return line.strip()

    def fail(self, why):
        for side in list(Side.live):
            side.kill()
        msgs = []
        for err in self.errs:
            err.seek(0)
            msgs.append(err.read()[-4000:])
        sys.exit("%s: a %s side failed (%s):\n%s" % (self.prog, self.name, why, "\n".join(msgs)))

    def ready(self, retry):
        """Waits for the side to start, then stops it. Raises PortTaken
        where it did not start for a taken port and retry allows."""
        line, answered = self._read()
        if line.strip() != "ready":
            # Only a lead whose output ended can have failed to bind: one
            # that gave no answer in time is still running.
            if retry and answered and not line and self._port_taken():
                raise PortTaken()
            self.fail("it did not start")
        self.signal(signal.SIGSTOP)

    def _port_taken(self):
        # The lead (rank 0, whose store binds the port) is ending; the
        # others may still wait for its store, and are killed after.
        try:
            self.lead.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        for err in self.errs:
            err.seek(0)
            if "Address already in use" in err.read():
                return True
        return False

    def kill(self):
        """Ends the side's processes, whatever state they are in."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
        Side.live.remove(self)

    def signal(self, sig):
        for p in self.procs:
            p.send_signal(sig)

    def chunk(self, key, k, batches):
        """The figure of one chunk, ns per call, the side run only meanwhile."""
        self.signal(signal.SIGCONT)
        self.lead.stdin.write("%s %d %d\n" % (key, k, batches))
        self.lead.stdin.flush()
        try:
            figure = float(self._line())
        except ValueError:
            self.fail("an answer that is not a figure")
        self.signal(signal.SIGSTOP)
        return figure

    def close(self):
        self.signal(signal.SIGCONT)
        self.lead.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.fail("it did not shut down")
            if p.returncode != 0:
                self.fail("exit status %d" % p.returncode)
        Side.live.remove(self)


def start_pair(argvs, kind=None):
    """A native and a backend side of kind (Side or a subclass), both
    ready; argvs() gives each side's process arguments (new ports each
    time: a pair whose port was taken starts again)."""
    kind = kind or Side
    for attempt in range(START_TRIES):
        sides = [kind(False, argvs()), kind(True, argvs())]
        try:
            for s in sides:
                s.ready(retry=attempt + 1 < START_TRIES)
            return sides
        except PortTaken:
            print("%s: a side's port was taken before it bound it: the pair starts again" % kind.prog,
                  file=sys.stderr)
            for s in sides:
                s.kill()
    raise AssertionError("unreachable")


#: Where each served torch other than the host's runs: the Debian release
#: of its root (scripts/torch-root).
ROOTS = {"2.6": "trixie"}


def in_root(version, script, args, prog):
    """Runs script with args in the root whose torch is version; returns
    its exit status."""
    release = ROOTS.get(version)
    if release is None:
        sys.exit("%s: no root for torch %s (%s)" % (prog, version, ", ".join(sorted(ROOTS))))
    tool = os.path.join(ROOT, "scripts", "torch-root")
    if subprocess.run([tool, "path", release], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        sys.exit("%s: no torch %s root: make torch-root" % (prog, version))
    argv = [tool, "run", release, "--bind", ROOT, "--cd", ROOT, "--", "python3", script] + args
    print("%s: %s" % (prog, " ".join(argv)), file=sys.stderr)
    return subprocess.run(argv).returncode


def torch_here(wanted, script, args, prog):
    """This Python's torch version ("1.13"). If wanted names another torch,
    runs script with args in that torch's root and exits with its status;
    without a torch here (and none wanted elsewhere), exits with a line."""
    try:
        import torch
        version = ".".join(torch.__version__.split(".")[:2])
    except ImportError:
        version = None
    if wanted and wanted != version:
        sys.exit(in_root(wanted, script, args, prog))
    if version is None:
        sys.exit("%s: this Python (%s) has no torch" % (prog, sys.executable))
    return version


def update_report(path, change):
    """Reads make bench's report at path (an object; {} if missing or not
    one), has change(report) alter it in place, and writes it back."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        report = {}
    if not isinstance(report, dict):
        report = {}
    change(report)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def run_pair(argvs, ops, rounds):
    """Starts a native and a backend side, runs the rounds, and returns each
    op's chunk figures and round ratios by its key."""
    figures = {}
    sides = start_pair(argvs)
    for r in range(rounds):
        for i, (_, key, k, batches) in enumerate(ops):
            got = {}
            for s in sides if (r + i) % 2 == 0 else sides[::-1]:
                got[s.backend] = s.chunk(key, k, batches)
            f = figures.setdefault(key, {"dac": [], "nat": [], "ratios": []})
            f["dac"].append(got[True])
            f["nat"].append(got[False])
            f["ratios"].append(got[True] / got[False])
    for s in sides:
        s.close()
    return figures


def median_interval(ratios, resamplings):
    """Where the median of ratios falls in 90 % of resamplings of them: the
    pairs' here (as the report resamples pairs), torchab.py's rounds."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamplings))
    return medians[resamplings // 20], medians[resamplings * 19 // 20]


def main():
    import torch

    version = ".".join(torch.__version__.split(".")[:2])
    counts = dict(COUNTS)
    for flag in counts:
        if flag in sys.argv:
            counts[flag] = int(sys.argv[sys.argv.index(flag) + 1])
    if min(counts.values()) < 1:
        sys.exit("torchbench: %s take a count >= 1" % ", ".join(counts))
    Side.aa = AA in sys.argv
    if Side.aa and not os.path.exists(AB_SHIM):
        sys.exit("torchbench: --aa: %s is missing: make torch-ab" % AB_SHIM)
    # Per op: every chunk figure of each side, and each pair's ratio.
    per_op = {key: {"dac": [], "nat": [], "pairs": []} for _, key, _, _ in OPS + [TRAIN_OP]}
    t0 = time.monotonic()

    def pair(argvs, ops, rounds, what, n, of):
        for key, f in run_pair(argvs, ops, rounds).items():
            per_op[key]["dac"] += f["dac"]
            per_op[key]["nat"] += f["nat"]
            per_op[key]["pairs"].append(statistics.median(f["ratios"]))
        print("torchbench: torch %s, %s pair %d of %d (%.0f s)" % (version, what, n + 1, of, time.monotonic() - t0),
              file=sys.stderr)

    def job():
        port = free_port()
        return [["--train", str(rank), port] for rank in range(3)]

    # Pairs, not rounds, are what vary (the docstring): the job, three
    # busy-polling agents a side, gets the most.
    for n in range(counts["--pairs"]):
        pair(lambda: [["--worker"]], OPS, counts["--rounds"], "one-process", n, counts["--pairs"])
    for n in range(counts["--job-pairs"]):
        pair(job, [TRAIN_OP], counts["--job-rounds"], "training-job", n, counts["--job-pairs"])
    ordered = OPS[:2] + [TRAIN_OP] + OPS[2:]
    if Side.aa:
        print("A/A, torch %s: native against native with the library loaded (the A/B build pointed at libtorch)"
              % version)
        print("| operation | loaded ns/op | torch ns/op | ratio | 90 % of resampled pairs |\n|---|---:|---:|---:|---|")
        for name, key, _, _ in ordered:
            f = per_op[key]
            lo, hi = median_interval(f["pairs"], 4000)
            print("| %s | %.1f | %.1f | %.3f | %.3f-%.3f |" % (name, statistics.median(f["dac"]),
                  statistics.median(f["nat"]), statistics.median(f["pairs"]), lo, hi))
        return
    rows = []
    print("| operation | distautograd ns/op | torch ns/op | ratio |\n|---|---:|---:|---:|")
    for name, key, _, _ in ordered:
        f = per_op[key]
        d, n, ratio = statistics.median(f["dac"]), statistics.median(f["nat"]), statistics.median(f["pairs"])
        rows.append({"level": "torch", "op": name, "threads": 1, "torch": version,
                     "label": name if version == HOST_TORCH else "%s (torch %s)" % (name, version),
                     "distautograd_call": "torch under the backend (distautograd-torch)",
                     "native_call": "torch as built (its own container)",
                     "distautograd_ns": round(d, 1), "native_ns": round(n, 1), "ratio": round(ratio, 3),
                     "pair_ratios": [round(v, 4) for v in f["pairs"]]})
        print("| %s | %.1f | %.1f | %.2f |" % (name, d, n, ratio))
    # build/bench.json is make bench's report (an object with "rows"): the
    # torch rows replace any earlier ones; docs/benchmarks.md and the README's
    # headline are rendered from it (go run ./bench -from build/bench.json
    # -tables docs/benchmarks.md -headline README.md).
    def replace_rows(report):
        report["rows"] = [r for r in report.get("rows", [])
                          if r.get("level") != "torch" or r.get("torch", HOST_TORCH) != version] + rows

    path = os.path.join(BUILD, "bench.json")
    update_report(path, replace_rows)
    print("wrote %s" % path)


if __name__ == "__main__":
    side = sys.argv[-1] == "backend"
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        print("defaults: " + " ".join("%s %d" % kv for kv in COUNTS.items()))
    elif "--worker" in sys.argv:
        worker(side)
    elif "--train" in sys.argv:
        i = sys.argv.index("--train")
        train_worker(side, int(sys.argv[i + 1]), sys.argv[i + 2])
    else:
        main()
