"""whatif on the job a learner brings: torch DDP on 2 Gloo ranks, two Linear(1024, 1024) (8.01 MiB of gradients),
profiled as the README's recipe says (schedule(wait=0, warmup=1, active=N, repeat=1)), recorded live with 2 and
3 steps. The trace is split at ProfilerStep#N: figures per step, buckets regrouped per step by DDP's rule."""

import json
import math
import os
import subprocess
import sys

import cloudpickle
import pytest

import commlib as cl
from commlib.profiling.replay import graph, regroup, whatif
from commlib.profiling.report import whatif as whatif_report
from commlib.profiling import traces as tr

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAD_BYTES = 2 * (1024 * 1024 + 1024) * 4   # two Linear(1024, 1024): weights and biases, float32


def _recipe(folder, active, marks=True):
    """The README's recipe, in a rank: torch DDP, one warm-up step, `active` recorded, repeat=1. marks=False: the
    profiler without a schedule, around the active steps only (a trace with no ProfilerStep#N)."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from commlib.profiling.jobs.live import settle

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank = dist.get_rank()
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(1024, 1024),
                                                                        torch.nn.Linear(1024, 1024)))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(8, 1024)

    def train_step():
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()

    os.makedirs(folder, exist_ok=True)
    if not marks:
        train_step()   # the warm-up, unrecorded
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(active):
                train_step()
            settle(prof)   # DDP's last bucket recorded before the profiler stops (live.settle)
        prof.export_chrome_trace(f"{folder}/rank{rank}.json")
        return rank
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{folder}/rank{rank}.json")) as prof:
        for i in range(1 + active):
            train_step()
            if i == active:
                settle(prof)
            prof.step()
    return rank


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipe")
    with cl.Cluster(world_size=2, timeout=120) as c:
        for active in (2, 3):
            c.run(_recipe, str(folder / f"steps{active}"), active)
        c.run(_recipe, str(folder / "nomarks"), 3, False)
    return {active: str(folder / f"steps{active}") for active in (2, 3)} | {"nomarks": str(folder / "nomarks")}


def test_without_profiler_step_marks_the_optimizer_steps_split_the_trace(recorded):
    """No schedule, so no ProfilerStep#N: each step ends where torch.optim's step ends (issue 41, section 4)."""
    ranks = tr.load(recorded["nomarks"])
    assert [len(r.steps) for r in ranks] == [3, 3]
    for r in ranks:   # contiguous, in order, each holding its step's two DDP buckets
        assert all(a[1] == b[0] for a, b in zip(r.steps, r.steps[1:]))
        for start, end in r.steps:
            assert sum(c.bytes for c in r.calls if c.op == "all_reduce" and start <= c.start_us < end) == GRAD_BYTES
    report = whatif.whatif(recorded["nomarks"], [whatif.Scenario(topology="dgx_h100", bucket_mb=1)])
    assert report["steps"] == 3
    assert f"regrouped into {math.ceil(GRAD_BYTES / 2**20)} bucket(s) of 1 MiB per step" in \
        report["scenarios"][-1]["assumptions"][0]


@pytest.mark.parametrize("active", [2, 3])
def test_the_recipes_trace_is_split_into_its_steps_and_regrouped_per_step_by_ddps_rule(recorded, active):
    ranks = tr.load(recorded[active])
    assert [len(r.steps) for r in ranks] == [active, active]
    g = graph.build(ranks)
    for r in g.ranks:   # DDP's two buckets (weight + bias each) in every step, on both ranks alike
        runs = regroup.dp_calls(r, {"0"})
        assert [sum(r.calls[i].bytes for i in run) for run in runs] == [GRAD_BYTES] * active
    for mb in (1, 2, 4, 8, 16):
        report = whatif.whatif(recorded[active], [whatif.Scenario(topology="dgx_h100", bucket_mb=mb)])
        assert report["steps"] == active
        said = report["scenarios"][-1]["assumptions"]
        assert f"regrouped into {math.ceil(GRAD_BYTES / (mb * 2**20))} bucket(s) of {mb} MiB per step" in said[0]
    measured = report["scenarios"][0]
    walls = [r.wall[1] - r.wall[0] for r in ranks]
    assert measured["step_us"] == pytest.approx(max(walls) / active)   # per step: the window over its steps
    for s in report["scenarios"]:   # the path lies within the step it explains
        assert s["critical_path"]["compute_us"] + s["critical_path"]["comm_us"] <= s["step_us"] * (1 + 1e-9)
    assert f"averaged over {active} steps" in whatif_report.format_report(report)


def test_the_cli_says_how_many_steps_it_averaged_and_regroups_each(recorded):
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "commlib", "whatif", recorded[3], "--hardware", "dgx_h100",
                          "--bucket-mb", "1", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["steps"] == 3 and "9 bucket(s) of 1 MiB per step" in report["scenarios"][-1]["assumptions"][0]


def test_smaller_buckets_wait_more_on_the_comm_lane_but_hidden_and_the_output_says_so(recorded):
    report = whatif.whatif(recorded[3], [whatif.Scenario(topology="dgx_h100", bucket_mb=b) for b in (25, 0.5)])
    big, small = report["scenarios"][2:]
    for s in (big, small):
        for o in s["ranks"].values():   # waiting is part of the communication time, hidden or exposed
            assert o["waiting_us"] <= o["comm_us"] + 1e-6
            assert o["hidden_us"] + o["exposed_us"] == pytest.approx(o["comm_us"])
    text = whatif_report.format_report(report)
    assert "it adds to the step only through exposed" in text.replace("\n", " ")


RECIPE_3_STEPS = os.path.join(ROOT, "tests", "data", "ddp_recipe_3steps")   # a live recording of the recipe


@pytest.mark.parametrize("mb", [1, 4, 16])
@pytest.mark.parametrize("marks", [True, False], ids=["as read", "innermost ops only"])
def test_the_critical_path_stays_within_its_step_where_a_regrouped_wait_points_forward(mb, marks):
    """On this recording, regrouped into 4 or 16 MiB buckets, the walk back found a wait whose lane position lay
    after where the path was: it looped, and the path came out at 3.9x the step (42,319 us of compute in a
    10,913-us step). The path now only moves back, and stops (truncated) where it would loop. Its waits read
    from the innermost ops alone (as before the ops' starts and ends were read too: traces._leaves) still make
    that wait, so the guard is exercised; as read now, each wait starts where the rank last ran (DDP's
    reducer::mul_out multiplies 645 us after its last child) and none points forward."""
    import numpy as np

    from commlib.profiling import traces

    ranks = traces.load(RECIPE_3_STEPS)
    if not marks:
        for r in ranks:
            r.leaves = r.leaves[(r.leaves[:, 1] - r.leaves[:, 0]) > 1.5 * traces.MARK_US]
    report = whatif.whatif(ranks, [whatif.Scenario(topology="dgx_h100", bucket_mb=mb)])
    assert report["steps"] == 3
    for s in report["scenarios"]:
        path = s["critical_path"]
        assert path["compute_us"] + path["comm_us"] <= s["step_us"] * (1 + 1e-9), (mb, s["name"], path)
    assert report["scenarios"][-1]["critical_path"]["truncated"] == (mb != 1 and not marks)
