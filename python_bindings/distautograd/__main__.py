"""``python -m distautograd``: what to know first about this install.

The version, the library file that was loaded and how it was found, whether
the torch backend is active (and if not, why and what to run), which
changes of Go's runtime the library was built with (docs/go-runtime.md),
and the debug information of a container initialized for worker 0 in this
short-lived process: the library's, or, run under the torch backend
(``distautograd-torch python -m distautograd``),
distautograd.torch.debug_info()'s, which adds torch's figures and the
backend's own, and the contexts it holds (distautograd.torch.contexts()).
Exit status 0 when the library loaded and answered. Where it does not
load, the package (imported before this module) says why in one line on
stderr and exits 1, without a traceback (``_run_as_module``, Python 3.10
on: it reads ``sys.orig_argv``).
"""
from __future__ import annotations

import json
import os
import sys
from types import ModuleType
from typing import Dict, List, Optional, Tuple


def _found_by(path: str) -> str:
    from . import _lib

    if os.environ.get(_lib.LIBRARY_ENV):
        return "$%s" % _lib.LIBRARY_ENV
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.dirname(os.path.abspath(path)) == here:
        return "the package's own folder"
    return "the checkout's build/ (PYTHONPATH use)"


def _describe_path(path: str) -> str:
    real = os.path.realpath(path)
    return path if real == os.path.abspath(path) else "%s -> %s" % (path, real)


def _torch_backend() -> Tuple[str, Optional[ModuleType]]:
    """The backend's state in words, and distautograd.torch when it serves."""
    import importlib

    try:
        backend = importlib.import_module("distautograd.torch")
    except ImportError as e:
        if getattr(e, "name", None) == "distautograd.torch":
            return "not available (this package has no distautograd.torch)", None
        return "not available (importing distautograd.torch failed: %s)" % e, None
    try:
        on, why = backend.state()
    except Exception as e:  # the report must come out whatever the backend does
        return "unknown (distautograd.torch raised %s: %s)" % (type(e).__name__, e), None
    if not on:
        return "inactive: %s" % why, None
    return "active (%s)" % why, backend


GO_RUNTIME_PREFIX = "go_runtime_"


def go_runtime_changes(info: Dict[str, int]) -> str:
    """The changes of Go's runtime the library was built with, from
    dac_debug_info's go_runtime_* keys (1: taken, 0: not)."""
    taken = sorted(k[len(GO_RUNTIME_PREFIX):].replace("_", "-") for k, v in info.items()
                   if k.startswith(GO_RUNTIME_PREFIX) and v == 1)
    left = sorted(k[len(GO_RUNTIME_PREFIX):].replace("_", "-") for k, v in info.items()
                  if k.startswith(GO_RUNTIME_PREFIX) and v != 1)
    if not taken and not left:
        return "unknown (a build made without the Makefile)"
    if not taken:
        return "none: Go's runtime as it is (not applied: %s)" % ", ".join(left)
    return "%s%s" % (", ".join(taken), " (not applied: %s)" % ", ".join(left) if left else "")


def report() -> List[str]:
    import distautograd as D
    from . import _lib

    backend_state, backend = _torch_backend()
    lines = [
        "distautograd %s" % D.__version__,
        "package:       %s" % os.path.dirname(os.path.abspath(D.__file__)),
        "library:       %s" % _describe_path(_lib.PATH),
        "  found in:    %s" % _found_by(_lib.PATH),
        "python:        %s %s" % (sys.executable, sys.version.split()[0]),
        "torch backend: %s" % backend_state,
    ]
    # The container of this fresh process is not initialized yet, and the
    # debug information needs one: worker 0 here, which nothing else sees.
    # Under the backend it is torch's container too.
    read = _lib.debug_info if backend is None else backend.debug_info
    source = "" if backend is None else "distautograd.torch.debug_info(), "
    try:
        _lib.debug_info()
        lines.append("debug info (%sthis process):" % source)
    except D.DistAutogradError as e:
        if e.status != D.Status.ERR_NOT_INITIALIZED:
            raise
        D._init(0)
        lines.append("debug info (%sthis process, after _init(0)):" % source)
    info = read()
    lines.insert(len(lines) - 1, "go runtime:    %s" % go_runtime_changes(info))
    lines += ["  %s" % line for line in json.dumps(info, indent=2, sort_keys=True).splitlines()]
    if backend is not None:
        held = backend.contexts()
        lines.append("contexts (distautograd.torch.contexts(), this process): %d" % len(held))
        lines += ["  %s" % json.dumps(c, sort_keys=True) for c in held]
    return lines


def main() -> int:
    print("\n".join(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
