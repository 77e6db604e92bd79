"""commlib.widgets and commlib.plots: the stepper shows the state of the step the slider is on."""

import matplotlib

matplotlib.use("Agg")
from commlib import algorithms as alg  # noqa: E402
from commlib import plots, widgets  # noqa: E402


def test_ring_stepper_follows_the_slider(cluster4, ring_traces):
    p, traces = cluster4.world_size, ring_traces
    box = widgets.ring_stepper(traces, p)
    play, slider = box.children[0].children
    out = box.children[1]
    assert slider.max == play.max == 2 * (p - 1)
    assert len(out.outputs) == 1
    slider.value = 3
    assert len(out.outputs) == 1  # replaced, not appended


def test_ring_step_titles_and_arrows(cluster4, ring_traces):
    p, traces = cluster4.world_size, ring_traces
    states = alg.replay(traces, p)
    ax = plots.ring_step(states, traces, 1, p)
    assert ax.get_title().startswith(f"step 1/{2 * (p - 1)}: reduce-scatter")
    assert len(ax.patches) == p * p + p + 1  # boxes, one arrow per rank (the wrap-around has two pieces)
    ax = plots.ring_step(states, traces, 2 * (p - 1), p)
    assert "all-gather" in ax.get_title()
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("+".join(map(str, range(p)))) == p * p


def test_cost_calculator_updates_with_its_controls():
    from commlib import cost

    box = widgets.cost_calculator()
    (op, algorithm), (link, p), size, out = box.children[0].children, box.children[1].children, box.children[2], box.children[3]
    link.value, p.value, size.value = "ib_hdr", 8, 1e9
    want = cost.breakdown("all_reduce", 1e9, 8, "ib_hdr", "ring")
    assert f"{want['time_s'] * 1e3:.3f} ms" in out.value and "bandwidth" in out.value
    op.value = "broadcast"  # ring does not exist for broadcast: the algorithm list follows the op
    assert algorithm.options == cost.PAIRS["broadcast"] and "Broadcast" not in out.value
    assert f"{cost.collective_time('broadcast', 1e9, 8, 'ib_hdr', algorithm.value) * 1e3:.3f} ms" in out.value
    op.value, algorithm.value = "all_gather", "recursive_doubling"
    p.value = 6
    assert "power-of-two" in out.value


def test_alpha_beta_fit_figure():
    import numpy as np

    n = np.logspace(3, 7, 9)
    fig = plots.alpha_beta_fit(n, 1e-5 + n * 1e-9, 1e-5, 1e-9)
    top, bottom = fig.axes
    assert "α = 10.0 µs" in top.get_legend().get_texts()[1].get_text()
    assert np.allclose(bottom.lines[0].get_ydata(), 0, atol=1e-9)


def test_reduction_explorer_reports_losses():
    box = widgets.reduction_explorer(numel=1024)
    (p, mag), strategy, out = box.children[0].children, box.children[1], box.children[2]
    p.value, mag.value = 64, 3000.0
    assert "values lost" in out.value and "inf" in out.value
    strategy.value = "fp32_accumulate"
    assert "all values kept" in out.value


def test_overlap_explorer_and_timeline():
    from commlib import overlap

    box = widgets.overlap_explorer()
    text = box.children[3]
    cap = box.children[2]
    cap.value = 2**12
    big = text.value
    cap.value = 2**2
    assert big != text.value and "With overlap" in text.value and "buckets" in text.value
    ax = plots.timeline(overlap.simulate([0.01] * 3, [0.005] * 3))
    assert len(ax.patches) == 6 and "step 35.0 ms" in ax.get_title()
