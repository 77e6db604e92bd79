"""matplotlib figures for the notebooks: thin drawings over data computed elsewhere."""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.patches import FancyArrowPatch, Rectangle

from commlib.algorithms.trace import Event
from commlib.ui.language import speaks, tr
from commlib.ui.ticks import set_ticks


@speaks
def ring_step(states, events_by_rank: list[list[Event]], step: int, world_size: int, ax=None):
    """Draw the ring all-reduce after `step` steps: one column per rank, one box per chunk, shaded by
    how many ranks' data it holds (labelled with their ranks), and this step's messages as arrows."""
    p = world_size
    if ax is None:
        _, ax = plt.subplots(figsize=(2.0 + 1.6 * p, 1.2 + 0.55 * p))
    ax.clear()
    state = states[step]
    cmap = plt.get_cmap("Blues")
    for r in range(p):
        ax.text(r * 1.6 + 0.6, p + 0.25, f"rank {r}", ha="center", va="bottom", fontsize=10, weight="bold")
        for c in range(p):
            have = state[r][c]
            full = len(have) == p
            ax.add_patch(Rectangle((r * 1.6, p - 1 - c), 1.2, 0.85, fc=cmap(0.15 + 0.7 * len(have) / p),
                                   ec="darkgreen" if full else "#333333", lw=2.5 if full else 1))
            ax.text(r * 1.6 + 0.6, p - 1 - c + 0.42, "+".join(map(str, sorted(have))), ha="center",
                    va="center", fontsize=8, color="white" if len(have) > p / 2 else "black")
    for c in range(p):
        ax.text(-0.6, p - 1 - c + 0.42, f"chunk {c}", ha="right", va="center", fontsize=8)
    moves = {(e.src, e.dst, e.chunk, e.phase) for evs in events_by_rank for e in evs if e.step == step - 1}
    for src, dst, c, phase in sorted(moves):
        y = p - 1 - c + 0.42
        color = "#C44E52" if phase == "reduce_scatter" else "#55A868"
        if dst > src:
            segments = [(src * 1.6 + 1.2, dst * 1.6)]
        else:  # the wrap-around from the last rank to the first: leave on the right, enter on the left
            segments = [(src * 1.6 + 1.2, src * 1.6 + 1.55), (dst * 1.6 - 0.4, dst * 1.6)]
            ax.text(src * 1.6 + 1.58, y, f"to {dst}", ha="left", va="center", fontsize=7, color=color)
            ax.text(dst * 1.6 - 0.42, y + 0.3, f"from {src}", ha="center", va="bottom", fontsize=7, color=color)
        for x0, x1 in segments:
            ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=12, lw=1.6, color=color))
    total = 2 * (p - 1)
    if step == 0:
        what = "start: each rank holds its own data (the label lists whose data a box holds)"
    elif step <= p - 1:
        what = f"reduce-scatter step {step}/{p - 1}: each rank sends one chunk right and adds the one it receives"
    else:
        what = f"all-gather step {step - (p - 1)}/{p - 1}: each rank forwards a finished chunk"
    ax.set_title(f"step {step}/{total}: {what}", fontsize=9.5)
    ax.set_xlim(-1.6, p * 1.6 + 0.3)
    ax.set_ylim(-0.4, p + 0.8)
    ax.axis("off")
    return ax


@speaks
def bytes_per_rank(rows: list[dict], ax=None):
    """Bars of measured bytes sent by each rank per algorithm, with the model's value as a marker."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / max(len(rows), 1)
    p = len(rows[0]["measured"])
    for i, row in enumerate(rows):
        xs = [r + i * width for r in range(p)]
        ax.bar(xs, [b / 2**20 for b in row["measured"]], width, label=row["algorithm"])
        ax.scatter(xs, [b / 2**20 for b in row["model"]], marker="_", s=200, color="black", zorder=3)
    ax.set_xticks([r + 0.4 - width / 2 for r in range(p)], [f"rank {r}" for r in range(p)])
    ax.set_ylabel("MiB sent")
    ax.set_title("bytes each rank sends (bars: counted; black ticks: cost model)")
    ax.legend(fontsize=8, ncol=min(len(rows), 3))
    return ax


@speaks
def alpha_beta_fit(nbytes, seconds, alpha: float, beta: float, title: str = ""):
    """Measured times with the fitted t = alpha + n*beta (log-log), and the relative residuals below."""
    import numpy as np

    n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    grid = np.logspace(np.log10(n.min()), np.log10(n.max()), 200)
    top.loglog(n, t * 1e6, "o", label="measured (median)")
    top.loglog(grid, (alpha + grid * beta) * 1e6, "-", label=f"fit: α = {alpha * 1e6:.1f} µs, 1/β = {1 / beta / 1e9:.2f} GB/s")
    top.loglog(grid, np.full_like(grid, alpha * 1e6), ":", color="gray", label="α alone (latency bound)")
    top.loglog(grid, grid * beta * 1e6, "--", color="gray", label="n·β alone (bandwidth bound)")
    top.axvline(alpha / beta, color="#C44E52", lw=1)
    top.text(alpha / beta, t.max() * 1e6, f" n½ = α/β = {alpha / beta / 1024:.0f} KiB", color="#C44E52",
             va="top", fontsize=8)
    top.set_ylabel("time (µs)")
    top.legend(fontsize=8)
    top.set_title(title or "t = α + n·β")
    bottom.semilogx(n, ((alpha + n * beta) - t) / t * 100, "o-", ms=3)
    bottom.axhline(0, color="gray", lw=0.8)
    bottom.set_ylabel("fit error (%)")
    bottom.set_xlabel("message size (bytes)")
    fig.tight_layout()
    return fig


def _byte_label(n: float) -> str:
    """4096 -> '4 KiB', 1 << 20 -> '1 MiB' (powers of two as people read them)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def _byte_ticks(ax, values) -> None:
    """Ticks at the sizes that were measured, labelled in KiB/MiB (not 2^k)."""
    ax.set_xticks(list(values), [_byte_label(v) for v in values])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


@speaks
def measured_vs_predicted(curves: dict, ax=None):
    """curves: name -> (nbytes list, measured seconds, predicted seconds). Solid: measured; dashed: model.
    Without ax: one small panel per algorithm on shared axes (a dozen lines on one panel cannot be read),
    -> the list of panels; with ax: every curve on it, -> [ax]."""
    if ax is not None:
        panels = [ax] * len(curves)
    else:
        cols = min(3, len(curves))
        rows = -(-len(curves) // cols)
        fig, grid = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.5 * rows + 0.6), sharex=True, sharey=True,
                                 squeeze=False)
        panels = list(grid.flat)
        for extra in panels[len(curves):]:
            extra.set_visible(False)
    for i, (name, (n, measured, predicted)) in enumerate(curves.items()):
        p, color = panels[i], f"C{i}"
        p.loglog(n, [m * 1e6 for m in measured], "o-", color=color, ms=3, label=f"{name} measured")
        p.loglog(n, [m * 1e6 for m in predicted], "--", color=color, label=f"{name} model")
        if ax is None:
            p.set_title(name, fontsize=9.5)
            p.grid(True, which="major", lw=0.3, alpha=0.5)
    if ax is not None:
        ax.set_xlabel("all_reduce size (bytes)")
        ax.set_ylabel("time (µs)")
        ax.legend(fontsize=7, ncol=2)
        ax.set_title("measured (solid) vs α-β-γ model (dashed)")
        return [ax]
    for p in grid[-1]:
        p.set_xlabel("all_reduce size (bytes)")
    for p in grid[:, 0]:
        p.set_ylabel("time (µs)")
    fig.suptitle("measured (solid, dots) vs α-β-γ model (dashed), one panel per algorithm", fontsize=10)
    fig.tight_layout()
    return panels[:len(curves)]


@speaks
def comm_share(micro_batches, shares: dict, ax=None):
    """The communication share of a step vs gradient accumulation (micro-batches per optimizer step)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.5))
    for name, ys in shares.items():
        ax.semilogx(micro_batches, [y * 100 for y in ys], "o-", label=name, base=2)
    ax.set_xlabel("micro-batches per optimizer step (gradient accumulation)")
    ax.set_ylabel("communication share of step (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("one all-reduce per optimizer step, no overlap")
    return ax


@speaks
def precision_vs_world_size(world_sizes, results: dict, magnitude: float):
    """Two panels per strategy: share of gradient values lost (inf, nan, flushed to 0) and the mean
    relative error of the others, as the number of ranks grows."""
    fig, (lost, err) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, (name, rows) in enumerate(results.items()):
        lost.semilogx(world_sizes, [r[0] * 100 for r in rows], "o-", base=2, color=f"C{i}", label=name)
        err.plot(world_sizes, [max(r[1], 1e-9) for r in rows], "o-", color=f"C{i}", label=name)
    err.set_xscale("log", base=2)
    err.set_yscale("log")  # errors in powers of ten, ranks in powers of two
    lost.set_title(f"values lost (inf, nan or 0), gradients ~ {magnitude:g}")
    lost.set_ylabel("% of gradient values")
    err.set_title("mean relative error of the values kept")
    for ax in (lost, err):
        ax.set_xlabel("ranks p")
        ax.set_xticks(list(world_sizes), [str(p) for p in world_sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    # the legend below both panels, where it covers no line (strategies that agree draw one line)
    handles, labels = err.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return fig


@speaks
def timeline(tl, ax=None, title: str = "", unit: float = 1e3):
    """Gantt chart of an overlap.Timeline: forward and backward compute on one row, the all-reduces on the other."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1.9))
    rows = {"forward": 1, "compute": 1, "comm": 0}
    for e in tl.events:
        color = "lightgray" if e.kind == "forward" else f"C{e.bucket % 10}"
        ax.barh(rows[e.kind], (e.end - e.start) * unit, left=e.start * unit, height=0.6, color=color,
                edgecolor="black", lw=0.5, alpha=0.85 if e.kind == "compute" else 0.6,
                hatch=None if e.kind == "compute" else "//")
    compute_end = max((e.end for e in tl.events if e.kind in ("forward", "compute")), default=0.0)
    ax.axvline(compute_end * unit, color="black", lw=1, ls=":")
    forward = any(e.kind == "forward" for e in tl.events)
    set_ticks(ax, "y", [1, 0], ["forward, backward" if forward else "backward", "all-reduce"])
    ax.set_xlabel("ms" if unit == 1e3 else "s")
    ax.set_xlim(0, max(tl.total_s * unit * 1.02, 1e-9))
    ax.set_title(title or f"step {tl.total_s * unit:.1f} ms, exposed communication {tl.exposed_comm_s * unit:.1f} ms, "
                          f"{tl.overlap_fraction:.0%} of communication hidden", fontsize=9.5)
    return ax


@speaks
def bucket_sweep(caps_mb, steps_s, exposed_s, ax=None):
    """Step time and exposed communication vs bucket size."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    ax.semilogx(caps_mb, [s * 1e3 for s in steps_s], "o-", base=2, label=tr("step", "step time"))
    ax.semilogx(caps_mb, [s * 1e3 for s in exposed_s], "s--", base=2, label="exposed communication")
    best = min(range(len(caps_mb)), key=lambda i: steps_s[i])
    ax.axvline(caps_mb[best], color="gray", ls=":", lw=1)
    ax.set_xlabel("bucket cap (MiB)")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    ax.set_title(f"best bucket cap here: {caps_mb[best]:g} MiB")
    return ax


@speaks
def profile_spans(report: dict, ax=None):
    """A profile's merged compute and communication spans on two rows, exposed communication in red."""
    from commlib.cost.intervals import intersect, union

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1.9))
    compute, comm = report["compute_spans"], report["comm_spans"]
    for row, spans, color in ((1, compute, "C0"), (0, comm, "C2")):
        ax.broken_barh([(s * 1e3, (e - s) * 1e3) for s, e in spans], (row - 0.3, 0.6), color=color, alpha=0.8)
    hidden = intersect(union(compute), union(comm))
    exposed = [(s, e) for s, e in comm]
    for hs, he in hidden:  # draw the exposed parts: comm minus the hidden parts
        exposed = [piece for s, e in exposed for piece in ((s, min(e, hs)), (max(s, he), e)) if piece[1] > piece[0]]
    ax.broken_barh([(s * 1e3, (e - s) * 1e3) for s, e in exposed], (-0.3, 0.6), color="#C44E52")
    set_ticks(ax, "y", [1, 0], ["compute", "communication"])
    ax.set_xlabel("ms")
    ax.set_title(f"profiled step: compute {report['compute_s'] * 1e3:.1f} ms, communication {report['comm_s'] * 1e3:.1f} ms, "
                 f"exposed (red) {report['exposed_comm_s'] * 1e3:.1f} ms, idle {report['idle_s'] * 1e3:.1f} ms", fontsize=9)
    return ax


@speaks
def chunk_sweep(chunk_bytes, measured_s, predicted_s, total_bytes: int, ax=None):
    """Time to all-reduce the same total in chunks of each size: measured and modelled."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    ax.loglog(chunk_bytes, [t * 1e3 for t in measured_s], "o-", label="measured")
    ax.loglog(chunk_bytes, [t * 1e3 for t in predicted_s], "--", label="α-β model")
    _byte_ticks(ax, chunk_bytes)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))  # 10, 100 ms: not 10^k
    ax.set_xlabel("chunk size")
    ax.set_ylabel("ms for all of it")
    ax.set_title(f"all-reducing {total_bytes >> 20} MiB in chunks: latency x number of messages")
    ax.legend(fontsize=8)
    return ax


@speaks
def segment_sweep(segment_bytes, measured_s, predicted_s, nbytes: int, bus_factor: float, ax=None):
    """busbw of one all-reduce of nbytes whose ring moves its chunks in segments of each size: measured and
    modelled (a pipelined ring whose segments each pay alpha)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    busbw = lambda ts: [nbytes / t * bus_factor / 1e9 for t in ts]  # noqa: E731
    ax.semilogx(segment_bytes, busbw(measured_s), "o-", label="measured")
    ax.semilogx(segment_bytes, busbw(predicted_s), "--", label="pipelined ring model")
    _byte_ticks(ax, segment_bytes)
    ax.set_xlabel("segment size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"one {nbytes >> 20} MiB all-reduce: smaller segments, lower bandwidth")
    ax.legend(fontsize=8)
    return ax


@speaks
def topology_busbw(topology, op: str = "all_reduce", sizes=None, ax=None):
    """The model's busbw against message size for every algorithm of `op` on a commlib.topology.Topology, with
    the two ceilings dashed: the node's NICs (k x one NIC) and one NIC."""
    import numpy as np

    from commlib import topology as topo

    sizes = np.logspace(3, 10, 50) if sizes is None else np.asarray(sizes, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    for algorithm in topo.PAIRS[op]:
        ax.plot(sizes, [topo.breakdown(op, n, topology, algorithm)["busbw_GBps"] for n in sizes], label=algorithm)
    ax.set_xscale("log")
    if topology.nodes > 1:
        nic = topology.inter.bandwidth / 1e9
        top = max(ax.get_ylim()[1], nic * topology.nics_per_node)
        ax.set_ylim(0, top * 1.4)  # a band above every curve and label, inside the frame, for the legend
        for level, ls, label in ((nic * topology.nics_per_node, "--", f"{topology.nics_per_node} NICs "),
                                 (nic, ":", "one NIC ")):
            ax.axhline(level, ls=ls, c="gray", lw=1)
            ax.text(sizes[0], level, " " + label, va="bottom", fontsize=8, color="dimgray")  # small sizes: no curve
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    nics = f"{topology.nics_per_node} NIC{'s' * (topology.nics_per_node > 1)}"
    ax.set_title(f"{op}: {topology.nodes} node{'s' * (topology.nodes > 1)} x {topology.gpus_per_node} GPUs, {nics} "
                 f"per node\n{topology.intra.label} inside, {topology.inter.label} per NIC",
                 fontsize=9.5)
    ax.legend(fontsize=8, loc="upper left", ncol=2)  # in the band above the curves and the ceilings' labels
    return ax


@speaks
def pipeline_timeline(events_by_rank, ax=None, title: str = "", unit: float = 1.0, xlabel: str = "time"):
    """Gantt chart of a pipelined step: one row per stage (stage 0 on top), forwards light and backwards dark,
    each labelled with its micro-batch; the gaps are the bubble. events_by_rank: [(op, i, start, end)] per
    stage, as parallel.pipeline.train_step records them or pipeline.simulate computes them."""
    from commlib.parallel.pipeline import bubble

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * len(events_by_rank) + 0.9))
    t0 = min(e[2] for evs in events_by_rank for e in evs)
    p = len(events_by_rank)
    for s, evs in enumerate(events_by_rank):
        for op, i, start, end in evs:
            left, width = (start - t0) * unit, (end - start) * unit
            ax.barh(p - 1 - s, width, left=left, height=0.7, color=f"C{i % 10}", alpha=0.45 if op == "F" else 0.9,
                    edgecolor="black", lw=0.5)
            ax.text(left + width / 2, p - 1 - s, f"{op}{i}", ha="center", va="center", fontsize=7)
    set_ticks(ax, "y", range(p), [f"stage {s}" for s in reversed(range(p))])
    ax.set_xlabel(xlabel)
    got = bubble(events_by_rank)
    name = {1e3: " ms", 1e6: " µs"}.get(unit, "")
    ax.set_title(title or f"{p} stages, step {got['step_s'] * unit:.3g}{name}, idle {got['bubble']:.0%}", fontsize=9.5)
    return ax


# ------------------------------------------------------------------------ chapter 5: gradient compression
@speaks
def compression_bytes_vs_p(world_sizes, curves: dict, ax=None, title: str = ""):
    """Bytes one rank sends per step against the number of ranks, one line per method (log-log).
    curves: name -> bytes per rank, one per world size."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    for name, nbytes in curves.items():
        ax.plot(world_sizes, nbytes, "o-" if "top" in name or "int8" in name else "s--", ms=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks p")
    ax.set_ylabel("bytes sent per rank")
    ax.set_title(title or "all-reduce: flat in p; all-gather: grows like p - 1", fontsize=10)
    ax.legend(fontsize=8)
    return ax


@speaks
def compression_tradeoff(variants: dict, title: str = ""):
    """Per variant, three panels: bytes per step (log), final test accuracy (bars: the mean; whiskers: min and
    max over seeds), compression overhead per step (ms). variants: name -> a row of the committed sweep."""
    names = list(variants)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), sharey=True)
    ys = range(len(names))
    colors = ["#C44E52" if "no EF" in n else "C0" for n in names]
    axes[0].barh(ys, [variants[n]["bytes_per_step"] for n in names], color=colors)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("bytes per step (busiest rank)")
    acc = [variants[n]["test_accuracy"] for n in names]
    err = [[a - variants[n].get("test_accuracy_min", a) for n, a in zip(names, acc)],
           [variants[n].get("test_accuracy_max", a) - a for n, a in zip(names, acc)]]
    axes[1].barh(ys, acc, xerr=err, color=colors)
    axes[1].set_xlim(min(acc) - 0.05, 1.0)
    axes[1].set_xlabel("test accuracy at the end")
    axes[2].barh(ys, [variants[n]["overhead_s"] * 1e3 for n in names], color=colors)
    axes[2].set_xlabel("compressing + decompressing (ms/step)")
    set_ticks(axes[0], "y", list(ys), names)
    axes[0].invert_yaxis()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


@speaks
def loss_curves(curves: dict, ax=None, smooth: int = 10, title: str = ""):
    """Training loss per step, one line per variant, as a moving average over `smooth` steps."""
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    for name, losses in curves.items():
        y = np.convolve(losses, np.ones(smooth) / smooth, mode="valid")
        ax.plot(range(smooth, smooth + len(y)), y, ls="--" if "no EF" in name else "-", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"train loss ({smooth}-step mean)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return ax


@speaks
def step_vs_bandwidth(rows: list[dict], crossovers: dict | None = None, ax=None, title: str = ""):
    """Step time against the emulated inter-node bandwidth, one line per variant; loopback (bandwidth None) is
    drawn at the right edge, past a gap; crossovers (name -> bytes/s, optional) as ticks on the bottom axis."""
    import math

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    emulated = sorted({r["bandwidth"] for r in rows if r["bandwidth"] is not None})
    loop_x = emulated[-1] * 4
    for i, name in enumerate(dict.fromkeys(r["variant"] for r in rows)):
        mine = {r["bandwidth"]: r["step_s"] * 1e3 for r in rows if r["variant"] == name}
        line, = ax.plot([b / 1e6 for b in emulated], [mine[b] for b in emulated], "o-", ms=4, label=name,
                        color=f"C{i}", lw=2.2 if name == "none" else 1.2)
        if None in mine:
            ax.plot([loop_x / 1e6], [mine[None]], "D", color=line.get_color(), ms=5)
        bw = (crossovers or {}).get(name)
        if bw and math.isfinite(bw) and name != "none":
            ax.axvline(bw / 1e6, color=line.get_color(), ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ticks = [b / 1e6 for b in emulated] + [loop_x / 1e6]
    set_ticks(ax, "x", ticks, [f"{t:g}" for t in ticks[:-1]] + ["loopback"])
    ax.minorticks_off()
    ax.set_xlabel("emulated inter-node bandwidth (MB/s per direction)")
    ax.set_ylabel("step (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    return ax
