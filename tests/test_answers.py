"""commlib.exercises.answers: any answer becomes a number, a name or a hint that says what is wrong with it."""

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

from commlib.exercises.answers import Verdict, _choice, _number, _values


@pytest.mark.parametrize("answer, want, hint", [
    (10**400, None, "far too large"),
    (-10**400, None, "far too large"),
    (float("nan"), None, "should be a finite number, got nan"),
    (float("-inf"), None, "should be a finite number, got -inf"),
    (np.float64("inf"), None, "finite number"),
    (torch.tensor(float("nan")), None, "finite number"),
    (np.array([1.5, 1.5]), None, "should be one number, got an array of shape (2,)"),
    (torch.ones(2, 3), None, "should be one number, got a tensor of shape (2, 3)"),
    (torch.ones(0), None, "got a tensor of shape (0,)"),
    (torch.empty(3, device="meta"), None, "got a tensor of shape (3,)"),
    (torch.empty((), device="meta"), None, "cannot read"),
    ("1.5e6", None, "should be a number, got str. Remove the quotes."),
    ("many", None, "should be a number, got str."),
    (True, None, "should be a number, got bool"),
    (np.bool_(True), None, "should be a number, got bool"),
    (torch.tensor(True), None, "should be a number, got bool"),
    (1 + 2j, None, "should be a number, got complex"),
    (torch.tensor(1 + 2j), None, "should be a number, got complex"),
    (["1"], None, "should be a number, got list"),
    (None, None, "Replace the None"),
    (..., None, "Replace the None"),
    (np.float64(1.5e6), 1.5e6, ""),
    (np.float32(0.5), 0.5, ""),
    (np.int64(22), 22, ""),
    (np.uint8(255), 255, ""),
    (torch.tensor(1.5e6, dtype=torch.float64), 1.5e6, ""),
    (torch.tensor(3, dtype=torch.int64), 3, ""),
    (torch.tensor(2.0, requires_grad=True), 2.0, ""),
    (np.array(2.5), 2.5, ""),
    (np.array([22]), 22, ""),          # one element: one number (a one-element result of dist.all_reduce)
    (torch.tensor([[7.0]]), 7.0, ""),
    (Fraction(1, 4), 0.25, ""),
    (Decimal("0.25"), 0.25, ""),
    (10**300, 10**300, ""),
    (-0.0, 0.0, ""),
])
def test_numbers_arrive_as_numbers_and_anything_else_gets_a_hint(answer, want, hint):
    x, bad = _number(answer, "the answer")
    if want is None:
        assert x is None and isinstance(bad, Verdict) and not bad.ok and hint in bad.message, bad
    else:
        assert bad is None and x == want and type(x) in (int, float)


@pytest.mark.parametrize("answer, want, hint", [
    (np.str_("bf16"), "bf16", ""),
    (np.array("bf16"), "bf16", ""),
    (np.array(["bf16"]), "bf16", ""),
    (np.array(["bf16", "fp16"]), None, "choose one of ('bf16', 'fp16'): one of them, not an array of shape (2,)."),
    (["bf16", "fp16"], None, "a name, in quotes; got list"),
    (3, None, "a name, in quotes; got int"),
    (b"bf16", None, "got bytes"),
    ("BF16", None, "choose one of ('bf16', 'fp16')."),
    (None, None, "Replace the None"),
])
def test_names_arrive_as_names_and_arrays_of_names_get_a_hint(answer, want, hint):
    value, bad = _choice(answer, ("bf16", "fp16"))
    if want is None:
        assert value is None and not bad.ok and hint in bad.message, bad
    else:
        assert bad is None and value == want and type(value) is str


def test_numeric_choices_take_any_number_and_name_the_unit():
    assert _choice(np.int64(25), [1, 25], "MiB") == (25, None)
    assert _choice(torch.tensor(25.0), [1, 25], "MiB") == (25.0, None)
    assert _choice(7, [1, 25], "MiB")[1].message == "choose one of [1, 25] (MiB)."
    assert "choose one of [1, 25] (MiB): the answer should be a finite number" in _choice(float("nan"), [1, 25], "MiB")[1].message


def test_tensor_values_are_shown_briefly():
    assert _values(torch.arange(3.0)) == "[0.0, 1.0, 2.0]"
    assert _values(torch.zeros(2, 20)) == f"{[0.0] * 16} ... (40 values, shape (2, 20))"
    assert _values(torch.empty(3, device="meta")) == "a torch.float32 tensor of shape (3,) on meta"


def test_a_verdict_prints_in_lines_that_fit_the_column():
    from commlib.exercises.answers import WIDTH, Verdict

    words = " ".join(f"word{i}" for i in range(60))
    text = repr(Verdict(True, words + "\n  an indented line of its own"))
    lines = text.splitlines()
    assert text.startswith("Correct. word0") and all(len(line) <= WIDTH for line in lines)
    assert " ".join(" ".join(lines[:-1]).split()) == "Correct. " + words  # wrapped between words, nothing lost
    assert lines[-1] == "  an indented line of its own"
    assert repr(Verdict(False, "short")) == "Not yet. short"
