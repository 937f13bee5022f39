"""fork() from Python: a parent that loaded distautograd and keeps it busy
(threads making contexts with known workers, a flaky Python cleanup sender
with retries in flight, get-or-create of other workers' passes) forks,
through multiprocessing's "fork" start method and through os.fork. Every
child gets a fast, clear DistAutogradError (ERR_FORKED, naming fork and the
fix) from the library, never a hang or a crash; a child that uses nothing,
or holds DistAutogradContext objects until interpreter exit, exits cleanly
and quietly; the parent keeps working and loses no cleanup message.

Each scenario runs in its own interpreter (the unittest process must not
fork with its threads), under a timeout, and every wait in it has one.
"""
from __future__ import annotations

import unittest

from . import _support

# The busy parent every scenario starts from. After it: D (the module),
# held (contexts the children inherit), stop_busy() (joins the threads and
# returns how many rounds they did), sent/attempts (the sender's counters).
PARENT = r'''
import json, multiprocessing as mp, os, sys, threading, time
import distautograd as D
from distautograd import _fanout

D._init(3)
lock = threading.Lock()
attempts = [0]
sent = [0]

def sender(worker_id, context_id):
    with lock:
        attempts[0] += 1
        k = attempts[0]
    if k % 4 == 0:
        raise ConnectionError("flaky peer")  # a failed attempt: retried
    with lock:
        sent[0] += 1

D.set_cleanup_sender(sender)
D.set_cleanup_options(max_attempts=50, initial_backoff=0.0001, max_backoff=0.001)
stop = threading.Event()
rounds = [0, 0, 0, 0]

def busy(i):
    while not stop.is_set():
        # Backpressure, as a host would apply it: on a loaded machine these
        # threads can outpace the Python sender (which needs the GIL they
        # hold) and fill the bounded queue, which then drops and logs.
        if rounds[i] % 64 == 0:
            while D.cleanup_stats().pending > 5000 and not stop.is_set():
                time.sleep(0.001)
        with D.context() as cid:
            ctx = D._current_context()
            ctx._add_known_worker_id(4)
            ctx._add_known_worker_id(5)
            other = D._get_or_create_context((9 << 48) | (i << 32) | rounds[i])
            other._add_known_worker_id(9)
            D._release_context_if_present(other._context_id())
            D._retrieve_context(cid)
        rounds[i] += 1

threads = [threading.Thread(target=busy, args=(i,), daemon=True) for i in range(4)]
for t in threads:
    t.start()
deadline = time.monotonic() + 60
while min(rounds) < 20 and time.monotonic() < deadline:
    time.sleep(0.001)
assert min(rounds) >= 20, rounds
held = [D._get_or_create_context((7 << 48) | k) for k in range(5)]
held[0]._add_known_worker_id(8)

def stop_busy():
    stop.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    return sum(rounds)

def wait_pid(pid, seconds=60):
    """Exit code of the child, or 'hung' (then it is killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"

def parent_still_works(total_rounds):
    """The parent after its forks: it works, and every release's cleanup
    messages were delivered (3 per busy round, plus held[0]'s one)."""
    with D.context() as cid:
        D._current_context()._add_known_worker_id(4)
    for c in held:
        D._release_context(c._context_id())
    pending = D.cleanup_flush(30)
    st = D.cleanup_stats()
    return {
        "pending": pending,
        "failed": st.failed,
        "every message delivered": st.sent == 3 * total_rounds + 2 == sent[0],
        "retried some": st.retried > 0,
        "contexts": D._get_debug_info()["num_autograd_contexts"],
    }
'''

# What a child that uses the library tries: every function of the package,
# and the methods of a context it inherited. Each must raise ERR_FORKED.
TRY_EVERYTHING = r'''
def try_everything():
    # The exit handler has nothing to wait for: no library thread came along.
    idle = _fanout._calls == 0 and _fanout._sender is None
    c = held[0]
    calls = [
        ("_init", lambda: D._init(3)),
        ("_new_context", D._new_context),
        ("_current_context", D._current_context),
        ("_retrieve_context", lambda: D._retrieve_context(c._context_id())),
        ("_retrieve_context_if_present", lambda: D._retrieve_context_if_present(1)),
        ("_get_or_create_context", lambda: D._get_or_create_context(1)),
        ("_is_valid_context", lambda: D._is_valid_context(1)),
        ("_release_context", lambda: D._release_context(1)),
        ("_release_context_if_present", lambda: D._release_context_if_present(1)),
        ("_get_max_id", D._get_max_id),
        ("_get_debug_info", D._get_debug_info),
        ("context", lambda: D.context().__enter__()),
        ("_known_worker_ids", c._known_worker_ids),
        ("_send_functions", c._send_functions),
        ("_recv_functions", c._recv_functions),
        ("_add_known_worker_id", lambda: c._add_known_worker_id(4)),
        ("set_cleanup_sender", lambda: D.set_cleanup_sender(None)),
        ("set_log_hook", lambda: D.set_log_hook(None)),
        ("set_cleanup_options", lambda: D.set_cleanup_options(max_attempts=3)),
        ("cleanup_stats", D.cleanup_stats),
        ("cleanup_flush", lambda: D.cleanup_flush(0.01)),
        ("_release_contexts_of_worker", lambda: D._release_contexts_of_worker(7)),
        ("_reap_idle_contexts", lambda: D._reap_idle_contexts(1.0)),
        ("debug_info", D._lib.debug_info),
    ]
    out = {}
    for name, fn in calls:
        try:
            fn()
            out[name] = "no error"
        except D.DistAutogradError as e:
            out[name] = [int(e.status), str(e)]
        except BaseException as e:
            out[name] = "%s: %s" % (type(e).__name__, e)
    out["exit handler idle"] = idle
    return out
'''


class MultiprocessingFork(unittest.TestCase):
    def test_children_get_a_clear_error_and_exit(self) -> None:
        out = _support.run_json(self, PARENT + TRY_EVERYTHING + r'''
def uses_it(q):
    q.put(try_everything())
    del held[:]  # the inherited objects' __del__ drop references: no error, no noise

def uses_nothing(q):
    q.put("nothing")

ctx = mp.get_context("fork")
results = []
for target in (uses_it, uses_nothing, uses_it, uses_nothing):
    for where in ("main", "thread"):
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q,))
        if where == "main":
            p.start()
        else:  # started from another thread, as a runtime's helper thread would
            s = threading.Thread(target=p.start)
            s.start()
            s.join(30)
        try:
            got = q.get(timeout=60)
        except Exception as e:
            got = "no answer: %r" % e
        p.join(60)
        if p.exitcode is None:
            p.kill()
            p.join()
        results.append({"target": target.__name__, "where": where, "got": got, "exitcode": p.exitcode})
total = stop_busy()
print(json.dumps({"children": results, "parent": parent_still_works(total)}))
''')
        self.assertEqual(len(out["children"]), 8)
        for child in out["children"]:
            with self.subTest(target=child["target"], where=child["where"]):
                self.assertEqual(child["exitcode"], 0)
                if child["target"] == "uses_nothing":
                    self.assertEqual(child["got"], "nothing")
                    continue
                got = child["got"]
                self.assertIs(got.pop("exit handler idle"), True)
                for name, result in got.items():
                    with self.subTest(function=name):
                        self.assertIsInstance(result, list, result)
                        status, msg = result
                        self.assertEqual(status, 10)  # Status.ERR_FORKED
                        self.assertTrue(msg.startswith("distautograd: dac_"), msg)
                        self.assertIn("loaded before fork()", msg)
                        self.assertIn("load it after fork, or use the 'spawn' start method", msg)
                self.assertEqual(len(got), 24)
        self.assertEqual(out["parent"], {"pending": 0, "failed": 0, "every message delivered": True,
                                         "retried some": True, "contexts": 0})

    def test_spawn_children_use_the_library(self) -> None:
        # The fix the error names: a "spawn" child loads the library itself.
        out = _support.run_json(self, PARENT + r'''
# The target must be importable in the fresh interpreter: exec of a string is.
SPAWNED = """
import distautograd as D
D._init(5)
with D.context() as cid:
    q.put(cid)
"""

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=exec, args=(SPAWNED, {"q": q}))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    total = stop_busy()
    print(json.dumps({"child": got, "exitcode": p.exitcode, "parent": parent_still_works(total)}))
''')
        self.assertEqual(out["child"], 5 << 48)
        self.assertEqual(out["exitcode"], 0)
        self.assertEqual(out["parent"]["pending"], 0)
        self.assertIs(out["parent"]["every message delivered"], True)


class OsFork(unittest.TestCase):
    def test_interpreter_exit_in_child_holding_contexts(self) -> None:
        # The child returns to the interpreter, which exits normally: the
        # exit handler runs, then the objects it holds (in a list, in a
        # reference cycle, in a thread's frame) are collected and their
        # __del__ drop references, every one failing with ERR_FORKED,
        # silently. A sender call was in flight at the fork: the child must
        # not wait for it. The child's stderr is the parent's: it stays empty.
        p = _support.run_python(PARENT + r'''
entered, release = threading.Event(), threading.Event()
first = [True]
def blocking_sender(worker_id, context_id):
    # One call blocks (the one in flight at every fork); the rest deliver,
    # so the busy threads' messages do not pile up meanwhile.
    with lock:
        mine, first[0] = first[0], False
    if mine:
        entered.set()
        release.wait(30)
D.set_cleanup_sender(blocking_sender)
with D.context() as cid:
    D._current_context()._add_known_worker_id(4)
assert entered.wait(30)
# The busy threads stop here: with one sender thread blocked and the others
# waiting for the GIL they hold, their messages would pile up past the
# queue's bound while the forks wait for the blocked call (0.1 s each).
total = stop_busy()
codes = []
for k in range(3):
    pid = os.fork()
    if pid == 0:
        class Cycle:
            pass
        c = Cycle(); c.me = c; c.ctx = held[1]
        mine = [held[2], held[3]]
        if k == 1:
            def hold(ctx):
                threading.Event().wait()
            threading.Thread(target=hold, args=(held[4],), daemon=True).start()
        if k == 2:
            try:
                D._get_max_id()
            except D.DistAutogradError as e:
                assert e.status == D.Status.ERR_FORKED, e
        # The sender call in flight is the parent's: the exit handler must
        # not wait for it (3 if it would).
        sys.exit(0 if _fanout._calls == 0 and _fanout._sender is None else 3)
    codes.append(wait_pid(pid))
release.set()
D.set_cleanup_sender(sender)
print(json.dumps({"codes": codes, "parent": parent_still_works(total)}))
''')
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stderr, "")
        import json
        out = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(out["codes"], [0, 0, 0])
        self.assertEqual(out["parent"]["pending"], 0)
        self.assertEqual(out["parent"]["failed"], 0)
        self.assertEqual(out["parent"]["contexts"], 0)

    def test_child_that_execs_loads_the_library_anew(self) -> None:
        out = _support.run_json(self, PARENT + r'''
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.dup2(w, 1)
    os.execv(sys.executable, [sys.executable, "-c",
             "import distautograd as D; D._init(6); print(D._get_max_id(), flush=True)"])
os.close(w)
code = wait_pid(pid)
child_out = os.read(r, 4096).decode()
total = stop_busy()
print(json.dumps({"code": code, "child": child_out.strip(), "parent": parent_still_works(total)}))
''')
        self.assertEqual(out["code"], 0)
        self.assertEqual(out["child"], str((6 << 48) | (2**48 - 1)))
        self.assertEqual(out["parent"]["pending"], 0)


if __name__ == "__main__":
    unittest.main()
