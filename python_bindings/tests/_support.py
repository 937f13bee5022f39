"""What the tests share: paths, the in-process container, subprocess helpers.

The container is a process singleton: the tests that run in the unittest
process share one, initialized for worker 3 by init(); whatever needs another
worker id, or an uninitialized container, runs in a child process
(run_python).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, Optional

TESTS = os.path.dirname(os.path.abspath(__file__))
BINDINGS = os.path.dirname(TESTS)
ROOT = os.path.dirname(BINDINGS)
BUILD_LIB = os.path.join(ROOT, "build", "libdistautograd.so")
#: The library's testing build (make testing-lib): its dactest_* hooks.
TESTING_LIB = os.path.join(ROOT, "build", "testing", "libdistautograd.so")

WORKER = 3
FIRST_ID = 3 << 48  # 844424930131968


def in_ci() -> bool:
    """CI=true: a test that cannot run here is a failure, not a skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def loud_skip(test: Any, what: str) -> None:
    """Skips the test, saying so on stderr; under CI=true, fails it instead."""
    msg = "%s: %s" % (test.id(), what)
    if in_ci():
        test.fail("CI=true and " + msg)
    sys.stderr.write("\n" + "!" * 72 + "\n!! SKIPPED " + msg + "\n" + "!" * 72 + "\n")
    test.skipTest(what)


def init() -> Any:
    """Returns distautograd, its container initialized for WORKER."""
    import distautograd

    distautograd._init(WORKER)
    return distautograd


def child_env(**overrides: Optional[str]) -> Dict[str, str]:
    """The environment of a child that imports distautograd from the checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = BINDINGS
    env.setdefault("DISTAUTOGRAD_LIBRARY", BUILD_LIB)
    env["GLOG_minloglevel"] = "2"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(code: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
               python: str = sys.executable, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter; returns the finished process."""
    return subprocess.run(
        [python, "-c", textwrap.dedent(code)],
        env=env if env is not None else child_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json(test: Any, code: str, **kwargs: Any) -> Any:
    """Runs code, which prints one JSON value last, and returns that value."""
    p = run_python(code, **kwargs)
    test.assertEqual(p.returncode, 0, "child failed:\n" + p.stdout + p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


#: The Python that has torch, the oracle: $DISTAUTOGRAD_TORCH_PYTHON, else
#: Debian's /usr/bin/python3 (python3-torch), else this one.
TORCH_PYTHON = os.environ.get("DISTAUTOGRAD_TORCH_PYTHON") or (
    "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
)


def torch_problem(module: str) -> Optional[str]:
    """Returns why torch's ``module`` (e.g. "torch.distributed.rpc") cannot
    serve as the oracle with TORCH_PYTHON, or None if it can."""
    try:
        p = subprocess.run(
            [TORCH_PYTHON, "-c", "import %s as m; assert m.is_available()" % module],
            capture_output=True, text=True, timeout=120, env=child_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run %s: %s" % (TORCH_PYTHON, e)
    if p.returncode != 0:
        return "%s is not usable with %s:\n%s" % (module, TORCH_PYTHON, p.stderr[-2000:])
    return None
