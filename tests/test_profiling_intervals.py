"""cost/intervals.py: the numpy paths against the plain merge."""

import random

import numpy as np

from commlib.cost.intervals import intersect, length, overlap_length, overlap_lengths, union


def test_numpy_union_equals_the_python_union():
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 20000, 500).astype(float)
    spans = np.stack([starts, starts + rng.integers(-5, 30, 500)], axis=1)
    assert union(spans) == union(spans.tolist()) and len(union(spans)) > 5


def test_overlap_length_equals_the_length_of_the_intersection():
    """overlap_length (numpy, bisect and prefix sums: diagnose's overlap per rank) against the plain merge, on
    random disjoint span lists that touch, nest in and run past each other, and empty ones."""
    rng = random.Random(3)
    for _ in range(300):
        a = union((s, s + rng.uniform(0, 30)) for s in (rng.uniform(0, 500) for _ in range(rng.randint(0, 40))))
        b = union((s, s + rng.uniform(0, 5)) for s in (rng.uniform(0, 500) for _ in range(rng.randint(0, 200))))
        assert abs(overlap_length(a, b) - length(intersect(a, b))) < 1e-9
        assert abs(overlap_length(b, a) - length(intersect(a, b))) < 1e-9
        each = overlap_lengths(a, b)   # per span of a: what diagnose reads as the compute beside each call
        assert len(each) == len(a) and all(abs(x - length(intersect([s], b))) < 1e-9 for x, s in zip(each, a))


def test_bridged_closes_only_the_gaps_shorter_than_asked():
    import numpy as np

    from commlib.cost.intervals import bridged

    spans = np.array([[0.0, 10.0], [12.0, 12.001], [20.0, 30.0], [34.9, 40.0], [40.0, 41.0]])
    assert bridged(spans, 5.0).tolist() == [[0.0, 12.001], [20.0, 41.0]]
    assert bridged(spans, 2.0).tolist() == [[0.0, 10.0], [12.0, 12.001], [20.0, 30.0], [34.9, 41.0]]
    assert bridged(spans[:1], 5.0).tolist() == [[0.0, 10.0]]
