"""The launcher of the torch backend (``distautograd-torch CMD ARGS...``).

It judges the command it is about to run, not the Python it runs in: the
interpreter CMD resolves to (through PATH, venvs, conda, or a pyenv-style
shim: that interpreter itself is asked), or for a program such as torchrun
the interpreter its ``#!`` line names. When that interpreter has no torch,
or a torch the backend does not serve, it says so in one line with what to
run instead, and runs nothing. A command that is not a Python program
(a shell script, a binary) runs unjudged: the backend's own check, on
torch's first container call, still keeps an unserved torch native.
Once the first process of the job is served, it says so on stderr, once
for the job (watch_served; DISTAUTOGRAD_QUIET=1 silences it).

It needs the standard library only and imports nothing of the package
(importing the package loads libdistautograd), so that ``make install``
can install it beside ``_process`` as the ``distautograd-torch`` script.
"""
from __future__ import annotations

import difflib
import glob
import json
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

try:
    from . import _process
except ImportError:  # the installed distautograd-torch script: _process lies beside
    import _process  # type: ignore[no-redef]

#: The torch versions the backend serves (a version is served when it is one
#: of these or starts with one and a dot). The one list: the launcher, `python
#: -m distautograd`, the tests and the docs' checks read it (torch_backend/
#: symbols.h's DAT_TORCH_VERSIONS, the shim's, is the same: a test ties the two).
SERVED_TORCH = ("1.13", "2.6")

#: Names the backend's shim explicitly (else the launcher's library folder,
#: the package's folder, the checkout's build/).
LIBRARY_ENV = "DISTAUTOGRAD_TORCH_LIBRARY"

#: The Python that Debian's python3-torch installs torch for: suggested when
#: the command's own Python lacks a served torch and this one has it.
SYSTEM_PYTHON = "/usr/bin/python3"

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT_BUILD = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir, "build"))

#: Run in the command's interpreter: where its torch is and which version,
#: read from torch/version.py without importing torch (a second or more).
_PROBE = r"""
import importlib.util, json, os, re, sys
out = {"executable": sys.executable, "prefix": os.path.realpath(sys.prefix), "torch": None}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    out["torch"] = "unknown"
    for folder in spec.submodule_search_locations:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                m = re.search(r'''__version__\s*=\s*['"]([^'"]+)['"]''', f.read())
        except OSError:
            continue
        if m:
            out["torch"] = m.group(1)
            break
print(json.dumps(out))
"""

_PYTHON_NAME = re.compile(r"^python[0-9.]*$")

#: The launcher as the user typed it, for the commands its messages suggest.
PROG = "distautograd-torch"


class UsageError(Exception):
    """What the launcher refuses, with the one line to show."""


#: The int64_t bound of DISTAUTOGRAD_REAP_IDLE_MS (its nanoseconds fit).
_REAP_MS_MAX = (2**63 - 1) // 1000000
#: The signals DISTAUTOGRAD_CONTEXTS_SIGNAL names, and those it may never
#: take by number (the runtime's, the host's faults, job control).
_SIGNAL_NAMES = {"USR1": 10, "USR2": 12, "HUP": 1, "WINCH": 28, "PWR": 30}
_SIGNALS_REFUSED = {9, 19, 11, 7, 8, 4, 27, 23, 13, 17}  # KILL STOP SEGV BUS FPE ILL PROF URG PIPE CHLD
_SIGRTMAX = 64


def _int_in(text: str, lo: int, hi: int) -> bool:
    return re.fullmatch(r"[+-]?[0-9]+", text) is not None and lo <= int(text) <= hi


def _signal_ok(text: str) -> bool:
    if text in ("0", "off", "none"):
        return True
    name = text[3:] if text.startswith("SIG") else text
    if name in _SIGNAL_NAMES:
        return True
    return _int_in(text, 1, _SIGRTMAX) and int(text) not in _SIGNALS_REFUSED


#: The backend's settings, each with what it accepts (read by the backend
#: when it starts: torch_backend/impl.cpp, read_settings, which takes the
#: same values: test_backend's TestSettings ties the two). docs/torch.md
#: says what each does. A bad value is refused before the job starts.
SETTINGS = {
    "DISTAUTOGRAD_REAP_IDLE_MS": ("a positive number of ms", lambda v: _int_in(v, 1, _REAP_MS_MAX)),
    "DISTAUTOGRAD_MAX_CONTEXTS": ("a count >= 0", lambda v: _int_in(v, 0, 2**63 - 1)),
    "DISTAUTOGRAD_DEAD_WORKERS": ("0 or 1", lambda v: v in ("0", "1")),
    "DISTAUTOGRAD_CONTEXTS_SIGNAL": (
        "a signal the backend may take (USR1, USR2, HUP, WINCH, PWR, a number, or off)", _signal_ok),
}


#: The launcher's own: DISTAUTOGRAD_QUIET=1 keeps it from saying, once a
#: process of the job is served, that the backend serves the job.
QUIET_ENV = "DISTAUTOGRAD_QUIET"
LAUNCHER_SETTINGS = {
    QUIET_ENV: ("0 or 1", lambda v: v in ("0", "1")),
}


def check_settings(env: Dict[str, str]) -> None:
    """Refuses the first bad value of a setting in env, the backend's or
    the launcher's, and a DISTAUTOGRAD_* name that is a setting's name
    misspelt, which the job would ignore (UsageError: its one line). An
    empty value is the default, as unset. Other DISTAUTOGRAD_* names
    (DISTAUTOGRAD_LIBRARY, a script's own) pass: they are not settings."""
    settings = {**SETTINGS, **LAUNCHER_SETTINGS}
    for name, (what, ok) in settings.items():
        value = env.get(name, "")
        if value and not ok(value):
            raise UsageError("%s=%s is not %s" % (name, value, what))
    for name in sorted(env):
        if name.startswith("DISTAUTOGRAD_") and name not in settings:
            near = difflib.get_close_matches(name, settings, n=1, cutoff=0.8)
            if near:
                raise UsageError("%s is not a setting: %s?" % (name, near[0]))


#: Names to the backend's shim the abstract socket (Linux's, no file) that
#: the launcher's watcher listens on (torch_backend/symbols.h:
#: DAT_NOTIFY_ENV, the same name).
NOTIFY_ENV = "DISTAUTOGRAD_TORCH_NOTIFY"

#: What the watcher prints, once a job, when the first of its processes is served.
SERVED_LINE = ("distautograd-torch: torch %s's distributed autograd is served by distautograd "
               "(first in process %d; " + QUIET_ENV + "=1 hides this line)")

_UCRED = struct.Struct("iII")  # SCM_CREDENTIALS: pid, uid, gid


def _watch(sock: socket.socket, job: int) -> None:
    """The watcher: waits for the first served process of the job (a
    datagram from the shim, the torch version, sent by a process of this
    user), prints SERVED_LINE on stderr and returns; returns as well when
    the job's first process (the launcher's, after its exec) has ended
    with nothing heard. Holds nothing of the job but stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is the job's to take
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    lo = 3
    for fd in sorted((sock.fileno(), job)):
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, os.sysconf("SC_OPEN_MAX"))
    while True:
        ready = select.select([sock, job], [], [])[0]
        if sock not in ready:
            return  # the job has ended: no datagram is queued
        data, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(_UCRED.size))
        for level, kind, cred in ancillary:
            if (level, kind) != (socket.SOL_SOCKET, socket.SCM_CREDENTIALS) or len(cred) < _UCRED.size:
                continue
            pid, uid, _ = _UCRED.unpack(cred[:_UCRED.size])
            version = data.decode("ascii", "replace")
            if uid == os.getuid() and version in SERVED_TORCH:
                os.write(2, (SERVED_LINE % (version, pid) + "\n").encode())
                return


def watch_served(env: Dict[str, str]) -> None:
    """Has the job say once on stderr that the backend serves it: a
    watcher process, detached (forked twice: no child of the command),
    listens on an abstract socket named in env[NOTIFY_ENV], and prints
    SERVED_LINE on the first datagram the shim sends from a served
    process. It exits then, or when the launcher's process (the command,
    after exec) ends; the socket goes with it, and the later served
    processes find no one listening. Nothing is left on disk. Quiet
    (QUIET_ENV=1), or where Linux cannot do it: nothing is set up."""
    env.pop(NOTIFY_ENV, None)
    if env.get(QUIET_ENV) == "1" or not hasattr(os, "pidfd_open"):
        return
    name = "distautograd-torch-%d-%s" % (os.getpid(), secrets.token_hex(8))
    try:
        job = os.pidfd_open(os.getpid())
    except OSError:
        return
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        os.close(job)
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.bind("\0" + name)
        child = os.fork()
        if child == 0:
            try:
                if os.fork() == 0:
                    _watch(sock, job)
            finally:
                os._exit(0)  # never back into the launcher, whatever happened
        try:
            os.waitpid(child, 0)
        except ChildProcessError:
            pass  # SIGCHLD ignored: reaped already
    except OSError:
        return
    finally:
        sock.close()
        os.close(job)
    env[NOTIFY_ENV] = name


def served(version: Optional[str]) -> bool:
    return bool(version) and any(version == v or version.startswith(v + ".") for v in SERVED_TORCH)


def served_text() -> str:
    return " or ".join(SERVED_TORCH)


def impl_files(folder: str) -> List[str]:
    """The backend's implementations in folder: one per torch it was built for."""
    return sorted(glob.glob(os.path.join(folder, _process.IMPL_PREFIX + "*.so")))


def library_path(library_dir: Optional[str] = None) -> str:
    """The path of the backend's shim, checked: beside it an implementation
    and libdistautograd. Raises UsageError saying what is missing."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        if not os.path.isfile(env):
            raise UsageError("%s=%r does not name a file" % (LIBRARY_ENV, env))
        shim = env
    else:
        tried = [os.path.join(d, _process.SHIM_NAME) for d in (library_dir, _HERE, _CHECKOUT_BUILD) if d]
        found = [p for p in tried if os.path.isfile(p)]
        if not found:
            raise UsageError(
                "the torch backend is not built: looked for %s. Run `make` in the distautograd checkout "
                "(it needs libtorch-dev), or set %s" % (" and ".join(tried), LIBRARY_ENV))
        shim = found[0]
    shim = os.path.realpath(shim)
    folder = os.path.dirname(shim)
    if not impl_files(folder):
        raise UsageError("%s lacks %s beside it: the backend was built without libtorch-dev, or partly; "
                         "install libtorch-dev and run `make`" % (shim, _process.IMPL_PREFIX + "<torch>.so"))
    if not os.path.isfile(os.path.join(folder, _process.SONAME)):
        raise UsageError("%s lacks %s beside it: run `make` (or `make install`) again" % (shim, _process.SONAME))
    return shim


def _shebang(path: str) -> Optional[List[str]]:
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def python_of(command: str, env: Dict[str, str]) -> Optional[str]:
    """The interpreter a command runs Python in, as a path to run, or None
    for a command that is not a Python program. A command named python*
    is its own interpreter (a venv's, conda's, or a shim that execs one:
    running it runs what the command will); any other is judged by the
    interpreter its #! line names, through `env` where it says so."""
    if _PYTHON_NAME.match(os.path.basename(command)):
        return command
    line = _shebang(command)
    if not line:
        return None
    interp = line[0]
    if os.path.basename(interp) == "env":
        rest = [a for a in line[1:] if not a.startswith("-") and "=" not in a]
        if not rest:
            return None
        interp = shutil.which(rest[0], path=env.get("PATH", os.defpath)) or rest[0]
    return interp if _PYTHON_NAME.match(os.path.basename(interp)) else None


def probe(python: str, env: Dict[str, str]) -> Tuple[str, Optional[str]]:
    """(the interpreter's sys.executable, its torch version or None): asked
    of the interpreter itself, in the environment the command will get."""
    return _probe(python, env)[:2]


def _probe(python: str, env: Dict[str, str]) -> Tuple[str, Optional[str], str]:
    try:
        p = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError("cannot run %s to see which torch it has: %s" % (python, e))
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise UsageError("%s failed to start (exit %d): %s" % (python, p.returncode,
                                                               (p.stderr.strip().splitlines() or ["no output"])[-1]))
    out = json.loads(lines[-1])
    return out["executable"], out["torch"], out["prefix"]


def _instead(prefix: str, path: str, argv: List[str], env: Dict[str, str]) -> str:
    """What to run instead: the system's Python where its torch is served
    (and it is not the environment that was judged: sys.prefix tells a
    venv from the interpreter it was made from)."""
    if os.access(SYSTEM_PYTHON, os.X_OK):
        try:
            _, v, system_prefix = _probe(SYSTEM_PYTHON, env)
        except UsageError:
            v, system_prefix = None, prefix
        if served(v) and system_prefix != prefix:
            # A Python program (torchrun) runs as well as a script of that Python.
            script = [] if _PYTHON_NAME.match(os.path.basename(argv[0])) else [path]
            example = shlex.join([PROG, SYSTEM_PYTHON] + script + argv[1:])
            return "%s has torch %s: `%s` (or a venv made with --system-site-packages)" % (SYSTEM_PYTHON, v, example)
    return "install a torch the backend serves for it (Debian 12: apt-get install python3-torch libtorch-dev, " \
           "for %s)" % SYSTEM_PYTHON


def judge(argv: List[str], env: Dict[str, str]) -> Tuple[str, str, Optional[str]]:
    """Resolves the command; raises UsageError when it cannot run under the
    backend. Returns (the path to exec, what was found: for --check, the
    command's torch version: None for a program that is not Python's)."""
    name = argv[0]
    path = name if "/" in name else shutil.which(name, path=env.get("PATH", os.defpath))
    if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
        if os.path.isfile(name):
            raise UsageError("%s is not a command; to run a Python script, name its Python first: `%s`"
                             % (name, shlex.join([PROG, SYSTEM_PYTHON] + argv)))
        if name.endswith(".py"):
            raise UsageError("%s: no such script in %s, nor a command of that name" % (name, os.getcwd()))
        raise UsageError("%s: command not found" % name)
    python = python_of(path, env)
    if python is None:
        return path, "%s is not a Python program: not checked (torch's first container call is)" % path, None
    executable, version, prefix = _probe(python, env)
    runs = name if python == path else "%s (a %s program)" % (name, python)
    if version is None:
        raise UsageError("%s runs %s, which has no torch; the backend serves torch %s: %s"
                         % (runs, executable, served_text(), _instead(prefix, path, argv, env)))
    if not served(version):
        raise UsageError("%s runs %s, whose torch is %s; the backend serves torch %s only: run the command without "
                         "distautograd-torch (torch then keeps its own container), or: %s"
                         % (runs, executable, version, served_text(), _instead(prefix, path, argv, env)))
    return path, "torch %s for %s" % (version, executable), version


USAGE = """usage: distautograd-torch [--check] COMMAND [ARGS...]
       python -m distautograd.torch [--check] COMMAND [ARGS...]

Runs COMMAND with torch's distributed autograd served by distautograd
(LD_PRELOAD of the torch backend; every process COMMAND starts inherits it).
COMMAND is checked first: the Python it runs must have torch %s
(Debian 12's is %s). --check only checks (COMMAND defaults to python3)
and prints the library's path. USE_LIBUV=0 is set for COMMAND unless set
or its torch is 1.x (Debian 13's torch 2.6 has no libuv for its TCPStore).
Once a process of the job is served, one line on stderr says so
(%s=1: not).""" % (served_text(), SYSTEM_PYTHON, QUIET_ENV)


def main(argv: Optional[List[str]] = None, library_dir: Optional[str] = None) -> int:
    global PROG
    if os.path.basename(sys.argv[0]) == "distautograd-torch":
        PROG = sys.argv[0]
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
    if not args and not check_only:
        print(USAGE, file=sys.stderr)
        return 2
    env = dict(os.environ)
    try:
        check_settings(env)
        shim = library_path(library_dir)
        path, found, version = judge(args or ["python3"], env)
    except UsageError as e:
        print("distautograd-torch: %s" % e, file=sys.stderr)
        return 127 if str(e).endswith(("command not found", "nor a command of that name")) else 2
    if check_only:
        print("%s (%s)" % (shim, found))
        return 0
    watch_served(env)
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p and p != shim]
    env["LD_PRELOAD"] = " ".join([shim] + preload)
    # Debian 13's torch 2.6 is built without libuv, which its TCPStore asks
    # for by default (2.4 on): env:// (MASTER_ADDR, MASTER_PORT) works only
    # with USE_LIBUV=0, natively too. torch 1.13 reads no such variable; a
    # command that is not Python's may start either.
    if version is None or not version.startswith("1."):
        env.setdefault("USE_LIBUV", "0")
    os.execve(path, args, env)
    return 127  # not reached
