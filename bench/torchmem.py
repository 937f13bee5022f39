"""The memory-growth report of pytorch issue 61920 ("RPC memory leak for
CPU"), natively and under the torch backend: how much each process's
resident memory grows per training pass, and how much of that malloc holds
live and how much it keeps free.

The job is the issue's smaller repro with the model on a worker of its
own: two processes on 127.0.0.1 over TensorPipe, a trainer and a worker
that owns the issue's model (two nn.Linear(1000, 1000)) behind an RRef the
trainer made with rpc.remote. A pass: `with dist_autograd.context()`, 20
`model_rref.rpc_async().forward(x)`, `dist_autograd.backward` on the sum
of their outputs.

A native job and a backend job (LD_PRELOAD of
build/libdistautograd_torch.so) are started together and take turns, in
chunks of --chunk passes, the other job stopped (SIGSTOP, as
bench/torchbench.py's pairs), the job that goes first alternating: both see
the same machine. After --warmup passes each, --passes passes are measured;
every --every passes each process of each job is sampled:

- RSS (/proc/PID/status's VmRSS) and two of its parts: shared memory
  (RssShmem: TensorPipe's rings) and anonymous memory (RssAnon);
- resident bytes by kind of mapping (/proc/PID/smaps: malloc's arenas,
  the brk heap, stacks, Go's heap, other anonymous memory, files);
- malloc's live bytes, handed out and not had back (mallinfo2's uordblks
  + hblkhd, over every arena), and its free bytes, held from the system
  but not handed out (arena + hblkhd - live): freed memory malloc keeps,
  which RSS shows but no object holds;
- Python objects gc tracks (after a collection), threads. (The backend's
  own figures, distautograd.torch.debug_info(), are read at the end only:
  the call allocates, and the native side has no such call.)

A figure per pass is the slope of a least-squares line through the
measured samples (bytes per pass); "late" is the slope over the last half
alone (growth that goes on, rather than a start that levels off). At the
end each process reports torch's counts (contexts, RRefs), the backend's
(contexts alive, Go heap) and malloc's arenas (malloc_info). Nothing is
asserted: the figures are printed, and written to
build/torchmem-VERSION.json.

usage: python3 bench/torchmem.py [--torch 1.13|2.6] [--passes N] [--warmup W] [--every E]
           [--chunk C] [--threads T] [--batch B] [--env NAME=VALUE]... [--trim] [--json PATH]
  --torch 2.6 runs it inside the Debian 13 root (scripts/torch-root), where
  the interpreter here has another torch; --threads is the agent's
  num_worker_threads (default 16, torch's; the issue saw growth above 6);
  --env runs both jobs with NAME=VALUE in their environment (glibc's
  MALLOC_ARENA_MAX=1, MALLOC_MMAP_THRESHOLD_=131072); --trim calls
  malloc_trim(0) in each process before each sample. Defaults: 400 passes
  after 40, sampled every 10, in chunks of 20, a batch of 8 rows.
"""
import argparse
import ctypes
import gc
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchbench  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError:  # --torch 2.6 from a Python without torch runs it in the root
    torch = None

ROOT = torchbench.ROOT
BUILD = torchbench.BUILD
FORWARDS = 20
NAMES = ("trainer", "model")

# ---- One process of a job --------------------------------------------------

BACKEND = False


if torch is not None:
    class MyModel(nn.Module):
        """The issue's model (rpc.remote pickles the class by name: both
        processes run this file)."""

        def __init__(self):
            super().__init__()
            self.nets = nn.Sequential(*[nn.Linear(1000, 1000) for _ in range(2)])

        def forward(self, x):
            return self.nets(x)


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = MallInfo2
_libc.malloc_trim.argtypes = [ctypes.c_size_t]
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]


def sample(trim):
    """This process's figures now (run by the trainer for itself, and for
    the model's worker through rpc_sync)."""
    if trim:
        _libc.malloc_trim(0)
    m = _libc.mallinfo2()
    with open("/proc/self/status") as f:
        status = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)
                  if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}
    live = m.uordblks + m.hblkhd
    gc.collect()
    s = {"rss": status["VmRSS"], "anon": status["RssAnon"], "file": status["RssFile"], "shmem": status["RssShmem"],
         "live": live, "free": m.arena + m.hblkhd - live, "objects": len(gc.get_objects()),
         "threads": len(os.listdir("/proc/self/task")), "regions": regions()}
    return s


#: The kinds of mapping regions() sorts resident memory into.
KINDS = ("arenas", "brk heap", "stacks", "go heap", "other anon", "files")
#: glibc's non-main malloc arenas are heaps of at most 64 MiB
#: (HEAP_MAX_SIZE on 64-bit), each mapped at a multiple of that size; so is
#: each 64 MiB arena of Go's heap.
HEAP_MAX = 64 << 20


def glibc_heap(mem, a, b):
    """Whether the mapping [a, b) is one of glibc's non-main heaps: at a
    multiple of 64 MiB, it starts with glibc's heap_info (the arena: its own
    state just past the header for an arena's first heap, else the previous
    heap; then the heap's size and the bytes made read-write, the
    mapping's). Read through /proc/self/mem, which fails rather than faults
    where a heap was unmapped meanwhile."""
    if a % HEAP_MAX or b - a > HEAP_MAX:
        return False
    try:
        head = os.pread(mem, 32, a)
    except OSError:
        return False
    if len(head) < 32:
        return False
    arena, prev, size, rw = (int.from_bytes(head[i:i + 8], "little") for i in range(0, 32, 8))
    return rw == b - a and size <= rw and (a < arena <= a + 64 if prev == 0 else prev % HEAP_MAX == 0)


def by_mapping(sizes=None):
    """Resident bytes by mapping name (a file's path, [heap], [stack]...;
    anonymous mappings together as "anonymous"); sizes, a dict, gets each
    name's mapped bytes."""
    out = {}
    name = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                name = head[5].strip() if len(head) > 5 else "anonymous"
            elif head[0] == "Rss:":
                out[name] = out.get(name, 0) + int(head[1]) * 1024
            elif head[0] == "Size:" and sizes is not None:
                sizes[name] = sizes.get(name, 0) + int(head[1]) * 1024
    return out


MARK = {}


def mark():
    """Remembers the resident bytes by mapping at the start of the
    measured passes (report() says which grew since)."""
    MARK.clear()
    MARK.update(by_mapping())


def regions():
    """This process's resident bytes by kind of mapping (/proc/self/smaps):
    malloc's arenas other than the main one (glibc_heap), the main arena's
    brk heap, thread stacks (behind a one-page guard; the main thread's
    [stack]), Go's heap (under the backend: the other anonymous mappings at
    a multiple of 64 MiB, where Go maps its heap arenas), other anonymous
    memory (malloc's mmapped chunks, Python's object arenas, the Go
    runtime's own structures, the rest), files (libraries, and shared
    memory: TensorPipe's rings)."""
    maps = []
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                a, b = (int(v, 16) for v in head[0].split("-"))
                maps.append([a, b, head[1], head[5].strip() if len(head) > 5 else "", 0])
            elif head[0] == "Rss:":
                maps[-1][4] = int(head[1]) * 1024
    out = dict.fromkeys(KINDS, 0)
    # The 64 MiB blocks of Go's heap seen so far: an arena starts one, and
    # Go maps, unmaps and advises parts of it, which smaps shows as several
    # mappings; its arenas may follow one another.
    go_blocks = set()
    mem = os.open("/proc/self/mem", os.O_RDONLY)
    try:
        for i, (a, b, perms, path, rss) in enumerate(maps):
            before = maps[i - 1] if i else None
            anon = not path or path.startswith("[anon")
            if path == "[heap]":
                kind = "brk heap"
            elif path.startswith("[stack"):
                kind = "stacks"
            elif not anon:
                kind = "files"
            elif perms.startswith("rw") and glibc_heap(mem, a, b):
                kind = "arenas"
            elif BACKEND and (a % HEAP_MAX == 0 or a // HEAP_MAX in go_blocks):
                kind = "go heap"
                go_blocks.update(range(a // HEAP_MAX, (b - 1) // HEAP_MAX + 1))
            elif before and before[1] == a and before[2].startswith("---") and before[1] - before[0] <= 1 << 16:
                kind = "stacks"
            else:
                kind = "other anon"
            out[kind] += rss
    finally:
        os.close(mem)
    return out


def arenas():
    """malloc's arenas (malloc_info's heaps): how many, and each one's bytes
    from the system and of those free."""
    fd, path = tempfile.mkstemp(prefix="torchmem-")
    os.close(fd)
    try:
        fp = _libc.fopen(path.encode(), b"w")
        _libc.malloc_info(0, fp)
        _libc.fclose(fp)
        with open(path) as f:
            xml = f.read()
    finally:
        os.unlink(path)
    heaps = []
    for body in re.findall(r'<heap nr="\d+">(.*?)</heap>', xml, re.S):
        system = re.search(r'<system type="current" size="(\d+)"/>', body)
        free = sum(int(v) for v in re.findall(r'<total type="(?:fast|rest)" count="\d+" size="(\d+)"/>', body))
        heaps.append({"system": int(system.group(1)) if system else 0, "free": free})
    return heaps


def report():
    """This process's counts at the end of the run."""
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc

    gc.collect()
    r = {"torch_autograd": {k: int(v) for k, v in da._get_debug_info().items()},
         "rpc": {k: int(v) for k, v in rpc._get_debug_info().items() if not k.startswith("agent.")},
         "arenas": arenas()}
    with open("/proc/self/smaps_rollup") as f:
        r["smaps"] = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f if ":" in line)
                      if k in ("Rss", "Anonymous", "Private_Dirty")}
    sizes = {}
    now = by_mapping(sizes)
    grew = sorted(((now.get(k, 0) - MARK.get(k, 0), k) for k in set(now) | set(MARK)), reverse=True)
    # Each: the name, its growth, its resident and its mapped bytes now.
    r["grew"] = [[k, d, now.get(k, 0), sizes.get(k, 0)] for d, k in grew[:6] if d > 0]
    if BACKEND:
        import distautograd.torch

        r["distautograd"] = {k: v for k, v in distautograd.torch.debug_info().items()
                             if not k.startswith("go_runtime_")}
    return r


def job(backend, rank, port, threads, batch):
    global BACKEND
    BACKEND = backend
    import torch.distributed.autograd as da
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=threads, rpc_timeout=300)
    rpc.init_rpc(NAMES[rank], rank=rank, world_size=len(NAMES), rpc_backend_options=opts)
    torchbench.check_served(backend)
    if rank == 0:
        torch.manual_seed(0)
        model = rpc.remote(NAMES[1], MyModel)
        x = torch.randn(batch, 1000)

        def one_pass():
            with da.context() as cid:
                futs = [model.rpc_async().forward(x) for _ in range(FORWARDS)]
                loss = torch.stack([f.wait().sum() for f in futs]).sum()
                da.backward(cid, [loss])

        def both(trim):
            return [sample(trim), rpc.rpc_sync(NAMES[1], sample, args=(trim,))]

        print("ready", flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[0] == "run":  # run N EVERY TRIM: N passes, both processes sampled every EVERY
                n, every, trim = int(words[1]), int(words[2]), words[3] == "1"
                got, seconds = [], 0.0
                for i in range(n):
                    t0 = time.perf_counter()
                    one_pass()
                    seconds += time.perf_counter() - t0
                    if (i + 1) % every == 0:
                        got.append(both(trim))
                print(json.dumps({"samples": got, "seconds": seconds}), flush=True)
            elif words[0] == "mark":
                mark()
                rpc.rpc_sync(NAMES[1], mark)
                print("{}", flush=True)
            elif words[0] == "report":
                print(json.dumps([report(), rpc.rpc_sync(NAMES[1], report)]), flush=True)
    rpc.shutdown()


# ---- The run ----------------------------------------------------------------


class Job(torchbench.Side):
    script = os.path.abspath(__file__)
    prog = "torchmem"

    def ask(self, line):
        """The trainer's answer to line, the job run only meanwhile."""
        self.signal(signal.SIGCONT)
        self.lead.stdin.write(line + "\n")
        self.lead.stdin.flush()
        out = self._line()
        self.signal(signal.SIGSTOP)
        try:
            return json.loads(out)
        except ValueError:
            self.fail("an answer that is not JSON: %r" % out[:200])


def slope(xs, ys):
    """Least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch", help="the torch to run it with (1.13 here, 2.6 in its root)")
    ap.add_argument("--passes", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=20)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--trim", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if min(args.passes, args.every, args.chunk, args.threads, args.batch) < 1 or args.warmup < 0:
        sys.exit("torchmem: counts are >= 1 (--warmup >= 0)")
    if args.chunk % args.every or args.warmup % args.chunk or args.passes % args.chunk:
        sys.exit("torchmem: --chunk must be a multiple of --every, --warmup and --passes of --chunk")
    version = torchbench.torch_here(args.torch, os.path.abspath(__file__), sys.argv[1:], "torchmem")
    for setting in args.env:
        name, eq, value = setting.partition("=")
        if not name or not eq:
            sys.exit("torchmem: --env takes NAME=VALUE, not %r" % setting)
        os.environ[name] = value
    port = []

    def argv():
        port[:] = [torchbench.free_port()]
        return [["--job", str(rank), port[0], str(args.threads), str(args.batch)] for rank in range(len(NAMES))]

    jobs = torchbench.start_pair(argv, Job)
    trim = "1" if args.trim else "0"
    # series[side][process]: (pass, sample) of the measured passes.
    series = {j.name: [[], []] for j in jobs}
    seconds = {j.name: 0.0 for j in jobs}
    done = 0
    if not args.warmup:
        for j in jobs:
            j.ask("mark")
    for c in range((args.warmup + args.passes) // args.chunk):
        for j in jobs if c % 2 == 0 else jobs[::-1]:
            got = j.ask("run %d %d %s" % (args.chunk, args.every, trim))
            if done >= args.warmup:
                seconds[j.name] += got["seconds"]
            for i, per_process in enumerate(got["samples"]):
                at = done + (i + 1) * args.every - args.warmup
                if at > 0:
                    for p, s in enumerate(per_process):
                        series[j.name][p].append((at, s))
        done += args.chunk
        if done == args.warmup:
            for j in jobs:
                j.ask("mark")
        print("torchmem: torch %s, %d of %d passes" % (version, done, args.warmup + args.passes), file=sys.stderr)
    reports = {j.name: j.ask("report") for j in jobs}
    for j in jobs:
        j.close()

    # A line per process and side: each figure's slope, and the late slope.
    rows = []
    print("\ntorch %s, %d passes after %d (each: %d `rpc_async` forwards through the RRef + `backward`), "
          "num_worker_threads=%d%s%s; bytes per pass (late: RSS over the last half; shared memory, anonymous: "
          "RSS's parts; malloc's live and free bytes)"
          % (version, args.passes, args.warmup, FORWARDS, args.threads,
             "".join(", " + e for e in args.env),
             ", malloc_trim(0) before each sample" if args.trim else ""))
    print("a pass takes %.0f ms natively, %.0f ms under the backend"
          % (1000 * seconds["native"] / args.passes, 1000 * seconds["backend"] / args.passes))
    print("| process | side | RSS B/pass | late | shared memory | anonymous | malloc live | malloc free "
          "| objects/pass | RSS first, last MiB | arenas |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for p, process in enumerate(NAMES):
        for side in ("native", "backend"):
            pts = series[side][p]
            half = pts[len(pts) // 2:]
            row = {"process": process, "side": side, "torch": version}
            for key in ("rss", "shmem", "anon", "live", "free", "objects"):
                row[key] = slope([a for a, _ in pts], [s[key] for _, s in pts])
                row[key + "_late"] = slope([a for a, _ in half], [s[key] for _, s in half])
            row["regions"] = {k: slope([a for a, _ in pts], [s["regions"][k] for _, s in pts]) for k in KINDS}
            row["rss_first"], row["rss_last"] = pts[0][1]["rss"], pts[-1][1]["rss"]
            row["report"] = reports[side][p]
            row["samples"] = [dict(s, at=a) for a, s in pts]
            rows.append(row)
            print("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %.1f, %.1f | %d |"
                  % (process, side, row["rss"], row["rss_late"], row["shmem"], row["anon"], row["live"], row["free"],
                     row["objects"], row["rss_first"] / 2**20, row["rss_last"] / 2**20,
                     len(row["report"]["arenas"])))
    print("\nwhere RSS grows: resident bytes per pass by kind of mapping (/proc/PID/smaps)")
    print("| process | side | %s |" % " | ".join(KINDS))
    print("|---|---|" + "---:|" * len(KINDS))
    for row in rows:
        print("| %s | %s | %s |" % (row["process"], row["side"],
                                    " | ".join("%.0f" % row["regions"][k] for k in KINDS)))
    print()
    for row in rows:
        r = row["report"]
        extra = ""
        if "distautograd" in r:
            d = r["distautograd"]
            extra = ", distautograd: contexts %d, torch_contexts_alive %d, live_handles %d, go_heap_bytes %d" % (
                d.get("num_autograd_contexts", -1), d["torch_contexts_alive"], d["live_handles"],
                d["go_heap_bytes"])
        print("%s %s at the end: torch: contexts %d, backward passes %d; RRefs: owners %d, forks %d, pending users %d; "
              "threads %d%s" % (row["process"], row["side"], r["torch_autograd"]["num_autograd_contexts"],
                               r["torch_autograd"]["num_current_backward_passes"], r["rpc"]["num_owner_rrefs"],
                               r["rpc"]["num_forks"], r["rpc"]["num_pending_users"],
                               row["samples"][-1]["threads"], extra))
        print("  grew most since the first measured pass: %s" % ", ".join(
            "%s %+.0f KiB (%.1f of %.1f MiB mapped resident)" % (os.path.basename(k) or k, d / 1024, rss / 2**20,
                                                                 size / 2**20)
            for k, d, rss, size in r["grew"]))
    path = args.json or os.path.join(BUILD, "torchmem-%s.json" % version)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"torch": version, "args": vars(args), "pass_seconds": {k: v / args.passes for k, v in seconds.items()},
                   "rows": rows}, f, indent=1)
        f.write("\n")
    print("wrote %s" % os.path.relpath(path, ROOT))


if __name__ == "__main__":
    if "--job" in sys.argv:
        i = sys.argv.index("--job")
        rank, port, threads, batch = sys.argv[i + 1:i + 5]
        job(sys.argv[-1] == "backend", int(rank), port, int(threads), int(batch))
    else:
        main()
