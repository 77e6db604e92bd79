"""replay/compute.py and what whatif does with it (issue 64): the compute stretched with the gaps kept, calibrated to
the job's untraced step (the profiler's time kept out), priced for ranks sharing this machine's cores; what a
group does (gradients, activations, unknown) in the scale-out's words; a scenario on the measured network gives
the identity replay's answer."""

import json

import pytest

from commlib import cost
from commlib import topology as topo
from commlib.profiling import traces as tr
from commlib.profiling.replay import compute, graph, whatif
from commlib.profiling.report.whatif import format_report

LINK = cost.Link("here", 1e9, 10e-6, "test")
HERE = topo.Topology(2, 1, LINK, LINK)


def job(nbytes=1 << 20):
    """test_profiling_whatif's two ranks: rank 0 computes [0, 50], queues at 30; rank 1 computes [0, 70], queues
    at 75 (last); the call ends at 90 (transfer 15); both compute [91, 100]. Its step: 70 + 5 + 15 + 1 + 9."""
    out = []
    for r, (busy, start) in enumerate(((50.0, 30.0), (70.0, 75.0))):
        call = tr.Call(r, "all_reduce", "0", 2, nbytes, "float32", start, 90.0 - start, None, None, None)
        rt = tr.RankTrace(f"rank{r}.json", r, 2, "gloo", None, [call], [(0.0, busy), (91.0, 100.0)], (0.0, 100.0))
        rt.issued = {0: start}
        out.append(rt)
    return out


def in_chinese(report) -> str:
    """The report's text in the Chinese edition, its spaces and line breaks taken out."""
    from commlib.ui import language

    language.set_language("zh_CN")
    try:
        return "".join(format_report(report).split())
    finally:
        language.set_language(None)


def test_a_stretch_lengthens_each_compute_span_and_keeps_the_gaps_and_the_calls():
    g = graph.build(job())
    s = compute.stretch(g, 2.0)
    r0, r1 = s.ranks
    assert r0.spans.tolist() == [[0.0, 100.0], [141.0, 159.0]]   # 91 moves by the 50 us of compute before it
    assert r0.calls[0].start_us == 60.0 and r0.calls[0].duration_us == 60.0   # queued at 30: 30 of compute before
    assert r1.queue == [145.0]   # 70 of compute, then the traced 5 us gap
    assert s.transfer == g.transfer
    # rank 1 computes 140, 5 us to its call, the 15 us transfer, 1 us to wake, 18 us of compute
    assert graph.replay(s)["step_us"] == pytest.approx(140 + 5 + 15 + 1 + 18)
    assert graph.replay(compute.stretch(g, [1.0, 1.0]))["step_us"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="factors must be one positive number per rank"):
        compute.stretch(g, [1.0])


def test_calibrate_finds_the_compute_factor_that_replays_the_untraced_step():
    g = graph.build(job())
    f, got = compute.calibrate(g, 70.0)   # 79 f + 21 = 70
    assert f == pytest.approx(49 / 79, rel=1e-3) and got == pytest.approx(70.0, rel=1e-3)
    assert compute.calibrate(g, 120.0) == (1.0, pytest.approx(100.0))   # no faster untraced: nothing changes
    # more than the compute can explain even at x0.5 (79 x 0.5 + 21 = 60.5 > 30): nothing corrected, said so
    assert compute.calibrate(g, 30.0) == (1.0, pytest.approx(100.0))
    report = whatif.whatif(job(), [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=30e-6)
    assert report["profiler"]["compute_factor"] == 1.0 and report["scenarios"][2]["step_us"] == pytest.approx(100.0)
    assert "more than the compute can explain at x0.5" in " ".join(format_report(report).split())


def test_a_traced_step_within_the_noise_of_the_untraced_one_is_left_as_it_is():
    """100 us traced against 97 untraced (3%, within compute.NOISE): nothing corrected, and the line says why;
    against 95 (5.3%) the compute is scaled."""
    g = graph.build(job())
    assert compute.NOISE == 0.05 and compute.calibrate(g, 97.0) == (1.0, pytest.approx(100.0))
    assert compute.calibrate(g, 95.0)[0] < 1.0
    report = whatif.whatif(job(), [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=97e-6)
    assert report["profiler"]["compute_factor"] == 1.0 and report["profiler"]["noise"] == 0.05
    assert "x1.03: within the noise of a few steps (5%), nothing corrected" in " ".join(format_report(report).split())
    text = in_chinese(report)
    assert "在只测几步的噪声（5%）以内，未做校正" in text and "within the noise" not in text


def test_the_profilers_time_is_taken_out_up_to_its_cost_per_recorded_op():
    """Where the traces count their ops, calibrate takes out at most compute.PER_OP_US a recorded op
    (compute.floor): 100 us traced against 90 untraced (11%, beyond compute.NOISE; 79 f + 21 = 90) is corrected
    where 3 ops a rank can add it (the compute x0.826 at most) and left where 1 op a rank cannot (x0.942 at most:
    95.4 us), and the line says which; the loop then records again (network_whatif.slowed). Within NOISE nothing
    is corrected, whatever the ops."""
    from commlib.profiling.jobs import network_whatif

    def counted(ops):
        ranks = job()
        for r in ranks:
            r.ops = ops
        return ranks

    assert compute.PER_OP_US == 4.0
    busy = 59.0 + 79.0   # the two ranks' compute
    many, few = graph.build(counted(3)), graph.build(counted(1))
    assert compute.floor(many) == pytest.approx(1 - 4.0 * 6 / busy)
    assert compute.floor(few) == pytest.approx(1 - 4.0 * 2 / busy)
    assert compute.floor(graph.build(job())) == compute.MIN_FACTOR   # not counted
    assert compute.floor(graph.build(counted(1000))) == compute.MIN_FACTOR   # never below it
    f, got = compute.calibrate(many, 90.0)
    assert f == pytest.approx(69 / 79, rel=1e-3) and got == pytest.approx(90.0, rel=1e-3)
    assert compute.calibrate(few, 90.0) == (1.0, pytest.approx(100.0))
    assert compute.calibrate(many, 97.0) == (1.0, pytest.approx(100.0))   # within NOISE

    def line(ops, untraced):
        report = whatif.whatif(counted(ops), [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=untraced)
        return report, " ".join(format_report(report).split())
    report, text = line(3, 90e-6)
    assert report["profiler"]["ops"] == 3 and report["profiler"]["floor"] == pytest.approx(1 - 24 / busy)
    assert report["scenarios"][2]["step_us"] == pytest.approx(90.0, rel=1e-3)
    assert "every scenario's compute x0.873 (x0.83 at most)" in text and not network_whatif.slowed(report)
    report, text = line(1, 90e-6)
    assert report["scenarios"][2]["step_us"] == pytest.approx(100.0) and network_whatif.slowed(report)
    assert ("x1.11: more than the profiler adds to 1 ops a step (4 us each at most, the compute x0.94): the calls, "
            "the gaps between ops, or a host busy while it recorded, which slows all of these: nothing corrected; "
            "record again") in text
    text = in_chinese(report)
    assert "超出profiler给每步1个算子所加的开销（每个最多4µs，即计算×0.94）" in text and "more than" not in text


def test_the_traced_step_is_a_median_over_the_marked_steps_as_the_untraced_one_is():
    """job() marked as 3 ProfilerSteps of 20, 20 and 60 us (a step the host held up): the traced step is their
    median, 20 us, against 19 untraced (x1.05: beyond NOISE), and the replay (a mean: 33.3 us a step) is calibrated
    to 19 x 33.3 / 20 (79 f + 21 = 95 us in all). Against the mean it would read x1.75, more than the compute can
    explain."""
    ranks = job()
    for r in ranks:
        r.steps = [(0.0, 20.0), (20.0, 40.0), (40.0, 100.0)]
    report = whatif.whatif(ranks, [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=19e-6)
    p = report["profiler"]
    assert p["traced_median"] and p["traced_us"] == pytest.approx(20.0) and p["ratio"] == pytest.approx(20 / 19)
    assert p["traced_mean_us"] == pytest.approx(100 / 3)
    assert p["compute_factor"] == pytest.approx(74 / 79, rel=1e-3)
    assert report["scenarios"][2]["step_us"] == pytest.approx(95 / 3, rel=1e-3)
    ranks[1].steps = ranks[1].steps[:2]   # the ranks mark different steps: the replay's mean, as before
    p = whatif.whatif(ranks, [], measured=HERE, untraced=19e-6)["profiler"]
    assert not p["traced_median"] and p["ratio"] == pytest.approx(100 / 2 / 19)


def test_the_traces_count_the_cpu_ops_their_compute_is_made_of(tmp_path):
    from commlib.profiling.jobs import synthetic

    paths = synthetic.write_job(str(tmp_path / "t"), ranks=2, events=400, form="cpu")
    with open(paths[0]) as f:
        events = json.load(f)["traceEvents"]
    compute = [e for e in events if e.get("cat") == "cpu_op" and not e["name"].startswith("c10d::")]
    assert len(compute) > 100 and [r.ops for r in tr.load(paths)] == [len(compute)] * 2
    assert [r.ops for r in graph.build(tr.load(paths)).ranks] == [len(compute)] * 2


def test_whatif_keeps_the_profilers_time_out_of_its_scenarios_and_says_so():
    report = whatif.whatif(job(), [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=70e-6)
    measured, identity, same = report["scenarios"]
    assert measured["step_us"] == identity["step_us"] == pytest.approx(100.0)   # the traced job, as traced
    assert same["step_us"] == pytest.approx(70.0, rel=1e-3)
    p = report["profiler"]
    assert p["ratio"] == pytest.approx(100 / 70) and p["compute_factor"] == pytest.approx(49 / 79, rel=1e-3)
    assert p["source"] == "given"
    text = " ".join(format_report(report).split())
    assert "profiler: traced steps 0.10 ms, untraced 0.07 ms (given), x1.43: every scenario's compute x0.620" in text
    slow = whatif.whatif(job(), [whatif.Scenario("same", topology=HERE)], measured=HERE, untraced=200e-6)
    assert slow["profiler"]["compute_factor"] == 1.0 and slow["scenarios"][2]["step_us"] == pytest.approx(100.0)
    assert "no faster without the profiler, nothing corrected" in " ".join(format_report(slow).split())
    none = whatif.whatif(job(), [whatif.Scenario("same", topology=HERE)], measured=HERE)
    assert none["profiler"] is None and "(nothing corrected)" in format_report(none)
    for bad in (0, -1.0, float("nan"), "1"):
        with pytest.raises((ValueError, TypeError), match="untraced"):
            whatif.whatif(job(), [], measured=HERE, untraced=bad)


def test_the_untraced_step_is_read_from_the_traces_and_a_bad_one_is_named(tmp_path):
    from commlib.profiling.jobs import synthetic

    paths = synthetic.write_job(str(tmp_path / "t"), ranks=2, events=400, form="cpu")
    traced = whatif.whatif(paths, [])["scenarios"][0]["step_us"]
    for value in ({"step_s": traced * 0.8e-6}, {"step_s": "fast"}):
        for i, p in enumerate(paths):
            with open(p) as f:
                doc = json.load(f)
            doc["commlib_untraced"] = value   # rank 0's after traceEvents, rank 1's before
            doc = doc if i == 0 else {"commlib_untraced": value, **{k: v for k, v in doc.items() if k != "commlib_untraced"}}
            with open(p, "w") as f:
                json.dump(doc, f)
        if value["step_s"] == "fast":
            with pytest.raises(ValueError, match=r"rank\d.json: its commlib_untraced is not"):
                whatif.whatif(paths, [])
            continue
        assert [r.untraced for r in tr.load(paths)] == [value, value]
        p = whatif.whatif(paths, [])["profiler"]
        assert p["source"] == "traces" and p["untraced_us"] == pytest.approx(traced * 0.8)
        assert p["ratio"] == pytest.approx(1 / 0.8)


def test_record_writes_the_untraced_step_into_the_trace(tmp_path):
    from commlib.profiling.jobs import recording

    assert recording.job_step_s([0.3, 0.1, 0.2]) == pytest.approx(0.2)   # one rank: its median
    path = recording.record(lambda: sum(range(100)), str(tmp_path / "rank{rank}.json"), untraced_s=0.0125)
    with open(path) as f:
        assert json.load(f)[recording.UNTRACED_KEY] == {"step_s": 0.0125}
    with pytest.raises(ValueError, match="untraced_s must be"):
        recording.record(lambda: None, str(tmp_path / "rank{rank}.json"), untraced_s=-1.0)


def test_this_machine_stretches_compute_by_the_ranks_per_core_and_says_which_cluster():
    assert compute.share(4, 2, 2) == 2.0 and compute.share(2, 2, 2) == 1.0 and compute.share(2, 2, 1) == 1.0
    assert compute.share(8, 4, 2) == 2.0 and compute.share(2, 4, 2) == 0.5 and compute.share(4, 2, 8) == 1.0
    real, here = (whatif.Scenario("x2", nodes=4, this_machine=m) for m in (False, True))
    report = whatif.whatif(job(), [real, here], measured=HERE, cores=2)
    a, b = report["scenarios"][2:]
    assert (a["name"], a["cluster"], b["name"], b["cluster"]) == ("x2", "real", "x2 (this machine)", "this machine")
    assert b["ranks"][1]["compute_us"] == pytest.approx(2 * a["ranks"][1]["compute_us"])
    transfer = a["step_us"] - (70 + 5 + 1 + 9)   # the same re-priced call in both
    assert b["step_us"] == pytest.approx(140 + 5 + transfer + 1 + 18)
    assert any("on this machine (2 usable core(s)): 4 ranks against the traced 2, each rank's compute x2.00" in line
               for line in b["assumptions"])
    assert "the new ranks as fast as the traced ones" in a["assumptions"][0]
    assert not any("as fast as the traced" in line for line in b["assumptions"])
    text = format_report(report)
    assert "scenarios marked (this machine): the emulated cluster" in text
    roomy = whatif.whatif(job(), [here], measured=HERE, cores=4)["scenarios"][2]
    assert roomy["step_us"] == pytest.approx(a["step_us"])   # 4 ranks on 4 cores: as fast as a real cluster
    with pytest.raises(ValueError, match="cores"):
        whatif.whatif(job(), [here], measured=HERE, cores=0)


def test_this_machine_leaves_the_emulated_accelerators_compute_unstretched():
    """commlib's emulated accelerator sleeps (RankTrace.offcore): on this machine only the compute that takes a
    core grows with the ranks per core."""
    import numpy as np

    assert compute._minus(np.array([[0.0, 10.0], [20.0, 30.0]]), np.array([[5.0, 25.0]])).tolist() == [
        [0.0, 5.0], [25.0, 30.0]]
    ranks = job()
    ranks[1].offcore = np.array([[0.0, 40.0]])   # 40 of rank 1's 70 us of compute: the accelerator
    here = whatif.Scenario("x2", nodes=4, this_machine=True)
    b = whatif.whatif(ranks, [here], measured=HERE, cores=2)["scenarios"][2]
    assert b["ranks"][1]["compute_us"] == pytest.approx(40 + 2 * 30 + 2 * 9)   # the 30 and 9 us on a core, x2
    plain = whatif.whatif(job(), [here], measured=HERE, cores=2)["scenarios"][2]
    assert plain["ranks"][1]["compute_us"] == pytest.approx(2 * 79)   # without it: every span x2
    line = "commlib's emulated accelerator takes no core: its 29% of the compute is not stretched"   # 40 of 138
    assert line in b["assumptions"] and not any("accelerator" in x for x in plain["assumptions"])
    from commlib.ui import language

    language.set_language("zh_CN")
    try:
        text = format_report(whatif.whatif(ranks, [here], measured=HERE, cores=2))
    finally:
        language.set_language(None)
    assert "模拟加速器不占用核" in "".join(text.split()) and "takes no core" not in text


def test_the_reader_marks_the_emulated_accelerators_ops_as_taking_no_core():
    from commlib.profiling.read import records
    from commlib.profiling.read.events import Event

    rec = records.Records("x")
    rec.add([Event("X", "cpu_op", "commlib::accelerator", 0.0, 5.0, 1, 1), Event("X", "cpu_op", "aten::mm", 5.0, 1.0, 1, 1)])
    assert [k & records.OFFCORE for k in rec.cpu.kinds] == [records.OFFCORE, 0]


def test_a_scenario_on_the_measured_network_gives_the_identity_replay():
    """Before, it re-priced every call by the model (its excess kept, its flows shared anew): on a real job up to 2.9%
    off the identity replay (issue 64), two answers to one question. Now it keeps every measured duration."""
    from commlib.network import links, spec

    s = spec.parse("2x1@20e6")
    report = whatif.whatif(job(), [whatif.Scenario("same", topology=links.topology(s)),
                                   whatif.Scenario("faster", topology=links.topology(spec.parse("2x1@40e6")))],
                           measured=links.topology(s), excess="bytes")   # equal, not the same object
    _, identity, same, faster = report["scenarios"]
    assert same["step_us"] == identity["step_us"] and same["critical_path"] == identity["critical_path"]
    assert same["assumptions"] == ["the network as measured: every call keeps its measured duration, as in the "
                                   "identity replay"]
    assert faster["step_us"] < identity["step_us"] and not faster["assumptions"]
    bucketed = whatif.whatif(job(), [whatif.Scenario(topology=links.topology(s), bucket_mb=4)],
                             measured=links.topology(s))["scenarios"][2]   # a change: priced, not kept
    assert not any("network as measured" in line for line in bucketed["assumptions"])


# --------------------------------------------------------------------------------------- what groups do
def _rank(r, calls, spans, waits, steps=None):
    rt = tr.RankTrace(f"rank{r}.json", r, 2, "gloo", None, calls, spans, (spans[0][0], spans[-1][1]))
    rt.issued = {i: c.start_us for i, c in enumerate(calls)}
    rt.waits = waits
    rt.steps = steps or []
    return rt


def tensor_parallel():
    """Per rank, one step: four all-reduces of one activation's size, each waited for as soon as queued, two in
    forward (after 10 and 20 us of compute), two in backward."""
    return _waited_at_once("all_reduce", 1 << 16, (10.0, 25.0, 50.0, 75.0),
                           [(0.0, 10.0), (15.0, 25.0), (30.0, 50.0), (55.0, 75.0), (80.0, 90.0)])


def _waited_at_once(op: str, nbytes: int, at: tuple, spans: list):
    """Per rank, one step: a call of `op` and nbytes at each time in `at` (5 us each), each waited for as soon as
    queued, between the compute spans."""
    out = []
    for r in range(2):
        calls = [tr.Call(r, op, "0", 2, nbytes, "float32", t, 5.0, None, None, None) for t in at]
        out.append(_rank(r, calls, spans, {i: (t, t + 5.0) for i, t in enumerate(at)}))
    return out


def data_parallel():
    """Per rank, one step: forward [0, 40], backward [40, 100] issuing three buckets of their own sizes at 50, 70
    and 90, the end of backward waiting for the last, then the optimizer [120, 130]."""
    out = []
    for r in range(2):
        calls = [tr.Call(r, "all_reduce", "0", 2, n, "float32", t, 25.0, None, None, None)
                 for n, t in ((3 << 20, 50.0), (2 << 20, 70.0), (1 << 20, 95.0))]
        out.append(_rank(r, calls, [(0.0, 100.0), (120.0, 130.0)], {2: (100.0, 120.0)}))
    return out


def test_roles_tell_activations_from_gradients_and_say_unknown_otherwise():
    assert compute.roles(graph.build(tensor_parallel()), ["0"]) == {"0": "activations"}
    assert compute.roles(graph.build(data_parallel()), ["0"]) == {"0": "gradients"}
    early = data_parallel()   # buckets queued in the first tenth of the compute, not waited for: neither
    for rt in early:
        rt.calls = [tr.Call(rt.rank, c.op, c.group, c.group_size, c.bytes, c.dtype, c.start_us - 45, c.duration_us,
                            None, None, None) for c in rt.calls]
        rt.issued = {i: c.start_us for i, c in enumerate(rt.calls)}
        rt.waits = {}
    assert compute.roles(graph.build(early), ["0"]) == {"0": "unknown"}


def fully_sharded():
    """Per rank, one step as FSDP2 runs it on Gloo: forward [0, 34], then backward, whose four layers each end in a
    reduce-scatter of one size, waited for at once (a Gloo reduce_scatter is an all-reduce of the whole input)."""
    return _waited_at_once("reduce_scatter", 1 << 18, (40.0, 62.0, 84.0, 106.0),
                           [(0.0, 40.0), (45.0, 62.0), (67.0, 84.0), (89.0, 106.0), (111.0, 120.0)])


def test_reduce_scatters_waited_at_once_in_the_backward_are_gradients_not_activations():
    """FSDP2's reduce-scatters have one size and are waited for at once, as a tensor-parallel group's all-reduces
    are; they come after the forward (the committed kernel run's FSDP2 job: its first at 38-40% of the step's
    compute, read as tensor parallelism while the rule took anything before half)."""
    assert compute.roles(graph.build(fully_sharded()), ["0"]) == {"0": "gradients"}
    lines = " ".join(whatif.whatif(fully_sharded(), [whatif.Scenario(nodes=4)], measured=HERE)
                     ["scenarios"][2]["assumptions"])
    assert "data-parallel group(s) 0 grow x2" in lines and "activations" not in lines


def test_a_step_that_a_stray_op_slowed_is_outvoted():
    """Three steps of the data-parallel job; in one, an op after the buckets (a loaded machine's stray, 769 us)
    puts them in its first tenth of compute. Two of three steps still say gradients (on every rank): gradients.
    Slowed in two of the three, the group is "unknown"."""
    def three(slowed):
        out = []
        for rank in data_parallel():
            calls, spans, waits, steps = [], [], {}, []
            for k in range(3):
                o = 1000.0 * k
                calls += [tr.Call(c.rank, c.op, c.group, c.group_size, c.bytes, c.dtype, c.start_us + o,
                                  c.duration_us, None, None, None) for c in rank.calls]
                spans += [(o, o + 100.0), (o + 120.0, o + 130.0)] + ([(o + 131.0, o + 900.0)] if k in slowed else [])
                waits[3 * k + 2] = (o + 100.0, o + 120.0)
                steps.append((o, o + 950.0))
            out.append(_rank(rank.rank, calls, spans, waits, steps))
        return out
    assert compute.roles(graph.build(three({1})), ["0"]) == {"0": "gradients"}
    assert compute.roles(graph.build(three({0, 2})), ["0"]) == {"0": "unknown"}


@pytest.mark.parametrize("make, says, not_says", [
    (tensor_parallel, ["2 -> 4 ranks: group(s) 0 all-reduce activations through every layer, forward and backward "
                       "(tensor parallelism, not data parallelism)", "same model on 4 ranks would have smaller shards",
                       "for a real cluster: compute per rank as measured"], "data-parallel group"),
    (data_parallel, ["2 -> 4 ranks: data-parallel group(s) 0 grow x2; compute per rank as measured, the new ranks "
                     "as fast as the traced ones"], "activations"),
])
def test_the_scale_out_says_what_the_growing_group_does(make, says, not_says):
    report = whatif.whatif(make(), [whatif.Scenario(nodes=4)], measured=HERE)
    lines = report["scenarios"][2]["assumptions"]
    text = " ".join(lines)
    assert all(s in text for s in says) and not_says not in text, lines
    assert report["group_roles"] == {"0": "activations" if make is tensor_parallel else "gradients"}


def test_a_group_the_replay_cannot_name_is_said_to_all_reduce_not_to_be_data_parallel():
    ranks = data_parallel()
    for rt in ranks:
        rt.compute = [(0.0, 5.0), (5.5, 100.0), (120.0, 130.0)]
        rt.calls = [tr.Call(rt.rank, c.op, c.group, c.group_size, c.bytes, c.dtype, 5.0 + i * 0.1, c.duration_us,
                            None, None, None) for i, c in enumerate(rt.calls)]
        rt.issued = {i: c.start_us for i, c in enumerate(rt.calls)}
    report = whatif.whatif(ranks, [whatif.Scenario(nodes=1)], measured=HERE)
    assert report["scenarios"][2]["assumptions"][:2] == [
        "2 -> 1 ranks: group(s) 0 that all-reduce shrink x0.5 (the traces do not show whether they carry gradients "
        "or activations)", "for a real cluster: compute per rank as measured, each rank on a processor of its own"]


def test_the_new_lines_have_chinese_translations():
    from commlib.ui import language

    language.set_language("zh_CN")
    try:
        report = whatif.whatif(tensor_parallel(), [whatif.Scenario(nodes=4, this_machine=True)], measured=HERE,
                               untraced=80e-6, cores=2)
        text = "".join(line.strip() for line in format_report(report).splitlines())
    finally:
        language.set_language(None)
    for words in ("张量并行", "本机", "profiler：记录 trace 时每步", "标有（本机）的场景"):
        assert words in text, text
    assert "tensor parallelism" not in text and "usable core" not in text


def _megatron_step(folder):
    """Inside a rank: a Megatron-style tensor-parallel MLP of 4 layers (a column- then a row-parallel matmul, the
    activations all-reduced after each layer forward and their gradients backward), recorded."""
    import torch
    import torch.distributed as dist

    from commlib.profiling.jobs.emulated_job import Copy, Reduce   # Megatron's f and g, on Gloo's all-reduce
    from commlib.profiling.jobs.recording import record

    torch.manual_seed(0)
    torch.set_num_threads(1)
    p, h = dist.get_world_size(), 64
    layers = [(torch.randn(h, 4 * h // p, requires_grad=True), torch.randn(4 * h // p, h, requires_grad=True))
              for _ in range(4)]

    x = torch.randn(32, h)

    def step():   # 4 training steps, each marked as one (commlib:step): 4 votes per rank, not one
        for _ in range(4):
            with torch.profiler.record_function("commlib:step"):
                y = x
                for a, b in layers:
                    y = Reduce.apply(torch.relu(Copy.apply(y) @ a) @ b)
                y.square().mean().backward()

    return record(step, folder + "/rank{rank}.json")


def test_a_live_megatron_style_job_is_read_as_tensor_parallel_not_data_parallel(tmp_path):
    import sys

    import cloudpickle

    import commlib as cl

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with cl.Cluster(world_size=2) as c:
        c.run(_megatron_step, str(tmp_path))
    report = whatif.whatif(str(tmp_path), [whatif.Scenario(nodes=4)], measured="dgx_h100")
    g = graph.build(tr.load(str(tmp_path)))
    votes = [compute._votes(r, "0") for r in g.ranks]
    assert [len(v) for v in votes] == [4, 4] and report["group_roles"] == {"0": "activations"}, votes
    line = report["scenarios"][2]["assumptions"][0]
    assert "all-reduce activations through every layer" in line and "data-parallel group" not in line, line


def test_the_cli_takes_this_machine_and_names_the_cluster(capsys):
    from commlib.__main__ import main

    assert main(["whatif", tr.SAMPLE, "--hardware", "dgx_h100", "--nodes", "2", "--this-machine", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["scenarios"][-1]
    assert row["name"] == "dgx_h100, 2 x 8 GPUs (this machine)" and row["cluster"] == "this machine"
    assert any(line.startswith("on this machine (") for line in row["assumptions"]), row["assumptions"]


def test_the_loops_verdict_says_how_far_the_replay_scaled_the_recorded_compute():
    from commlib.profiling.jobs import network_whatif as nw

    loop = {"base": "2x1@20e6", "scenario": "2x1@60e6", "predicted_s": 0.0216, "measured_s": 0.0218, "error": -0.01,
            "cpu_base_s": None, "cpu_s": None, "compute_factor": 0.933, "traced_vs_untraced": 1.05}
    said = nw.verdict(loop).splitlines()
    assert said[-2:] == ["the replay's compute x0.933: the recorded steps ran x1.05 their untraced time (the profiler's "
                         "own),", "so both runs are measured without it"]
    assert all(len(line) <= 100 for line in said)
    for f in (None, 1.0):
        assert "the replay's compute" not in nw.verdict({**loop, "compute_factor": f})


# ------------------------------------------------------------------------------------ a ring step's floor
def _small_calls(took_us: float, nbytes: int = 1 << 16, gap_us: float = 2000.0):
    """Two ranks, one step: four all-reduces of nbytes, each waited for at once and taking took_us, after gap_us
    of compute each (the emulated tensor-parallel job's shape)."""
    out = []
    for r in range(2):
        at = [gap_us + k * (gap_us + took_us) for k in range(4)]
        calls = [tr.Call(r, "all_reduce", "0", 2, nbytes, "float32", t, took_us, None, None, None) for t in at]
        spans = [(t - gap_us, t) for t in at] + [(at[-1] + took_us, at[-1] + took_us + gap_us)]
        out.append(_rank(r, calls, spans, {i: (t, t + took_us) for i, t in enumerate(at)}))
    return out


def test_small_calls_move_as_the_networks_measured_small_calls_do_not_as_the_model():
    """The kernel network's tensor-parallel job (issue 64): its 64 KiB all-reduces ran under their bytes' time at
    10 MB/s (HTB's burst), so at x4 the bandwidth the model moved them to nothing, where they took 2.3-2.7 ms.
    With whatif's `small` (the network's measured 2-rank calls by size and rate) a call whose steps are one packet
    moves by that table's ratio: the traced call times the table's scenario over its traced figure, its steps
    counted (4 ranks: 6 steps of a quarter of the bytes, not 2 of half); the identity replay is untouched."""
    from commlib.network import links, spec

    measured = links.topology(spec.parse("2x1@10e6"))
    x4 = whatif.Scenario("x4", topology=links.topology(spec.parse("2x1@40e6")))
    four = whatif.Scenario("4 nodes", nodes=4)
    table = lambda nbytes, rate: 2e-3 + 0.5 * nbytes / rate   # noqa: E731  (a made-up measured table)
    table.source = "a test's table"
    took = 4900.0

    def steps(small):
        got = whatif.whatif(_small_calls(took), [x4, four], measured=measured, excess="bytes", small=small)
        return [s["step_us"] for s in got["scenarios"][1:]], got["scenarios"]

    (same0, x4_0, four0), _ = steps(None)
    (same1, x4_1, four1), rows = steps(table)
    assert same1 == same0                                                   # the identity replay: as traced
    assert x4_0 < 5 * 2000.0 + 4 * 1000.0                                  # the model: the calls nearly free
    rate = 10e6 * links.PAYLOAD_FRACTION
    ratio = table(1 << 16, 4 * rate) / table(1 << 16, rate)
    assert x4_1 == pytest.approx(5 * 2000.0 + 4 * took * ratio, rel=0.01)
    ratio4 = 6 * table(2 * (1 << 14), rate) / (2 * table(1 << 16, rate))   # 6 steps of 16 KiB against 2 of 32 KiB
    assert four1 == pytest.approx(5 * 2000.0 + 4 * took * ratio4, rel=0.01)
    assert any("4 small call(s) (one packet a ring step) moved as this network's calls of their size measured "
               "(a test's table)" in a for a in rows[2]["assumptions"])
    with pytest.raises(TypeError, match="small must be a function"):
        whatif.whatif(_small_calls(took), [x4], measured=measured, small=1.5e-3)


def test_the_kernel_networks_small_calls_are_the_committed_table():
    """network.links.small_calls reads benchmarks/small_messages.json: each measured cell back at its size and
    payload rate (no higher than at a slower rate), log-log between them, held at the edges; nothing for a call
    whose steps are more than one 64 KiB packet; the pacer has none; a missing file gives none."""
    import json

    from commlib.network import links, spec
    from commlib.network.kernel import GSO_MAX, PAYLOAD_FRACTION

    with open(f"{links.ROOT}/{links.SMALL}") as f:
        run = json.load(f)
    least = links.small(spec.parse("2x1@10e6"))
    for j, n in enumerate(run["sizes"]):
        lowest = float("inf")
        for i, rate in enumerate(run["rates"]):
            lowest = min(lowest, run["mean_s"][i][j])
            want = lowest if n <= 2 * GSO_MAX else 0.0
            assert least(n, rate * PAYLOAD_FRACTION) == pytest.approx(want, rel=1e-9), (n, rate)
    assert least(1, 1.0) == pytest.approx(run["mean_s"][0][0])            # held at the edges
    assert least(2 * GSO_MAX, 1e12) == pytest.approx(least(2 * GSO_MAX, run["rates"][-1] * PAYLOAD_FRACTION))
    assert least(2 * GSO_MAX + 4, 1e7) == 0.0                               # a step of two packets: its bytes
    r = run["rates"][2] * PAYLOAD_FRACTION
    a, b = least(run["sizes"][1], r), least(run["sizes"][2], r)
    assert least((run["sizes"][1] * run["sizes"][2]) ** 0.5, r) == pytest.approx((a * b) ** 0.5)   # log-log
    assert links.small(spec.Spec(2, 1, bandwidth=1e7, kind="paced")) is None
    assert links.small_calls("/nonexistent/small_messages.json") is None


def test_commlibs_ring_on_more_ranks_waits_for_its_notices_where_they_leave_behind_data():
    """benchmarks/ring_steps.json: commlib's ring of 4 ranks on 10 MB/s NICs took 98.75 ms for a 512 KiB all-reduce
    whose bytes take 82.55 (2 ranks: none), each step's send waiting for a notice behind the receiver's 64 KiB
    packet. network.links.notice is that wait per step, as a share of a packet's time; whatif adds it to each step
    of commlib's ring on 3+ ranks where a notice leaves by a NIC that sends the ring's data (4 x 1, 2 x 2 on one
    NIC), not on a NIC per GPU of 2 x 2, not on 2 ranks, not to Gloo's own calls."""
    import json

    from commlib import topology as topo_
    from commlib.network import links, spec
    from commlib.network.kernel import GSO_MAX, PAYLOAD_FRACTION
    from commlib.profiling.replay.pricing import notice_behind_data

    with open(f"{links.ROOT}/{links.RING_STEPS}") as f:
        row = next(r for r in json.load(f)["rows"] if r["nodes"] == 4 and r["packets"] == GSO_MAX)
    share = links.ring_notice()
    assert share == pytest.approx((row["call_median_s"] - row["call_ideal_s"]) / 6 / (GSO_MAX / (10e6 * PAYLOAD_FRACTION)))
    wait = links.notice(spec.parse("4x1@10e6"))
    assert wait(1 << 20, 1e7) == pytest.approx(share * GSO_MAX / 1e7) and wait(1000, 1e7) == pytest.approx(share * 1e-4)
    assert links.notice(spec.Spec(2, 1, bandwidth=1e7, kind="paced")) is None
    shape = lambda n, g, k: topo_.Topology(n, g, LINK, LINK, k)   # noqa: E731
    assert notice_behind_data(shape(4, 1, 1), 4) and notice_behind_data(shape(2, 2, 1), 4)
    assert not notice_behind_data(shape(2, 2, 2), 4)

    measured = links.topology(spec.parse("2x1@10e6"))
    scenarios = [whatif.Scenario("4 nodes", nodes=4), whatif.Scenario("x1", topology=links.topology(spec.parse("2x1@10e6"))),
                 whatif.Scenario("2x2, 2 NICs", nodes=2, gpus_per_node=2, topology=links.topology(spec.parse("2x2x2@10e6")))]

    def steps(algorithm, notice):   # 4 calls of 512 KiB, each as long as its model: no excess to move
        ranks = _small_calls((512 << 10) / (1e7 * PAYLOAD_FRACTION) * 1e6, nbytes=512 << 10)   # its bytes' time
        for r in ranks:
            r.calls = [dataclasses.replace(c, algorithm=algorithm) for c in r.calls]
        got = whatif.whatif(ranks, scenarios, measured=measured, excess="bytes", notice=notice)["scenarios"]
        return [s["step_us"] for s in got[2:]], got[2]["assumptions"]

    import dataclasses

    (four, same, rails), said = steps("ring", wait)
    (four0, same0, rails0), _ = steps("ring", None)
    per_call = 6 * wait(128 << 10, 1e7 * PAYLOAD_FRACTION) * 1e6   # 6 steps of 128 KiB: one packet's wait each
    assert four - four0 == pytest.approx(4 * per_call, rel=0.02)
    assert same == same0 and rails == rails0
    assert any("each step waits for its receiver's notice" in line for line in said)
    (four_gloo, _, _), _ = steps(None, wait)
    (four_gloo0, _, _), _ = steps(None, None)
    assert four_gloo == four_gloo0                                    # Gloo's own ring: not paid


def test_the_kernel_networks_credit_is_what_gloo_rings_measured_per_step_size(tmp_path):
    """network.links.credit: on the kernel network, the packets of a step (at most GSO_MAX bytes) that
    benchmarks/gloo_rings.py measured a streaming Gloo call end under its bytes and one latency after idle links,
    the median of its ops per step size, interpolated in log(bytes) and held at the table's ends; no less than 0;
    none without the file; none on the pacer, which times commlib's messages only."""
    from commlib.network import links, spec
    from commlib.network.kernel import GSO_MAX

    row = lambda op, step, under, behind=False: {"op": op, "step_bytes": step, "under_packets": under,  # noqa: E731
                                                 "notice_behind_data": behind}
    path = tmp_path / "gloo_rings.json"
    path.write_text(json.dumps({"rows": [row("all_gather", 32768, 0.7), row("all_reduce", 32768, 0.5),
                                         row("all_gather", 131072, -0.1), row("all_reduce", 131072, -0.3),
                                         row("all_gather", 32768, 9.0, behind=True)]}))
    table = links.gloo_credit(str(path))
    assert [s for s, _ in table] == [32768, 131072]   # one NIC per node's row left out
    assert [u for _, u in table] == pytest.approx([0.6, 0.0])   # the medians; below 0 held at 0
    assert links._packets(table, 16384) == pytest.approx(0.6) and links._packets(table, 1 << 20) == 0.0
    assert links._packets(table, 65536) == pytest.approx(0.3)      # halfway in log(bytes)
    assert links.gloo_credit(str(tmp_path / "none.json")) == () and links._packets((), 65536) == 0.0
    committed = links.gloo_credit()   # benchmarks/gloo_rings.json
    credit = links.credit(spec.parse("2x2x2@10e6"))
    step = committed[0][0]
    assert credit(step, 9.5e6) == pytest.approx(committed[0][1] * min(step, GSO_MAX) / 9.5e6)
    assert credit(4 << 20, 9.5e6) == pytest.approx(committed[-1][1] * GSO_MAX / 9.5e6)
    assert links.credit(spec.Spec(2, 1, bandwidth=1e7, kind="paced")) is None
