"""widgets.topology_calculator: a preset shows its node in the custom controls, so "custom" starts from it."""

import matplotlib

matplotlib.use("Agg")
from commlib import plan  # noqa: E402
from commlib import topology as topo  # noqa: E402
from commlib.ui import widgets  # noqa: E402


def test_a_preset_fills_the_custom_controls_and_custom_starts_from_it():
    box = widgets.topology_calculator()
    (node, achievable, nodes), (gpus, nics, intra, inter), (op, size) = (c.children for c in box.children[:3])
    text = box.children[3]
    assert (gpus.value, nics.value, intra.value, inter.value) == (8, 8, "nvlink4 (achievable)", "ib_ndr (achievable)")
    node.value = "dgx_a100"
    achievable.value = False
    assert (intra.value, inter.value) == ("nvlink3", "ib_hdr")
    node.value = "custom"  # now change one thing: one NIC per node
    nics.value = 1
    one_nic = topo.Topology(2, 8, "nvlink3", "ib_hdr", 1)
    for algorithm in ("flat_ring", "hierarchical"):
        assert f"{topo.collective_time('all_reduce', size.value, one_nic, algorithm) * 1e3:,.3f} ms" in text.value
    assert not gpus.disabled and nics.value == 1


# ------------------------------------------------------------------ captions for people, not reprs
REPRS = ("Topology(", "Link(", "Hardware(", "bandwidth=", "source=", "e+")


def test_describe_topology_is_one_short_human_line():
    t = topo.preset("dgx_h100", 2, achievable=True)
    assert plan.describe_topology(t) == "2 x DGX H100 (16 GPUs): NVLink4 370 GB/s, 8 x NDR 48 GB/s per node (achievable, each way)"
    line = plan.describe_topology(topo.preset("dgx_a100", 64))
    assert line.startswith("64 x DGX A100 (512 GPUs): NVLink3 300 GB/s, 8 x HDR 25 GB/s") and "line rate" in line
    custom = plan.describe_topology(topo.Topology(3, 4, "pcie4_x16", "tcp100", 1))
    assert custom == "3 nodes of 4 GPUs: PCIe4 x16 31.5 GB/s, 1 x TCP 100G 12.5 GB/s per node (line rate, each way)"
    for name in topo.PRESETS:
        for achievable in (False, True):
            text = plan.describe_topology(topo.preset(name, 64, achievable=achievable))
            assert len(text) <= 100 and "\n" not in text and not any(r in text for r in REPRS), text
    assert set(plan.topology_sources(t)) == {"DGX H100", "NVLink4 370 GB/s", "NDR 48 GB/s"}
    assert "nccl-tests/issues/212" in plan.topology_sources(t)["NVLink4 370 GB/s"]


def test_hardware_describe_adds_the_gpu_and_its_datasheet():
    from commlib import plan

    hw = plan.hardware("dgx_h100", 2, achievable=True)
    assert hw.describe().splitlines() == [plan.describe_topology(hw.topology), "GPUs of 80 GB, 989 TFLOP/s dense 16-bit"]
    assert hw.sources()["H100"] == plan.GPUS["h100"].source


def test_captions_show_the_summary_aligned_tables_and_folded_sources():
    import re

    from commlib import plan

    text = widgets.topology_calculator().children[3].value
    planner = widgets.planner("llama2_7b", "dgx_h100", nodes=2).children[6].value
    cost = widgets.cost_calculator().children[3].value
    for html in (text, planner, cost):
        shown = re.sub(r"<details.*?</details>", "", html, flags=re.S)  # what a reader sees before opening a fold
        assert not any(r in shown for r in REPRS), shown
        assert "<details" in html and "padding" in html  # sources folded; cells apart
    assert plan.describe_topology(topo.preset("dgx_h100", 2, achievable=True)) in text
    assert plan.describe_topology(plan.hardware("dgx_h100", 2, achievable=True).topology) in planner
    # the sources are there, behind the fold
    assert topo.PRESETS["dgx_h100"][2] in text and plan.GPUS["h100"].source in planner


def test_html_table_checks_its_shape():
    import pytest

    html = widgets.html_table(("a", "b"), [("x", "1")])
    assert "text-align:left" in html and "text-align:right" in html
    with pytest.raises(ValueError, match="cells"):
        widgets.html_table(("a", "b"), [("x",)])
