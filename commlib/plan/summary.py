"""A cluster as people read it: one line instead of a repr, and where its numbers come from.

    describe_topology(t)  '2 x DGX H100 (16 GPUs): NVLink4 370 GB/s, 8 x NDR 48 GB/s per node (achievable, each way)'
    topology_sources(t)   {'DGX H100': the preset's source, 'NVLink4 370 GB/s': the link's source, ...}

Widgets show the line and fold the sources (commlib.ui.widgets); Hardware.describe() adds the GPU.
"""

from __future__ import annotations

from commlib import topology as topo

NODE_NAMES = {"dgx_a100": "DGX A100", "dgx_h100": "DGX H100", "dgx_b200": "DGX B200", "b200_xdr": "B200 + XDR",
              "gb200_nvl72": "GB200 NVL72", "gb300_nvl72": "GB300 NVL72"}


def _preset(t: topo.Topology) -> str | None:
    if not isinstance(t, topo.Topology):
        raise TypeError(f"t must be a topology.Topology, got {type(t).__name__}")
    base = t.name.split(" ")[0]
    return base if base in topo.PRESETS else None


def describe_topology(t: topo.Topology) -> str:
    """One line, under 100 characters for the presets: nodes (or NVLink domains) and GPUs, the intra link, the
    NICs per node, and whether the speeds are line rates or NCCL's achievable ones (per direction)."""
    base = _preset(t)
    node = (f"{t.nodes} x {NODE_NAMES.get(base, base)} ({t.world_size} GPUs)" if base else
            f"{t.nodes} node{'s' * (t.nodes > 1)} of {t.gpus_per_node} GPUs")
    achievable = all(link.name.endswith("_nccl") for link in (t.intra, t.inter))
    return (f"{node}: {t.intra.label}, {t.nics_per_node} x {t.inter.label} per node "
            f"({'achievable' if achievable else 'line rate'}, each way)")


def topology_sources(t: topo.Topology) -> dict[str, str]:
    """Where the node's and each link's numbers come from: label -> source text."""
    base = _preset(t)
    out = {NODE_NAMES.get(base, base): topo.PRESETS[base][2]} if base else {}
    out.update({link.label: link.source for link in (t.intra, t.inter) if link.source})
    return out
