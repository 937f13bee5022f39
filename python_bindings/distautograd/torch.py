"""PyTorch's own distributed autograd, served by distautograd.

``distautograd-torch CMD ARGS...`` (or ``python -m distautograd.torch CMD
ARGS...``) runs CMD with the torch backend preloaded: every process it
starts that loads a torch the backend serves (``SERVED_TORCH``) keeps its
distributed autograd contexts in distautograd (``dist_autograd.backward``, the send/recv functions of every
RPC, the cleanup RPCs, ``torch.distributed.autograd.context()``), with no
change to the script. It works in front of ``torchrun`` too::

    distautograd-torch /usr/bin/python3 train.py --epochs 3
    distautograd-torch torchrun --nproc_per_node 4 --redirects 2 --tee 2 train.py

(Debian's torchrun for torch 1.13 on Python 3.11 parses only 1 and 2 for
``--redirects`` and ``--tee``, whose default is 0, with or without the
backend.)

The launcher judges the command before it runs it (``_launch``): the
Python that command runs must have a served torch, else it says which
Python has one and runs nothing.

Inside, :func:`active` says whether torch's container is distautograd, and
``torch.distributed.autograd._get_debug_info()`` shows distautograd's
figures (the fan-out's counters among them). Processes that never use
distributed autograd never load more than a few kilobytes of the backend.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional, Tuple

from . import _launch, _process
from ._launch import SERVED_TORCH, UsageError, library_path

__all__ = ["active", "state", "library_path", "main", "SERVED_TORCH"]


def _instead() -> str:
    return "`distautograd-torch %s script.py`" % _launch.SYSTEM_PYTHON


def state() -> Tuple[bool, str]:
    """(whether torch's distributed autograd container is distautograd in
    this process, why not and what to run). Under the backend it makes
    torch's first container call if none was made, so it imports torch."""
    shim = _process.shim_path()
    if shim is None:
        try:
            library_path()
        except UsageError as e:
            return False, "not preloaded in this process, and %s" % e
        try:
            _, version = _launch.probe(sys.executable, dict(os.environ))
        except UsageError:
            version = None
        if version is None:
            return False, ("not preloaded in this process, and this Python (%s) has no torch: run the script "
                           "as %s" % (sys.executable, _instead()))
        if not _launch.served(version):
            return False, ("not preloaded in this process, and this Python's torch %s is not one the backend "
                           "serves (%s): run the script as %s" % (version, _launch.served_text(), _instead()))
        return False, ("not preloaded in this process: run the script as `distautograd-torch %s script.py`"
                       % sys.executable)
    import ctypes

    try:
        import torch
    except ImportError as e:
        return False, ("preloaded (%s), but torch does not import in this Python (%s: %s): run the script as %s"
                       % (shim, sys.executable, e, _instead()))
    version = getattr(torch, "__version__", "unknown")
    if not _launch.served(version):
        return False, ("preloaded, but torch %s is not one the backend serves (%s): torch keeps its own "
                       "container; run it without distautograd-torch, or as %s"
                       % (version, _launch.served_text(), _instead()))
    import torch.distributed.autograd  # noqa: F401  (loads libtorch: the backend can decide)

    entry = getattr(ctypes.CDLL(None), _process.PROBE_SYMBOL)
    entry.restype = ctypes.c_int64
    entry.argtypes = []
    entry()  # currentContextId: harmless either way, and it makes the backend decide
    # The implementation the shim loaded, if any (one per torch served).
    serving = False
    for path in _launch.impl_files(os.path.dirname(shim)):
        try:
            impl = ctypes.CDLL(path, mode=_process.RTLD_NOLOAD)
        except OSError:
            continue
        serving = serving or bool(impl.dat_impl_active())
    if not serving:
        return False, ("preloaded, but the backend refused this torch %s on its first container call (its "
                       "reason went to stderr once: \"distautograd-torch: ... NOT in use\")" % version)
    return True, "torch %s, %s" % (version, shim)


def active() -> bool:
    """Whether torch's distributed autograd container is distautograd in this
    process: the backend is preloaded and serves this torch (see state)."""
    if _process.shim_path() is None:
        return False
    return state()[0]


def main(argv: Optional[List[str]] = None) -> int:
    return _launch.main(argv)


if __name__ == "__main__":
    sys.exit(main())
