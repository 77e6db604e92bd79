"""Execute notebooks top to bottom in a fresh kernel and save them with their outputs.

    python tools/run_notebooks.py                       # every notebook in notebooks/
    python tools/run_notebooks.py notebooks/00_start_here.ipynb

Run it after editing a notebook, then commit the result: nbval checks the saved outputs.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def run(path: Path, timeout: int = 120) -> float:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for p in paths:
        print(f"{p.name}: {run(p):.1f} s", flush=True)
