"""The release fan-out on the real RPC engine: four processes on
torch.distributed.rpc (TensorPipe over 127.0.0.1), each with distautograd's
container and distautograd.rpc.install() (see _rpc_worker.py, whose rank 0
drives the scenario and reports; this driver starts the processes, kills
one, and judges).

- A chain 0->1->2->3 and a fan 0->{1,2,3}: every hop leaves a copy of the
  context and records its known worker; the origin releases and every worker
  ends up with no contexts.
- Worker 3 is killed (SIGKILL, by this driver) holding copies of passes of
  worker 0, and having started two passes that reached everyone. Releases on
  worker 0 still return without waiting for any delivery (a gate keeps the
  sender from starting before the release returned); the cleanups to the dead
  worker fail, are retried and counted; what the dead worker started is
  cleared on the survivors by the reaper and by _release_contexts_of_worker.
- Nothing hangs: every process is waited for with a deadline, and a
  straggler is killed and fails the test.

torch comes from $DISTAUTOGRAD_TORCH_PYTHON, default /usr/bin/python3
(Debian's python3-torch). Without it the test skips loudly, and under
CI=true fails. Durations are reported, never asserted.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

from . import _support

TORCH_PYTHON = _support.TORCH_PYTHON
WORLD = 4
DEAD = WORLD - 1
#: The whole run's deadline, in seconds: past it every process is killed.
DEADLINE = 120.0
WORKER_MAIN = "import sys; from tests import _rpc_worker; _rpc_worker.main(sys.argv[1:])"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RpcMultiprocess(unittest.TestCase):
    procs: List[subprocess.Popen]

    def setUp(self) -> None:
        problem = _support.torch_problem("torch.distributed.rpc")
        if problem:
            _support.loud_skip(self, "the multi-process fan-out test needs torch.distributed.rpc: " + problem)
        self.procs = []
        self.logs: List[Any] = []
        self.addCleanup(self._kill_all)

    def _kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    stream.close()
        for f in self.logs:
            f.close()

    def _stderr(self) -> str:
        out = []
        for rank, f in enumerate(self.logs):
            f.seek(0)
            text = f.read().decode("utf-8", "replace")
            out.append("---- worker %d (exit %s) stderr:\n%s" % (rank, self.procs[rank].poll(), text[-3000:]))
        return "\n".join(out)

    def test_fanout_across_four_processes(self) -> None:
        start = time.monotonic()
        deadline = start + DEADLINE
        port = _free_port()
        env = _support.child_env()
        for rank in range(WORLD):
            log = tempfile.TemporaryFile()
            self.logs.append(log)
            self.procs.append(subprocess.Popen(
                [TORCH_PYTHON, "-c", WORKER_MAIN, str(rank), str(WORLD), str(port)],
                cwd=_support.BINDINGS, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            ))
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()

        def read(stream: Any) -> None:
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, args=(self.procs[0].stdout,), daemon=True).start()

        def event() -> Dict[str, Any]:
            while True:
                left = deadline - time.monotonic()
                try:
                    line = lines.get(timeout=max(left, 0.01))
                except queue.Empty:
                    self.fail("no report from worker 0 within %.0f s\n%s" % (DEADLINE, self._stderr()))
                if line is None:
                    self.fail("worker 0 ended without a result\n%s" % self._stderr())
                if line.startswith(b"@@ "):
                    ev = json.loads(line[3:])
                    if ev["event"] == "error":
                        self.fail("worker 0 failed:\n%s\n%s" % (ev["traceback"], self._stderr()))
                    return ev

        ev = event()
        self.assertEqual(ev, {"event": "kill", "rank": DEAD})
        killed_at = time.monotonic()
        os.kill(self.procs[DEAD].pid, signal.SIGKILL)
        self.procs[DEAD].wait(10)
        self.procs[0].stdin.write(b"killed\n")
        self.procs[0].stdin.flush()
        res = event()
        self.assertEqual(res["event"], "result")

        # Nothing hangs: every survivor exits by itself, in time.
        for rank, p in enumerate(self.procs):
            try:
                p.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                self.fail("worker %d did not exit within %.0f s\n%s" % (rank, DEADLINE, self._stderr()))
        codes = [p.returncode for p in self.procs]
        self.assertEqual(codes, [0] * DEAD + [-signal.SIGKILL], self._stderr())
        sys.stderr.write(
            "\n[rpc fan-out] run %.1f s (after the kill %.1f s); releases %s s, with a dead peer %s s; "
            "settled in %.2f s; stats %s\n" % (
                time.monotonic() - start, time.monotonic() - killed_at,
                ["%.5f" % s for s in res["release_seconds"]], ["%.5f" % s for s in res["release_seconds_dead_peer"]],
                res["released"]["seconds"], json.dumps(res["final_stats"], sort_keys=True)))

        self.assertEqual(res["installed"], [False, True, True, True])
        self.assertEqual(res["unknown_rank"], "distautograd.rpc: no RPC worker has rank %d" % (WORLD + 5))
        self.assertEqual(res["bad_timeouts"], ["0", "-1.0", "'1'"])
        self.assertIn("distautograd.rpc", res["handler_pickle"])
        self.assertIn("_handle_cleanup", res["handler_pickle"])

        # Phase 1: the passes spread along their paths...
        self.assertEqual(res["spread_counts"], {"0": 2, "1": 2, "2": 2, "3": 2})
        self.assertEqual(res["chain_known"], {"0": [1], "1": [2], "2": [3], "3": []})
        self.assertEqual(res["fan_known"], {"0": [1, 2, 3], "1": [], "2": [], "3": []})
        # ...and releasing at the origin cleared every worker.
        self.assertEqual(res["released"]["counts"], {"0": 0, "1": 0, "2": 0, "3": 0}, res)

        # Phase 2: before the kill everyone held both passes of each origin.
        self.assertEqual(res["before_kill_counts"], {"0": 4, "1": 4, "2": 4, "3": 4})
        self.assertEqual(res["driver_says"], "killed")
        # The releases returned before the sender attempted anything: every
        # attempt found the gate open, none waited it out.
        self.assertGreater(res["gate"]["attempts"], 0)
        self.assertEqual(res["gate"]["timeouts"], 0, res["gate"])
        # What is left on the survivors is what the dead worker started.
        self.assertEqual(res["after_release"]["counts"], {"0": 2, "1": 2, "2": 2}, res)
        stats = res["stats_after_kill"]
        for rank in ("0", "1", "2"):
            self.assertEqual(stats[rank]["flush_pending"], 0, stats)
            self.assertEqual(stats[rank]["dropped"], 0, stats)
        # The cleanups to the dead worker (0's fan to 3, 2's chain hop to 3)
        # were retried up to max_attempts, then counted as failed.
        for rank in ("0", "2"):
            self.assertGreaterEqual(stats[rank]["failed"], 1, stats)
            self.assertGreaterEqual(stats[rank]["retried"], 2, stats)
        self.assertEqual(stats["1"]["failed"], 0, stats)
        # Every message to a live worker was delivered: phase 1 sent 1 (chain)
        # + 3 (fan) from 0, 1 from 1 and 2; phase 2 as many but 0->3 and 2->3.
        self.assertEqual([stats[r]["sent"] for r in ("0", "1", "2")], [4 + 3, 1 + 1, 1 + 0], stats)

        # The reaper on 2 and _release_contexts_of_worker on 1 and 0 each
        # found the two passes the dead worker started; then nothing is left.
        self.assertEqual(res["reaped"], 2)
        self.assertEqual(res["released_of_dead"], {"1": 2, "0": 2})
        self.assertEqual(res["cleared"]["counts"], {"0": 0, "1": 0, "2": 0}, res)
        for rank in ("0", "1", "2"):
            self.assertEqual(res["final_stats"][rank]["pending"], 0, res["final_stats"])


if __name__ == "__main__":
    unittest.main()
