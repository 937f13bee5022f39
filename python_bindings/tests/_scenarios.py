"""Scenarios of the differential suite, and the runner that plays them.

Each scenario is a function ``scenario(D, rec)``: D is the module under test
(``torch.distributed.autograd`` or ``distautograd``), rec records what each
step returned or raised. The same scenario runs on both and the records must
be equal: same values, same exception types, and for RuntimeError (and the
scenario's own exceptions) the same message; a TypeError's message is
pybind11's in torch and is not compared.

The container is a process singleton, so every scenario runs in a process of
its own: the runner forks one child per scenario from a parent that never
initialized the container. The torch parent imports torch first (2 s, paid
once); the distautograd parent does not even load the library (the Go
runtime does not survive fork), each child imports distautograd itself.

    python3 _scenarios.py torch|distautograd [NAME...]

prints one JSON object {name: record} on stdout.
"""
from __future__ import annotations

import copy
import decimal
import fractions
import json
import os
import pickle
import re
import signal
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List

SCENARIO_TIMEOUT_S = 60


class Boom(Exception):
    """The scenarios' own exception: its message is compared."""


class Index:
    """An int-like object: has __index__."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v

    def __repr__(self) -> str:
        return "Index(%d)" % self.v


class IntOnly:
    """Has __int__ but no __index__."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __int__(self) -> int:
        return self.v

    def __repr__(self) -> str:
        return "IntOnly(%d)" % self.v


class RaisingIndex:
    def __index__(self) -> int:
        raise ValueError("no index")


class IndexAndInt:
    """__index__ out of int64, __int__ in range."""

    def __index__(self) -> int:
        return 2**70

    def __int__(self) -> int:
        return 11

    def __repr__(self) -> str:
        return "IndexAndInt()"


class IntSubclass(int):
    pass


class FloatOnly:
    def __float__(self) -> float:
        return 3.0


def _norm(v: Any) -> Any:
    """A JSON-able, backend-neutral form of a result."""
    if type(v).__name__ == "DistAutogradContext":
        return {"context": v._context_id()}
    if isinstance(v, (set, frozenset)):
        return {"set": sorted(v)}
    if isinstance(v, dict):
        return {"dict": sorted([_norm(k), _norm(x)] for k, x in v.items())}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if v is None or isinstance(v, (bool, int, str, float)):
        return v
    return {"type": type(v).__name__}


def _exc(e: BaseException) -> List[Any]:
    if isinstance(e, RuntimeError):
        return ["RuntimeError", str(e)]
    if isinstance(e, Boom):
        return ["Boom", str(e)]
    return [type(e).__name__]


class Recorder:
    """Records each step as [label, "ok", value] or [label, "raise", type, (message)]."""

    def __init__(self) -> None:
        self.events: List[Any] = []
        self._lock = threading.Lock()

    def __call__(self, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            r = fn(*args, **kwargs)
        except BaseException as e:  # noqa: B902 - every outcome is data here
            self.add(label, "raise", *_exc(e))
            return None
        self.add(label, "ok", _norm(r))
        return r

    def value(self, label: str, v: Any) -> None:
        self.add(label, "value", _norm(v))

    def add(self, *event: Any) -> None:
        with self._lock:
            self.events.append(list(event))


def _in_thread(fn: Callable[[], Any]) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


# ---- The scenarios ----------------------------------------------------------

SCENARIOS: Dict[str, Callable[[Any, Recorder], None]] = {}


def scenario(fn: Callable[[Any, Recorder], None]) -> Callable[[Any, Recorder], None]:
    SCENARIOS[fn.__name__] = fn
    return fn


def renumbered(events: Any) -> Any:
    """events with each id of a worker other than 0 (the threads_
    scenarios' are 3 and 40000) named by its order of first appearance:
    where contexts are made on several threads, the ids' values differ by
    design (each thread's come from a run of its own where torch counts one
    by one: docs/torch-compat.md), and what the two must agree on is which
    steps name the same context."""
    names: Dict[int, str] = {}

    def name(n: int) -> Any:
        return names.setdefault(n, "id #%d" % len(names)) if abs(n) >= 1 << 48 else n

    def walk(v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return name(v)
        if isinstance(v, str):
            return re.sub(r"-?\d{15,}", lambda m: str(name(int(m.group()))), v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(events)


def _everything(D: Any, rec: Recorder, tag: str) -> None:
    rec(tag + "new", D._new_context)
    rec(tag + "current", D._current_context)
    rec(tag + "max_id", D._get_max_id)
    rec(tag + "debug", D._get_debug_info)
    rec(tag + "is_valid", D._is_valid_context, 1)
    rec(tag + "retrieve", D._retrieve_context, 1)
    rec(tag + "release", D._release_context, 1)

    def with_context() -> Any:
        with D.context() as cid:
            return cid

    rec(tag + "with", with_context)


@scenario
def before_init(D: Any, rec: Recorder) -> None:
    _everything(D, rec, "")
    rec("ctor", D.DistAutogradContext)
    # Types are checked before the container is.
    for bad in ("x", 1.5, None, 2**63, -(2**63) - 1, [], b"3"):
        rec("retrieve %r" % (bad,), D._retrieve_context, bad)
        rec("release %r" % (bad,), D._release_context, bad)
    rec("is_valid -2**63", D._is_valid_context, -(2**63))
    rec("release True", D._release_context, True)
    # Threads see the same uninitialized container.
    _in_thread(lambda: _everything(D, rec, "thread "))


def _init_rules(D: Any, rec: Recorder, w: int) -> None:
    rec("init", D._init, w)
    rec("max_id", D._get_max_id)
    rec("debug", D._get_debug_info)
    c = rec("new", D._new_context)
    rec("current", D._current_context)
    rec("release", D._release_context, c._context_id())
    with D.context() as cid:
        rec.value("with id", cid)
        rec("retrieve", D._retrieve_context, cid)
    rec("init same", D._init, w)
    rec("init other", D._init, w ^ 1)
    rec("init 0", D._init, 0)
    rec("init 65535", D._init, 65535)
    rec("init -1", D._init, -1)
    rec("init 65536", D._init, 65536)
    rec("max_id again", D._get_max_id)
    rec("retrieve max_id", D._retrieve_context, D._get_max_id())
    rec("is_valid max_id", D._is_valid_context, D._get_max_id())
    rec("debug again", D._get_debug_info)


def _init_scenario(w: int) -> None:
    def fn(D: Any, rec: Recorder) -> None:
        _init_rules(D, rec, w)

    fn.__name__ = "init_worker_%d" % w
    scenario(fn)


for _w in (0, 3, 7, 32767, 32768, 40000, 65535):
    _init_scenario(_w)


@scenario
def init_out_of_range(D: Any, rec: Recorder) -> None:
    for w in (-1, 65536, -(2**63), 2**63 - 1, 2**40):
        rec("init %d" % w, D._init, w)
    rec("new", D._new_context)
    rec("init 7", D._init, 7)
    rec("max_id", D._get_max_id)


@scenario
def init_bool(D: Any, rec: Recorder) -> None:
    rec("init True", D._init, True)
    rec("max_id", D._get_max_id)
    rec("init 1", D._init, 1)
    rec("init False", D._init, False)
    rec("init Index(1)", D._init, Index(1))


@scenario
def init_decimal(D: Any, rec: Recorder) -> None:
    rec("init Decimal(7.9)", D._init, decimal.Decimal("7.9"))
    rec("max_id", D._get_max_id)


@scenario
def init_fraction(D: Any, rec: Recorder) -> None:
    rec("init Fraction(9, 2)", D._init, fractions.Fraction(9, 2))
    rec("max_id", D._get_max_id)


@scenario
def init_int_only(D: Any, rec: Recorder) -> None:
    rec("init IntOnly(5)", D._init, IntOnly(5))
    rec("max_id", D._get_max_id)


@scenario
def init_index(D: Any, rec: Recorder) -> None:
    rec("init Index(6)", D._init, Index(6))
    rec("max_id", D._get_max_id)


_BAD = [
    ("str", "x"),
    ("bytes", b"3"),
    ("float", 1.0),
    ("nan", float("nan")),
    ("None", None),
    ("list", [1]),
    ("complex", complex(3)),
    ("2**63", 2**63),
    ("-2**63-1", -(2**63) - 1),
    ("Index(2**70)", Index(2**70)),
    ("RaisingIndex", RaisingIndex()),
    ("FloatOnly", FloatOnly()),
    ("Decimal(nan)", decimal.Decimal("NaN")),
    ("Decimal(inf)", decimal.Decimal("Infinity")),
    ("c_int64", "c_int64"),
    ("object", object()),
]


@scenario
def argument_types(D: Any, rec: Recorder) -> None:
    import ctypes

    bads = [(label, ctypes.c_int64(5) if bad == "c_int64" else bad) for label, bad in _BAD]
    for label, bad in bads:
        rec("init " + label, D._init, bad)
    rec("init kwarg", lambda: D._init(worker_id=3))
    rec("init no arg", lambda: D._init())
    rec("init 2 args", lambda: D._init(3, 4))
    rec("init", D._init, 3)
    fns = {
        "retrieve": D._retrieve_context,
        "release": D._release_context,
        "is_valid": D._is_valid_context,
    }
    for name, fn in fns.items():
        for label, bad in bads:
            rec("%s %s" % (name, label), fn, bad)
        for label, good in [
            ("True", True),
            ("False", False),
            ("-2**63", -(2**63)),
            ("2**63-1", 2**63 - 1),
            ("-1", -1),
            ("Index(5)", Index(5)),
            ("IntOnly(6)", IntOnly(6)),
            ("Decimal(7.9)", decimal.Decimal("7.9")),
            ("Decimal(-7.9)", decimal.Decimal("-7.9")),
            ("Fraction(17, 2)", fractions.Fraction(17, 2)),
            ("IndexAndInt", IndexAndInt()),
            ("IntSubclass(12)", IntSubclass(12)),
        ]:
            rec("%s %s" % (name, label), fn, good)
        rec(name + " kwarg", lambda: fn(context_id=1))
        rec(name + " no arg", lambda: fn())
        rec(name + " 2 args", lambda: fn(1, 2))
    for name in ("_new_context", "_current_context", "_get_max_id", "_get_debug_info"):
        rec(name + " 1 arg", getattr(D, name), 1)
    c = D._new_context()
    for name in ("_context_id", "_known_worker_ids", "_send_functions", "_recv_functions"):
        rec(name + " 1 arg", getattr(c, name), 1)
    rec("context 1 arg", D.context, 1)
    rec("release", D._release_context, c._context_id())
    with D.context() as cid:  # still works after all that
        rec.value("with", cid)


@scenario
def context_ids_in_order(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    ids = []
    for _ in range(5):
        with D.context() as cid:
            ids.append(cid)
    rec.value("ids", ids)
    held = [rec("new %d" % i, D._new_context) for i in range(1)]
    rec("release", D._release_context, held[0]._context_id())
    for i in range(3):
        c = rec("new after %d" % i, D._new_context)
        rec("release after %d" % i, D._release_context, c._context_id())
    rec("retrieve next", D._retrieve_context, held[0]._context_id() + 4)
    rec("debug", D._get_debug_info)


@scenario
def context_manager(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    cm = D.context()
    cid = rec("enter", cm.__enter__)
    rec.value("attribute", cm.autograd_context)
    rec("current", D._current_context)
    rec("retrieve", D._retrieve_context, cid)
    rec("debug inside", D._get_debug_info)
    rec("exit", cm.__exit__, None, None, None)
    rec("retrieve after", D._retrieve_context, cid)
    rec("current after", D._current_context)
    rec("debug after", D._get_debug_info)
    rec("exit twice", cm.__exit__, None, None, None)
    rec("exit without enter", D.context().__exit__, None, None, None)
    rec.value("held after exit", cm.autograd_context)


@scenario
def context_manager_body_raises(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    ids = []

    def body() -> None:
        with D.context() as cid:
            ids.append(cid)
            raise Boom("in the body")

    rec("with raising", body)
    rec("retrieve", D._retrieve_context, ids[0])
    rec("current", D._current_context)
    rec("debug", D._get_debug_info)

    def again() -> int:
        with D.context() as cid:
            return cid

    rec("with again", again)


@scenario
def context_manager_release_inside(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)

    def body() -> None:
        with D.context() as cid:
            D._release_context(cid)
            rec("current inside", D._current_context)

    rec("with releasing", body)

    def body_raises() -> None:
        with D.context() as cid:
            D._release_context(cid)
            raise Boom("after release")

    try:
        body_raises()
    except BaseException as e:  # noqa: B902
        rec.value("raised", _exc(e))
        rec.value("raised context", _exc(e.__context__) if e.__context__ else None)
    rec("debug", D._get_debug_info)


@scenario
def context_manager_nested(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    outer = []

    def nested() -> None:
        with D.context() as a:
            outer.append(a)
            with D.context() as b:
                rec.value("inner", b)

    rec("nested", nested)
    rec("outer released", D._retrieve_context, outer[0])
    rec("debug", D._get_debug_info)


@scenario
def context_object(D: Any, rec: Recorder) -> None:
    rec("ctor before init", D.DistAutogradContext)
    rec("init", D._init, 3)
    rec("ctor", D.DistAutogradContext)
    rec("ctor args", D.DistAutogradContext, 1)
    c = D._new_context()
    cid = c._context_id()
    rec("id", c._context_id)
    rec("known", c._known_worker_ids)
    rec("send", c._send_functions)
    rec("recv", c._recv_functions)
    rec.value("known is set", type(c._known_worker_ids()) is set)
    rec.value("send is dict", type(c._send_functions()) is dict)
    rec.value("new set each time", c._known_worker_ids() is not c._known_worker_ids())
    rec.value("eq self", c == c)
    rec.value("eq current", D._current_context()._context_id() == cid)
    rec("lt", lambda: c < c)
    rec("setattr", setattr, c, "foo", 1)
    rec("getattr", getattr, c, "foo")
    rec("pickle", pickle.dumps, c)
    rec("copy", copy.copy, c)
    rec("deepcopy", copy.deepcopy, c)
    rec("weakref", lambda: weakref.ref(c)() is c)
    rec("hash", lambda: isinstance(hash(c), int))
    rec("release", D._release_context, cid)
    rec("id after release", c._context_id)
    rec("known after release", c._known_worker_ids)
    rec("send after release", c._send_functions)
    rec("retrieve after release", D._retrieve_context, cid)
    rec("is_valid after release", D._is_valid_context, cid)
    rec("release again", D._release_context, cid)
    del c
    rec("debug", D._get_debug_info)


@scenario
def release_same_thread(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    c = D._new_context()
    rec("has current", D._current_context)
    rec("release", D._release_context, c._context_id())
    rec("current after", D._current_context)
    d = rec("new after", D._new_context)
    # Releasing a context that is not the current one keeps the current id.
    e = D._get_max_id()
    rec("release unknown", D._release_context, e)
    rec("release -1", D._release_context, -1)
    with_ctx = []

    def other() -> None:
        with_ctx.append(D._new_context())

    _in_thread(other)
    rec("release other thread's", D._release_context, with_ctx[0]._context_id())
    rec("current still", D._current_context)
    rec("release current", D._release_context, d._context_id())
    rec("current gone", D._current_context)
    rec("debug", D._get_debug_info)


@scenario
def threads_own_current(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    a = rec("main new", D._new_context)
    made = []

    def t() -> None:
        rec("thread current", D._current_context)
        b = rec("thread new", D._new_context)
        made.append(b._context_id())
        rec("thread current after", D._current_context)
        rec("thread new again", D._new_context)
        rec("thread retrieve main's", D._retrieve_context, a._context_id())
        rec("thread id", b._context_id)

    _in_thread(t)
    rec("main current", D._current_context)
    rec("debug", D._get_debug_info)
    rec("main retrieve thread's", D._retrieve_context, made[0])
    # A thread that exits leaves its context in the container.
    rec("main release thread's", D._release_context, made[0])
    rec("main current after", D._current_context)

    def t2() -> None:
        rec("fresh thread current", D._current_context)
        with D.context() as cid:
            rec.value("fresh thread with", cid)

    _in_thread(t2)
    rec("debug after", D._get_debug_info)


@scenario
def threads_release_from_other(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 3)
    a = D._new_context()
    aid = a._context_id()
    _in_thread(lambda: rec("thread releases main's", D._release_context, aid))
    rec("main current stale", D._current_context)
    rec("main new while stale", D._new_context)
    rec("main with while stale", lambda: D.context().__enter__())
    rec("main retrieve", D._retrieve_context, aid)
    rec("main release", D._release_context, aid)
    rec("main current still stale", D._current_context)
    rec("held object", a._context_id)
    rec("debug", D._get_debug_info)
    # The stale thread can still work with contexts by id.
    b = [None]

    def t() -> None:
        b[0] = D._new_context()

    _in_thread(t)
    bid = b[0]._context_id()
    rec("retrieve other's", D._retrieve_context, bid)
    rec("is_valid other's", D._is_valid_context, bid)
    rec("release other's", D._release_context, bid)
    rec("debug after", D._get_debug_info)


@scenario
def threads_many(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 40000)
    ids: List[int] = []
    errors: List[Any] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker() -> None:
        try:
            D._current_context()
        except RuntimeError as e:
            with lock:
                errors.append(str(e))
        barrier.wait()
        for _ in range(25):
            with D.context() as cid:
                if D._current_context()._context_id() != cid:
                    errors.append("current is not the context's")
                with lock:
                    ids.append(cid)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.value("errors", sorted(set(errors)))
    rec.value("count", len(ids))
    rec.value("ids", sorted(ids))
    rec("debug", D._get_debug_info)
    rec("main current", D._current_context)


@scenario
def extreme_ids(D: Any, rec: Recorder) -> None:
    rec("init", D._init, 65535)
    for cid in (-(2**63), 2**63 - 1, -1, 0, 1, -(2**48)):
        rec("retrieve %d" % cid, D._retrieve_context, cid)
        rec("is_valid %d" % cid, D._is_valid_context, cid)
        rec("release %d" % cid, D._release_context, cid)
    with D.context() as cid:
        rec.value("first id", cid)
        rec("retrieve", D._retrieve_context, cid)
    rec("max_id", D._get_max_id)


# ---- The runner -------------------------------------------------------------


def _child(D_name: str, name: str, wfd: int) -> None:
    signal.alarm(SCENARIO_TIMEOUT_S)
    rec = Recorder()
    try:
        if D_name == "torch":
            import torch.distributed.autograd as D
        else:
            import distautograd as D
        SCENARIOS[name](D, rec)
        out = {"events": rec.events}
    except BaseException as e:  # noqa: B902 - a broken scenario is a result too
        import traceback

        out = {"events": rec.events, "harness_error": traceback.format_exc(), "exc": _exc(e)}
    if name.startswith("threads_"):
        out["events"] = renumbered(out["events"])
    data = json.dumps(out).encode()
    with os.fdopen(wfd, "wb") as f:
        f.write(data)


def run(backend: str, names: List[str]) -> Dict[str, Any]:
    """Plays each scenario in a forked child; returns {name: outcome}."""
    if backend == "torch":
        import torch.distributed.autograd  # noqa: F401 - paid once, before the forks
    elif backend != "distautograd":
        raise SystemExit("backend must be torch or distautograd, not %r" % backend)
    results: Dict[str, Any] = {}
    for name in names:
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                _child(backend, name, w)
            except BaseException:  # noqa: B902
                code = 3
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        if data:
            results[name] = json.loads(data)
        else:
            results[name] = {"events": [], "harness_error": "child died: wait status %d" % status}
        if status != 0:
            results[name]["wait_status"] = status
    return results


if __name__ == "__main__":
    backend = sys.argv[1]
    names = sys.argv[2:] or list(SCENARIOS)
    json.dump(run(backend, names), sys.stdout)
