"""Hooks for every pytest run in this repository (tests/conftest.py holds the fixtures of tests/).

nbval's run of a chapter (notebooks/*.ipynb) is held to the book's column too: every line a cell printed in this
run, measured cells included (nbval compares none of their text), fits in tools.printed.COLUMN characters. This is
the check tests/test_browser.py makes on JupyterLab's run of the chapters it runs there; here it covers all of them.
"""

import os
import secrets
from pathlib import Path

import pytest

from tools.printed import COLUMN, wide_output_lines

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


def shown(outputs: list[dict], source: str) -> list[dict]:
    """The outputs a learner's kernel shows. nbval runs cells with store_history=False (nbval/kernel.py), and then
    IPython reads the previous cell's source to decide whether a trailing ';' hides the result: a cell ending in ';'
    gets an execute_result under nbval that JupyterLab and nbclient do not show."""
    from IPython.core.displayhook import DisplayHook

    if DisplayHook.semicolon_at_end_of_expression(source):
        return [o for o in outputs if o.get("output_type") != "execute_result"]
    return outputs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    outputs = getattr(item, "test_outputs", None)  # nbval's IPyNbCell: what this run of the cell printed
    if outputs and hasattr(item, "raise_cell_error") and Path(item.path).parent == NOTEBOOKS:
        cell = {"cell_type": "code", "id": item.name, "outputs": shown(outputs, item.cell.source)}
        wide = wide_output_lines({"cells": [cell]})
        if wide:
            item.raise_cell_error(f"printed lines wider than the book's column ({COLUMN} characters): {wide}")
    return result


def ipc_kernel_manager(base):
    """nbval's KernelManager, its kernels on Unix sockets of their own (transport ipc), as course.py lab runs them.
    Over TCP, jupyter_client picks five free ports, lets them go, and the kernel binds them once it has started:
    seconds later under load, and the suite's ranks and stores bind ports all the while. A port taken in between
    kills the kernel, and every cell of the chapter errors in setup (CI: a workshop learner's chapter 1, 18 errors,
    while the suite ran). Each kernel's sockets are named in the user's Jupyter runtime folder by a prefix of its
    own (pid and random), so two kernels never pick the same name; shutting the kernel down removes them."""
    from jupyter_core.paths import jupyter_runtime_dir

    class IpcKernelManager(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            folder = Path(jupyter_runtime_dir())
            prefix = folder / f"nbval-{os.getpid()}-{secrets.token_hex(4)}-ipc"
            if len(str(prefix)) <= 96:  # sun_path holds 107 bytes, with "-N" after the prefix; else keep tcp
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                self.transport = "ipc"
                self.ip = str(prefix)

    return IpcKernelManager


def pytest_configure(config):
    if os.name == "nt":  # no Unix sockets for zmq there
        return
    try:
        from nbval import kernel
    except ImportError:
        return
    if not getattr(kernel.KernelManager, "commlib_ipc", False):
        kernel.KernelManager = ipc_kernel_manager(kernel.KernelManager)
        kernel.KernelManager.commlib_ipc = True


DURATIONS = Path(__file__).resolve().parent / "tests" / "durations.json"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (course.py test on >= 2 cores): the files longest first, by tests/durations.json
    (tools/durations.py writes it), each file's tests in their own order. A file runs on one worker
    (--dist loadfile) and a worker takes the next file when it is done, so the last file to start is a short one
    and the workers end together. Every worker collects, and sorts, the same way."""
    if getattr(config.option, "dist", "no") == "no" or not DURATIONS.is_file():
        return
    import json

    seconds = json.loads(DURATIONS.read_text())["tests"]
    rank = {}
    for item in items:
        rank.setdefault(item.nodeid.split("::")[0], len(rank))
    items.sort(key=lambda item: (-seconds.get(item.nodeid.split("::")[0], 0.0), rank[item.nodeid.split("::")[0]]))
