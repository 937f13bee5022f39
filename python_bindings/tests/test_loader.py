"""Where the package finds libdistautograd.so: $DISTAUTOGRAD_LIBRARY, then
its own folder, then the checkout's build/; and what it says when none is
there. Each case imports a copy of the package in a child process."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from . import _support

PKG = os.path.join(_support.BINDINGS, "distautograd")


class PackageCopy(unittest.TestCase):
    """A copy of the package, without a library, in a checkout's layout."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        # tmp/checkout/python_bindings/distautograd: the layout of a checkout,
        # with tmp/checkout/build as its build folder (absent until made).
        self.checkout = os.path.join(tmp.name, "checkout")
        self.bindings = os.path.join(self.checkout, "python_bindings")
        self.pkg = os.path.join(self.bindings, "distautograd")
        shutil.copytree(PKG, self.pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
        self.build = os.path.join(self.checkout, "build")


class Loader(PackageCopy):
    def child(self, env_lib: "str | None") -> "tuple[int, str]":
        env = _support.child_env(PYTHONPATH=self.bindings, DISTAUTOGRAD_LIBRARY=env_lib)
        p = _support.run_python("""
            import distautograd as D
            from distautograd import _lib
            D._init(3)
            with D.context() as cid:
                assert cid == 3 << 48
            print(_lib.PATH)
        """, env=env, cwd=self.checkout)
        return p.returncode, (p.stdout + p.stderr).strip()

    def put(self, folder: str, name: str = "libdistautograd.so") -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        shutil.copyfile(_support.BUILD_LIB, path)
        return path

    def test_nothing_found_says_where_it_looked(self) -> None:
        rc, out = self.child(None)
        self.assertNotEqual(rc, 0)
        self.assertIn("ImportError: distautograd: libdistautograd.so not found", out)
        self.assertIn("DISTAUTOGRAD_LIBRARY", out)
        for folder in (self.pkg, self.build):
            for name in ("libdistautograd.so", "libdistautograd.so.0"):
                self.assertIn(os.path.join(folder, name), out)
        self.assertIn("make", out)

    def test_checkout_build(self) -> None:
        path = self.put(self.build)
        self.assertEqual(self.child(None), (0, path))

    def test_checkout_build_soname(self) -> None:
        path = self.put(self.build, "libdistautograd.so.0")
        self.assertEqual(self.child(None), (0, path))

    def test_package_folder_before_checkout(self) -> None:
        self.put(self.build)
        path = self.put(self.pkg)
        self.assertEqual(self.child(None), (0, path))

    def test_env_first(self) -> None:
        self.put(self.pkg)
        path = self.put(os.path.join(self.checkout, "elsewhere"))
        self.assertEqual(self.child(path), (0, path))

    def test_env_naming_nothing_is_an_error(self) -> None:
        self.put(self.pkg)  # not used as a fallback
        missing = os.path.join(self.checkout, "nope.so")
        rc, out = self.child(missing)
        self.assertNotEqual(rc, 0)
        self.assertIn("DISTAUTOGRAD_LIBRARY=%r does not name a file" % missing, out)

    def test_not_a_library(self) -> None:
        bogus = os.path.join(self.checkout, "bogus.so")
        with open(bogus, "w") as f:
            f.write("not an ELF file")
        rc, out = self.child(bogus)
        self.assertNotEqual(rc, 0)
        self.assertIn("ImportError: distautograd: cannot load %s" % bogus, out)

    def test_library_without_the_functions(self) -> None:
        libc = None
        for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"):
            if os.path.isfile(p):
                libc = p
                break
        if libc is None:
            self.fail("no libc.so.6 found to stand for a library lacking the dac_* functions")
        rc, out = self.child(libc)
        self.assertNotEqual(rc, 0)
        self.assertIn("lacks dac_version, dac_last_error", out)
        self.assertIn("rebuild it with `make`", out)


class Diagnostic(PackageCopy):
    """`python -m distautograd` (and any module of the package run so) where
    the library does not load: the problem in one line on stderr, exit
    status 1, no traceback. A program importing the package still gets the
    ImportError, a module of its own run with -m included."""

    def diagnose(self, env_lib: "str | None", *module: str) -> subprocess.CompletedProcess:
        env = _support.child_env(PYTHONPATH=self.bindings, DISTAUTOGRAD_LIBRARY=env_lib)
        return subprocess.run([sys.executable, "-m", *(module or ["distautograd"])], env=env, cwd=self.checkout,
                              capture_output=True, text=True, timeout=120)

    def assert_one_line(self, p: subprocess.CompletedProcess, *wants: str) -> None:
        self.assertEqual((p.returncode, p.stdout), (1, ""), p.stderr)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("distautograd: "), p.stderr)
        for want in wants:
            self.assertIn(want, lines[0])

    def test_env_naming_nothing(self) -> None:
        missing = os.path.join(self.checkout, "nope.so")
        self.assert_one_line(self.diagnose(missing), "DISTAUTOGRAD_LIBRARY=%r does not name a file" % missing)
        self.assert_one_line(self.diagnose(missing, "distautograd.torch", "--check"),
                             "DISTAUTOGRAD_LIBRARY=%r does not name a file" % missing)

    def test_nothing_found(self) -> None:
        paths = [os.path.join(folder, name) for folder in (self.pkg, self.build)
                 for name in ("libdistautograd.so", "libdistautograd.so.0")]
        self.assert_one_line(self.diagnose(None), "libdistautograd.so not found", "then: %s; Run `make`"
                             % ", ".join(paths))

    def test_not_a_library(self) -> None:
        bogus = os.path.join(self.checkout, "bogus.so")
        with open(bogus, "w") as f:
            f.write("not an ELF file")
        self.assert_one_line(self.diagnose(bogus), "cannot load %s" % bogus)

    def test_a_module_of_its_own_keeps_the_import_error(self) -> None:
        other = os.path.join(self.bindings, "other")
        os.makedirs(other)
        with open(os.path.join(other, "__init__.py"), "w") as f:
            f.write("import distautograd\n")
        with open(os.path.join(other, "__main__.py"), "w") as f:
            f.write("print('ran')\n")
        p = self.diagnose(os.path.join(self.checkout, "nope.so"), "other")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("Traceback", p.stderr)
        self.assertIn("ImportError: distautograd: DISTAUTOGRAD_LIBRARY=", p.stderr)


class Prototypes(unittest.TestCase):
    """The loader applies the whole PROTOTYPES table, entries for functions it
    does not wrap (or the library does not have) included."""

    def test_tolerates_unknown_entries(self) -> None:
        D = _support.init()
        from distautograd import _lib

        table = dict(_lib.PROTOTYPES)
        extra = {"dac_from_a_later_header": (ctypes.c_int, (ctypes.c_int64,))}
        try:
            _lib.PROTOTYPES.update(extra)
            lib = _lib.load(_lib.PATH)
        finally:
            _lib.PROTOTYPES.clear()
            _lib.PROTOTYPES.update(table)
        self.assertEqual(lib.dac_max_id.argtypes, (ctypes.POINTER(ctypes.c_int64),))
        self.assertEqual(D._get_max_id(), 1125899906842623)

    def test_required_entries(self) -> None:
        _support.init()
        from distautograd import _lib

        table = dict(_lib.PROTOTYPES)
        try:
            del _lib.PROTOTYPES["dac_context_new"]
            with self.assertRaises(ImportError) as cm:
                _lib.load(_lib.PATH)
        finally:
            _lib.PROTOTYPES.clear()
            _lib.PROTOTYPES.update(table)
        self.assertIn("dac_context_new", str(cm.exception))

    def test_every_entry_typed(self) -> None:
        _support.init()
        from distautograd import _lib

        for name, (restype, argtypes) in _lib.PROTOTYPES.items():
            fn = getattr(_lib.LIB, name)
            self.assertEqual(fn.restype, restype, name)
            self.assertEqual(tuple(fn.argtypes), argtypes, name)


class StaticTLS(unittest.TestCase):
    """A library loaded late with dlopen (ctypes) must fit its initial-exec
    TLS in glibc's small static-TLS surplus, which every such library of the
    process shares: the package imports after one that took 1 KiB of it,
    and after torch."""

    def hog(self) -> str:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        path = os.path.join(tmp.name, "libtlshog.so")
        src = os.path.join(_support.ROOT, "capi_test", "c", "tls_hog.c")
        p = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-DTLS_HOG_BYTES=1024", "-o", path, src],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return path

    def test_import_after_a_1k_static_tls_library(self) -> None:
        p = _support.run_python("""
            import ctypes, sys, threading
            hog = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else %r)
            hog.tls_hog_touch(1)
            import distautograd as D
            D._init(3)
            def pass_():
                with D.context() as cid:
                    pass
                try:
                    D._retrieve_context(cid)
                except RuntimeError as e:
                    print(e)
            pass_()
            t = threading.Thread(target=pass_); t.start(); t.join()
        """ % self.hog())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        from distautograd._abi import CONTEXT_ID_RUN

        self.assertEqual(p.stdout.split("\n")[:2], [
            "Could not find autograd context with id: 844424930131968",
            # The thread's first id starts the next run (DAC_CONTEXT_ID_RUN).
            "Could not find autograd context with id: %d" % (_support.FIRST_ID + CONTEXT_ID_RUN),
        ])

    def test_import_after_torch(self) -> None:
        problem = _support.torch_problem("torch.distributed.autograd")
        if problem:
            _support.loud_skip(self, problem)
        p = _support.run_python("""
            import ctypes, torch
            hog = ctypes.CDLL(%r)
            import distautograd as D
            D._init(3)
            with D.context() as cid:
                print(cid)
        """ % self.hog(), python=_support.TORCH_PYTHON)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.strip(), str(3 << 48))


if __name__ == "__main__":
    unittest.main()
