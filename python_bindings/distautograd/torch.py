"""PyTorch's own distributed autograd, served by distautograd.

``distautograd-torch CMD ARGS...`` (or ``python -m distautograd.torch CMD
ARGS...``) runs CMD with the torch backend preloaded: every process it
starts that loads torch 1.13 or 2.6 (Debian 12's and 13's) keeps its distributed autograd contexts in
distautograd (``dist_autograd.backward``, the send/recv functions of every
RPC, the cleanup RPCs, ``torch.distributed.autograd.context()``), with no
change to the script. It works in front of ``torchrun`` too::

    distautograd-torch python train.py --epochs 3
    distautograd-torch torchrun --nproc_per_node 4 --redirects 2 --tee 2 train.py

(Debian's torchrun for torch 1.13 on Python 3.11 parses only 1 and 2 for
``--redirects`` and ``--tee``, whose default is 0, with or without the
backend.)

Debian 13's torch 2.6 is built without libuv, which its TCPStore uses by
default from 2.4 on: ``init_rpc`` through ``env://`` (MASTER_ADDR and
MASTER_PORT) fails there natively too, unless ``USE_LIBUV=0``. The launcher
sets ``USE_LIBUV=0`` for the command when torch is 2.x and it is unset.

Inside, :func:`active` says whether torch's container is distautograd, and
``torch.distributed.autograd._get_debug_info()`` shows distautograd's
figures (the fan-out's counters among them). Processes that never use
distributed autograd never load more than a few kilobytes of the backend.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from typing import List, Optional

from . import _process

__all__ = ["active", "library_path", "main", "TORCH_VERSIONS"]

#: The torch releases the backend serves (Debian 12's and 13's python3-torch).
TORCH_VERSIONS = _process.TORCH_VERSIONS

#: Names the backend's shim explicitly (else the package's folder, then the checkout's build/).
LIBRARY_ENV = "DISTAUTOGRAD_TORCH_LIBRARY"

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT_BUILD = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir, "build"))


class UsageError(Exception):
    """What the launcher refuses, with the message to show."""


def library_path() -> str:
    """The path of libdistautograd_torch.so, checked: beside it the
    implementation and libdistautograd. Raises UsageError saying what is
    missing."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        if not os.path.isfile(env):
            raise UsageError("%s=%r does not name a file" % (LIBRARY_ENV, env))
        shim = env
    else:
        tried = [os.path.join(d, _process.SHIM_NAME) for d in (_HERE, _CHECKOUT_BUILD)]
        found = [p for p in tried if os.path.isfile(p)]
        if not found:
            raise UsageError(
                "the torch backend is not built: looked for %s. Run `make` in the distautograd checkout "
                "(it needs libtorch-dev), or set %s" % (" and ".join(tried), LIBRARY_ENV))
        shim = found[0]
    shim = os.path.realpath(shim)
    folder = os.path.dirname(shim)
    if not os.path.isfile(os.path.join(folder, _process.SONAME)):
        raise UsageError("%s lacks %s beside it: the backend was built partly; run `make`" % (shim, _process.SONAME))
    if not any(os.path.isfile(os.path.join(folder, _process.impl_name(v))) for v in TORCH_VERSIONS):
        raise UsageError("%s has no implementation beside it (%s): the backend was built without libtorch-dev; "
                         "install libtorch-dev and run `make`"
                         % (shim, ", ".join(_process.impl_name(v) for v in TORCH_VERSIONS)))
    return shim


def served(version: str) -> Optional[str]:
    """The served release a torch version belongs to ("2.6.0+debian": "2.6"), or None."""
    for v in TORCH_VERSIONS:
        if version == v or version.startswith(v + "."):
            return v
    return None


def _torch_version() -> Optional[str]:
    """torch's version for this interpreter, read without importing torch
    (which takes a second), or None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                m = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""", f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return "unknown"


def check_torch() -> str:
    """Returns torch's version if the backend serves it, else raises UsageError."""
    v = _torch_version()
    served_list = " and ".join(TORCH_VERSIONS)
    if v is None:
        raise UsageError("torch is not installed for %s: the backend serves torch %s (Debian: apt-get install "
                         "python3-torch libtorch-dev)" % (sys.executable, served_list))
    if served(v) is None:
        raise UsageError("torch %s is installed for %s; the backend serves torch %s only. Run the command "
                         "without distautograd-torch (torch then keeps its own container)"
                         % (v, sys.executable, served_list))
    return v


def active() -> bool:
    """Whether torch's distributed autograd container is distautograd in this
    process: the backend is preloaded and serves this torch (it decides on
    torch's first container call; this makes that call if none was made, so
    it imports torch)."""
    shim = _process.shim_path()
    if shim is None:
        return False
    import ctypes

    import torch.distributed.autograd  # noqa: F401  (loads libtorch: the backend can decide)

    entry = getattr(ctypes.CDLL(None), _process.PROBE_SYMBOL)
    entry.restype = ctypes.c_int64
    entry.argtypes = []
    entry()  # currentContextId: harmless either way, and it makes the backend decide
    impl = _process.loaded_impl(os.path.dirname(shim))
    return impl is not None and bool(impl.dat_impl_active())


USAGE = """usage: distautograd-torch [--check] COMMAND [ARGS...]
       python -m distautograd.torch [--check] COMMAND [ARGS...]

Runs COMMAND with torch's distributed autograd served by distautograd
(LD_PRELOAD of the torch backend; every process COMMAND starts inherits it).
--check only checks that the backend is built and torch is %s, and prints
the library's path. With torch 2.x, USE_LIBUV=0 is set for COMMAND unless
set (Debian's torch 2.6 has no libuv for its TCPStore).""" % " or ".join(TORCH_VERSIONS)


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check_only = False
    while args and args[0].startswith("-"):
        a = args.pop(0)
        if a == "--":
            break
        if a in ("-h", "--help"):
            print(USAGE)
            return 0
        if a == "--check":
            check_only = True
            continue
        print("distautograd-torch: unknown option %s\n%s" % (a, USAGE), file=sys.stderr)
        return 2
    try:
        shim = library_path()
        version = check_torch()
    except UsageError as e:
        print("distautograd-torch: %s" % e, file=sys.stderr)
        return 2
    if check_only:
        print("%s (torch %s)" % (shim, version))
        return 0
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if shutil.which(args[0]) is None and not os.path.exists(args[0]):
        print("distautograd-torch: %s: command not found" % args[0], file=sys.stderr)
        return 127
    env = dict(os.environ)
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p and p != shim]
    env["LD_PRELOAD"] = " ".join([shim] + preload)
    if not version.startswith("1."):
        env.setdefault("USE_LIBUV", "0")
    os.execvpe(args[0], args, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
