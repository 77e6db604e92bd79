"""The what-if against runs (issue 34's test): a data-parallel job on the emulated 2-node cluster is recorded,
its step predicted at 1/4x and 4x the NIC's bandwidth and on twice the nodes, then each is run and measured
(commlib.profiling.jobs.emulated_job.predict_and_run, what benchmarks/whatif_accuracy.py prints). The benchmark holds
the issue's goal (median error <= 10% on a quiet machine); this test a bound that a loaded CI machine cannot
break, and the direction of every change."""

import sys

import cloudpickle
import pytest

import commlib as cl
from commlib.profiling.jobs import emulated_job as ej

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# a measurement, run alone (course.py test runs these after the rest): beside another worker's tests, in CI's
# first phase, its 4-rank run took 30% longer than predicted and broke the bound (median error 0.28)
@pytest.mark.alone
def test_the_replay_predicts_other_links_and_more_nodes_of_an_emulated_job(tmp_path):
    with cl.Cluster(world_size=2, timeout=300) as small, cl.Cluster(world_size=4, timeout=300) as large:
        result = ej.predict_and_run(small, large, str(tmp_path), bandwidth=100e6, latency=5e-4, steps=3, recorded=2)
    rows = {r["name"]: r for r in result["rows"]}
    identity = result["report"]["scenarios"][1]
    assert identity["step_us"] * 1e-6 == rows["measured"]["predicted_s"]   # the replay reproduces the trace
    # the directions: a slower link costs, more nodes cost (predicted and measured: both by tens of ms); a faster
    # link saves (predicted: measured, its few ms are within a loaded machine's noise)
    for key in ("predicted_s", "measured_s"):
        assert rows["1/4 bandwidth"][key] > 1.3 * rows["measured"][key]
        assert rows["2x nodes"][key] > 1.1 * rows["measured"][key]
    assert rows["4x bandwidth"]["predicted_s"] <= rows["measured"]["predicted_s"]
    assert ej.median_error(result) < 0.25, result["rows"]
    assert all(abs(r["error"]) < 0.45 for r in result["rows"]), result["rows"]


def test_the_committed_run_met_the_goal_and_says_where_it_ran():
    run = ej.load_accuracy()
    assert {r["name"] for r in run["rows"]} == {"measured", "1/4 bandwidth", "4x bandwidth", "2x nodes"}
    assert run["median_error"] == ej.median_error(run) <= 0.10
    assert run["cpus"] and run["load"] and run["command"].startswith("python benchmarks/whatif_accuracy.py")


def test_the_committed_kernel_network_run_holds_its_rows_and_its_statistics():
    """benchmarks/whatif_accuracy.py --network kernel: every job of emulated_job.JOBS (five kinds: DDP twice, FSDP2,
    tensor parallelism, a CNN with BatchNorm) and torch DDP on 2 x 2; the median and p90 it states are those of its
    rows for a real cluster (what the goal is checked on is computed, not written), its scale-outs predicted for
    this machine too, their errors apart."""
    import statistics

    run = ej.load_accuracy(ej.ACCURACY_KERNEL)
    jobs = {r["job"] for r in run["rows"]}
    assert run["network"] == "kernel" and jobs >= set(ej.JOBS) and len(jobs) >= 6
    assert run["noise_floor"]["runs"] == 2 and all(len(r["runs_s"]) == 2 for r in run["rows"] if r["measured_s"])
    pairs = [r for r in run["rows"] if r["scenario"] != "identity replay" and r["measured_s"] and r["predicted_s"]
             and r["cluster"] == "real"]
    assert len(pairs) >= 40 and run["pairs"] == len(pairs) and len({r["scenario"] for r in pairs}) >= 8
    for r in run["rows"]:
        if r["measured_s"] and r["predicted_s"]:
            assert r["error"] == r["predicted_s"] / r["measured_s"] - 1
    errors = sorted(abs(r["error"]) for r in pairs)
    assert run["median_error"] == statistics.median(errors)
    assert run["p90_error"] == errors[min(len(errors) - 1, int(0.9 * len(errors)))]
    here = [r for r in run["rows"] if r["cluster"] == "this machine" and r["measured_s"]]
    assert {r["scenario"].removesuffix(" (this machine)") for r in here} == {"4 nodes", "2 GPUs/node, 1 NIC(s)",
                                                                             "2 GPUs/node, 2 NIC(s)"}
    assert run["this_machine_error_max"] == max(abs(r["error"]) for r in here)
    assert run["machine"]["cpus"] and len(run["load"]) == 2


class _Runs:
    """A stand-in Cluster: each run returns the next step time (two ranks, three steps each) and keeps its knobs."""

    def __init__(self, steps):
        self.steps, self.calls = list(steps), []

    def run(self, fn, folder, **kw):
        assert fn is ej.train and folder == ""
        self.calls.append(kw)
        s = self.steps.pop(0)
        return [{"step_s": [s, s, s]}, {"step_s": [s / 2, s, s / 2]}]


def test_chapter_9s_live_check_takes_the_faster_re_run_of_the_job_as_its_base():
    # CI (nbval of chapter 9 beside other chapters on 2 cores) once re-ran the job at 109 ms where it runs at 70: the
    # change measured from that one re-run read x0.81 for a scenario predicted and run at x1.27 (issue 64)
    report = {"scenarios": [{"name": "measured", "step_us": 70e3}, {"name": "slow", "step_us": 140e3},
                            {"name": "buckets", "step_us": 84e3}]}
    runs = _Runs([0.109, 0.150, 0.089, 0.072])   # before (a busy second), the two scenarios, after
    live = ej.run_scenarios(runs, report, {"slow": {"bandwidth": 25.0}, "buckets": {"bucket_mb": 4}},
                           bandwidth=100.0, latency=1e-3)
    assert live["base_s"] == (0.109, 0.072)
    base = {"bandwidth": 100.0, "latency": 1e-3, "recorded": 0}   # timed, not recorded
    assert runs.calls == [base, {**base, "bandwidth": 25.0}, {**base, "bucket_mb": 4}, base]
    rows = {r["name"]: r for r in live["rows"]}
    assert rows["slow"]["change_predicted"] == pytest.approx(2.0)
    assert rows["slow"]["change_measured"] == pytest.approx(0.150 / 0.072)
    assert rows["buckets"]["predicted_s"] == pytest.approx(0.084)
    assert rows["buckets"]["measured_s"] == 0.089
    assert rows["buckets"]["change_measured"] == pytest.approx(0.089 / 0.072)
    with pytest.raises(ValueError, match=r"scenarios must be named as in the report .*got \['2x'\]"):
        ej.run_scenarios(_Runs([]), report, {"2x": {}}, bandwidth=100.0)
