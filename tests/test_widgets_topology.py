"""widgets.topology_calculator: a preset shows its node in the custom controls, so "custom" starts from it."""

import matplotlib

matplotlib.use("Agg")
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
