"""commlib.ui.whatif: the what-if timelines draw every span of every scenario and rank where it is."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from commlib.profiling.replay import whatif  # noqa: E402
from commlib.ui import whatif as ui  # noqa: E402
from tests.test_profiling_whatif import job  # noqa: E402

KINDS = ("compute", "comm", "waiting")   # timelines draws them in this order, one broken_barh per (row, kind)


@pytest.fixture(scope="module")
def report():
    from commlib import cost, topology as topo

    link = cost.Link("here", 1e9, 10e-6, "test")
    return whatif.whatif(job(), [whatif.Scenario("slow", topology=topo.Topology(2, 1, link, cost.Link(
        "slow", 0.1e9, 10e-6, "test")))], measured=topo.Topology(2, 1, link, link))


def _extents(collection):
    """Each bar's (start, end) in ms, flat: [a0, b0, a1, b1, ...]."""
    return [float(x) for p in collection.get_paths() for x in (p.vertices[:, 0].min(), p.vertices[:, 0].max())]


def _ms(spans):
    return [x / 1e3 for span in spans for x in span]


def test_the_timelines_draw_each_scenarios_spans_and_step_end(report):
    ax = ui.timelines(report)
    rows = [s for s in report["scenarios"] if s["name"] != "identity replay"]
    bars = ax.collections
    assert len(bars) == len(KINDS) * len(rows) * 2
    drawn = 0
    for i, (s, r) in enumerate((s, r) for s in rows for r in (0, 1)):
        for k, kind in enumerate(KINDS):
            want = _ms(s["ranks"][r]["spans"][kind])
            assert _extents(bars[len(KINDS) * i + k]) == pytest.approx(want), (s["name"], r, kind)
            drawn += len(want) // 2
    assert drawn > 2 * len(rows) * 2   # the job has compute and communication on every row
    ends = sorted(line.get_xdata()[0] for line in ax.lines)
    assert ends == pytest.approx(sorted(s["ranks"][r]["step_us"] / 1e3 for s in rows for r in (0, 1)))
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "measured · rank 0"
    assert ax.get_xlim()[1] == pytest.approx(max(ends) * 1.02)


def test_the_timelines_draw_only_the_scenarios_asked_for_waits_hatched(report):
    ax = ui.timelines(report, scenarios=["identity replay", "slow"])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "identity replay · rank 0", "identity replay · rank 1", "slow · rank 0", "slow · rank 1"]
    assert len(ax.collections) == len(KINDS) * 4
    assert [c.get_hatch() for c in ax.collections[:3]] == [None, None, "////"]
    slow = report["scenarios"][-1]
    assert _extents(ax.collections[len(KINDS) * 2 + 1]) == pytest.approx(_ms(slow["ranks"][0]["spans"]["comm"]))


def test_flows_draw_each_call_and_stack_the_ones_in_flight_together():
    from commlib.profiling.jobs import shared_nic
    from commlib import cost, topology as topo

    ranks, nic = shared_nic.two_flows(1 << 20, 1e9)
    fast = topo.Topology(2, 1, nic.intra, cost.Link("fast", 4e9, 0.0, "test"))
    report = whatif.whatif(ranks, [whatif.Scenario("x4", topology=fast)], measured=nic)
    ax = ui.flows(report, rank=0)
    bars = [_extents(c) for c in ax.collections]
    want = [_ms([c]) for s in report["scenarios"][1:] for c in sorted(map(tuple, s["ranks"][0]["spans"]["calls"]))]
    assert bars == [pytest.approx(w) for w in want] and len(bars) == 4
    ys = [c.get_paths()[0].vertices[:, 1].min() for c in ax.collections]
    assert ys[0] != ys[1] and ys[2] != ys[3]   # the two calls in flight at once: on rows of their own
    assert [t.get_text() for t in ax.texts][:2] == [f"{(b - a):.2f}" for a, b in bars[:2]]
