"""commlib.ui.plots, readable: no dozen lines on one panel, no legend over a line, no axis in 2^k milliseconds,
no label across the frame (issue 25). Each test draws with made-up data and checks the figure's geometry."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from commlib import cost  # noqa: E402
from commlib import topology as topo  # noqa: E402
from commlib.ui import plots  # noqa: E402

LINK = cost.Link("made up", 1e9, 50e-6)


def _inside(fig, artist, ax) -> bool:
    fig.canvas.draw()
    box, frame = artist.get_window_extent(), ax.get_window_extent()
    return frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1 and frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1


def test_measured_vs_predicted_draws_one_panel_per_algorithm():
    names = ["ring", "tree", "recursive_doubling", "rabenseifner", "naive", "double_binary_tree"]
    n = [1 << 10, 1 << 14, 1 << 18]
    curves = {a: (n, [1e-4, 2e-4, 1e-3], [cost.collective_time("all_reduce", x, 4, LINK, a) for x in n]) for a in names}
    panels = plots.measured_vs_predicted(curves)
    assert [p.get_title() for p in panels] == names
    assert all(len(p.get_lines()) == 2 for p in panels)  # measured and model, nothing else on a panel
    plt.close("all")


def test_precision_legend_sits_below_the_panels_not_over_a_line():
    from commlib import precision

    ws = [2, 8, 32, 128]
    fig = plots.precision_vs_world_size(ws, precision.error_vs_world_size(ws, 1000.0), 1000.0)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(legend.y1 <= ax.get_window_extent().y0 for ax in fig.axes)  # wholly below both panels
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["2", "8", "32", "128"]
    plt.close(fig)


@pytest.mark.parametrize("draw", ["chunk_sweep", "segment_sweep"])
def test_sizes_in_kib_and_milliseconds_in_plain_numbers(draw):
    sizes = [4 << 10, 64 << 10, 1 << 20]
    if draw == "chunk_sweep":
        ax = plots.chunk_sweep(sizes, [0.1, 0.02, 0.01], [0.08, 0.015, 0.008], 4 << 20)
    else:
        ax = plots.segment_sweep(sizes, [0.5, 0.1, 0.05], [0.4, 0.08, 0.04], 4 << 20, 1.0)
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4 KiB", "64 KiB", "1 MiB"]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert not any("^" in t or "mathdefault" in t for t in labels), labels  # no 2^k, no 10^k
    plt.close(ax.figure)


@pytest.mark.parametrize("nodes", [2, 8, 64])
@pytest.mark.parametrize("op", ["all_reduce", "all_to_all"])
def test_topology_ceilings_labels_stay_inside_the_frame_and_clear_of_the_legend(nodes, op):
    t = topo.preset("dgx_h100", nodes, achievable=True)
    ax = plots.topology_busbw(t, op)
    fig = ax.figure
    labels = [x for x in ax.texts if "NIC" in x.get_text()]
    assert len(labels) == 2 and all(_inside(fig, x, ax) for x in labels)
    legend = ax.get_legend().get_window_extent()
    assert not any(legend.overlaps(x.get_window_extent()) for x in labels)
    assert "nvlink4_nccl" not in ax.get_title() and "NVLink4 370 GB/s" in ax.get_title()
    plt.close(fig)
