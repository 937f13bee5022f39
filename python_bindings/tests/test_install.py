"""The package installs as a user installs it, in a bare virtual environment
(``python -m venv``: its own pip, no system site-packages), offline:

- ``make wheel`` writes a platform wheel with the library inside, and
  ``pip install`` of that file works and imports from anywhere;
- ``pip install ./python_bindings`` builds the same wheel through the
  project's standard-library build backend (no setuptools, no wheel package);
- ``python -m distautograd`` says what was loaded;
- the README's Python example, run as the README says, prints what the
  README shows.

Nothing outside the temporary folder changes. A few seconds per venv.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import zipfile
from typing import Dict

from . import _support

#: pip run offline, deaf to the user's configuration.
PIP_ENV = dict(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1")


def _bare_env() -> Dict[str, str]:
    """The environment of a user's shell: no hint where the library is, no
    make flags from an outer `make test`."""
    env = _support.child_env(DISTAUTOGRAD_LIBRARY=None, PYTHONPATH=None, MAKEFLAGS=None, MFLAGS=None,
                             MAKELEVEL=None, MAKEOVERRIDES=None, **PIP_ENV)
    return env


def manylinux_tag(paths) -> str:
    """PEP 600's tag for the newest GLIBC_ version the files need, as
    binutils' readelf lists their version needs (independent of the wheel
    backend's own ELF reader)."""
    newest = (0, 0)
    for path in paths:
        p = subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        for m in re.finditer(r"Name: GLIBC_(\d+)\.(\d+)", p.stdout):
            newest = max(newest, (int(m.group(1)), int(m.group(2))))
    assert newest > (2, 17), "no glibc version need found in %s" % paths
    return "manylinux_%d_%d_%s" % (newest + (sysconfig.get_platform().split("-", 1)[1].replace("-", "_"),))


def readme_output():
    """The lines python_bindings/README.md shows for `python -m distautograd`."""
    with open(os.path.join(_support.BINDINGS, "README.md"), encoding="utf-8") as f:
        text = f.read()
    after = text[text.index("`python -m distautograd` prints"):]
    block = after[after.index("```\n") + 4:]
    return block[:block.index("```\n")].splitlines()


def readme_example():
    """The README's Python example (its ```python block) and the output it
    shows after it."""
    with open(os.path.join(_support.ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"```python\n(# example\.py: venv/bin/python example\.py\n.*?)```\n\n```\n(.*?)```\n", text, re.S)
    assert m, "README.md has no ```python block starting '# example.py: venv/bin/python example.py', then its output"
    return m.group(1), m.group(2)


def matches(pattern, lines) -> bool:
    """Whether lines match the pattern lines: "..." within a line stands for
    any text, a line that is only "..." for any number of lines."""
    if not pattern:
        return not lines
    if pattern[0] == "...":
        return any(matches(pattern[1:], lines[i:]) for i in range(len(lines) + 1))
    rx = ".*".join(re.escape(part) for part in pattern[0].split("..."))
    return bool(lines) and re.fullmatch(rx, lines[0]) is not None and matches(pattern[1:], lines[1:])


def _version() -> str:
    import distautograd

    return distautograd.__version__


class Install(unittest.TestCase):
    def setUp(self) -> None:
        if importlib.util.find_spec("venv") is None or importlib.util.find_spec("ensurepip") is None:
            _support.loud_skip(self, "%s has no venv/ensurepip (Debian: python3-venv)" % sys.executable)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.env = _bare_env()

    def bare_venv(self) -> str:
        """Makes a venv with its own pip and nothing else; returns its python."""
        venv = os.path.join(self.tmp, "venv")
        p = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as f:
            self.assertIn("include-system-site-packages = false", f.read())
        return os.path.join(venv, "bin", "python")

    def pip_install(self, python: str, what: str) -> None:
        p = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", what],
                           env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, "pip install %s failed:\n%s%s" % (what, p.stdout[-3000:], p.stderr[-3000:]))

    def check_installed(self, python: str) -> None:
        """Imported from elsewhere, with no hint: the package finds its own .so."""
        p = _support.run_python("""
            import json, os, sys
            import distautograd as D
            from distautograd import _lib
            D._init(3)
            with D.context() as cid:
                known = D._current_context()._known_worker_ids()
            here = os.path.dirname(D.__file__)
            print(json.dumps({"file": D.__file__, "lib": _lib.PATH, "cid": cid,
                              "typed": os.path.isfile(os.path.join(here, "py.typed")),
                              "version": D.__version__}))
        """, env=self.env, cwd=self.tmp, python=python)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        venv = os.path.realpath(os.path.join(os.path.dirname(python), os.pardir))
        self.assertTrue(os.path.realpath(out["file"]).startswith(venv + os.sep), out)
        pkg = os.path.realpath(os.path.dirname(out["file"]))
        self.assertEqual(os.path.realpath(out["lib"]), os.path.join(pkg, "libdistautograd.so.0"))
        self.assertEqual(out["cid"], _support.FIRST_ID)
        self.assertTrue(out["typed"])
        self.assertEqual(out["version"], _version())

        p = subprocess.run([python, "-m", "distautograd"], env=self.env, cwd=self.tmp,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0], "distautograd " + _version())
        self.assertIn("library:       " + os.path.join(pkg, "libdistautograd.so.0") + "\n", p.stdout)
        self.assertIn("found in:    the package's own folder", p.stdout)
        self.assertTrue(any(line.startswith("torch backend: ") for line in lines), p.stdout)
        info = json.loads("\n".join(lines[lines.index("debug info (this process, after _init(0)):") + 1:]))
        self.assertEqual(info["num_autograd_contexts"], 0)
        want = readme_output()
        self.assertTrue(matches(want, lines), "python_bindings/README.md shows\n%s\nbut python -m distautograd "
                        "printed\n%s" % ("\n".join(want), p.stdout))

    def test_wheel_into_bare_venv(self) -> None:
        out = os.path.join(self.tmp, "dist")
        p = subprocess.run(["make", "--no-print-directory", "-C", _support.ROOT, "wheel", "WHEEL_DIR=" + out,
                            "PYTHON=" + sys.executable],
                           env=self.env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        build = os.path.dirname(_support.BUILD_LIB)
        shared = [os.path.realpath(_support.BUILD_LIB)]
        torch_backend = [os.path.join(build, n) for n in sorted(os.listdir(build))
                         if re.match(r"libdistautograd_torch(_impl.*)?\.so$", n)]
        if len(torch_backend) >= 2:  # the shim and an implementation: the backend was built
            shared += torch_backend
        # The tag: every file but the implementations, of which the one that
        # needs the oldest glibc (each loads only beside its own torch).
        impls = [p for p in shared if "_impl_" in os.path.basename(p)]
        oldest = sorted(impls, key=lambda p: tuple(int(x) for x in manylinux_tag([p]).split("_")[1:3]))[:1]
        platform = manylinux_tag([p for p in shared if p not in impls] + oldest)
        name = "distautograd-%s-py3-none-%s.whl" % (_version(), platform)
        self.assertEqual(os.listdir(out), [name])
        wheel = os.path.join(out, name)

        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            dist_info = "distautograd-%s.dist-info/" % _version()
            for want in ("distautograd/__init__.py", "distautograd/__main__.py", "distautograd/py.typed",
                         "distautograd/libdistautograd.so.0", dist_info + "METADATA", dist_info + "WHEEL",
                         dist_info + "RECORD"):
                self.assertIn(want, names)
            # The library once (a wheel holds no links), and each shared object
            # the platform tag was computed from.
            carried = sorted(n for n in names if ".so" in n)
            self.assertEqual(carried, sorted("distautograd/" + ("libdistautograd.so.0" if p == shared[0] else
                                                                os.path.basename(p)) for p in shared))
            self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")], names)
            wheel_meta = z.read(dist_info + "WHEEL").decode()
            self.assertIn("Root-Is-Purelib: false\n", wheel_meta)
            self.assertIn("Tag: py3-none-%s\n" % platform, wheel_meta)
            self.assertIn("Version: %s\n" % _version(), z.read(dist_info + "METADATA").decode())
            with open(os.path.realpath(_support.BUILD_LIB), "rb") as f:
                self.assertEqual(z.read("distautograd/libdistautograd.so.0"), f.read())
            # RECORD lists every other file with its sha256 and size.
            record = {}
            for line in z.read(dist_info + "RECORD").decode().splitlines():
                path, digest, size = line.rsplit(",", 2)
                record[path] = (digest, size)
            self.assertEqual(set(record), names)
            for path in names - {dist_info + "RECORD"}:
                data = z.read(path)
                digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(record[path], (digest, str(len(data))), path)

        python = self.bare_venv()
        self.pip_install(python, wheel)
        self.check_installed(python)

        example, shown = readme_example()
        with open(os.path.join(self.tmp, "example.py"), "w", encoding="utf-8") as f:
            f.write(example)
        p = subprocess.run([python, "example.py"], env=self.env, cwd=self.tmp, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertEqual(p.stdout, shown, "the README's example.py printed\n%s\nthe README shows\n%s"
                         % (p.stdout, shown))

    def test_source_install_into_bare_venv(self) -> None:
        # pip builds through pyproject.toml's backend, in an isolated build
        # environment into which it installs nothing (requires = []).
        python = self.bare_venv()
        self.pip_install(python, os.path.join(_support.ROOT, "python_bindings"))
        self.check_installed(python)


if __name__ == "__main__":
    unittest.main()
