"""Builds the distautograd wheel, libdistautograd.so inside.

The library comes from $DISTAUTOGRAD_LIBRARY if set, else from the checkout
this folder sits in: `make` runs there first (it does nothing when the
library is up to date). The version is the header's DAC_VERSION_STRING, so
the package and the library it carries cannot disagree.
"""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
HEADER = os.path.join(CHECKOUT, "include", "distautograd.h")
LIBRARY_ENV = "DISTAUTOGRAD_LIBRARY"


def version():
    with open(HEADER, encoding="utf-8") as f:
        m = re.search(r'#define\s+DAC_VERSION_STRING\s+"([^"]+)"', f.read())
    if not m:
        raise SystemExit("distautograd: no DAC_VERSION_STRING in %s" % HEADER)
    return m.group(1)


def library():
    """Returns the path of the libdistautograd.so to bundle."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        if not os.path.isfile(env):
            raise SystemExit("distautograd: %s=%r does not name a file" % (LIBRARY_ENV, env))
        return env
    if not os.path.isfile(os.path.join(CHECKOUT, "Makefile")):
        raise SystemExit(
            "distautograd: %s is not in a distautograd checkout; set %s to a built libdistautograd.so"
            % (HERE, LIBRARY_ENV)
        )
    make = os.environ.get("MAKE", "make")
    try:
        subprocess.run([make, "-C", CHECKOUT, "build/libdistautograd.so"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("distautograd: building the library with `%s -C %s` failed: %s" % (make, CHECKOUT, e))
    return os.path.join(CHECKOUT, "build", "libdistautograd.so")


class BuildPyWithLibrary(build_py):
    """build_py that also puts libdistautograd.so into the package."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        target = os.path.join(self.build_lib, "distautograd", "libdistautograd.so")
        self.mkpath(os.path.dirname(target))
        shutil.copyfile(library(), target)  # follows the .so -> .so.0 link
        os.chmod(target, 0o755)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [
            os.path.join(self.build_lib, "distautograd", "libdistautograd.so")
        ]


class BinaryDistribution(Distribution):
    """A wheel that carries a shared library is platform-specific."""

    def has_ext_modules(self):
        return True


setup(
    version=version(),
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
)
