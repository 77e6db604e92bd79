"""A collective's numeric fields as a trace writes them, checked: counts, shapes. An odd value raises
OddField (the field and the value); traces.py adds the file and the event's index, for one line.

    count("Group size", "8", low=1) -> 8        numel([8, 1024]) -> 8192
"""

from __future__ import annotations


def dims_numel(dims) -> int | None:
    """numel of the first tensor in a record_shapes 'Input Dims' entry (a TensorList is one level deeper)."""
    if not dims:
        return None
    if not isinstance(dims, list):
        raise OddField("Input Dims", dims)
    first = dims[0]
    if isinstance(first, list) and first and isinstance(first[0], list):  # TensorList: add its tensors up
        return sum(numel(d) for d in first)
    return numel(first) if isinstance(first, list) and first else None


def numel(shape) -> int:
    if not isinstance(shape, list):
        raise OddField("Input Dims", shape)
    n = 1
    for d in shape:
        n *= count("Input Dims", d)
    return n


class OddField(ValueError):
    """A collective's field that is not what torch writes (raised with the field and value; the caller adds
    the file and the event's index)."""

    def __init__(self, name: str, value):
        super().__init__(name)
        self.field, self.value = name, value


MAX_COUNT = 2**63 - 1   # torch writes counts as int64: a larger one is not from torch (2**80 elements, 10**400)
MAX_RANKS = 1 << 20     # the most ranks the model prices (plan's MAX_NODES x 8): more is no job's world_size


def count(name: str, value, low: int = 0, high: int = MAX_COUNT):
    """A count as a trace writes it: an int, or an int written as a string of ASCII digits or a whole float
    ("8", 8.0); None stays None; anything else (text, "²", NaN, a list, outside low..high) is an OddField."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else None
    if text is not None and text.isascii() and text.lstrip("-").isdigit() and len(text) <= 20:
        value = int(text)   # ASCII and short: never "²" (isdigit, not int) nor past int()'s 4300-digit limit
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise OddField(name, value)
    return value
