"""The sizes the live runs (commlib.parallel.live) accept, checked before any tensor is made or message sent.

Pure Python, no torch.distributed: a ValueError or TypeError whose one line names the argument and the
accepted range, where a raw torch error (a shape mismatch, "Gloo pair not connected", an allocation that
the machine kills) would otherwise end the run on some ranks and leave the others waiting.
The live runs are demonstrations: every size is a toy size, every tensor small.
"""

from __future__ import annotations

import math

from commlib import _validate as check

MAX_DIM = 4096           # one size (rows, hidden, heads, seq, ...): these runs fit in a laptop's seconds
MAX_ELEMENTS = 1 << 24   # one tensor: 64 MiB in fp32, on every rank at once
MAX_STEPS = 100          # training steps of a demonstration


def dims(**sizes) -> list[int]:
    """Each size an int in [1, MAX_DIM], in the order given."""
    return [check.integer(name, value, 1, MAX_DIM) for name, value in sizes.items()]


def divisible(name: str, value: int, by_name: str, by: int) -> None:
    """value % by == 0, else a ValueError naming both ("heads must be divisible by tp (4), got 6")."""
    if value % by:
        raise ValueError(f"{name} must be divisible by {by_name} ({by}), got {value}")


def at_least(name: str, value: int, by_name: str, by: int) -> None:
    """value >= by, else a ValueError naming both ("heads must be >= tp (8), got 4")."""
    if value < by:
        raise ValueError(f"{name} must be >= {by_name} ({by}), got {value}")


def elements(what: str, **shape) -> None:
    """A tensor of these sizes must hold at most MAX_ELEMENTS elements."""
    n = math.prod(shape.values())
    if n > MAX_ELEMENTS:
        sizes = " x ".join(f"{k}={v}" for k, v in shape.items())
        raise ValueError(f"{what} of {sizes} would hold {n} elements; at most {MAX_ELEMENTS} (make them smaller)")


def group(name: str, value, world: int) -> int:
    """A group size that tiles a world of `world` ranks: an int in [1, world] dividing it."""
    value = check.integer(name, value)  # the type; the range is said below, as one
    if not 1 <= value <= world or world % value:
        raise ValueError(f"{name} must be an int >= 1 dividing the world size {world}, got {value}")
    return value


def flag(name: str, value) -> bool:
    return check.instance(name, value, bool, "True or False")
