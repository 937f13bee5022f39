"""PyTorch's own distributed autograd, served by distautograd.

``distautograd-torch CMD ARGS...`` (or ``python -m distautograd.torch CMD
ARGS...``) runs CMD with the torch backend preloaded: every process it
starts that loads torch 1.13 keeps its distributed autograd contexts in
distautograd (``dist_autograd.backward``, the send/recv functions of every
RPC, the cleanup RPCs, ``torch.distributed.autograd.context()``), with no
change to the script. It works in front of ``torchrun`` too::

    distautograd-torch python train.py --epochs 3
    distautograd-torch torchrun --nproc_per_node 4 --redirects 2 --tee 2 train.py

(Debian's torchrun for torch 1.13 on Python 3.11 parses only 1 and 2 for
``--redirects`` and ``--tee``, whose default is 0, with or without the
backend.)

Inside, :func:`active` says whether torch's container is distautograd, and
:func:`debug_info` gives distautograd's figures (the fan-out's counters, the
libtorch context objects made and alive...).
``torch.distributed.autograd._get_debug_info()`` stays torch's own: its two
keys, with torch's meaning. Processes that never use distributed autograd
never load more than a few kilobytes of the backend.
"""
from __future__ import annotations

import importlib.util
import os
import re
import json
import shutil
import sys
from typing import Dict, List, Optional

from . import _process

__all__ = ["active", "debug_info", "NotServing", "library_path", "main", "TORCH_VERSION"]

#: The torch the backend serves (Debian's python3-torch / libtorch-dev).
TORCH_VERSION = "1.13"

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
    for name in (_process.IMPL_NAME, _process.SONAME):
        if not os.path.isfile(os.path.join(folder, name)):
            raise UsageError("%s lacks %s beside it: the backend was built without libtorch-dev, or partly; "
                             "install libtorch-dev and run `make`" % (shim, name))
    return shim


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
    if v is None:
        raise UsageError("torch is not installed for %s: the backend serves torch %s (Debian: apt-get install "
                         "python3-torch libtorch-dev)" % (sys.executable, TORCH_VERSION))
    if not (v == TORCH_VERSION or v.startswith(TORCH_VERSION + ".")):
        raise UsageError("torch %s is installed for %s; the backend serves torch %s only. Run the command "
                         "without distautograd-torch (torch then keeps its own container)"
                         % (v, sys.executable, TORCH_VERSION))
    return v


class NotServing(RuntimeError):
    """:func:`debug_info` in a process where the backend does not serve
    torch's distributed autograd container; the message says why."""


def _serving_impl():
    """The backend's implementation if it serves torch's container in this
    process, else the reason it does not (a str). Imports torch and makes
    torch's first container call if none was made: the backend decides on
    it."""
    shim = _process.shim_path()
    if shim is None:
        return ("the torch backend is not preloaded in this process (run it under distautograd-torch, or with "
                "LD_PRELOAD naming %s)" % _process.SHIM_NAME)
    import ctypes

    import torch.distributed.autograd  # noqa: F401  (loads libtorch: the backend can decide)

    entry = getattr(ctypes.CDLL(None), _process.PROBE_SYMBOL)
    entry.restype = ctypes.c_int64
    entry.argtypes = []
    entry()  # currentContextId: harmless either way, and it makes the backend decide
    try:
        impl = ctypes.CDLL(os.path.join(os.path.dirname(shim), _process.IMPL_NAME), mode=_process.RTLD_NOLOAD)
    except OSError:
        impl = None
    if impl is None or not impl.dat_impl_active():
        return ("the torch backend (%s) is preloaded but torch keeps its own container in this process: the "
                "backend said why on stderr" % shim)
    return impl


def active() -> bool:
    """Whether torch's distributed autograd container is distautograd in this
    process: the backend is preloaded and serves this torch (it decides on
    torch's first container call; this makes that call if none was made, so
    it imports torch)."""
    return not isinstance(_serving_impl(), str)


def _backend_figures(impl) -> Dict[str, int]:
    import ctypes

    fn = impl.dat_impl_debug_info
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    length = ctypes.c_size_t()
    cap = 256
    while True:
        buf = ctypes.create_string_buffer(cap)
        rc = fn(buf, cap, ctypes.byref(length))
        if rc == 1:
            raise NotServing("the torch backend does not serve torch's container in this process")
        if rc != 0:
            raise RuntimeError("dat_impl_debug_info failed (%d)" % rc)
        if length.value < cap:
            return json.loads(buf.value.decode("utf-8"))
        cap = length.value + 1


def debug_info() -> Dict[str, int]:
    """distautograd's figures for torch's distributed autograd in this process,
    which the backend serves: a dict of ints, keys sorted. (torch's own
    ``torch.distributed.autograd._get_debug_info()`` has torch's two keys
    only, as natively.)

    torch's figures, as ``_get_debug_info()`` gives them:

    - ``num_autograd_contexts``: contexts in the container (distautograd's).
    - ``num_current_backward_passes``: backward passes torch's engine is
      running.

    libdistautograd's, from its C function dac_debug_info (include/distautograd.h):

    - ``cleanup_sent``: cleanup messages (one per known worker of a released
      context) handed to torch's RPC agent; ``cleanup_retried``: attempts
      after one the agent could not take (no agent running yet, say);
      ``cleanup_failed``: given up on after the last attempt;
      ``cleanup_dropped``: refused, the queue being full;
      ``cleanup_skipped``: not sent, no sender set; ``cleanup_pending``:
      queued or awaiting a retry, now.
    - ``max_contexts``: the cap (``DISTAUTOGRAD_MAX_CONTEXTS``; 0: none);
      ``refused_contexts``: creations refused by it.
    - ``live_handles``: references to contexts held through the C ABI now;
      ``uncounted_handles``: those held uncounted.
    - ``go_heap_bytes``: the library's Go heap, live bytes at the last
      collection.

    The backend's own:

    - ``torch_cleanup_handed``: cleanup messages torch's agent accepted (as
      ``cleanup_sent``); ``torch_cleanup_delivered``: those the receiving
      worker acknowledged; ``torch_cleanup_failed``: those whose send torch
      finally reported failed (each also logged on stderr, as natively).
      The rest are still being sent (torch retries a failed send 20 times,
      backing off from 1 s).
    - ``torch_contexts_made``: libtorch context objects built;
      ``torch_contexts_alive``: those not yet destroyed (held by a live
      context, or by torch: its engine, a Python object).
    - ``torch_native_contexts``: what libtorch's own container map holds
      (0: every context is distautograd's).

    The three groups are read one after another, not as one snapshot.
    Raises :class:`NotServing` (a RuntimeError) when the backend does not
    serve torch's container in this process (not preloaded, or torch kept
    native: the message says which), and torch's RuntimeError when
    distributed autograd is not initialized, as ``_get_debug_info()`` does.
    It imports torch.
    """
    impl = _serving_impl()
    if isinstance(impl, str):
        raise NotServing(impl)
    import torch.distributed.autograd as dist_autograd

    from . import _lib

    info = dict(dist_autograd._get_debug_info())
    for key, value in _lib.debug_info().items():
        info.setdefault(key, value)
    info.update(_backend_figures(impl))
    return dict(sorted(info.items()))


USAGE = """usage: distautograd-torch [--check] COMMAND [ARGS...]
       python -m distautograd.torch [--check] COMMAND [ARGS...]

Runs COMMAND with torch's distributed autograd served by distautograd
(LD_PRELOAD of the torch backend; every process COMMAND starts inherits it).
--check only checks that the backend is built and torch is %s, and prints
the library's path.""" % TORCH_VERSION


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
    os.execvpe(args[0], args, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
