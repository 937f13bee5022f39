"""`pip install --no-build-isolation ./python_bindings` works offline and
installs a package that carries its own libdistautograd.so.

The install goes into a throwaway virtual environment made with
``python3 -m venv --without-pip --system-site-packages`` (Debian's Python is
externally managed; the venv borrows the system's pip, setuptools and
wheel), and nothing outside the temporary folder changes, apart from the
gitignored build folders that pip's in-tree build leaves in python_bindings/.
It takes a few seconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

from . import _support


def _missing_tools() -> "str | None":
    import importlib.util

    missing = [m for m in ("pip", "setuptools", "wheel", "venv") if importlib.util.find_spec(m) is None]
    if missing:
        return "%s: no %s (Debian: python3-pip)" % (sys.executable, ", ".join(missing))
    return None


class Install(unittest.TestCase):
    def test_pip_install_into_venv(self) -> None:
        problem = _missing_tools()
        if problem:
            _support.loud_skip(self, problem)
        with tempfile.TemporaryDirectory() as tmp:
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv],
                           check=True, capture_output=True)
            py = os.path.join(venv, "bin", "python")
            env = _support.child_env(DISTAUTOGRAD_LIBRARY=None, PYTHONPATH=None, PIP_NO_INDEX="1",
                                     PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
                                     PIP_CONFIG_FILE=os.devnull)
            p = subprocess.run(
                [py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                 os.path.join(_support.ROOT, "python_bindings")],
                env=env, cwd=tmp, capture_output=True, text=True, timeout=300,
            )
            self.assertEqual(p.returncode, 0, "pip install failed:\n" + p.stdout[-3000:] + p.stderr[-3000:])
            # Imported from elsewhere, with no hint: the package finds its own .so.
            p = _support.run_python("""
                import json, os, sys
                import distautograd as D
                from distautograd import _lib
                D._init(3)
                with D.context() as cid:
                    known = D._current_context()._known_worker_ids()
                here = os.path.dirname(D.__file__)
                print(json.dumps({"file": D.__file__, "lib": _lib.PATH, "cid": cid, "known": sorted(known),
                                  "typed": os.path.isfile(os.path.join(here, "py.typed")),
                                  "prefix": sys.prefix, "version": D.__version__}))
            """, env=env, cwd=tmp, python=py)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            out = json.loads(p.stdout.strip().splitlines()[-1])
            site = os.path.realpath(venv)
            self.assertTrue(os.path.realpath(out["file"]).startswith(site), out)
            self.assertEqual(os.path.realpath(out["lib"]),
                             os.path.join(os.path.realpath(os.path.dirname(out["file"])), "libdistautograd.so"))
            self.assertEqual(out["cid"], _support.FIRST_ID)
            self.assertTrue(out["typed"])
            import distautograd

            self.assertEqual(out["version"], distautograd.__version__)


if __name__ == "__main__":
    unittest.main()
