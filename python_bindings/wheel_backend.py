"""Builds the distautograd wheel, libdistautograd.so inside, with nothing but
the standard library.

It is the project's PEP 517 build backend (pyproject.toml), so
``pip install ./python_bindings`` needs no setuptools, no wheel package and
no network, in any virtual environment; and it is what ``make wheel`` runs::

    python3 python_bindings/wheel_backend.py [--library PATH] [-o DIR]

The wheel is ``distautograd-<version>-py3-none-<platform>.whl``: pure Python
(ctypes, any CPython 3), so ``py3-none``, but it carries shared libraries
built for this machine's architecture against glibc, so the platform tag is
``manylinux_X_Y_<arch>`` (PEP 600), X.Y the newest ``GLIBC_`` symbol version
any of its .so files needs, read from their ELF version-needs sections at
build: it installs wherever that glibc is. The version is the header's
(DAC_VERSION_MAJOR, _MINOR and _PATCH), so the package and the library it
carries cannot disagree.

The library comes from --library, else $DISTAUTOGRAD_LIBRARY, else the
checkout this folder sits in, where ``make`` runs first (it does nothing
when the library is up to date).
"""
from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import io
import os
import re
import struct
import subprocess
import sys
import sysconfig
import time
import zipfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
HEADER = os.path.join(CHECKOUT, "include", "distautograd.h")
PACKAGE = os.path.join(HERE, "distautograd")
LIBRARY_ENV = "DISTAUTOGRAD_LIBRARY"
NAME = "distautograd"

SUMMARY = "The context container of torch.distributed.autograd, in Go, through ctypes"
CLASSIFIERS = (
    "Programming Language :: Python :: 3",
    "Operating System :: POSIX :: Linux",
    "Typing :: Typed",
)
REQUIRES_PYTHON = ">=3.8"

# Zip entries get this time (1980-01-01, the zip epoch) unless
# SOURCE_DATE_EPOCH says otherwise: the same inputs make the same wheel.
_EPOCH = (1980, 1, 1, 0, 0, 0)


#: The library, under its soname: what the torch backend's implementations
#: link and the package loads (one file: a wheel cannot hold a link).
SONAME_FILE = "libdistautograd.so.0"
#: The torch backend's files, bundled when built (make, with libtorch-dev):
#: its shim and every implementation (one per torch served).
TORCH_SHIM = "libdistautograd_torch.so"
TORCH_IMPLS = "libdistautograd_torch_impl*.so"

#: The launcher: `distautograd-torch python train.py`.
ENTRY_POINTS = "[console_scripts]\ndistautograd-torch = distautograd.torch:main\n"


def version() -> str:
    """The header's DAC_VERSION_MAJOR.DAC_VERSION_MINOR.DAC_VERSION_PATCH."""
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define\s+DAC_VERSION_%s\s+([0-9]+)\s*$" % part, text, re.MULTILINE)
        if not m:
            raise SystemExit("distautograd: no DAC_VERSION_%s in %s" % (part, HEADER))
        parts.append(str(int(m.group(1))))
    return ".".join(parts)


_SHT_GNU_VERNEED = 0x6FFFFFFE


def glibc_needed(path: str) -> Optional[Tuple[int, ...]]:
    """The newest GLIBC_x.y symbol version the ELF file at path needs (its
    SHT_GNU_verneed section, as `readelf -V` shows it), or None."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit("distautograd: %s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    newest: Optional[Tuple[int, ...]] = None
    for sh in sections:
        if sh[1] != _SHT_GNU_VERNEED:
            continue
        strtab_offset = sections[sh[6]][4]
        entry = sh[4]
        for _ in range(sh[7]):  # sh_info: the number of Verneed entries
            _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, entry)
            at = entry + aux
            for _ in range(cnt):
                _, _, _, name, aux_next = struct.unpack_from("<IHHII", data, at)
                end = data.index(b"\0", strtab_offset + name)
                m = re.match(r"GLIBC_(\d+(?:\.\d+)+)$", data[strtab_offset + name:end].decode("ascii", "replace"))
                if m:
                    v = tuple(int(x) for x in m.group(1).split("."))
                    newest = v if newest is None or v > newest else newest
                at += aux_next
            entry += nxt
    return newest


def platform_tag(files: List[str]) -> str:
    """manylinux_X_Y_ARCH from the newest glibc version the files need
    (linux_ARCH when none needs a versioned glibc symbol)."""
    arch = re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform().split("-", 1)[-1])
    needs = [v for v in (glibc_needed(p) for p in files) if v]
    if not needs:
        return "linux_" + arch
    newest = max(needs)
    return "manylinux_%d_%d_%s" % (newest[0], newest[1] if len(newest) > 1 else 0, arch)


def tagged(shared: List[Tuple[str, str]]) -> List[str]:
    """The files of bundled() the platform tag is computed from: all but
    the torch backend's implementations, of which only the one that needs
    the oldest glibc. Each implementation is loaded only beside its own
    torch (libtorch_cpu.so.<version>), on a system whose glibc that torch
    was built for; the wheel installs wherever one of them can run (torch
    2.6's, built on Debian 13, needs a glibc Debian 12 lacks)."""
    impls = [p for n, p in shared if n.startswith(TORCH_IMPLS[:-len("*.so")])]
    rest = [p for n, p in shared if not n.startswith(TORCH_IMPLS[:-len("*.so")])]
    if impls:
        rest.append(min(impls, key=lambda p: glibc_needed(p) or ()))
    return rest


def bundled(lib_path: str) -> List[Tuple[str, str]]:
    """(name in the package, path here) of the shared objects the wheel
    carries: the library once, under its soname; and the torch backend
    where it was built beside the library (the launcher and the package both
    take that one library in a process under the backend: one Go runtime)."""
    out = [(SONAME_FILE, lib_path)]
    folder = os.path.dirname(os.path.abspath(lib_path))
    shim = os.path.join(folder, TORCH_SHIM)
    impls = sorted(glob.glob(os.path.join(folder, TORCH_IMPLS)))
    if os.path.isfile(shim) and impls:
        out += [(os.path.basename(p), p) for p in [shim] + impls]
    return out


def wheel_name(lib: Optional[str] = None) -> str:
    return "%s-%s-py3-none-%s.whl" % (NAME, version(), platform_tag(tagged(bundled(library(lib)))))


def library(explicit: Optional[str] = None) -> str:
    """Returns the path of the libdistautograd.so to bundle."""
    path = explicit or os.environ.get(LIBRARY_ENV)
    if path:
        if not os.path.isfile(path):
            raise SystemExit("distautograd: the library %r is not a file" % path)
        return path
    if not os.path.isfile(os.path.join(CHECKOUT, "Makefile")):
        raise SystemExit(
            "distautograd: %s is not in a distautograd checkout; set %s to a built libdistautograd.so"
            % (HERE, LIBRARY_ENV)
        )
    make = os.environ.get("MAKE", "make")
    try:
        subprocess.run([make, "-C", CHECKOUT, "build/libdistautograd.so"], check=True,
                       stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("distautograd: building the library with `%s -C %s` failed: %s" % (make, CHECKOUT, e))
    return os.path.join(CHECKOUT, "build", "libdistautograd.so")


def metadata() -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + version(),
        "Summary: " + SUMMARY,
        "Requires-Python: " + REQUIRES_PYTHON,
    ]
    lines += ["Classifier: " + c for c in CLASSIFIERS]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines) + "\n\n" + readme


def wheel_file(tag: str) -> str:
    return "Wheel-Version: 1.0\nGenerator: distautograd wheel_backend\nRoot-Is-Purelib: false\nTag: py3-none-%s\n" % tag


def package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path here) of the package's sources: every .py
    and py.typed; never a library or cache left in the source folder."""
    out = []
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, HERE).replace(os.sep, "/"), full))
    return out


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def _date_time() -> Tuple[int, int, int, int, int, int]:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        t = time.gmtime(max(int(epoch), 315532800))
        return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
    return _EPOCH


def build(out_dir: str, lib: Optional[str] = None) -> str:
    """Writes the wheel into out_dir; returns its file name."""
    dist_info = "%s-%s.dist-info" % (NAME, version())
    entries: Dict[str, Tuple[bytes, int]] = {}
    for arcname, path in package_files():
        with open(path, "rb") as f:
            entries[arcname] = (f.read(), 0o644)
    lib_path = library(lib)
    shared = bundled(lib_path)
    for name, path in shared:
        with open(path, "rb") as f:  # follows the .so -> .so.X -> .so.X.Y.Z links
            entries[NAME + "/" + name] = (f.read(), 0o755)
    tag = platform_tag(tagged(shared))
    entries[dist_info + "/entry_points.txt"] = (ENTRY_POINTS.encode("utf-8"), 0o644)
    entries[dist_info + "/METADATA"] = (metadata().encode("utf-8"), 0o644)
    entries[dist_info + "/WHEEL"] = (wheel_file(tag).encode("utf-8"), 0o644)
    entries[dist_info + "/top_level.txt"] = ((NAME + "\n").encode("utf-8"), 0o644)
    record = io.StringIO()
    for arcname, (data, _) in entries.items():
        record.write("%s,%s,%d\n" % (arcname, _record_hash(data), len(data)))
    record.write(dist_info + "/RECORD,,\n")
    entries[dist_info + "/RECORD"] = (record.getvalue().encode("utf-8"), 0o644)

    os.makedirs(out_dir, exist_ok=True)
    name = "%s-%s-py3-none-%s.whl" % (NAME, version(), tag)
    final = os.path.join(out_dir, name)
    tmp = final + ".tmp"
    when = _date_time()
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        # dist-info last, as the wheel spec recommends.
        for arcname in sorted(entries, key=lambda a: (a.startswith(dist_info), a)):
            data, mode = entries[arcname]
            info = zipfile.ZipInfo(arcname, date_time=when)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, final)
    return name


# ---- PEP 517: what pip calls (pyproject.toml: build-backend = "wheel_backend")


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return build(wheel_directory)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Builds the distautograd wheel (make wheel).")
    ap.add_argument("--library", help="the libdistautograd.so to bundle (default: $%s, else make's)" % LIBRARY_ENV)
    ap.add_argument("-o", "--out-dir", default=os.path.join(CHECKOUT, "build"))
    ap.add_argument("--name", action="store_true", help="print the wheel's file name and build nothing")
    ap.add_argument("--tag", action="store_true", help="print the wheel's platform tag and build nothing")
    args = ap.parse_args(argv)
    if args.name:
        print(wheel_name(args.library))
        return 0
    if args.tag:
        print(platform_tag(tagged(bundled(library(args.library)))))
        return 0
    name = build(args.out_dir, args.library)
    print(os.path.join(args.out_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
