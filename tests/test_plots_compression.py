"""Chapter 5's figures (commlib.ui.plots) and the committed sweep they draw (benchmarks/compression_tradeoff.json)."""

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from commlib import compression  # noqa: E402
from commlib.ui import plots
from commlib.compression import tradeoff  # noqa: E402

SWEEP = Path(__file__).resolve().parents[1] / "benchmarks" / "compression_tradeoff.json"


@pytest.fixture(scope="module")
def sweep():
    loaded = tradeoff.load_sweep()
    assert loaded == json.loads(SWEEP.read_text())
    with pytest.raises(FileNotFoundError, match="compression_tradeoff.py"):
        tradeoff.load_sweep(SWEEP.with_name("missing.json"))
    return loaded


def test_the_committed_sweep_has_what_the_chapter_reads(sweep):
    meta, variants, links = sweep["meta"], sweep["variants"], sweep["links"]
    assert set(variants) == set(tradeoff.VARIANTS)
    for key in ("load_before", "load_after", "cpus", "date", "steps"):
        assert key in meta and key in links["meta"]
    assert "seeds" in meta and "rounds" in links["meta"]
    shapes = [tuple(p.shape) for p in tradeoff.models()[1].parameters()]
    for name, v in variants.items():  # counted bytes: the closed form, to a few bytes of uneven ring shards
        method, params = tradeoff.VARIANTS[name]
        closed = {k: x for k, x in params.items() if k != "error_feedback"}
        assert abs(v["bytes_per_step"] - compression.bytes_per_rank(method, shapes, meta["world_size"], **closed)) <= 8
        assert len(v["train_loss_curve"]) == meta["steps"]
    emulated = [r for r in links["rows"] if r["bandwidth"] is not None]
    assert emulated and all(r["inter_node_bytes_per_step"] == r["paced_bytes_per_step"] > 0 for r in emulated)
    assert {r["bandwidth"] for r in emulated} == set(links["meta"]["bandwidths"])
    assert set(links["crossovers"]) == {r["variant"] for r in links["rows"]}


def test_bytes_vs_p_draws_one_line_per_method():
    ps = [2, 4, 8]
    ax = plots.compression_bytes_vs_p(ps, {m: [compression.bytes_per_rank(m, (1000,), p) for p in ps]
                                           for m in ("none", "int8")})
    assert [line.get_label() for line in ax.get_lines()] == ["none", "int8"]
    plt.close("all")


def test_tradeoff_figure_has_a_bar_per_variant_in_each_panel(sweep):
    fig = plots.compression_tradeoff(sweep["variants"])
    assert [len(ax.patches) for ax in fig.axes] == [len(sweep["variants"])] * 3
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list(sweep["variants"])
    plt.close("all")


def test_step_vs_bandwidth_puts_loopback_last_and_marks_finite_crossovers(sweep):
    rows = sweep["links"]["rows"]
    crossings = {"powersgd r=4": 15e6, "topk 1%": math.inf}
    ax = plots.step_vs_bandwidth(rows, crossings)
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "loopback"
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 1 and dotted[0].get_xdata()[0] == pytest.approx(15.0)
    plt.close("all")


def test_loss_curves_smooth_and_dash_the_runs_without_error_feedback():
    ax = plots.loss_curves({"topk 1%": [1.0] * 30, "topk 1% no EF": [2.0] * 30}, smooth=10)
    solid, dashed = ax.get_lines()
    assert len(solid.get_xdata()) == 21 and dashed.get_linestyle() == "--"
    plt.close("all")
