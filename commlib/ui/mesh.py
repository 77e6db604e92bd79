"""Chapter 8's pictures: ring attention stepped over the causal attention matrix, the work per rank, the timelines
of a ring pass (compute and transfers, one row per rank)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from commlib.parallel.context import chunks_of
from commlib.ui.animation import Animation, _png
from commlib.ui.language import speaks


@speaks
def ring_attention_step(cp: int, balance: str = "zigzag", step: int = 0, causal: bool = True, ax=None):
    """The attention matrix cut into 2cp x 2cp chunk pairs (queries down, keys across). After `step` steps of the
    ring (step 0: every rank attends to its own K/V), the pairs computed so far are coloured by the rank that
    computed them; those of this step are outlined; the mask hides the grey ones."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 4.6))
    ax.clear()
    n = 2 * cp
    owner = {c: r for r in range(cp) for c in chunks_of(r, cp, balance)}
    grid = np.full((n, n, 3), 1.0)
    for qc in range(n):
        for kc in range(n):
            r, src = owner[qc], owner[kc]
            t = (r - src) % cp    # the step at which rank r holds the K/V of rank src
            if causal and kc > qc:
                grid[qc, kc] = (0.85, 0.85, 0.85)
            elif t <= step:
                grid[qc, kc] = plt.cm.tab10(r % 10)[:3]
                if t == step:
                    ax.add_patch(plt.Rectangle((kc - 0.5, qc - 0.5), 1, 1, fill=False, lw=2.2, ec="black"))
    ax.imshow(grid, interpolation="nearest")
    ax.set_xticks(range(n), [f"k{c}\nr{owner[c]}" for c in range(n)], fontsize=7)
    ax.set_yticks(range(n), [f"q{c} r{owner[c]}" for c in range(n)], fontsize=7)
    ax.set_xlabel("key chunk (and the rank that holds it)", fontsize=8)
    ax.set_ylabel("query chunk", fontsize=8)
    held = ", ".join(f"r{r}: K/V of r{(r - step) % cp}" for r in range(cp))
    ax.set_title(f"{balance}, step {step} of {cp - 1}: {held}", fontsize=8.5)
    return ax


def ring_attention(cp: int = 4, balance: str = "zigzag", causal: bool = True, interval_ms: int = 1500) -> Animation:
    """Every step of ring attention as a player (needs no kernel): frame k is ring_attention_step(.., k)."""
    ax = None
    frames, captions = [], []
    try:
        for k in range(cp):
            ax = ring_attention_step(cp, balance, k, causal, ax=ax)
            ax.figure.tight_layout()
            frames.append(_png(ax.figure))
            captions.append(ax.get_title())
    finally:
        if ax is not None:
            plt.close(ax.figure)
    return Animation(tuple(frames), tuple(captions), interval_ms)


@speaks
def work_bars(work: dict, ax=None):
    """work: {balance: [chunk pairs per rank]} -> grouped bars, one group per rank."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 2.4))
    width = 0.8 / len(work)
    for i, (name, per_rank) in enumerate(work.items()):
        xs = np.arange(len(per_rank)) + i * width
        ax.bar(xs, per_rank, width, label=f"{name} (busiest {max(per_rank)})", color=f"C{i}")
    ax.set_xticks(np.arange(len(next(iter(work.values())))) + width * (len(work) - 1) / 2,
                  [f"rank {r}" for r in range(len(next(iter(work.values()))))])
    ax.set_ylabel("chunk pairs computed")
    ax.legend(fontsize=8)
    ax.set_title("causal attention: the step lasts as long as the busiest rank", fontsize=9.5)
    return ax


@speaks
def ring_timelines(timelines, ax=None, title: str = "", unit: float = 1e3):
    """One row per rank: compute (solid) above, the transfer in flight (hatched) below. timelines: one
    overlap.Timeline per rank (collective_matmul.ring_timelines)."""
    p = len(timelines)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.55 * p + 1.0))
    for r, tl in enumerate(timelines):
        y = p - 1 - r
        for e in tl.events:
            comm = e.kind == "comm"
            ax.barh(y + (-0.2 if comm else 0.15), (e.end - e.start) * unit, left=e.start * unit,
                    height=0.3 if comm else 0.4, color=f"C{e.bucket % 10}", alpha=0.5 if comm else 0.9,
                    hatch="//" if comm else None, edgecolor="black", lw=0.5)
    ax.set_yticks(range(p), [f"rank {r}" for r in reversed(range(p))])
    ax.set_xlabel("ms" if unit == 1e3 else "s")
    exposed = max(tl.total_s - tl.compute_s for tl in timelines)
    ax.set_title(title or f"solid: compute of step t; hatched: the block in flight. "
                          f"Most exposed: {exposed * unit:.1f} ms", fontsize=9)
    return ax
