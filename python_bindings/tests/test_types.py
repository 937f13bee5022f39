"""Arguments are checked in Python, as torch's pybind11 checks them, before
any call reaches C: wrong types and ints outside int64 are TypeErrors (ctypes
alone would raise ctypes.ArgumentError, or silently wrap a big int)."""
from __future__ import annotations

import ctypes
import decimal
import fractions
import unittest
from typing import Any, Callable, List, Tuple

from . import _support

D = _support.init()


class Index:
    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


class IntOnly:
    def __int__(self) -> int:
        return 6


class IndexAndInt:
    # pybind11 falls back on __int__ when __index__ is out of range.
    def __index__(self) -> int:
        return 2**70

    def __int__(self) -> int:
        return 11


class RaisingIndex:
    def __index__(self) -> int:
        raise ValueError("no")


class IntSubclass(int):
    pass


BAD: List[Any] = [
    "1", b"1", 1.0, 2.5, float("nan"), None, [1], (1,), {1: 1}, complex(1), object(),
    2**63, -(2**63) - 1, 2**64 + 5, Index(2**63), RaisingIndex(),
    decimal.Decimal("NaN"), decimal.Decimal("Infinity"), ctypes.c_int64(5),
]

# (value, the int torch makes of it)
GOOD: List[Tuple[Any, int]] = [
    (True, 1), (False, 0), (Index(5), 5), (IntOnly(), 6), (IndexAndInt(), 11), (IntSubclass(9), 9),
    (decimal.Decimal("7.9"), 7), (decimal.Decimal("-7.9"), -7), (fractions.Fraction(17, 2), 8),
    (-(2**63), -(2**63)), (2**63 - 1, 2**63 - 1),
]


def id_functions() -> List[Tuple[str, Callable[[Any], Any]]]:
    return [
        ("_retrieve_context", D._retrieve_context),
        ("_release_context", D._release_context),
        ("_is_valid_context", D._is_valid_context),
        ("_retrieve_context_if_present", D._retrieve_context_if_present),
        ("_release_context_if_present", D._release_context_if_present),
        ("_get_or_create_context", D._get_or_create_context),
        ("_init", D._init),
    ]


class Types(unittest.TestCase):
    def test_bad_types_are_type_errors(self) -> None:
        for name, fn in id_functions():
            for bad in BAD:
                with self.subTest(fn=name, arg=repr(bad)):
                    with self.assertRaises(TypeError) as cm:
                        fn(bad)
                    self.assertNotIsInstance(cm.exception, ctypes.ArgumentError)
                    self.assertTrue(str(cm.exception).startswith(
                        name + "(): incompatible function arguments. The following argument types are supported:\n"
                        "    1. (arg0: int) -> "), str(cm.exception))
                    self.assertTrue(str(cm.exception).endswith("Invoked with: " + repr(bad)))

    def test_conversions_as_torch(self) -> None:
        for value, want in GOOD:
            for name, fn in id_functions():
                if name in ("_init", "_get_or_create_context"):
                    continue
                with self.subTest(fn=name, arg=repr(value)):
                    if name.endswith("_if_present"):
                        self.assertIn(fn(value), (None, False))
                        continue
                    with self.assertRaises(D.DistAutogradError) as cm:
                        fn(value)
                    self.assertEqual(str(cm.exception), "Could not find autograd context with id: %d" % want)

    def test_converted_ids_are_ints(self) -> None:
        for value, want in GOOD:
            with self.subTest(arg=repr(value)):
                c = D._get_or_create_context(value)
                self.assertIs(type(c._context_id()), int)
                self.assertEqual(c._context_id(), want)
                self.assertTrue(D._release_context_if_present(value))

    def test_init_converts(self) -> None:
        # Already initialized for 3: a converted 3 is the same id, anything
        # else a different one.
        self.assertIsNone(D._init(Index(3)))
        self.assertIsNone(D._init(decimal.Decimal("3.99")))
        with self.assertRaises(D.DistAutogradError) as cm:
            D._init(True)
        self.assertEqual(str(cm.exception), "Container is already initialized with worker_id: 3, "
                         "cannot initialize with different worker_id: 1")

    def test_arity(self) -> None:
        for name, fn in id_functions():
            with self.subTest(fn=name):
                self.assertRaises(TypeError, fn)
                self.assertRaises(TypeError, fn, 1, 2)
        for fn in (D._new_context, D._current_context, D._get_max_id, D._get_debug_info):
            self.assertRaises(TypeError, fn, 1)
        with D.context() as cid:
            c = D._retrieve_context(cid)
            for m in (c._context_id, c._known_worker_ids, c._send_functions, c._recv_functions):
                self.assertRaises(TypeError, m, 1)
            self.assertRaises(TypeError, c._add_known_worker_id)
            for bad in BAD:
                with self.subTest(arg=repr(bad)):
                    self.assertRaises(TypeError, c._add_known_worker_id, bad)
            self.assertEqual(c._known_worker_ids(), set())


if __name__ == "__main__":
    unittest.main()
