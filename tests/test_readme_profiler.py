"""The README's "Diagnose your own job's traces": what prof.export_chrome_trace writes after the loop depends on
the schedule (torch 2.13): repeat=0 (torch's default) clears the window's events as the next cycle starts,
repeat=1 keeps them, and after on_trace_ready exported them a second export raises "Trace is already saved"."""

import json
import os
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _after_the_loop(tmp_path, repeat, ready):
    """-> aten::mm events in the export after the loop (3 steps: 1 warm-up, 2 active), or the error it raised."""
    kw = {"on_trace_ready": lambda p: p.export_chrome_trace(str(tmp_path / "ready.json"))} if ready else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # repeat=0's "Profiler clears events at the end of each cycle"
        with profile(activities=[ProfilerActivity.CPU], **kw,
                     schedule=schedule(wait=0, warmup=1, active=2, repeat=repeat)) as prof:
            for _ in range(3):
                torch.ones(8, 8) @ torch.ones(8, 8)
                prof.step()
        path = tmp_path / "after.json"
        try:
            prof.export_chrome_trace(str(path))
        except RuntimeError as e:
            return str(e)
    with open(path) as f:
        return sum(e.get("name") == "aten::mm" for e in json.load(f)["traceEvents"])


@pytest.mark.parametrize("repeat, ready, want", [(0, False, 0), (1, False, 2), (1, True, "Trace is already saved")])
def test_an_export_after_the_loop_depends_on_the_schedule_as_the_readme_says(tmp_path, repeat, ready, want):
    got = _after_the_loop(tmp_path, repeat, ready)
    assert got == want if isinstance(want, int) else want in got
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = " ".join(f.read().split())
    assert "with `repeat=0`, torch's default" in readme and "raises `RuntimeError: Trace is already saved`" in readme
