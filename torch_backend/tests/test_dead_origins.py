"""The container bugs torch never fixed, each run natively and under the
backend with its default settings, in separate jobs of three workers on
loopback (origin_job.py; RPC timeout RPC_TIMEOUT_S): worker w0 opens the
passes, w1 forwards them to w2.

  killed origin  w0 is SIGKILLed inside a pass: natively w1 and w2 keep its
                 context for good (pytorch issue 26379); under the backend
                 each releases it within 3x the RPC timeout of the death: w1
                 by its check of w0, w2 (its own check off) told by w1.
  idle pass      a live pass idle for 4x the RPC timeout between its forward
                 and its backward completes, with native's gradients: the
                 backend checks w0 and keeps the pass's contexts.
  flush          w1 is stopped before w0's release and continued 2 s later:
                 under the backend distautograd.torch.flush() waits for it,
                 returns 0, and w1 holds nothing then; torch has no such
                 wait (pytorch issue 34359), its release reaches w1 some time
                 after it is continued.
  dead peer      w1 is SIGKILLed, then w0 ends a pass that reached it:
                 natively torch retries its cleanup message to w1 (20
                 times, backing off from 1 s: some two hours, ending in
                 "Could not release Dist Autograd Context on node 1", at
                 the latest when the agent shuts down); under the backend
                 the first attempt finds w1 gone, the message is dropped
                 and counted, no retry is made, flush() returns 0 at once.
  contexts       distautograd.torch.contexts() on the origin and, through an
                 RPC, on a peer, and the contexts signal's report; natively
                 torch shows a count only.

Network namespaces (a SIGKILL across hosts, a link taken down) are
test_netfaults.py's."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import unittest

from torch_backend.tests._driven import Driven
from torch_backend.tests.test_backend import BackendTest, PYTHON, both_ways, env, free_port, logs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from origin_job import RPC_TIMEOUT_S, WORLD  # noqa: E402

#: How long the idle pass stays idle: 4x the RPC timeout.
IDLE_S = 4 * RPC_TIMEOUT_S
#: The bound on a dead origin's contexts under the backend (issue's "3x").
RELEASE_BOUND_S = 3 * RPC_TIMEOUT_S
#: How long the flush test keeps w1 stopped.
STOP_S = 2.0
#: Natively nothing releases them: they are looked at once past the bound.
NATIVE_LOOK_S = RELEASE_BOUND_S + 1
#: How long torch's retries of a cleanup message to a dead peer are looked
#: for (natively the second try comes 1 s after the first).
RETRY_LOOK_S = 5


class Job:
    """Three origin_job.py workers, native or under the backend."""

    def __init__(self, out: str, backend: bool, ranks: dict = None, **extra: str) -> None:
        """extra: every worker's environment; ranks: {rank: extra} one's."""
        os.makedirs(out, exist_ok=True)
        self.out, self.backend = out, backend
        port = free_port()
        self.w = [Driven("w%d" % rank, [PYTHON, os.path.join(HERE, "origin_job.py"), str(rank), port],
                         env(backend, **dict(extra, **(ranks or {}).get(rank, {}))), os.path.join(out, "log-%d" % rank))
                  for rank in range(WORLD)]
        for w in self.w:
            got = w.answer()
            assert got.get("ready") == w.name, (w.name, got, logs(out))

    def close(self) -> None:
        for w in self.w:
            w.close()

    def count(self, rank: int) -> int:
        return self.w[rank].ask("contexts")["count"]

    def wait_count(self, rank: int, want: int, until: float) -> float:
        """Polls worker rank until it holds want contexts or the monotonic
        clock passes until; returns the time of the answer that held want,
        or -1."""
        while True:
            got = self.w[rank].ask("contexts")
            if got["count"] == want:
                return got["t"]
            if time.monotonic() > until:
                return -1.0
            time.sleep(0.1)


class DeadOriginTest(BackendTest):
    def job(self, backend: bool, ranks: dict = None, **extra: str) -> Job:
        j = Job(os.path.join(self.tmp, "backend" if backend else "native"), backend, ranks, **extra)
        self.addCleanup(j.close)
        return j

    def both(self, scenario, ranks: dict = None, **extra: str) -> dict:
        """Runs scenario(job) natively, then under the backend (each job's
        environment with extra, and each rank's with ranks[rank]): their
        results."""
        return both_ways(lambda backend: self.job(backend, ranks, **extra), scenario)


class TestKilledOrigin(DeadOriginTest):
    def test_killed_origin(self) -> None:
        def scenario(j: Job) -> dict:
            cid = j.w[0].ask("hold")["context"]
            assert j.count(1) == 1 and j.count(2) == 1, "the pass reached w1 and w2"
            j.w[0].proc.send_signal(signal.SIGKILL)
            j.w[0].proc.wait(timeout=60)
            killed = time.monotonic()
            rec = {"context": cid}
            if j.backend:
                gone = [j.wait_count(r, 0, killed + NATIVE_LOOK_S) for r in (1, 2)]
                rec["gone_after_s"] = [round(t - killed, 2) if t >= 0 else None for t in gone]
                rec["info"] = [j.w[r].ask("info") for r in (1, 2)]
            else:
                time.sleep(max(0.0, killed + NATIVE_LOOK_S - time.monotonic()))
                rec["held_after_look"] = [j.count(r) for r in (1, 2)]
            return rec

        # w2 does not check origins itself: the pass's context goes from it
        # only through w1's release, which must tell it (w1 forwarded the
        # pass to it: the worker torch's engine recorded).
        runs = self.both(scenario, ranks={2: {"DISTAUTOGRAD_DEAD_WORKERS": "0"}})
        sys.stderr.write("\nkilled origin: native w1, w2 hold %s after %.0f s | backend released after %s s "
                         "(bound %d s)\n" % (runs[False]["held_after_look"], NATIVE_LOOK_S,
                                              runs[True]["gone_after_s"], RELEASE_BOUND_S))
        # Natively the dead origin's context stays on both, for good.
        self.assertEqual(runs[False]["held_after_look"], [1, 1], runs[False])
        for r, took in zip((1, 2), runs[True]["gone_after_s"]):
            self.assertIsNotNone(took, "w%d still holds the dead origin's context: %s" % (r, runs[True]))
            self.assertLessEqual(took, RELEASE_BOUND_S, runs[True])
        infos = runs[True]["info"]
        # w1 found w0 gone and released the pass, telling w2; w2 checked nothing.
        self.assertEqual(infos[0]["torch_orphans_released"], 1, infos)
        self.assertEqual(infos[0]["torch_workers_gone"], 1, infos)
        self.assertEqual(infos[1]["torch_origin_probes"], 0, infos)
        self.assertEqual(infos[1]["torch_orphans_released"], 0, infos)
        for i in infos:
            self.assertEqual(i["num_autograd_contexts"], 0, i)
            self.assertEqual(i["torch_native_contexts"], 0, i)


class TestIdlePass(DeadOriginTest):
    def test_live_pass_idle_4x_the_timeout(self) -> None:
        def scenario(j: Job) -> dict:
            got = j.w[0].ask("idle_pass %g" % IDLE_S)
            assert got["ok"], got
            rec = {"grads": got["grads"]}
            if j.backend:
                rec["info"] = [j.w[r].ask("info") for r in (1, 2)]
            return rec

        runs = self.both(scenario)
        self.assertEqual(runs[True]["grads"], runs[False]["grads"])
        infos = runs[True]["info"]
        sys.stderr.write("\nidle pass (%d s): the same gradients; backend checks of w0: %s, contexts released: %s\n" % (
            IDLE_S, [i["torch_origin_probes"] for i in infos], [i["torch_orphans_released"] for i in infos]))
        # Both peers held the pass idle past the timeout, checked its origin,
        # and kept it.
        for i in infos:
            self.assertGreaterEqual(i["torch_origin_probes"], 1, i)
            self.assertEqual(i["torch_orphans_released"], 0, i)
            self.assertEqual(i["torch_workers_gone"], 0, i)
            self.assertEqual(i["num_autograd_contexts"], 0, i)


class TestFlush(DeadOriginTest):
    def test_flush_waits_for_a_stopped_peer(self) -> None:
        def scenario(j: Job) -> dict:
            j.w[0].ask("hold")
            w1 = j.w[1].proc
            w1.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            cont = threading.Timer(STOP_S, w1.send_signal, args=(signal.SIGCONT,))
            cont.start()
            try:
                j.w[0].ask("release")
                rec = j.w[0].ask("flush 60")
                rec["release_to_flush_end_s"] = rec["t"] - stopped
                # What w1 holds right then (answered once it runs again).
                rec["w1_after_flush"] = j.count(1)
                if not j.backend:
                    rec["w1_gone_at_s"] = j.wait_count(1, 0, time.monotonic() + 30) - stopped
            finally:
                cont.join()
            return rec

        runs = self.both(scenario)
        nat, be = runs[False], runs[True]
        sys.stderr.write("\nflush beside w1 stopped %.0f s: backend flush took %.2f s, returned %s, w1 then holds %d |"
                         " native: no flush; w1's copy gone %.2f s after the stop\n" % (
                             STOP_S, be["took"], be["pending"], be["w1_after_flush"], nat["w1_gone_at_s"]))
        self.assertIsNone(nat["pending"])  # torch has nothing to wait with
        self.assertGreaterEqual(nat["w1_gone_at_s"], STOP_S, nat)
        self.assertEqual(be["pending"], 0, be)
        self.assertGreaterEqual(be["release_to_flush_end_s"], STOP_S, be)
        self.assertLess(be["took"], 30, be)
        self.assertEqual(be["w1_after_flush"], 0, be)


class TestDeadPeer(DeadOriginTest):
    def test_release_to_a_dead_peer(self) -> None:
        def scenario(j: Job) -> dict:
            j.w[0].ask("hold")
            j.w[1].proc.send_signal(signal.SIGKILL)
            j.w[1].proc.wait(timeout=60)
            j.w[0].ask("release")
            rec = {"flush": j.w[0].ask("flush 30")}
            # torch logs each failed try of a send (at INFO): natively the
            # second comes 1 s after the first; looked for up to RETRY_LOOK_S.
            end = time.monotonic() + RETRY_LOOK_S
            while True:
                with open(os.path.join(j.out, "log-0")) as f:
                    log = f.read().splitlines()
                rec["tries"] = len([ln for ln in log if "Send try " in ln])
                rec["gone"] = [ln for ln in log if "is gone" in ln or "Could not release" in ln]
                if time.monotonic() > end or (not j.backend and rec["tries"] >= 2):
                    break
                time.sleep(0.2)
            rec["info"] = j.w[0].ask("info")
            return rec

        # torch's INFO lines: glog's (1.13), c10's (2.6).
        runs = self.both(scenario, GLOG_minloglevel="0", TORCH_CPP_LOG_LEVEL="INFO")
        nat, be = runs[False], runs[True]
        sys.stderr.write("\nrelease to a dead peer: native failed tries %d (and retrying) | backend failed tries %d, "
                         "flush took %.2f s, %s\n" % (nat["tries"], be["tries"], be["flush"]["took"], be["gone"]))
        self.assertGreaterEqual(nat["tries"], 2, nat)
        self.assertEqual(be["tries"], 0, be)
        self.assertEqual(len(be["gone"]), 1, be)
        self.assertTrue(be["gone"][0].startswith("distautograd-torch: worker 1 is gone ("), be)
        self.assertEqual(be["flush"]["pending"], 0, be)
        self.assertLess(be["flush"]["took"], RPC_TIMEOUT_S, be)
        info = be["info"]
        self.assertEqual(info["torch_cleanup_gone"], 1, info)
        self.assertEqual(info["torch_cleanup_outstanding"], 0, info)
        self.assertEqual(info["torch_workers_gone"], 1, info)


class TestContexts(DeadOriginTest):
    def test_contexts_on_origin_and_peer(self) -> None:
        def scenario(j: Job) -> dict:
            cid = j.w[0].ask("hold")["context"]
            rec = {"context": cid, "origin": j.w[0].ask("contexts %d" % cid),
                   "w1": j.w[0].ask("peer_contexts w1 %d" % cid), "w2": j.w[1].ask("peer_contexts w2 %d" % cid)}
            if j.backend:
                # The contexts signal: w1 reports on its stderr, and goes on.
                j.w[1].proc.send_signal(signal.SIGUSR2)
                rec["w1_pid"] = j.w[1].proc.pid
                rec["w1_still_answers"] = j.count(1)
            j.w[0].ask("release")
            rec["after"] = [j.wait_count(r, 0, time.monotonic() + 30) >= 0 for r in range(WORLD)]
            return rec

        runs = self.both(scenario)
        nat, be = runs[False], runs[True]
        for who in ("origin", "w1", "w2"):
            self.assertEqual(nat[who]["count"], 1, nat)
            self.assertIsNone(nat[who]["contexts"], nat)  # torch shows a count only
            self.assertEqual(be[who]["count"], 1, be)
        cid = be["context"]
        for who in ("origin", "w1", "w2"):
            (c,) = be[who]["contexts"]
            self.assertEqual(c["id"], cid, c)
            self.assertEqual(c["origin_worker"], 0, c)
            # The workers torch's engine recorded on its own context, as
            # natively: every one reached the library's.
            self.assertEqual(be[who]["torch_known"], nat[who]["torch_known"], (who, be, nat))
            self.assertEqual(c["known_workers"], be[who]["torch_known"], (who, c))
            self.assertTrue(c["known_workers"], (who, c))
            self.assertGreaterEqual(c["age_s"], c["idle_s"], c)
            self.assertGreaterEqual(c["idle_s"], 0, c)
        self.assertEqual(be["w1_still_answers"], 1)
        self.assertEqual(nat["after"], [True] * WORLD)
        self.assertEqual(be["after"], [True] * WORLD)
        with open(os.path.join(self.tmp, "backend", "log-1")) as f:
            report = f.read()
        self.assertIn("distautograd-torch: worker 1 (pid %d) holds 1 context:\n  context %d: origin worker 0, "
                      "known workers [%s], age " % (be["w1_pid"], cid, ", ".join(map(str, be["w1"]["torch_known"]))), report)


if __name__ == "__main__":
    unittest.main()
