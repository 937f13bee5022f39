"""torch's own distributed-autograd test suites, composed as torch's
test/distributed/rpc/test_tensorpipe_agent.py composes its suites
(generate_tests over the TensorPipe fixture): DistAutogradTest,
TensorPipeAgentDistAutogradTest, DistOptimizerTest and JitDistAutogradTest,
102 tests in torch 1.13 and 2.6. Each test spawns its worker processes; run
under the backend (LD_PRELOAD, inherited by every worker), each worker
records at exit whether the backend served torch's container there, and
the run fails unless every worker's record says it did.

usage: LD_PRELOAD=build/libdistautograd_torch.so PYTHONPATH=python_bindings \\
       python3 torch_backend/tests/torch_suites.py [--native] [unittest args]

--native runs them without the backend (then no worker may be served).
Not a unittest module of make test (it takes 15-30 minutes): make
test-torch-versions runs it for each served torch.
"""
import glob
import json
import multiprocessing
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import unittest

RECORDS_ENV = "DISTAUTOGRAD_SUITE_RECORDS"
NATIVE = "--native" in sys.argv
if NATIVE:
    sys.argv.remove("--native")
# Debian 13's torch 2.6 has no libuv (env:// TCPStores need this; natively too).
os.environ.setdefault("USE_LIBUV", "0")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.rpc.dist_autograd_test import (  # noqa: E402
    DistAutogradTest,
    TensorPipeAgentDistAutogradTest,
)
from torch.testing._internal.distributed.rpc.dist_optimizer_test import DistOptimizerTest  # noqa: E402
from torch.testing._internal.distributed.rpc.jit.dist_autograd_test import JitDistAutogradTest  # noqa: E402
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (  # noqa: E402
    TensorPipeRpcAgentTestFixture,
)
from torch.testing._internal.distributed.rpc_utils import generate_tests  # noqa: E402

SUITES = [DistAutogradTest, DistOptimizerTest, JitDistAutogradTest, TensorPipeAgentDistAutogradTest]
globals().update(generate_tests("TensorPipe", TensorPipeRpcAgentTestFixture, SUITES, __name__))


def _record() -> None:
    """At a worker's exit: whether the backend served its container."""
    import distautograd.torch as dt

    rec = {"pid": os.getpid(), "preloaded": "libdistautograd_torch" in os.environ.get("LD_PRELOAD", ""),
           "active": dt.active()}
    with open(os.path.join(os.environ[RECORDS_ENV], "%d.json" % os.getpid()), "w") as f:
        json.dump(rec, f)


if __name__ == "__mp_main__" and os.environ.get(RECORDS_ENV):
    # A spawned worker: multiprocessing runs these finalizers as the process ends.
    multiprocessing.util.Finalize(None, _record, exitpriority=10)


def main() -> int:
    records = tempfile.mkdtemp(prefix="dat-suite-")
    os.environ[RECORDS_ENV] = records
    tests = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__]).countTestCases()
    print("torch_suites: %d tests (%s), %s" % (tests, ", ".join(s.__name__ for s in SUITES),
                                               "natively" if NATIVE else "under the backend"), flush=True)
    code = 0
    try:
        run_tests()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    recs = []
    for path in glob.glob(os.path.join(records, "*.json")):
        with open(path) as f:
            recs.append(json.load(f))
    shutil.rmtree(records, True)
    served = sum(1 for r in recs if r["active"])
    print("torch_suites: %d worker processes recorded, %d served by distautograd" % (len(recs), served), flush=True)
    if not recs:
        print("torch_suites: FAIL: no worker process recorded", flush=True)
        return code or 3
    if served != (0 if NATIVE else len(recs)):
        print("torch_suites: FAIL: %d of %d workers %s" % (
            served if NATIVE else len(recs) - served, len(recs),
            "served though native" if NATIVE else "NOT served by distautograd"), flush=True)
        return code or 3
    return code


if __name__ == "__main__":
    if NATIVE:
        os.environ.pop("LD_PRELOAD", None)
    sys.exit(main())
