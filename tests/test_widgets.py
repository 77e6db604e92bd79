"""commlib.ui.widgets and commlib.ui.plots: the stepper shows the state of the step the slider is on."""

import matplotlib

matplotlib.use("Agg")
from commlib import algorithms as alg  # noqa: E402
from commlib.ui import plots  # noqa: E402
from commlib.ui import widgets


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
    op.value = "broadcast"  # the algorithm list follows the op
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
    assert cap.value == 25.0 and cap.label == "25"  # DDP's default bucket_cap_mb, exactly
    assert "can only start when backward ends" in text.value
    cap.value = 2**12
    big = text.value
    cap.value = 2**2
    assert big != text.value and "With overlap" in text.value and "buckets" in text.value
    ax = plots.timeline(overlap.simulate([0.01] * 3, [0.005] * 3))
    assert len(ax.patches) == 6 and "step 35.0 ms" in ax.get_title()


def test_segment_sweep_plots_busbw():
    ax = plots.segment_sweep([4096, 1 << 20], [0.5, 0.01], [0.4, 0.02], 4 << 20, 1.0)
    measured, model = ax.get_lines()[:2]
    assert list(measured.get_ydata()) == [(4 << 20) / 0.5 / 1e9, (4 << 20) / 0.01 / 1e9]
    assert list(model.get_xdata()) == [4096, 1 << 20] and "4 MiB" in ax.get_title()


def test_timeline_draws_forward_on_the_compute_row():
    from commlib import overlap

    ax = plots.timeline(overlap.simulate([0.01] * 2, [0.005] * 2, forward_s=0.02))
    assert len(ax.patches) == 5 and ax.get_yticklabels()[0].get_text() == "forward, backward"


def test_topology_calculator_prices_every_algorithm():
    from commlib import topology as topo

    box = widgets.topology_calculator()
    (node, achievable, nodes), (gpus, nics, intra, inter), (op, size) = (c.children for c in box.children[:3])
    text, out = box.children[3], box.children[4]
    nodes.value, size.value = 4, 1e9
    want = topo.breakdown("all_reduce", 1e9, topo.preset("dgx_h100", 4, achievable=True), "multi_ring")
    assert f"{want['busbw_GBps']:,.1f}" in text.value and len(out.outputs) == 1
    assert gpus.disabled and "DGX BasePOD" in text.value
    node.value, gpus.value, nics.value, intra.value, inter.value = "custom", 4, 1, "pcie4_x16", "roce100"
    op.value = "all_to_all"
    custom = topo.Topology(4, 4, "pcie4_x16", "roce100", 1)
    assert f"{topo.collective_time('all_to_all', 1e9, custom, 'pairwise') * 1e3:,.3f} ms" in text.value
    assert "bulk" in text.value and not gpus.disabled and len(out.outputs) == 1
    ax = plots.topology_busbw(custom, "all_reduce", sizes=[1e6, 1e9])
    assert [line.get_label() for line in ax.get_lines()[:4]] == list(topo.PAIRS["all_reduce"])
