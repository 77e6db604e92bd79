"""ipywidgets UIs for the notebooks: thin layers over commlib's pure functions and plots."""

from __future__ import annotations

import ipywidgets as W
import matplotlib.pyplot as plt

from commlib.ui import plots
from commlib.algorithms import trace
from commlib.ui.language import language, speaks, tr


def _show(out: W.Output, fig) -> None:
    """Replace the picture in `out` with fig (works in a kernel and outside one, as in tests)."""
    out.outputs = ()
    out.append_display_data(fig)
    plt.close(fig)


def _labelled(values) -> list:
    """A dropdown's options: in English the values themselves (the widget as the English edition shows it), else
    (label, value) pairs, each label in the notebook's language and each value as code passes it ("custom",
    recompute="selective")."""
    return list(values) if language() is None else [(tr(v), v) for v in values]


def _row(children) -> W.HBox:
    """Controls side by side that wrap onto the next line where the page is narrow (never cut off, as a plain
    HBox's are in a narrow column; sliders keep their track)."""
    return W.HBox(children, layout=W.Layout(flex_flow="row wrap"))


def html_table(head, rows, align: str | None = None) -> str:
    """An HTML table whose columns stay apart and aligned: padded cells, text left, numbers right (align: one 'l'
    or 'r' per column; default: the first column left, the others right). Cells are inserted as given (HTML)."""
    align = align or "l" + "r" * (len(head) - 1)
    if len(align) != len(head) or any(len(r) != len(head) for r in rows):
        raise ValueError(f"every row needs {len(head)} cells, as head has, and align one letter per column")

    def cell(tag, i, v):
        side = "left" if align[i] == "l" else "right"
        return f"<{tag} style='text-align:{side};padding:2px 14px 2px 0;white-space:nowrap'>{v}</{tag}>"

    header = "".join(cell("th", i, h) for i, h in enumerate(head)) if any(head) else ""
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return (f"<table style='border-collapse:collapse;margin:4px 0'>{'<tr>' + header + '</tr>' if header else ''}"
            f"{body}</table>")


def sources_fold(sources: dict, title: str = "sources") -> str:
    """Sources behind a fold (<details>): closed, one line; open, one item per source."""
    from html import escape

    items = "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in sources.items())
    return (f"<details style='font-size:smaller;margin-top:4px'><summary>{title}</summary>"
            f"<ul style='margin:2px 0'>{items}</ul></details>")


@speaks
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
    return W.VBox([_row([play, slider]), out])


def format_breakdown(b: dict) -> str:
    """The cost model's answer as a small HTML table."""
    def t(s):
        return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} µs"

    term = "&nbsp;&nbsp;&nbsp;"
    rows = [("<b>time</b>", f"<b>{t(b['time_s'])}</b>"), (f"{term}latency term (messages × α)", t(b["latency_s"])),
            (f"{term}bandwidth term (bytes × β)", t(b["bandwidth_s"])),
            (f"{term}reduction term (bytes × γ)", t(b["reduction_s"])),
            ("bottleneck", b["bottleneck"]), ("bytes sent by the busiest rank", f"{b['bytes_per_rank'] / 1e6:,.3f} MB"),
            ("algbw", f"{b['algbw_GBps']:.2f} GB/s"), ("busbw", f"{b['busbw_GBps']:.2f} GB/s")]
    return html_table(("", ""), rows)


@speaks
def cost_calculator(links: dict | None = None, gamma: float = 0.0) -> W.VBox:
    """Pick an op, algorithm, link, world size and message size; see the model's time term by term."""
    from commlib import cost

    links = dict(links or cost.LINKS)
    op = W.Dropdown(options=[o for o in cost.OPS if o != "sendrecv"], value="all_reduce", description="op")
    algorithm = W.Dropdown(options=cost.PAIRS["all_reduce"], value="ring", description="algorithm")
    link = W.Dropdown(options=_labelled(links), value=list(links)[0], description="link")
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
        chosen = links[link.value]
        out.value = format_breakdown(b) + sources_fold({link.value: chosen.source} if chosen.source else {},
                                                       f"source of {link.value}'s numbers")

    for w in (op, algorithm, link, p, size):
        w.observe(update, names="value")
    update()
    return W.VBox([_row([op, algorithm]), _row([link, p]), size, out])


@speaks
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
    return W.VBox([_row([p, mag]), strategy, out])


@speaks
def overlap_explorer() -> W.VBox:
    """A model of `layers` equal layers on `p` ranks over a link: pick the bucket cap and see the timeline."""
    from commlib import cost
    from commlib.cost.timeline import buckets_from_layers, simulate

    params = W.FloatLogSlider(value=1e9, base=10, min=7, max=11, step=0.25, description="parameters", readout_format=".2g")
    layers = W.IntSlider(value=24, min=1, max=96, description="layers")
    backward = W.FloatSlider(value=300, min=10, max=2000, step=10, description="backward ms",
                             style={"description_width": "initial"})  # the whole label, not "backward ..."
    link = W.Dropdown(options=list(cost.LINKS), value="ib_ndr", description="link")
    p = W.IntSlider(value=16, min=2, max=512, description="ranks p")
    # powers of two and DDP's default, 25 MiB (torch.nn.parallel.DistributedDataParallel's bucket_cap_mb), where
    # the slider starts (a log slider's steps would round 25 to 22.6)
    caps = sorted({2.0 ** k for k in range(-2, 13)} | {25.0})
    cap = W.SelectionSlider(options=[(f"{c:g}", c) for c in caps], value=25.0, description="bucket MiB")
    grad_bytes = W.Dropdown(options=[("fp32 (4 B)", 4), ("bf16/fp16 (2 B)", 2)], value=4, description="gradients")
    text, out = W.HTML(), W.Output()

    def update(_=None):
        per_layer = params.value * grad_bytes.value / layers.value
        compute, comm, sizes = buckets_from_layers([per_layer] * layers.value,
                                                   [backward.value / 1e3 / layers.value] * layers.value,
                                                   p.value, link.value, bucket_cap_mb=cap.value)
        with_overlap = simulate(compute, comm, overlap=True)
        without = simulate(compute, comm, overlap=False)
        text.value = (f"{len(sizes)} buckets; communication {with_overlap.comm_s * 1e3:.1f} ms, backward "
                      f"{with_overlap.compute_s * 1e3:.0f} ms.<br>Without overlap: step {without.total_s * 1e3:.1f} ms. "
                      f"<b>With overlap: step {with_overlap.total_s * 1e3:.1f} ms</b>, exposed "
                      f"{with_overlap.exposed_comm_s * 1e3:.1f} ms ({with_overlap.overlap_fraction:.0%} hidden). "
                      f"The last bucket, {sizes[-1] / 2**20:,.1f} MiB, can only start when backward ends.")
        _show(out, plots.timeline(with_overlap).figure)

    for w in (params, layers, backward, link, p, cap, grad_bytes):
        w.observe(update, names="value")
    update()
    return W.VBox([_row([params, layers, backward]), _row([link, p, grad_bytes]), cap, text, out])


@speaks
def topology_calculator(nbytes: float = 1e9) -> W.VBox:
    """Pick a node type (or your own nodes, GPUs, links and NICs) and an op; see time and busbw per algorithm."""
    from commlib import cost
    from commlib import plan
    from commlib import topology as topo

    links = {name: link for name, link in cost.LINKS.items()}
    links.update({f"{name} (achievable)": link for name, link in topo.ACHIEVABLE.items()})
    node = W.Dropdown(options=_labelled(["custom", *topo.PRESETS]), value="dgx_h100", description="node")
    achievable = W.Checkbox(value=True, description="NCCL's achievable speeds")
    nodes = W.IntSlider(value=2, min=1, max=64, description="nodes")
    gpus = W.IntSlider(value=8, min=1, max=72, description="GPUs/node")
    nics = W.IntSlider(value=8, min=1, max=72, description="NICs/node")
    intra = W.Dropdown(options=list(links), value="nvlink4", description="intra")
    inter = W.Dropdown(options=list(links), value="ib_ndr", description="NIC")
    op = W.Dropdown(options=list(topo.PAIRS), value="all_reduce", description="op")
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
            g = topo.preset_gpus(node.value)
            wanted = ((gpus, g), (nics, g), (intra, topo.PRESETS[node.value][0] + suffix),
                      (inter, topo.PRESETS[node.value][1] + suffix))
            if any(w.value != v for w, v in wanted):
                for w, v in wanted:
                    w.unobserve(update, names="value")
                    w.value = v
                    w.observe(update, names="value")
        t = chosen()
        rows = []
        for algorithm in topo.PAIRS[op.value]:
            b = topo.breakdown(op.value, size.value, t, algorithm)
            mb = {k: f"{v / 1e6:,.1f}" for k, v in b["bytes_per_rank"].items()}
            rows.append((algorithm, f"{b['time_s'] * 1e3:,.3f} ms", f"{b['busbw_GBps']:,.1f}", mb["intra"],
                         mb["inter"], b["bottleneck"]))
        head = ("algorithm", "time", "busbw GB/s", "MB/rank intra", "MB/rank inter", "bottleneck")
        text.value = (f"<p><b>{plan.describe_topology(t)}</b></p>" + html_table(head, rows, "lrrrrl")
                      + sources_fold(plan.topology_sources(t)))
        _show(out, plots.topology_busbw(t, op.value).figure)

    for w in (node, achievable, nodes, gpus, nics, intra, inter, op, size):
        w.observe(update, names="value")
    update()
    return W.VBox([_row([node, achievable, nodes]), _row([gpus, nics, intra, inter]), _row([op, size]),
                   text, out])


# ------------------------------------------------------------------------------------ the planner
def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.2f} GB"


def _ms(s: float) -> str:
    return f"{s * 1e3:,.1f} ms"


def _where(size: int, nodes: int, per_node: int) -> str:
    if size == 1:
        return "-"
    if nodes == 1:
        return f"{size} ranks in one node"
    return f"{size} ranks on {nodes} nodes, {per_node} per node"


def format_estimate(e, hw) -> str:
    """A plan.Estimate as HTML: the verdict, memory per GPU, each kind of communication (bytes per rank per
    step, time, where its group sits), and the step."""
    from commlib import plan

    c, m, t = e.config, e.memory, e.times
    verdict = (f"<b style='color:#2a7'>fits</b>: {_gb(m['total'])} of {_gb(hw.gpu_memory)} per GPU" if e.fits else
               f"<b style='color:#c33'>does not fit</b>: {_gb(m['total'])} &gt; {_gb(hw.gpu_memory)} per GPU")
    head = (f"<p>{verdict}. dp {c.dp} x tp {c.tp} x pp {c.pp} = {c.dp * c.tp * c.pp} GPUs, ep {c.ep}, "
            f"{f'ZeRO-{c.zero_stage}' if c.zero_stage else 'no ZeRO'}, {c.microbatches} micro-batch(es).</p>")
    labels = {"model_states": "model states", "activations": "activations",
              "zero3_gathered": "gathered ZeRO-3 layers", "total": "<b>total</b>"}
    memory = html_table(("memory per GPU", ""), [(labels[k], _gb(m[k])) for k in labels])
    where = plan.groups(hw, c)
    exposed = {"dp": f"{_ms(t['dp_exposed'])} exposed of {_ms(t['dp'])}", "tp": "on the critical path",
               "ep": "on the critical path", "pp": "on the critical path"}
    comm = html_table(("traffic", "bytes per rank per step", "group", "overlap"),
                      [(k, _gb(e.comm_bytes[k]), _where(*where[k][:1], *where[k][2:]),
                        exposed[k] if e.comm_bytes[k] else "-") for k in ("dp", "tp", "pp", "ep")], "lrll")
    step = (f"<p><b>step {e.step_s:,.3f} s</b> = compute {_ms(t['compute'])} + TP {_ms(t['tp'])} + EP {_ms(t['ep'])}"
            f" + PP {_ms(t['pp'])} + bubble {_ms(t['bubble'])} + exposed DP {_ms(t['dp_exposed'])}</p>")
    return head + memory + comm + step


@speaks
def planner(model: str = "llama2_7b", node: str = "dgx_h100", nodes: int = 2, global_batch: int = 64) -> W.VBox:
    """Model shape, cluster (a topology preset) and configuration in; memory per GPU, communication by kind,
    step time and a verdict (fits / does not fit) out. 'fastest that fits' runs plan.search."""
    from commlib import plan
    from commlib import topology as topo

    style = {"description_width": "initial"}
    preset = W.Dropdown(options=_labelled([*plan.MODELS, "custom"]), value=model, description="model")
    shape = {k: W.IntText(description=k, layout=W.Layout(width="150px"), style=style)
             for k in ("layers", "hidden", "heads", "seq", "vocab", "ffn", "experts", "topk")}
    machine = W.Dropdown(options=list(topo.PRESETS), value=node, description="node")
    n_nodes = W.IntSlider(value=nodes, min=1, max=64, description="nodes")
    achievable = W.Checkbox(value=True, description="NCCL's achievable speeds", style=style)
    powers = [1, 2, 4, 8, 16, 32, 64]
    tp, pp, ep = (W.Dropdown(options=powers, value=1, description=k, layout=W.Layout(width="150px"))
                  for k in ("tp", "pp", "ep"))
    zero = W.ToggleButtons(options=[0, 1, 2, 3], value=0, description="ZeRO", style={"button_width": "40px"})
    micro = W.IntText(value=1, description="micro-batches", style=style, layout=W.Layout(width="170px"))
    batch = W.IntText(value=global_batch, description="global batch", style=style, layout=W.Layout(width="170px"))
    mfu = W.FloatSlider(value=0.4, min=0.05, max=1.0, step=0.05, description="MFU")
    hide = W.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.1, description="DP overlap", style=style)
    recompute = W.Dropdown(options=_labelled(plan.RECOMPUTE), value="selective", description="recompute", style=style)
    search = W.Button(description="fastest that fits")
    out, found = W.HTML(), W.HTML()
    busy = [False]

    def fill(_=None):
        if preset.value in plan.MODELS:
            busy[0] = True
            for k, w in shape.items():
                w.value = getattr(plan.MODELS[preset.value], k)
            busy[0] = False
        update()

    def chosen():
        hw = plan.hardware(machine.value, n_nodes.value, achievable=achievable.value)
        base = plan.MODELS.get(preset.value)
        kw = {k: w.value for k, w in shape.items()}
        extra = {} if base is None else {"kv_heads": base.kv_heads, "tied": base.tied, "block": base.block}
        assume = plan.Assumptions(mfu=mfu.value, dp_overlap=hide.value, recompute=recompute.value)
        return plan.Model(**kw, **extra), hw, assume

    def update(_=None):
        if busy[0]:
            return
        try:
            m, hw, assume = chosen()
            if hw.world % (tp.value * pp.value):
                raise ValueError(f"tp*pp = {tp.value * pp.value} must divide the {hw.world} GPUs")
            c = plan.Config(hw.world // (tp.value * pp.value), tp.value, pp.value, ep.value, zero.value, micro.value)
            out.value = (format_estimate(plan.estimate(m, hw, c, batch.value, assume), hw)
                         + f"<p>{m.params / 1e9:.2f}B parameters on {hw.describe().replace(chr(10), '<br>')}</p>"
                         + sources_fold(hw.sources()))
        except (ValueError, TypeError) as err:
            out.value = f"<b>{err}</b>"

    def best(_=None):
        try:
            m, hw, assume = chosen()
        except (ValueError, TypeError):  # the estimate above says it already: printed once, not twice
            found.value = "<p>no search: the model or the cluster above is not valid.</p>"
            return
        try:
            fits, n = plan.search(m, hw, batch.value, assume)
        except (ValueError, TypeError) as err:
            found.value = f"<b>{err}</b>"
            return
        rows = [(e.config.dp, e.config.tp, e.config.pp, e.config.ep, e.config.zero_stage, e.config.microbatches,
                 f"{e.step_s:,.3f} s", _gb(e.memory["total"])) for e in fits[:5]]
        head = ("dp", "tp", "pp", "ep", "ZeRO", "micro-batches", tr("step", "step time"), "memory")
        found.value = (f"<p>{len(fits)} of {n} configurations fit; the fastest:</p>" + html_table(head, rows, "r" * 8)
                       if fits else f"<p>none of {n} configurations fits.</p>")

    preset.observe(fill, names="value")
    for w in (*shape.values(), machine, n_nodes, achievable, tp, pp, ep, zero, micro, batch, mfu, hide, recompute):
        w.observe(update, names="value")
    for w in shape.values():
        w.observe(lambda change: None if busy[0] else setattr(preset, "value", "custom"), names="value")
    search.on_click(best)
    fill()
    keys = list(shape)
    return W.VBox([_row([preset, *[shape[k] for k in keys[:3]]]), _row([shape[k] for k in keys[3:]]),
                   _row([machine, n_nodes, achievable]), _row([tp, pp, ep, micro, batch]), zero,
                   _row([mfu, hide, recompute]), out, _row([search]), found])
