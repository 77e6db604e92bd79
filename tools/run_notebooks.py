"""Execute notebooks top to bottom in a fresh kernel and save them with their outputs and their widgets' state.

    python tools/run_notebooks.py                       # every notebook in notebooks/
    python tools/run_notebooks.py notebooks/00_start_here.ipynb

Run it after editing a notebook, then commit the result: nbval checks the saved outputs, and the book
(`python3 course.py book`) shows them. nbclient keeps the state of every widget the kernel created in the
notebook's metadata (widgets / application/vnd.jupyter.widget-state+json), which is how the book shows
each widget's initial view without a kernel; the run fails if a widget view's model is not saved.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def unsaved_widget_views(nb) -> list[str]:
    """The model ids of widget views in the outputs whose state the notebook's metadata does not hold."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    views = [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells if c.cell_type == "code"
             for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    return [v for v in views if v not in state]


def run(path: Path, timeout: int = 120) -> float:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    missing = unsaved_widget_views(nb)
    if missing:
        raise RuntimeError(f"{path.name}: widget views without saved state (the book could not show them): {missing}")
    nbformat.write(nb, path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    for p in paths:
        print(f"{p.name}: {run(p):.1f} s", flush=True)
