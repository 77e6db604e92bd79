"""commlib.ui.widgets.planner: the verdict, memory and communication follow the controls; bad configurations
are named, not raised; the search button lists the fastest configurations that fit."""

import matplotlib

matplotlib.use("Agg")

from commlib import plan  # noqa: E402
from commlib.ui import widgets


def controls(box):
    """The planner's widgets by description."""
    found = {}

    def walk(w):
        for child in getattr(w, "children", ()):
            walk(child)
        if getattr(w, "description", ""):
            found[w.description] = w
    walk(box)
    return found


def report(box):
    return box.children[6].value


def test_the_planner_reports_the_estimate():
    box = widgets.planner("llama2_7b", "dgx_h100", nodes=2, global_batch=64)
    w = controls(box)
    m, hw = plan.MODELS["llama2_7b"], plan.hardware("dgx_h100", 2, achievable=True)
    e = plan.estimate(m, hw, plan.Config(dp=16), 64, plan.Assumptions(mfu=0.4))
    assert report(box).startswith("<p>") and "does not fit" in report(box)
    assert f"{e.memory['total'] / 1e9:,.2f} GB" in report(box) and f"step {e.step_s:,.3f} s" in report(box)
    assert "16 ranks on 2 nodes, 8 per node" in report(box)          # the DP group spans both nodes
    w["ZeRO"].value, w["micro-batches"].value = 1, 4
    assert "<b style='color:#2a7'>fits</b>" in report(box)
    w["tp"].value = 8
    assert "8 ranks in one node" in report(box) and "dp 2 x tp 8 x pp 1" in report(box)
    w["NCCL's achievable speeds"].value = False
    line = plan.estimate(m, plan.hardware("dgx_h100", 2), plan.Config(2, 8, 1, 1, 1, 4), 64)
    assert f"step {line.step_s:,.3f} s" in report(box)


def test_bad_configurations_are_named_not_raised():
    box = widgets.planner()
    w = controls(box)
    w["micro-batches"].value = 3
    assert "global_batch (64) must be divisible by dp*microbatches=48" in report(box)
    w["micro-batches"].value = 1
    w["heads"].value, w["tp"].value = 12, 8
    assert "heads (12) must be divisible by tp=8" in report(box) and w["model"].value == "custom"
    w["tp"].value = 1
    w["nodes"].value = 3
    w["pp"].value = 16
    assert "tp*pp = 16 must divide the 24 GPUs" in report(box)


def test_an_invalid_model_is_named_once_not_again_by_the_search():
    box = widgets.planner()
    w = controls(box)
    w["heads"].value = 0
    w["fastest that fits"].click()
    shown = "".join(child.value for child in box.children if hasattr(child, "value") and isinstance(child.value, str))
    assert shown.count("heads") == 1 and "heads" in report(box), shown
    assert "no search: the model or the cluster above is not valid" in box.children[8].value


def test_editing_the_shape_makes_a_custom_model_and_the_search_lists_what_fits():
    box = widgets.planner("gpt3_1.3b", "dgx_a100", nodes=1, global_batch=32)
    w = controls(box)
    assert w["layers"].value == 24 and w["model"].value == "gpt3_1.3b"
    w["layers"].value = 12
    assert w["model"].value == "custom"
    assert f"{plan.Model(12, 2048, 24, 2048, 50257).params / 1e9:.2f}B parameters" in report(box)
    w["fastest that fits"].click()
    found = box.children[8].value
    fits, n = plan.search(plan.Model(12, 2048, 24, 2048, 50257), plan.hardware("dgx_a100", 1, achievable=True), 32)
    assert f"{len(fits)} of {n} configurations fit" in found and f"{fits[0].step_s:,.3f} s" in found
    w["model"].value = "mixtral_8x7b"
    assert w["experts"].value == 8 and w["layers"].value == 32


def test_format_estimate_names_what_is_exposed():
    hw = plan.hardware("dgx_h100", 4)
    e = plan.estimate(plan.MODELS["llama2_7b"], hw, plan.Config(dp=8, tp=2, pp=2, zero_stage=1, microbatches=8), 64,
                      plan.Assumptions(dp_overlap=0.5))
    html = widgets.format_estimate(e, hw)
    assert f"{e.times['dp_exposed'] * 1e3:,.1f} ms exposed of {e.times['dp'] * 1e3:,.1f} ms" in html
    assert html.count("on the critical path") == 2            # TP and PP (no experts)
    assert "8 ranks on 2 nodes, 4 per node" in html           # DP behind tp = 2: one pipeline stage, 16 GPUs


def test_pipeline_timeline_draws_every_event_and_the_bubble():
    from commlib.ui import plots
    from commlib.parallel import pipeline as pl

    events = pl.simulate("1f1b", 3, 5)
    ax = plots.pipeline_timeline(events)
    assert len(ax.patches) == 3 * 2 * 5                           # a bar per forward and per backward
    assert ax.get_title() == f"3 stages, step {(5 + 2) * 3:g}, idle {2 / 7:.0%}"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 2", "stage 1", "stage 0"]
    ax = plots.pipeline_timeline([[(op, i, s / 1e3, e / 1e3) for op, i, s, e in evs] for evs in events], unit=1e3)
    assert ax.get_title().startswith("3 stages, step 21 ms")
