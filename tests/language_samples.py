"""What commlib shows a learner, gathered by running it (tests/test_language.py): every hint each checker gives
for wrong answers, every text each figure function draws, every caption and read-out of each widget.

Hints: each checker is called with odd answers, with each of its options, and once for every `close` its module
makes, that one taken as the match (so every branch of a numeric checker is reached). Figures: drawn with sample
data, then drawn again (matplotlib writes fixed tick labels afresh at each draw). Widgets: their descriptions
and the text of their HTML read-outs, after a change of each."""

from __future__ import annotations

import html
import importlib
import inspect
import itertools
import re

ARGS = {  # the notebooks' questions, where a checker has no defaults
    "ch1_ring_bytes": dict(nbytes=100e6, world_size=8),
    "ch2_ring_time": dict(nbytes=1e6, world_size=8, link="ib_hdr"),
    "ch2_busbw": dict(nbytes=1e9, time_s=0.010, world_size=8),
    "ch2_fastest": dict(op="all_reduce", nbytes=8e3, world_size=8, link="ib_ndr"),
    "ch9_chunked_time": dict(total_bytes=16 << 20, chunk_bytes=4096, world_size=8, link="ib_ndr"),
    "ch9_exposed": dict(compute_s=0.080, comm_s=0.050, overlapped_s=0.030),
    "ch9_trace_busbw": dict(nbytes=6637568 * 4, duration_us=2636.669, op="all_reduce", group_size=2),
    "ch9_kernel_algorithm": dict(kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "ch9_straggler": dict(durations_us=[400.0, 120.0, 390.0]),
    "ch9_reprice": dict(measured_s=0.012, model_old_s=0.008, model_new_s=0.002),
    "ch9_replay_wait": dict(last_arrival_s=0.075, transfer_s=0.045, wake_s=0.001, after_s=0.009),
    "ch9_bucket_count": dict(param_mb=[3, 0.5, 0.5, 1, 2.5], bucket_cap_mb=2),
}
ODD = [None, "x", "3", True, [1, 2], (1, 2), 0, 1, 2, 3, 7, -1, 0.5, 1e9, float("nan")]
WORKSHOP = ("check_model_states", "check_allreduce_time", "check_exposed", "check_best_bucket", "check_precision",
            "check_fits", "check_step_time")


def checkers():
    """(name, function, kwargs) of every checker that takes an answer, the workshop's for each cluster."""
    from commlib import exercises, plan
    from commlib.exercises import ch10
    from commlib.exercises import workshop as ws

    for name in sorted(dir(exercises)):
        fn = getattr(exercises, name)
        if not name.startswith("ch") or not callable(fn) or "answer" not in inspect.signature(fn).parameters:
            continue
        if name == "ch10_kind":
            yield from ((name, fn, {"scenario": s}) for s in ch10.SCENARIOS)
        elif name != "ch10_culprit":  # it needs a failed run: tests/test_exercises_ch10.py
            yield name, fn, ARGS.get(name, {})
    for name in WORKSHOP:
        for cluster in ws.CLUSTERS if name != "check_model_states" else [None]:
            kw = {"cluster": cluster} if cluster else {}
            if name == "check_step_time":
                kw["config"] = plan.Config(dp=8, tp=2, zero_stage=1, microbatches=4)
            yield name, getattr(ws, name), kw


def hints(fn, kwargs) -> list[str]:
    """What fn says (repr of its Verdict) to odd answers, to each of its options, and to an answer that each
    `close` of its module in turn takes as the match."""
    mod = importlib.import_module(fn.__module__)
    said, options = [], set()
    real_choice, real_close = getattr(mod, "_choice", None), getattr(mod, "close", None)

    def spy(answer, opts, *a, **k):
        options.update(o for o in opts if isinstance(o, (str, int, float)))
        return real_choice(answer, opts, *a, **k)

    def run(answer):
        said.append(repr(fn(answer, **kwargs)))

    try:
        if real_choice is not None:
            mod._choice = spy
        for a in ODD:
            run(a)
        for o in sorted(options, key=str):
            run(o)
        if real_close is not None:
            from commlib import plan

            config = plan.Config(dp=8, tp=2, zero_stage=1, microbatches=4)
            for k in range(40):
                count = itertools.count()
                mod.close = lambda *a, _k=k, **kw: next(count) == _k  # noqa: E731
                run(config if "check_fits" in fn.__name__ else 7.0)
                if next(count) <= k:  # fewer calls than k: every branch was reached
                    break
    finally:
        if real_choice is not None:
            mod._choice = real_choice
        if real_close is not None:
            mod.close = real_close
    return said


def figures():
    """(name, figure) for every figure function of commlib.ui, drawn with sample data."""
    import matplotlib.pyplot as plt

    from commlib import topology as topo
    from commlib.cost.timeline import simulate
    from commlib.profiling.jobs.scale import load_scale
    from commlib.profiling.replay import whatif as wi
    from commlib.profiling.traces import SAMPLE
    from commlib.ui import plots, records
    from commlib.ui import scale as ui_scale
    from commlib.ui import whatif as ui_whatif

    tl = simulate([0.01, 0.01], [0.008, 0.008], overlap=True)
    pipe = [[("F", 0, 0.0, 1.0), ("B", 0, 3.0, 5.0)], [("F", 0, 1.0, 2.0), ("B", 0, 2.0, 3.0)]]
    report = wi.whatif([SAMPLE], [wi.Scenario(bucket_mb=4)])
    made = {
        "timeline": lambda: plots.timeline(tl),
        "timeline with forward": lambda: plots.timeline(simulate([0.01], [0.008], overlap=True, forward_s=0.005)),
        "bucket_sweep": lambda: plots.bucket_sweep([1, 4], [0.2, 0.1], [0.05, 0.01]),
        "profile_spans": lambda: plots.profile_spans({"compute_spans": [(0, 0.01)], "comm_spans": [(0.005, 0.02)],
                                                      "compute_s": 0.01, "comm_s": 0.015, "exposed_comm_s": 0.01,
                                                      "idle_s": 0.0}),
        "pipeline_timeline": lambda: plots.pipeline_timeline(pipe, unit=1e3, xlabel="ms"),
        "topology_busbw, 1 NIC": lambda: plots.topology_busbw(topo.Topology(2, 8, "nvlink4", "ib_ndr", 1)),
        "topology_busbw, 8 NICs": lambda: plots.topology_busbw(topo.preset("dgx_a100", 2, achievable=True)),
        "comm_share": lambda: plots.comm_share([1, 2], {"ring": [0.5, 0.3]}),
        "chunk_sweep": lambda: plots.chunk_sweep([4096, 8192], [1e-3, 2e-3], [1e-3, 2e-3], 1 << 24),
        "segment_sweep": lambda: plots.segment_sweep([4096, 8192], [1e-3, 2e-3], [1e-3, 2e-3], 1 << 24, 1.5),
        "alpha_beta_fit": lambda: plots.alpha_beta_fit([1e3, 1e6], [1e-5, 1e-3], 1e-5, 1e-9),
        "measured_vs_predicted": lambda: plots.measured_vs_predicted({"ring": ([1e3, 1e6], [1e-5, 1e-3],
                                                                                [1e-5, 1e-3])}),
        "precision_vs_world_size": lambda: plots.precision_vs_world_size([2, 4], {"fp16": [(0.1, 1e-3),
                                                                                          (0.2, 1e-3)]}, 1e3),
        "step_vs_bandwidth": lambda: plots.step_vs_bandwidth([{"bandwidth": 1e8, "variant": "none", "step_s": 0.1},
                                                              {"bandwidth": None, "variant": "none",
                                                               "step_s": 0.05}]),
        "whatif.timelines": lambda: ui_whatif.timelines(report),
        "whatif.flows": lambda: ui_whatif.flows(report),
        "scale.diagnose_scale": lambda: ui_scale.diagnose_scale(load_scale()),
        "records.last_records": lambda: records.last_records(
            {0: {"fr": {"entries": []}, "waiting": {"op": "all_reduce", "p2p": False},
                 "p2p": {"pending": [{"op": "recv", "peer": 1}]}}, 1: None}, {"kind": "missing", "ranks": [1]}),
    }
    for name, make in made.items():
        thing = make()
        figure = thing if hasattr(thing, "savefig") else getattr(thing, "figure", None) or thing[0].figure
        yield name, figure
        plt.close(figure)


def drawn(figure) -> list[str]:
    """The texts a figure shows once drawn (titles, labels, legends, tick labels, annotations); TeX ticks out."""
    from matplotlib.text import Text

    figure.canvas.draw()
    return [t.get_text() for t in figure.findobj(Text)
            if t.get_visible() and t.get_text().strip() and not t.get_text().startswith("$")]


def widget_texts(box) -> list[str]:
    """A widget's captions (description) and the text of its HTML read-outs, its children's included; a sources
    fold's citations left out (titles, authors and versions stay as published)."""
    out, stack = [], [box]
    while stack:
        w = stack.pop()
        stack += list(getattr(w, "children", ()) or ())
        d = getattr(w, "description", None)
        if isinstance(d, str) and d:
            out.append(d)
        if type(w).__name__ in ("HTML", "Label"):
            value = re.sub(r"<ul style='margin:2px 0'>.*?</ul>", "", w.value, flags=re.DOTALL)
            out += [t for t in (html.unescape(x).strip() for x in re.findall(r">([^<]+)<", f">{value}<")) if t]
    return out


def widgets():
    """(name, widget) for each widget of commlib.ui, after the planner's search and the replay's second entry."""
    from commlib.ui import replay, widgets as W

    for name in ("cost_calculator", "reduction_explorer", "overlap_explorer", "topology_calculator", "planner"):
        box = getattr(W, name)()
        if name == "planner":
            next(w for w in _all(box) if type(w).__name__ == "Button").click()
        yield name, box
    snaps = {r: {"fr": {"entries": [_entry(1, "all_reduce"), _entry(2, "broadcast" if r == 2 else "all_reduce")],
                        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}},
                 "groups": {"0": ["default_pg", [0, 1, 2, 3]]}} for r in range(4)}
    box = replay.replay(snaps)
    slider = next(w for w in _all(box) if type(w).__name__ == "IntSlider")
    slider.value = slider.max
    yield "replay", box


def _all(box):
    stack = [box]
    while stack:
        w = stack.pop()
        yield w
        stack += list(getattr(w, "children", ()) or ())


def _entry(seq: int, op: str) -> dict:
    return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "process_group": ["0", "default_pg"],
            "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
            "state": "scheduled", "record_id": seq - 1, "p2p_seq_id": 0, "op_id": seq}
