"""Execute notebooks top to bottom in a fresh kernel and save them with their outputs and their widgets' state.

    python tools/run_notebooks.py                       # every notebook in notebooks/
    python tools/run_notebooks.py notebooks/00_start_here.ipynb
    python tools/run_notebooks.py --kernelspec-only     # only write the kernel's own kernelspec; runs nothing

Run it after editing a notebook, then commit the result: nbval checks the saved outputs, and the book
(`python3 course.py book`) shows them. nbclient keeps the state of every widget the kernel created in the
notebook's metadata (widgets / application/vnd.jupyter.widget-state+json), which is how the book shows
each widget's initial view without a kernel; the run fails if a widget view's model is not saved.
"""

import os
import sys
import time
import uuid
from pathlib import Path

import nbformat
from jupyter_core.paths import jupyter_runtime_dir
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
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


KERNEL = "python3"


def kernelspec(name: str = KERNEL) -> dict:
    """The notebook metadata JupyterLab writes for kernel `name`: its kernel.json's display_name and language.
    A notebook saved with anything else (ipykernel's "Python 3 (ipykernel)" against nbformat's default "Python 3")
    opens modified in JupyterLab, which asks to save it on close."""
    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def write_kernelspec(paths) -> list[Path]:
    """Set each notebook's metadata.kernelspec to kernelspec(), touching nothing else (no cell runs);
    -> the notebooks changed. The one command for it: python tools/run_notebooks.py --kernelspec-only"""
    want, changed = kernelspec(), []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if dict(nb.metadata.get("kernelspec", {})) != want:
            nb.metadata["kernelspec"] = want
            nbformat.write(nb, path)
            changed.append(path)
    return changed


class UnixSocketKernelManager(KernelManager):
    """A kernel reached over Unix sockets (ipc), as course.py lab's kernels are (TCP on Windows): no
    "Kernel is running over TCP without encryption" warning from every run, which nobody can act on."""

    def __init__(self, **kwargs):
        if os.name != "nt":
            kwargs = {"transport": "ipc", "ip": _socket_path(), **kwargs}
        super().__init__(**kwargs)


def _socket_path() -> str:
    """An absolute path for the kernel's sockets. Without one, jupyter_client names them 'kernel-ipc' relative
    to each process's folder: the kernel binds them in the notebook's folder, this client looks in its own, and
    the kernel never answers (a run from the repository's root timed out). Jupyter Server has no such problem:
    it names them after the kernel's connection file, in Jupyter's runtime folder."""
    runtime = jupyter_runtime_dir()
    os.makedirs(runtime, exist_ok=True)
    return os.path.join(runtime, f"run-notebooks-{uuid.uuid4().hex[:12]}-ipc")


def run(path: Path, timeout: int = 120) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = kernelspec(KERNEL)  # saved as the kernel that ran it reports itself
    t0 = time.perf_counter()
    NotebookClient(nb, kernel_manager_class=UnixSocketKernelManager, timeout=timeout, kernel_name=KERNEL,
                   store_widget_state=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    missing = unsaved_widget_views(nb)
    if missing:
        raise RuntimeError(f"{path.name}: widget views without saved state (the book could not show them): {missing}")
    nbformat.write(nb, path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    args = sys.argv[1:]
    only_kernelspec = "--kernelspec-only" in args
    paths = [Path(p) for p in args if p != "--kernelspec-only"] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    if only_kernelspec:
        for p in write_kernelspec(paths):
            print(f"{p.name}: kernelspec set to {kernelspec()['display_name']!r}")
    else:
        for p in paths:
            print(f"{p.name}: {run(p):.1f} s", flush=True)
