"""Two container limits, each run natively and under the backend in
separate jobs (limits_job.py: two workers on loopback, w0 and w1, or one
container without RPC).

  ids run out    w0's context and autograd message ids reach its max_id
                 ((worker_id << 48) | (2^48 - 1)), started a few ids before
                 it: natively in libtorch's own container (its fields, whose
                 offsets are checked against a fresh container's values),
                 under the backend through the library's testing build
                 (build/testing, make testing-lib: dactest_set_counter_offsets).
                 Natively nothing aborts: each id that is not there is a
                 RuntimeError from torch's internal assertion (w0's RPC with
                 autograd; w1's, whose answer needs one of w0's ids; a
                 context). But a failed context creation leaves the thread's
                 current id set to max_id, a context that does not exist:
                 that thread can start no pass and make no RPC of a Python
                 function, rpc.shutdown() included (which still ends w0's
                 agent: w1's shutdown then fails, or waits for good, as the
                 answer to its part of the gathering raced that end). Under the backend each is a
                 RuntimeError with the library's message, and nothing else
                 changes.
  worker 32767   a container alone (no RPC), whose max_id is 2^63 - 1:
                 natively the counter wraps past it, and the creation after
                 the failed one hands out worker 32768's first id; under the
                 backend each creation past it is the library's RuntimeError.
  the cap        w0 holds passes open, each with an RPC to w1. Natively w1
                 holds as many as w0 opens, with or without
                 DISTAUTOGRAD_MAX_CONTEXTS; under the backend with the cap N
                 on w1, the passes past N fail (their RPC raises the
                 library's message from w1), w1 holds exactly N, shown by
                 distautograd.torch.contexts(), and after the passes end
                 both hold nothing and new passes work.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unittest

from torch_backend.tests._driven import Driven
from torch_backend.tests.test_backend import BUILD, BackendTest, PYTHON, TIMEOUT, both_ways, env, free_port, in_ci, logs

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "limits_job.py")
#: The library's testing build (make testing-lib): under the backend, the
#: implementation finds it first (LD_LIBRARY_PATH comes before its RUNPATH).
TESTING = os.path.join(BUILD, "testing")
MASK = (1 << 48) - 1
#: The cap the test sets on w1, and how many passes w0 opens.
CAP = 3
PASSES = CAP + 2
#: A bound, not an expectation: a release reaches w1 asynchronously.
RELEASE_BOUND_S = 30
#: How long a peer stuck in rpc.shutdown() is looked at.
STUCK_LOOK_S = 1.0

# torch's messages (1.13 and 2.6 alike, but for container.cpp's line).
TORCH_MSG_IDS = "next_autograd_message_id_ < max_id_ INTERNAL ASSERT FAILED"
TORCH_CTX_IDS = "context_id < max_id_ INTERNAL ASSERT FAILED"
TORCH_HAVE_ONE = "Already have an autograd context id for this thread."
TORCH_NO_DATA = "Couldn't find autograd context data for current autograd context id"
TORCH_NO_CURRENT = "Current thread doesn't have a valid autograd context."


def max_id(worker: int) -> int:
    return worker << 48 | MASK


def lib_exhausted(kind: str, worker_max: int) -> str:
    """The library's message (include/distautograd.h, dac_context_new)."""
    return "distautograd: %s ids are exhausted: the next id would reach max_id %d" % (kind, worker_max)


class Job:
    """Two limits_job.py workers; left[rank] = (CTX_LEFT, MSG_LEFT), and
    per_rank[rank] the environment each adds."""

    def __init__(self, out: str, backend: bool, left=((0, 0), (0, 0)), per_rank=({}, {})) -> None:
        os.makedirs(out, exist_ok=True)
        self.out, self.backend = out, backend
        port = free_port()
        # The testing build where counters start near the end.
        extra = {"LD_LIBRARY_PATH": TESTING} if backend and any(map(any, left)) else {}
        self.w = [Driven("w%d" % rank, [PYTHON, JOB, str(rank), port, *map(str, left[rank])],
                         env(backend, **extra, **per_rank[rank]), os.path.join(out, "log-%d" % rank))
                  for rank in range(2)]
        try:
            self.ready = [w.answer() for w in self.w]
            for w, got in zip(self.w, self.ready):
                assert got.get("ready") == w.name, (w.name, got)
        except AssertionError as e:
            self.close()
            raise AssertionError("%s (backend=%s); logs:\n%s" % (e, backend, logs(out))) from None

    def close(self) -> None:
        for w in self.w:
            w.close()

    def wait_count(self, rank: int, want: int) -> bool:
        """Polls worker rank until it holds want contexts (True), or
        RELEASE_BOUND_S passes (False)."""
        end = time.monotonic() + RELEASE_BOUND_S
        while self.w[rank].ask("contexts")["count"] != want:
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True

    def shutdown(self) -> list:
        """rpc.shutdown() on both (it gathers every worker): their answers;
        where w0's failed, w1's is None if it has not answered STUCK_LOOK_S
        later (waiting for w0's word, which never comes)."""
        for w in self.w:
            w.send("shutdown")
        first = self.w[0].answer()
        if first["ok"]:
            return [first, self.w[1].answer()]
        time.sleep(STUCK_LOOK_S)
        return [first, None if self.w[1].lines.empty() else self.w[1].answer()]


class LimitsTest(BackendTest):
    def both(self, scenario, **kw) -> dict:
        """scenario(job) natively, then under the backend: their results."""
        def make_job(backend):
            j = Job(os.path.join(self.tmp, "backend" if backend else "native"), backend, **kw)
            self.addCleanup(j.close)
            return j

        return both_ways(make_job, scenario)

    def assert_backend_ready(self, job_ready: list) -> None:
        for got in job_ready:
            self.assertEqual(got["library"], os.path.join(TESTING, "libdistautograd.so.0"), got)


class TestIdExhaustion(LimitsTest):
    def setUp(self) -> None:
        super().setUp()
        if not os.path.isfile(os.path.join(TESTING, "libdistautograd.so.0")):
            problem = "the library's testing build is missing (make testing-lib)"
            if in_ci():
                self.fail("CI=true and " + problem)
            self.skipTest(problem)

    def test_a_workers_ids_run_out(self) -> None:
        """w0 has 3 context ids and 2 message ids left; its passes reach
        w1, and then one of w1's reaches w0."""
        def scenario(j: Job) -> dict:
            ask = j.w[0].ask
            rec = {"ready": j.ready, "passes": [ask("pass w1") for _ in range(3)],
                   "held": ask("contexts")["count"]}
            # The next context: none left.
            rec["context"] = ask("context")
            rec["again"] = ask("context")
            rec["current"] = ask("current")
            rec["rpc"] = ask("rpc w1")
            rec["other_thread"] = {"rpc": ask("thread rpc w1"), "context": ask("thread context")}
            # w1's pass reaches w0, whose answer needs a message id: w1's
            # RPC raises w0's error; w1's release reaches w0 as ever.
            rec["peer_pass"] = j.w[1].ask("pass w0")
            rec["peer_rpc"] = j.w[1].ask("rpc w0")
            rec["peer_released"] = j.wait_count(0, 0)
            rec["alive"] = [w.proc.poll() is None for w in j.w]
            rec["shutdown"] = j.shutdown()
            if rec["shutdown"][1] is None:
                j.w[1].proc.kill()  # waiting in rpc.shutdown() for good
            return rec

        runs = self.both(scenario, left=((3, 2), (0, 0)))
        nat, be = runs[False], runs[True]
        top = max_id(0)
        w1_down = nat["shutdown"][1]
        sys.stderr.write("\nids run out: native %r / %r, shutdown %r, w1's %s | backend %r / %r\n" % (
            nat["passes"][2]["error"][:60], nat["context"]["error"][:60], nat["shutdown"][0].get("error", "")[:70],
            "still waiting" if w1_down is None else repr(w1_down.get("error", "")[:40]),
            be["passes"][2]["error"][:60], be["context"]["error"][:60]))
        # Natively the job found libtorch's container where it looked.
        self.assertEqual(nat["ready"][0]["native"]["max_id"], top, nat["ready"])
        self.assertEqual(nat["ready"][1]["native"]["next_context_id"], 1 << 48, nat["ready"])
        self.assert_backend_ready(be["ready"][:1])
        for run in (nat, be):
            # The last ids below max_id are issued; max_id itself never.
            self.assertEqual([p.get("context") for p in run["passes"][:2]], [top - 3, top - 2], run)
            self.assertTrue(run["passes"][0]["ok"] and run["passes"][1]["ok"], run)
            # The third pass's RPC finds no message id left: a RuntimeError,
            # and its context is released as its `with` ends.
            self.assertEqual(run["passes"][2]["type"], "RuntimeError", run)
            self.assertEqual(run["held"], 0, run)
            self.assertEqual(run["context"]["type"], "RuntimeError", run)
            # Another thread still makes RPCs; no process died.
            self.assertEqual(run["other_thread"]["rpc"], {"ok": True, "value": [2.0, 2.0]}, run)
            self.assertEqual(run["peer_pass"]["type"], "RuntimeError", run)
            self.assertEqual(run["peer_rpc"], {"ok": True, "value": [2.0, 2.0]}, run)
            self.assertTrue(run["peer_released"], run)
            self.assertEqual(run["alive"], [True, True], run)
        # Natively: torch's assertions, as RuntimeErrors (no abort)...
        self.assertTrue(nat["passes"][2]["error"].startswith(TORCH_MSG_IDS), nat)
        self.assertTrue(nat["context"]["error"].startswith(TORCH_CTX_IDS), nat)
        # ...and the failed creation left the thread a current id with no
        # context: it can start no pass, make no RPC, nor shut down; w1,
        # the other side of that shutdown, fails or waits (a race).
        self.assertEqual(nat["again"]["error"], TORCH_HAVE_ONE, nat)
        self.assertEqual(nat["current"]["error"], TORCH_NO_DATA, nat)
        self.assertEqual(nat["rpc"]["error"], TORCH_NO_DATA, nat)
        self.assertTrue(nat["other_thread"]["context"]["error"].startswith(TORCH_CTX_IDS), nat)
        self.assertIn(TORCH_MSG_IDS, nat["peer_pass"]["error"], nat)
        self.assertFalse(nat["shutdown"][0]["ok"], nat)
        self.assertIn(TORCH_NO_DATA, nat["shutdown"][0]["error"], nat)
        self.assertTrue(nat["shutdown"][1] is None or not nat["shutdown"][1]["ok"], nat)
        # Under the backend: the library's message, and nothing else changes.
        self.assertEqual(be["passes"][2]["error"], lib_exhausted("autograd message", top), be)
        for r in (be["context"], be["again"], be["other_thread"]["context"]):
            self.assertEqual(r["error"], lib_exhausted("context", top), be)
        self.assertTrue(be["current"]["error"].startswith(TORCH_NO_CURRENT), be)
        self.assertEqual(be["rpc"], {"ok": True, "value": [2.0, 2.0]}, be)
        self.assertIn(lib_exhausted("autograd message", top), be["peer_pass"]["error"], be)
        self.assertEqual(be["shutdown"], [{"ok": True}, {"ok": True}], be)

    def test_worker_32767s_context_ids_wrap(self) -> None:
        """A container alone (no RPC), worker 32767, whose max_id is
        2^63 - 1: natively its counter wraps past it."""
        def solo(backend: bool) -> dict:
            extra = {"LD_LIBRARY_PATH": TESTING} if backend else {}
            r = subprocess.run([PYTHON, JOB, "solo", "32767", "1"], env=env(backend, **extra), capture_output=True,
                               text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, "backend=%s:\n%s%s" % (backend, r.stdout, r.stderr))
            return json.loads(r.stdout.strip().splitlines()[-1])

        nat, be = solo(False), solo(True)
        top = (1 << 63) - 1
        sys.stderr.write("\nworker 32767: native contexts %s | backend %s\n" % (
            [c.get("context", c.get("error", "")[:40]) for c in nat["contexts"]],
            [c.get("context", c.get("error", "")[:40]) for c in be["contexts"]]))
        for run in (nat, be):
            self.assertEqual(run["max_id"], top, run)
            self.assertEqual(run["contexts"][0], {"ok": True, "context": top - 1}, run)
        self.assertEqual(nat["native"]["max_id"], top, nat)
        # Natively: the assertion, then the counter has wrapped: the next
        # thread's context has worker 32768's first id (its top 16 bits).
        self.assertTrue(nat["contexts"][1]["error"].startswith(TORCH_CTX_IDS), nat)
        self.assertEqual(nat["contexts"][2], {"ok": True, "context": -(1 << 63)}, nat)
        self.assertEqual((nat["contexts"][2]["context"] >> 48) & 0xFFFF, 32768)
        for c in be["contexts"][1:]:
            self.assertEqual(c["error"], lib_exhausted("context", top), be)


class TestContextCap(LimitsTest):
    def test_a_peer_holds_at_most_the_cap(self) -> None:
        """w0 holds PASSES passes open, each with an RPC to w1, which has
        DISTAUTOGRAD_MAX_CONTEXTS=CAP (natively: no effect)."""
        def scenario(j: Job) -> dict:
            rec = {"holds": [j.w[0].ask("hold w1") for _ in range(PASSES)]}
            rec["w1"] = j.w[1].ask("contexts")
            rec["w1_info"] = j.w[1].ask("info")
            rec["w0"] = j.w[0].ask("contexts")
            rec["released"] = j.w[0].ask("release")["released"]
            rec["after"] = [j.wait_count(r, 0) for r in (0, 1)]
            rec["new"] = [j.w[0].ask("pass w1") for _ in range(2)]
            rec["alive"] = [w.proc.poll() is None for w in j.w]
            return rec

        runs = self.both(scenario, per_rank=({}, {"DISTAUTOGRAD_MAX_CONTEXTS": str(CAP)}))
        nat, be = runs[False], runs[True]
        sys.stderr.write("\nthe cap (%d) on w1: native w1 holds %d | backend w1 holds %d, refused %d: %r\n" % (
            CAP, nat["w1"]["count"], be["w1"]["count"], be["w1_info"]["refused_contexts"],
            [h.get("error", "")[:100] for h in be["holds"][CAP:]][0]))
        # Natively every pass reached w1: nothing bounds what it holds.
        self.assertEqual([h["ok"] for h in nat["holds"]], [True] * PASSES, nat)
        self.assertEqual(nat["w1"]["count"], PASSES, nat)
        # The backend: CAP passes hold a context on w1; each later one's RPC
        # raises w1's refusal, the library's message.
        self.assertEqual([h["ok"] for h in be["holds"]], [True] * CAP + [False] * (PASSES - CAP), be)
        for h in be["holds"][CAP:]:
            self.assertEqual(h["type"], "RuntimeError", h)
            self.assertIn("distautograd: the container holds %d contexts, its limit (max_contexts); release some "
                          "or raise the limit" % CAP, h["error"])
        self.assertEqual(be["w1"]["count"], CAP, be)
        held = sorted(h["context"] for h in be["holds"][:CAP])
        self.assertEqual(sorted(c["id"] for c in be["w1"]["contexts"]), held, be)
        self.assertEqual({c["origin_worker"] for c in be["w1"]["contexts"]}, {0}, be)
        self.assertEqual(be["w1_info"]["max_contexts"], CAP, be)
        self.assertEqual(be["w1_info"]["refused_contexts"], PASSES - CAP, be)
        # w0 (no cap) held the passes that went on: natively all.
        self.assertEqual(nat["w0"]["count"], PASSES, nat)
        self.assertEqual(be["w0"]["count"], CAP, be)
        for run, held_open in ((nat, PASSES), (be, CAP)):
            self.assertEqual(run["released"], held_open, run)
            self.assertEqual(run["after"], [True, True], run)
            self.assertEqual([p["ok"] for p in run["new"]], [True, True], run)
            self.assertEqual(run["alive"], [True, True], run)


if __name__ == "__main__":
    unittest.main()
