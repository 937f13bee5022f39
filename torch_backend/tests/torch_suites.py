"""torch's own distributed-autograd test suites, composed as torch's
test/distributed/rpc/test_tensorpipe_agent.py composes them (which
Debian's python3-torch does not ship; the suites it mixes are in
torch.testing._internal): each suite with the TensorPipe agent's fixture.

usage: torch_suites.py [UNITTEST ARGS] [Class.test_name ...]
    e.g. torch_suites.py TensorPipeDistAutogradTest.test_debug_info

Runs under the torch backend as a user would: LD_PRELOAD of
build/libdistautograd_torch.so, inherited by the worker processes each test
spawns. With DISTAUTOGRAD_SUITE_SERVED=DIR, every worker process writes a
file of its own in DIR (named from its pid) holding 1 if the backend served
torch's container in it, else 0 (distautograd.torch.active(), after its
test ran, passed or not).
"""
import os
import sys
import unittest

try:
    import expecttest  # noqa: F401
except ImportError:
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_standin"))

from torch.testing._internal.distributed.rpc.dist_autograd_test import (
    DistAutogradTest,
    TensorPipeAgentDistAutogradTest,
)
from torch.testing._internal.distributed.rpc.dist_optimizer_test import DistOptimizerTest
from torch.testing._internal.distributed.rpc.jit.dist_autograd_test import JitDistAutogradTest
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (
    TensorPipeRpcAgentTestFixture,
)
from torch.testing._internal.distributed.rpc_utils import generate_tests

SUITES = [DistAutogradTest, DistOptimizerTest, JitDistAutogradTest, TensorPipeAgentDistAutogradTest]
SERVED_ENV = "DISTAUTOGRAD_SUITE_SERVED"


def _note_served(run_test):
    """Wraps MultiProcessTestCase.run_test (which runs in each worker) to
    record whether the backend served that worker."""

    def wrapped(self, test_name, parent_pipe):
        try:
            run_test(self, test_name, parent_pipe)
        finally:
            folder = os.environ.get(SERVED_ENV)
            if folder:
                import tempfile

                import distautograd.torch

                # A file of its own (a later worker may get the same pid).
                fd, _ = tempfile.mkstemp(prefix="%d-" % os.getpid(), dir=folder)
                with os.fdopen(fd, "w") as f:
                    f.write("1" if distautograd.torch.active() else "0")

    return wrapped


_classes = generate_tests("TensorPipe", TensorPipeRpcAgentTestFixture, SUITES, __name__)
for _cls in _classes.values():
    _cls.run_test = _note_served(_cls.run_test)
globals().update(_classes)

if __name__ == "__main__":
    unittest.main(module=__name__, argv=sys.argv)
