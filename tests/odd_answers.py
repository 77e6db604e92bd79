"""Odd answers a learner might give a checker (tests/test_exercises.py, tests/test_workshop.py): every checker
must answer each with a Verdict, never an exception.

A hand-made generated set: each kind of value (missing, bool, int, float, extreme numbers, numpy scalars,
arrays and tensors of every shape, strings, containers, objects) crossed with the values that break
arithmetic or comparisons (NaN, inf, 10**400, zero, negatives, empty).
"""

import math
from numbers import Real
from decimal import Decimal
from fractions import Fraction

import numpy as np
import torch

from commlib.exercises import Verdict


class Hostile:
    """Every comparison, conversion and attribute read raises."""

    def _boom(self, *_a, **_k):
        raise RuntimeError("hostile answer")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = __float__ = __int__ = _boom
    __index__ = __len__ = __iter__ = __contains__ = _boom

    def __getattr__(self, name):
        raise RuntimeError(f"hostile answer has no {name}")


class HostileName(str):
    """A name whose comparisons and hash raise (issue 24: it escaped five checkers)."""

    def _boom(self, *_a, **_k):
        raise RuntimeError("hostile name")

    __eq__ = __ne__ = __hash__ = __lt__ = __contains__ = _boom


class HostileReal(Real):
    """A numbers.Real whose every attribute read raises, __class__ included (isinstance() reads it)."""

    def __getattribute__(self, name):
        raise RuntimeError(f"hostile number has no {name}")

    __abs__ = __add__ = __ceil__ = __eq__ = __float__ = __floor__ = __floordiv__ = __le__ = __lt__ = __mod__ = \
        __mul__ = __neg__ = __pos__ = __pow__ = __radd__ = __rfloordiv__ = __rmod__ = __rmul__ = __round__ = \
        __rpow__ = __rtruediv__ = __truediv__ = __trunc__ = __hash__ = Hostile._boom


_NUMBERS = [0, 1, -1, 22, 3.5, -0.0, 5e-324, 1e308, -1e308, 10**300, 10**400, -10**400,
            math.nan, math.inf, -math.inf]


def _odd_answers() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [("None", None), ("Ellipsis", ...), ("True", True), ("False", False)]
    out += [(repr(x) if abs(x) < 1e301 or not isinstance(x, int) else f"int of {len(str(abs(x)))} digits", x)
            for x in _NUMBERS]
    for dtype in (np.int64, np.int8, np.uint8, np.float16, np.float32, np.float64, np.bool_, np.complex128):
        for x in (1, 0, -1) if dtype is not np.uint8 else (1, 0, 255):
            out.append((f"np.{dtype.__name__}({x})", dtype(x)))
    out += [(f"np.float64({x})", np.float64(x)) for x in (math.nan, math.inf, -math.inf)]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                  torch.complex64):
        for shape in ((), (1,), (1, 1), (3,), (0,), (2, 3)):
            out.append((f"torch {dtype} {shape}", torch.ones(shape, dtype=dtype)))
    out += [("tensor nan", torch.tensor(math.nan)), ("tensor inf", torch.tensor(math.inf)),
            ("tensor requiring grad", torch.tensor(2.0, requires_grad=True)),
            ("meta tensor", torch.empty((), device="meta")), ("meta tensor (3,)", torch.empty(3, device="meta")),
            ("sparse tensor", torch.ones(3).to_sparse())]
    for shape in ((), (1,), (3,), (0,), (2, 3)):
        out.append((f"ndarray {shape}", np.full(shape, 2.5)))
    out += [("ndarray nan", np.array(math.nan)), ("ndarray of names", np.array(["ring", "tree"])),
            ("ndarray of one name", np.array(["bf16"])), ("object ndarray", np.array([None], dtype=object)),
            ("np.str_", np.str_("bf16")), ("np.datetime64", np.datetime64("2024-01-01"))]
    out += [("Fraction", Fraction(1, 3)), ("Decimal", Decimal("0.1")), ("complex", 1 + 2j),
            ("numeric string", "10"), ("string", "ring"), ("empty string", ""), ("bytes", b"bf16"),
            ("names list", ["ring", "tree"]), ("names tuple", ("bf16",)), ("list", [1, 2]), ("empty list", []),
            ("dict", {"a": 1}), ("set", {1}), ("object", object()), ("builtin function", print), ("type", int),
            ("lambda", lambda: 3), ("hostile", Hostile()), ("hostile str", HostileName("ring")),
            ("hostile Real", HostileReal())]
    return out


ODD_ANSWERS = _odd_answers()


def verdict_failures(check, answers) -> list[str]:
    """The answers for which check(answer) raised, or returned anything but a Verdict with a message."""
    failures = []
    for label, answer in answers:
        try:
            v = check(answer)
        except Exception as e:  # noqa: BLE001  (the point: nothing may escape)
            failures.append(f"{label}: raised {type(e).__name__}: {e}")
            continue
        if not (isinstance(v, Verdict) and isinstance(v.message, str) and v.message):
            failures.append(f"{label}: returned {v!r}")
    return failures
