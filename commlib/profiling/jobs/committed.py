"""A committed benchmark run (benchmarks/*.json) that a chapter shows: read whole, or a clear error naming the script
that writes it (a copy of notebooks/ without benchmarks/ beside it, as the browser test serves, has none)."""

import json
from pathlib import Path


def load_committed(path, script: str) -> dict:
    """The JSON at path; FileNotFoundError naming `script` (benchmarks/NAME.py) where it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run {script} from a clone of the course")
    with open(path) as f:
        return json.load(f)
