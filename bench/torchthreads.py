"""Where a training step's time goes, thread by thread, natively and under
the torch backend: make bench's training job (bench/torchbench.py's three
processes, torch_backend/tests/train_job.py's model), in the same pairs of
a native job and a backend job that take turns, the other stopped.

Around every chunk of steps each process's threads are read from /proc
(the side is stopped then, so nothing moves while it is read):

- CPU time, and time spent runnable but waiting for a CPU
  (/proc/PID/task/TID/schedstat);
- voluntary and involuntary context switches (.../status).

A thread's class is its name (torch's and TensorPipe's threads name
themselves; the agent's RPC pool keeps the interpreter's name), the
process's main thread apart, and "go runtime" for the threads Go's runtime
started inside the library: where a stopped thread stands
(.../syscall's program counter) lies in libdistautograd's code. A C
thread that calls into the library stays in its own class. The figures
are per step, summed over the job's three processes, the medians over
chunks; the step is the chunk's median step.

Nothing is asserted: it prints a table, and puts the figures into
build/bench.json ("torch_threads", an entry per torch; --json PATH for
another file), which make bench renders into docs/benchmarks.md.

usage: python3 bench/torchthreads.py [--torch 1.13|2.6] [--pairs N] [--rounds R] [--steps S] [--json PATH]
  (N pairs of R rounds after a round of warm-up, each round a chunk of S
  steps a side; default 4, 6, 20)
"""
import argparse
import collections
import os
import re
import statistics
import sys

import torchbench

#: The class of the threads Go's runtime started.
GO = "go runtime"
#: Per thread: CPU ns, wait ns, voluntary and involuntary switches.
FIELDS = ("cpu_us", "wait_us", "voluntary", "involuntary")


def library_code(pid):
    """The address ranges of libdistautograd's executable mappings in pid."""
    spans = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "x" in parts[1] and "libdistautograd.so" in parts[5]:
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                spans.append((lo, hi))
    return spans


def read_thread(pid, tid):
    """(name, counters, program counter) of a thread, or None once it is gone."""
    d = "/proc/%d/task/%d/" % (pid, tid)
    try:
        with open(d + "comm") as f:
            name = f.read().strip()
        with open(d + "schedstat") as f:
            cpu, wait, _ = (int(v) for v in f.read().split())
        with open(d + "status") as f:
            switches = dict(re.findall(r"^(\w+)_ctxt_switches:\s+(\d+)", f.read(), re.M))
    except (OSError, ValueError):
        return None
    try:
        # Reading where a thread stands takes the right to trace it (the
        # job's processes are this one's children); without it, no thread
        # is counted as the runtime's.
        with open(d + "syscall") as f:
            pc = f.read().split()[-1]
        pc = int(pc, 16) if pc.startswith("0x") else None
    except (OSError, ValueError, IndexError):
        pc = None
    return name, (cpu, wait, int(switches["voluntary"]), int(switches["nonvoluntary"])), pc


def snapshot(side, seen):
    """Every thread's counters now, by (process, tid); seen[(process, tid)]
    counts the snapshots that found it in the library's code."""
    out = {}
    for w, p in enumerate(side.procs):
        spans = library_code(p.pid)
        for tid in map(int, os.listdir("/proc/%d/task" % p.pid)):
            got = read_thread(p.pid, tid)
            if got is None:
                continue
            name, counters, pc = got
            inside = pc is not None and any(lo <= pc < hi for lo, hi in spans)
            looks = seen.setdefault((w, tid), [0, 0])
            looks[0] += inside
            looks[1] += 1
            out[(w, tid)] = (name, p.pid == tid, counters)
    return out


def class_of(name, main, looks):
    if looks[0] * 2 > looks[1]:
        return GO
    if main:
        return "main thread"
    return re.sub(r"[-_]?\d+$", "", name)


def chunk(side, steps, seen):
    """Runs a chunk of steps on side; returns its median step (ns) and each
    thread's counters over it, per step."""
    before = snapshot(side, seen)
    step_ns = side.chunk("step", 1, steps)
    after = snapshot(side, seen)
    # The chunk runs a warm-up step before its timed ones.
    n = steps + 1
    per = {}
    for key, (name, main, counters) in after.items():
        old = before.get(key, (name, main, (0, 0, 0, 0)))[2]
        per[key] = (name, main, [(b - a) / n for a, b in zip(old, counters)])
    return step_ns, per


def run(pairs, rounds, steps):
    """Per side ("native", "backend"): the chunks' step medians, and per
    class a list of per-step figures, one per chunk."""
    res = {s: {"step_ns": [], "classes": collections.defaultdict(lambda: [[] for _ in FIELDS]), "threads": {}}
           for s in ("native", "backend")}
    for n in range(pairs):
        port = []

        def argvs():
            port[:] = [torchbench.free_port()]
            return [["--train", str(rank), port[0]] for rank in range(3)]

        sides = torchbench.start_pair(argvs)
        seen = {}
        # Round 0 warms each side up (a side's first chunk after its start
        # runs about twice as long): it is not counted.
        for r in range(rounds + 1):
            for s in sides if r % 2 == 0 else sides[::-1]:
                step_ns, per = chunk(s, steps, seen)
                if r == 0:
                    continue
                out = res[s.name]
                out["step_ns"].append(step_ns)
                sums = collections.defaultdict(lambda: [0.0] * len(FIELDS))
                counts = collections.Counter()
                for key, (name, main, figures) in per.items():
                    c = class_of(name, main, seen[key])
                    counts[c] += 1
                    for i, v in enumerate(figures):
                        sums[c][i] += v
                for c, v in sums.items():
                    for i, x in enumerate(v):
                        out["classes"][c][i].append(x)
                    out["threads"][c] = max(out["threads"].get(c, 0), counts[c])
        for s in sides:
            s.close()
        print("torchthreads: pair %d of %d" % (n + 1, pairs), file=sys.stderr)
    return res


def report(res, version):
    nat, dac = res["native"], res["backend"]
    med = statistics.median
    print("torch %s, training step: native %.3f ms, backend %.3f ms (ratio %.3f)"
          % (version, med(nat["step_ns"]) / 1e6, med(dac["step_ns"]) / 1e6, med(dac["step_ns"]) / med(nat["step_ns"])))
    print("Per step, over the job's three processes (native / backend):")
    print("| threads | count | CPU us | waiting for a CPU us | voluntary switches | involuntary switches |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    total = {s: [0.0] * len(FIELDS) for s in res}
    for c in sorted(set(nat["classes"]) | set(dac["classes"]), key=lambda c: (c == GO, c)):
        row = {"threads": c}
        for s in ("native", "backend"):
            got = res[s]["classes"].get(c)
            figs = [med(v) for v in got] if got else [0.0] * len(FIELDS)
            row[s] = dict(zip(FIELDS, [round(figs[0] / 1e3, 1), round(figs[1] / 1e3, 1)] + [round(x, 2) for x in figs[2:]]))
            row[s]["count"] = res[s]["threads"].get(c, 0)
            for i, x in enumerate(figs):
                total[s][i] += x
        rows.append(row)
        cells = ["%d / %d" % (row["native"]["count"], row["backend"]["count"])]
        cells += ["%s / %s" % (row["native"][f], row["backend"][f]) for f in FIELDS]
        print("| %s | %s |" % (c, " | ".join(cells)))
    print("| all | | %s |" % " | ".join(
        "%.1f / %.1f" % (total["native"][i] / (1e3 if i < 2 else 1), total["backend"][i] / (1e3 if i < 2 else 1))
        for i in range(len(FIELDS))))
    return {"torch": version, "step_ns": {s: med(res[s]["step_ns"]) for s in res}, "rows": rows}


def save(result, path):
    """Puts result into the report at path (make bench's build/bench.json,
    an object): its "torch_threads" list keeps one entry per torch."""
    def replace_entry(rep):
        rep["torch_threads"] = [e for e in rep.get("torch_threads") or [] if e.get("torch") != result["torch"]] + [result]

    torchbench.update_report(path, replace_entry)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch", help="the torch to run it with (1.13 here, 2.6 in its root)")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", default=os.path.join(torchbench.BUILD, "bench.json"))
    args = ap.parse_args()
    if min(args.pairs, args.rounds, args.steps) < 1:
        sys.exit("torchthreads: counts are >= 1")
    version = torchbench.torch_here(args.torch, os.path.abspath(__file__), sys.argv[1:], "torchthreads")
    result = report(run(args.pairs, args.rounds, args.steps), version)
    result.update(pairs=args.pairs, rounds=args.rounds, steps=args.steps)
    save(result, args.json)


if __name__ == "__main__":
    try:
        main()
    finally:
        for side in list(torchbench.Side.live):
            side.kill()
