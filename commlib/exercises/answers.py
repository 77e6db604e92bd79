"""Reading a learner's answer: the Verdict every checker returns, and the helpers that turn any answer
(numbers, numpy scalars, arrays, tensors, names, a function run on the ranks) into something a checker
can compare, or into a hint saying what is wrong with it. No answer makes them raise.

Parameters are the notebook author's: a checker may raise ValueError/TypeError naming one
(commlib._validate). Answers are the learner's: they only ever get a Verdict.

An answer is looked at through its type (_is), never its own attributes: isinstance() reads __class__,
which an object can make raise; a str subclass is read as the plain str it holds, so its own __eq__ and
__hash__ never run.
"""

from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from numbers import Integral, Real

import numpy as np

from commlib.ui.language import language, tr
from commlib.ui.wrap import wrap


WIDTH = 100  # characters per printed line: the book's column holds them, JupyterLab breaks no word


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str

    def __repr__(self) -> str:
        """The verdict as the notebook prints it: lines of at most WIDTH characters (the book's column), wrapped
        between words, the message's own line breaks kept."""
        if language() is not None:  # the notebook's language (commlib.set_language): Chinese lines take 2 columns
            text = tr("Correct. " if self.ok else "Not yet. ") + tr(self.message)
            return "\n".join(out for line in text.split("\n") for out in (wrap(line, WIDTH) or [""]))
        text = ("Correct. " if self.ok else "Not yet. ") + self.message
        return "\n".join(line if len(line) <= WIDTH else
                         textwrap.fill(line, WIDTH, break_long_words=False, break_on_hyphens=False)
                         for line in text.split("\n"))

    def __bool__(self) -> bool:
        return self.ok


def _is(answer, kinds) -> bool:
    """isinstance(answer, kinds) from type(answer) alone (no attribute of the answer is read)."""
    return issubclass(type(answer), kinds)


def _plain(answer):
    """A str subclass -> the plain str it holds; a bool, int or float subclass -> the plain value; else unchanged."""
    for kind in (str, bool, int, float):
        if _is(answer, kind):
            try:
                return kind.__str__(answer) if kind is str else kind(answer) if kind is not bool else answer is True
            except Exception:  # a subclass whose conversion raises
                return None
    return answer


def _missing(answer) -> Verdict | None:
    if answer is None or answer is Ellipsis:
        return Verdict(False, "Replace the None (or ...) with your answer, then run the cell again.")
    return None


def _unwrap(answer):
    """numpy scalars, and numpy arrays and tensors of one element, -> (their Python value, None); any other
    array or tensor -> (None, what it is: "an array of shape (2, 3)"); anything else passes unchanged."""
    torch = sys.modules.get("torch")  # not imported: then the answer cannot be a tensor
    is_tensor = torch is not None and _is(answer, torch.Tensor)
    if not (is_tensor or _is(answer, (np.ndarray, np.generic))):
        return _plain(answer), None
    try:
        if (answer.numel() if is_tensor else answer.size) == 1:
            return answer.item(), None
        shape = tuple(answer.shape)
    except Exception as e:  # a meta or sparse tensor, an exotic dtype
        return None, f"a {type(answer).__name__} it cannot read ({type(e).__name__})"
    return None, f"{'a tensor' if is_tensor else 'an array'} of shape {shape}"


def _number(answer, name: str) -> tuple[int | float | None, Verdict | None]:
    """-> (answer as a Python int or float, None), or (None, a Verdict saying why it cannot be checked as a
    number: missing; not a number, e.g. a bool, a string, several values; NaN, infinite or beyond float's
    range). numpy scalars, and numpy arrays and tensors of one element, are numbers."""
    missing = _missing(answer)
    if missing is not None:
        return None, missing
    answer, several = _unwrap(answer)
    if several:
        return None, Verdict(False, f"{name} should be one number, got {several}.")
    if _is(answer, Decimal):
        try:
            answer = float(answer) if answer.is_finite() else answer
        except Exception:
            return None, Verdict(False, f"{name} should be a plain number; this Decimal cannot be read.")
    if _is(answer, bool) or not _is(answer, Real):
        hint = " Remove the quotes." if _is(answer, str) and _parses_as_float(answer) else ""
        return None, Verdict(False, f"{name} should be a number, got {type(answer).__name__}.{hint}")
    try:
        x = int(answer) if _is(answer, Integral) else float(answer)
        finite = math.isfinite(x)  # an int beyond float's range raises OverflowError here
    except OverflowError:
        return None, Verdict(False, f"{name} is far too large: more than 1.8e308, the largest float.")
    except Exception as e:  # a Real that refuses to become a float
        return None, Verdict(False, f"{name} should be a plain number; {type(answer).__name__} gave {type(e).__name__}.")
    if not finite:
        return None, Verdict(False, f"{name} should be a finite number, got {x}.")
    return x, None


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number_problem(answer, name: str) -> Verdict | None:
    """What keeps `answer` from being checked as a number (see _number), or None."""
    return _number(answer, name)[1]


def _choice(answer, options, unit: str = "") -> tuple[object, Verdict | None]:
    """-> (answer, None) if it is one of `options` (names, or numbers with their unit), else (None, a Verdict
    listing them)."""
    missing = _missing(answer)
    if missing is not None:
        return None, missing
    listing = f"choose one of {options}{' (' + unit + ')' if unit else ''}"
    value, several = _unwrap(answer)
    if several:
        return None, Verdict(False, f"{listing}: one of them, not {several}.")
    if all(isinstance(o, str) for o in options):
        if not _is(value, str):
            return None, Verdict(False, f"{listing}: a name, in quotes; got {type(value).__name__}.")
    else:
        value, bad = _number(value, "the answer")
        if bad is not None:
            return None, Verdict(False, f"{listing}: {bad.message}")
    if value not in options:
        return None, Verdict(False, f"{listing}.")
    return value, None


def _function_problem(fn) -> Verdict | None:
    if fn is None or fn is Ellipsis:
        return _missing(fn)
    if not callable(type(fn)) or not _callable(fn):
        return Verdict(False, f"pass your function itself (no parentheses), got {type(fn).__name__}.")
    return None


def _callable(fn) -> bool:
    try:
        return callable(fn)
    except Exception:  # callable() can read attributes of odd objects
        return False


def _run_on_ranks(cluster, fn, *args, context: str = "", hang: str = "") -> tuple[list | None, Verdict | None]:
    """cluster.run(fn, *args) -> (results, None), or (None, a Verdict naming the rank that raised or died,
    or the ranks that never finished, with `hang` as the hint)."""
    from commlib.cluster import ClusterTimeout, RankDied, RankError

    try:
        return cluster.run(fn, *args), None
    except RankDied as e:  # no traceback: its message says how it ended (after the diagnosis's line)
        return None, Verdict(False, f"{context}{_first_line(_without_diagnosis(e))}")
    except RankError as e:
        lines = (e.remote_traceback or "").strip().splitlines()
        found = _diagnosed(e)
        return None, Verdict(False, f"{context}{found}" if found else
                             f"{context}rank {e.rank} raised: {lines[-1] if lines else _first_line(str(e))}")
    except ClusterTimeout as e:
        found = _diagnosed(e)
        return None, Verdict(False, f"{context}ranks {e.ranks} never finished: {(found + ' ' + hang).strip() or hang}")
    except Exception as e:  # e.g. a function or a result that cannot be pickled
        return None, Verdict(False, f"{context}it could not run on the ranks: {type(e).__name__}: {_first_line(str(e))}")


def _diagnosed(error) -> str:
    """The failed run's diagnosis when it found something (a mismatch, a missing rank, an unmatched send/recv)."""
    d = getattr(error, "diagnosis", None) or {}
    return d.get("detail", "") if d.get("kind") in ("mismatch", "missing", "p2p") else ""


def _without_diagnosis(error) -> str:
    """The error's message without the diagnosis line that opens it."""
    text, d = str(error), getattr(error, "diagnosis", None)
    return text.split("\n", 1)[1] if d and text.startswith(d.get("detail", "\0")) and "\n" in text else text


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "(no message)"


def close(value: float, *targets: float, rel: float = 0.02, atol: float = 0.0) -> bool:
    """The one "close enough" of every checker: |value - target| <= rel |target| + atol for some target.
    value is what _number read from the answer; targets are what the checker computed (the right answer, or
    the result of a known mistake)."""
    return any(abs(value - t) <= rel * abs(t) + atol for t in targets)


def _values(t, at_most: int = 16) -> str:
    """A tensor's values as a list, the first at_most of them."""
    try:
        flat = t.detach().reshape(-1)
        shown = flat[:at_most].tolist()
    except Exception:  # a meta or sparse tensor
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    more = f" ... ({flat.numel()} values, shape {tuple(t.shape)})" if flat.numel() > at_most or t.dim() != 1 else ""
    return f"{shown}{more}"
