"""Argument checks shared by the pure modules (cost, links, overlap, precision) and the exercise checkers.

Each returns the value as a plain Python int or float, or raises a TypeError (not a number at all) or a
ValueError (a number out of range) whose message names the parameter and the allowed values. numpy
integers count as ints and numpy floats as numbers; bools count as neither.
"""

from __future__ import annotations

import math
import re
from numbers import Integral, Real

# Upper bounds for the checkers' and models' parameters: far beyond any real job, small enough that every
# formula stays finite (a world of 10**400 ranks overflows a float) and every enumeration short.
MAX_RANKS = 2**24
MAX_BYTES = 1e30
MAX_COUNT = 2**53  # counts (layers, tokens, sizes): beyond a float's exact integers nothing here is sensible


def _bound(x) -> str:
    return str(x) if isinstance(x, int) and abs(x) < 10**15 else f"{x:g}"  # an int bound reads as an int


def _bounds(low, high, strict_low: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if strict_low else '>='} {_bound(low)}")
    if high is not None:
        parts.append(f"<= {_bound(high)}")
    return " " + " and ".join(parts) if parts else ""


def shown(value) -> str:
    """repr(value), cut short (an int of 400 digits, a long list)."""
    r = repr(value)
    return r if len(r) <= 60 else r[:50] + f"... ({len(r)} characters)"


def integer(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """value as an int in [low, high] (either bound optional)."""
    allowed = f"an int{_bounds(low, high, False)}"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {allowed}, got {shown(value)}")
    return int(value)


def count(name: str, value, low: int = 1, high: int = MAX_COUNT) -> int:
    """integer() bounded by MAX_COUNT, with a fast path for plain ints (the planner's search is hot)."""
    if type(value) is int and low <= value <= high:
        return value
    return integer(name, value, low, high)


def number(name: str, value, low: float | None = None, strict: bool = False, unit: str = "",
           finite: bool = True, high: float | None = None) -> float:
    """value as a float >= low (> low if strict) and <= high, finite unless finite=False; NaN never passes."""
    allowed = f"a {'finite ' if finite else ''}number{' of ' + unit if unit else ''}{_bounds(low, high, strict)}"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:  # a Python int beyond float's range
        v = math.inf if value > 0 else -math.inf
    if math.isnan(v) or (finite and math.isinf(v)) or (low is not None and (v <= low if strict else v < low)) \
            or (high is not None and v > high):
        raise ValueError(f"{name} must be {allowed}, got {shown(value)}")
    return v


def choice(name: str, value, allowed) -> object:
    """value, as a plain str or int, if it is one of `allowed` (strs or ints; numpy ints count, bools do not).
    Anything else, a str subclass whose __eq__ raises or an unhashable list included, is a ValueError."""
    key = None
    try:
        if isinstance(value, str):
            key = str.__str__(value)  # the plain string: no subclass __eq__ or __hash__ runs below
        elif isinstance(value, Integral) and not isinstance(value, bool):
            key = int(value)
    except Exception:  # a hostile subclass
        key = None
    if key is None or key not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {shown_safely(value)}")
    return key


def instance(name: str, value, kind: type, what: str = ""):
    """value if it is a `kind`, else a TypeError naming the parameter and the type expected."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what or 'a ' + kind.__name__}, got {type(value).__name__}")
    return value


def shown_safely(value) -> str:
    """shown(value), or the name of its type when even repr() raises (a hostile object)."""
    try:
        return shown(value)
    except Exception:
        return f"a {type(value).__name__}"


def listed(name: str, values, item: str = "entry") -> list:
    """values (a list, tuple, array or other iterable, but not a string) as a non-empty list."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a list, got {type(values).__name__}")
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a list, got {type(values).__name__}") from None
    if not values:
        raise ValueError(f"{name} must list at least one {item}")
    return values


def numbers(name: str, values, low: float | None = None, strict: bool = False, unit: str = "",
            item: str = "entry") -> list[float]:
    """A non-empty list of numbers, each checked as number() does (name[i] in the message)."""
    return [number(f"{name}[{i}]", v, low, strict, unit) for i, v in enumerate(listed(name, values, item))]


def parse_size(text) -> int:
    """'64M' -> 67108864, '1K' -> 1024, '512' -> 512 (binary multiples, as nccl-tests); an int passes as it is.
    Here, not in commlib.bench, so that the command line parses sizes without importing torch."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size must look like 512, 1K, 64M or 1G, got {shown_safely(text)}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]
