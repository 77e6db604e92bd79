"""commlib.ui.whatif: the what-if timelines draw every span of every scenario and rank where it is."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from commlib.profiling import whatif  # noqa: E402
from commlib.ui import whatif as ui  # noqa: E402
from tests.test_profiling_whatif import job  # noqa: E402


def test_the_timelines_draw_each_scenarios_spans_and_step_end():
    from commlib import cost, topology as topo

    link = cost.Link("here", 1e9, 10e-6, "test")
    report = whatif.whatif(job(), [whatif.Scenario("slow", topology=topo.Topology(2, 1, link, cost.Link(
        "slow", 0.1e9, 10e-6, "test")))], measured=topo.Topology(2, 1, link, link))
    ax = ui.timelines(report)
    rows = [s for s in report["scenarios"] if s["name"] != "identity replay"]
    bars = ax.collections   # broken_barh: one collection per (row, kind)
    assert len(bars) == 3 * len(rows) * 2
    for i, (s, r) in enumerate((s, r) for s in rows for r in (0, 1)):
        compute = bars[3 * i].get_paths()
        want = s["ranks"][r]["spans"]["compute"]
        assert len(compute) == len(want)
        for path, (a, b) in zip(compute, want):
            xs = path.vertices[:, 0]
            assert xs.min() == pytest.approx(a / 1e3) and xs.max() == pytest.approx(b / 1e3)
    ends = sorted(line.get_xdata()[0] for line in ax.lines)
    assert ends == pytest.approx(sorted(s["ranks"][r]["step_us"] / 1e3 for s in rows for r in (0, 1)))
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "measured · rank 0"
