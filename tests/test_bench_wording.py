"""bench.agreement (commlib/bench/wording.py): the words a chapter prints about a measurement follow from its numbers."""

import re

import pytest

from commlib import bench


@pytest.mark.parametrize("measured, model, words", [
    (1.0, 1.0, "1.00x the model: agrees (within 1.25x)"),
    (0.8, 1.0, "0.80x the model: agrees (within 1.25x)"),
    (1.25, 1.0, "1.25x the model: agrees (within 1.25x)"),
    (1.3, 1.0, "1.30x the model: above the model"),
    (257.1, 295.1, "0.87x the model: agrees (within 1.25x)"),
    (0.5, 1.0, "0.50x the model: below the model"),
])
def test_agreement_names_the_side_of_the_band(measured, model, words):
    assert bench.agreement(measured, model) == words


def test_agreement_band_is_a_parameter():
    assert bench.agreement(1.3, 1.0, within=1.5).endswith("agrees (within 1.5x)")
    assert bench.agreement(1.05, 1.0, within=1.0).endswith("above the model")


@pytest.mark.parametrize("a_s, b_s, words", [
    (1.0, 2.0, "x was 2.00x faster than y"),
    (2.0, 1.0, "y was 2.00x faster than x"),
    (1.0, 1.05, "x and y took the same time (within 1.1x: 1.05x)"),
    (42.8, 44.4, "x and y took the same time (within 1.1x: 1.04x)"),
])
def test_versus_says_which_was_faster(a_s, b_s, words):
    assert bench.versus(a_s, b_s, "x", "y") == words


@pytest.mark.parametrize("call", [lambda: bench.agreement(0.0, 1.0), lambda: bench.agreement(1.0, -1.0),
                                  lambda: bench.agreement(1.0, 1.0, within=0.5),
                                  lambda: bench.versus(float("nan"), 1.0, "x", "y")])
def test_bad_numbers_are_value_errors_naming_the_parameter(call):
    with pytest.raises(ValueError, match=r"^(measured|model|within|a_s|b_s) must be"):
        call()


def test_agreement_refuses_text():
    with pytest.raises(TypeError, match="^measured must be"):
        bench.agreement("1", 1.0)


def test_machine_names_cores_and_load():
    assert re.fullmatch(r"\d+ cores, load \d+\.\d", bench.machine())
