"""ipywidgets UIs for the notebooks: thin layers over commlib's pure functions and plots."""

from __future__ import annotations

import ipywidgets as W
import matplotlib.pyplot as plt

from commlib import plots, trace


def _show(out: W.Output, fig) -> None:
    """Replace the picture in `out` with fig (works in a kernel and outside one, as in tests)."""
    out.outputs = ()
    out.append_display_data(fig)
    plt.close(fig)


def ring_stepper(events_by_rank, world_size: int) -> W.VBox:
    """Play / slider through a real ring all-reduce trace (one list of Events per rank), step by step."""
    states = trace.replay(events_by_rank, world_size)
    last = len(states) - 1
    play = W.Play(value=0, min=0, max=last, step=1, interval=1200, description="play")
    slider = W.IntSlider(value=0, min=0, max=last, description="step")
    W.jslink((play, "value"), (slider, "value"))
    out = W.Output()

    def show(step: int) -> None:
        _show(out, plots.ring_step(states, events_by_rank, step, world_size).figure)

    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return W.VBox([W.HBox([play, slider]), out])


def format_breakdown(b: dict) -> str:
    """The cost model's answer as a small HTML table."""
    def t(s):
        return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} µs"

    rows = [("time", t(b["time_s"])), ("  latency term (messages × α)", t(b["latency_s"])),
            ("  bandwidth term (bytes × β)", t(b["bandwidth_s"])), ("  reduction term (bytes × γ)", t(b["reduction_s"])),
            ("bottleneck", b["bottleneck"]), ("bytes sent by the busiest rank", f"{b['bytes_per_rank'] / 1e6:,.3f} MB"),
            ("algbw", f"{b['algbw_GBps']:.2f} GB/s"), ("busbw", f"{b['busbw_GBps']:.2f} GB/s")]
    body = "".join(f"<tr><td style='text-align:left'>{k}</td><td style='text-align:right'>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def cost_calculator(links: dict | None = None, gamma: float = 0.0) -> W.VBox:
    """Pick an op, algorithm, link, world size and message size; see the model's time term by term."""
    from commlib import cost

    links = dict(links or cost.LINKS)
    op = W.Dropdown(options=[o for o in cost.OPS if o != "sendrecv"], value="all_reduce", description="op")
    algorithm = W.Dropdown(options=cost.PAIRS["all_reduce"], value="ring", description="algorithm")
    link = W.Dropdown(options=list(links), value=list(links)[0], description="link")
    p = W.IntSlider(value=8, min=2, max=1024, description="ranks p")
    size = W.FloatLogSlider(value=1e8, base=10, min=3, max=11, step=0.25, description="bytes n", readout_format=".3g")
    out = W.HTML()

    def update(_=None):
        if tuple(algorithm.options) != cost.PAIRS[op.value]:  # the algorithm list follows the op
            keep = algorithm.value if algorithm.value in cost.PAIRS[op.value] else cost.PAIRS[op.value][0]
            algorithm.options = cost.PAIRS[op.value]
            if algorithm.value != keep:
                algorithm.value = keep
                return  # setting the value fires update again
        try:
            b = cost.breakdown(op.value, size.value, p.value, links[link.value], algorithm.value, gamma)
        except ValueError as e:
            out.value = f"<b>{e}</b>"
            return
        src = links[link.value].source
        out.value = format_breakdown(b) + f"<p style='font-size:smaller'>{link.value}: {src}</p>"

    for w in (op, algorithm, link, p, size):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([op, algorithm]), W.HBox([link, p]), size, out])


def reduction_explorer(numel: int = 4096) -> W.VBox:
    """Sliders for the number of ranks and the gradients' magnitude, a choice of strategy: what the
    averaged gradient loses (inf, nan, flushed to zero) and how wrong the rest is."""
    from commlib import precision

    p = W.IntSlider(value=8, min=2, max=256, description="ranks p")
    mag = W.FloatLogSlider(value=1000, base=10, min=-9, max=5, step=0.25, description="gradient ~", readout_format=".1e")
    strategy = W.ToggleButtons(options=precision.STRATEGIES, value="fp16", description="strategy")
    out = W.HTML()

    def update(_=None):
        r = precision.experiment(p.value, mag.value, strategy.value, numel=numel)
        lost = r["inf"] + r["nan"] + r["flushed_to_zero"]
        verdict = "all values kept" if lost == 0 else f"<b>{lost} of {numel} values lost</b>"
        out.value = (f"<p>{verdict}: inf {r['inf']}, nan {r['nan']}, flushed to zero {r['flushed_to_zero']}; "
                     f"mean relative error of the rest {r['mean_rel_error']:.2e} "
                     f"(max {r['max_rel_error']:.2e})</p>")

    for w in (p, mag, strategy):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([p, mag]), strategy, out])


def overlap_explorer() -> W.VBox:
    """A model of `layers` equal layers on `p` ranks over a link: pick the bucket cap and see the timeline."""
    from commlib import cost, overlap

    params = W.FloatLogSlider(value=1e9, base=10, min=7, max=11, step=0.25, description="parameters", readout_format=".2g")
    layers = W.IntSlider(value=24, min=1, max=96, description="layers")
    backward = W.FloatSlider(value=300, min=10, max=2000, step=10, description="backward ms")
    link = W.Dropdown(options=list(cost.LINKS), value="ib_ndr", description="link")
    p = W.IntSlider(value=16, min=2, max=512, description="ranks p")
    cap = W.FloatLogSlider(value=25, base=2, min=-2, max=12, step=0.5, description="bucket MiB")
    grad_bytes = W.Dropdown(options=[("fp32 (4 B)", 4), ("bf16/fp16 (2 B)", 2)], value=4, description="gradients")
    text, out = W.HTML(), W.Output()

    def update(_=None):
        per_layer = params.value * grad_bytes.value / layers.value
        compute, comm, sizes = overlap.buckets_from_layers([per_layer] * layers.value,
                                                           [backward.value / 1e3 / layers.value] * layers.value,
                                                           p.value, link.value, bucket_cap_mb=cap.value)
        with_overlap = overlap.simulate(compute, comm, overlap=True)
        without = overlap.simulate(compute, comm, overlap=False)
        text.value = (f"{len(sizes)} buckets; communication {with_overlap.comm_s * 1e3:.1f} ms, backward "
                      f"{with_overlap.compute_s * 1e3:.0f} ms.<br>Without overlap: step {without.total_s * 1e3:.1f} ms. "
                      f"<b>With overlap: step {with_overlap.total_s * 1e3:.1f} ms</b>, exposed "
                      f"{with_overlap.exposed_comm_s * 1e3:.1f} ms ({with_overlap.overlap_fraction:.0%} hidden). "
                      f"The last bucket, {sizes[-1] / 2**20:,.1f} MiB, can only start when backward ends.")
        _show(out, plots.timeline(with_overlap).figure)

    for w in (params, layers, backward, link, p, cap, grad_bytes):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([params, layers, backward]), W.HBox([link, p, grad_bytes]), cap, text, out])


def topology_calculator(nbytes: float = 1e9) -> W.VBox:
    """Pick a node type (or your own nodes, GPUs, links and NICs) and an op; see time and busbw per algorithm."""
    from commlib import cost
    from commlib import topology as topo

    links = {name: link for name, link in cost.LINKS.items()}
    links.update({f"{name} (achievable)": link for name, link in topo.ACHIEVABLE.items()})
    node = W.Dropdown(options=["custom", *topo.PRESETS], value="dgx_h100", description="node")
    achievable = W.Checkbox(value=True, description="NCCL's achievable speeds")
    nodes = W.IntSlider(value=2, min=1, max=64, description="nodes")
    gpus = W.IntSlider(value=8, min=1, max=16, description="GPUs/node")
    nics = W.IntSlider(value=8, min=1, max=16, description="NICs/node")
    intra = W.Dropdown(options=list(links), value="nvlink4", description="intra")
    inter = W.Dropdown(options=list(links), value="ib_ndr", description="NIC")
    op = W.Dropdown(options=list(topo.ALGORITHMS), value="all_reduce", description="op")
    size = W.FloatLogSlider(value=nbytes, base=10, min=3, max=11, step=0.25, description="bytes n",
                            readout_format=".3g")
    text, out = W.HTML(), W.Output()

    def chosen() -> topo.Topology:
        if node.value == "custom":
            return topo.Topology(nodes.value, gpus.value, links[intra.value], links[inter.value], nics.value)
        return topo.preset(node.value, nodes.value, achievable=achievable.value)

    def update(_=None):
        for w in (gpus, nics, intra, inter):
            w.disabled = node.value != "custom"
        if node.value != "custom":  # show the preset's node, so that "custom" starts from it
            suffix = " (achievable)" if achievable.value else ""
            wanted = ((gpus, 8), (nics, 8), (intra, topo.PRESETS[node.value][0] + suffix),
                      (inter, topo.PRESETS[node.value][1] + suffix))
            if any(w.value != v for w, v in wanted):
                for w, v in wanted:
                    w.unobserve(update, names="value")
                    w.value = v
                    w.observe(update, names="value")
        t = chosen()
        rows = []
        for algorithm in topo.ALGORITHMS[op.value]:
            b = topo.breakdown(op.value, size.value, t, algorithm)
            mb = {k: f"{v / 1e6:,.1f}" for k, v in b["bytes_per_rank"].items()}
            rows.append(f"<tr><td>{algorithm}</td><td>{b['time_s'] * 1e3:,.3f} ms</td><td>{b['busbw_GBps']:,.1f}</td>"
                        f"<td>{mb['intra']}</td><td>{mb['inter']}</td><td>{b['bottleneck']}</td></tr>")
        head = ("<tr><th>algorithm</th><th>time</th><th>busbw GB/s</th><th>MB/rank intra</th><th>MB/rank inter</th>"
                "<th>bottleneck</th></tr>")
        note = topo.PRESETS[node.value][2] if node.value in topo.PRESETS else "your own node"
        text.value = (f"<table>{head}{''.join(rows)}</table><p style='font-size:smaller'>{t.world_size} GPUs; "
                      f"{t.intra.name}: {t.intra.bandwidth / 1e9:g} GB/s, NIC {t.inter.name}: "
                      f"{t.inter.bandwidth / 1e9:g} GB/s per direction. {note}</p>")
        _show(out, plots.topology_busbw(t, op.value).figure)

    for w in (node, achievable, nodes, gpus, nics, intra, inter, op, size):
        w.observe(update, names="value")
    update()
    return W.VBox([W.HBox([node, achievable, nodes]), W.HBox([gpus, nics, intra, inter]), W.HBox([op, size]),
                   text, out])
