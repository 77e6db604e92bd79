"""A measurement against its model, or against another measurement, in words computed from the numbers.

The chapters' prose says what the model expects; these lines say what this run measured and whether it
agrees, so that no markdown sentence asserts a live result (issue 43). `within` is the band counted as
agreement: a ratio r agrees when 1/within <= r <= within.
"""

import os

from commlib import _validate as check
from commlib.ui.language import tr  # the notebook's language (English: as is)


def _band(within: float) -> float:
    return check.number("within", within, 1.0, strict=False, high=1e6)


def agreement(measured: float, model: float, within: float = 1.25) -> str:
    """'0.87x the model: agrees (within 1.25x)', or '... above the model' / '... below the model'."""
    measured = check.number("measured", measured, 0, strict=True)
    model = check.number("model", model, 0, strict=True)
    within, r = _band(within), measured / model
    if 1 / within <= r <= within:
        return tr(f"{r:.2f}x the model: agrees (within {within:g}x)")
    return tr(f"{r:.2f}x the model: {'above' if r > 1 else 'below'} the model")


def versus(a_s: float, b_s: float, a: str, b: str, within: float = 1.1) -> str:
    """Which of two timed things was faster, by how much; 'the same time' within the band."""
    a_s = check.number("a_s", a_s, 0, strict=True, unit="seconds")
    b_s = check.number("b_s", b_s, 0, strict=True, unit="seconds")
    within, r = _band(within), b_s / a_s
    if 1 / within <= r <= within:
        return tr(f"{a} and {b} took the same time (within {within:g}x: {r:.2f}x)")
    faster, slower, x = (a, b, r) if r > 1 else (b, a, 1 / r)
    return tr(f"{faster} was {x:.2f}x faster than {slower}")


def machine() -> str:
    """The cores and the 1-minute load average now: a live timing is only as steady as the machine it ran on."""
    return tr(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
