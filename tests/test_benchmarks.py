"""The benchmarks' own arithmetic (the measurements themselves are benchmarks, not tests)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import model_fit  # noqa: E402


def test_a_fit_without_bandwidth_is_reported_not_divided_by():
    """Before: --max-bytes 64K fitted beta = 0 and 1 / beta raised ZeroDivisionError."""
    line = model_fit.fit_line(2, 30e-6, 0.0, 4)
    assert "no bandwidth can be fitted" in line and "alpha 30.0 µs" in line
    assert "GB/s" in model_fit.fit_line(2, 30e-6, 1e-9, 4) and "1.000 GB/s" in model_fit.fit_line(2, 30e-6, 1e-9, 4)
