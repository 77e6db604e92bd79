"""The what-if's timelines (profiling.replay.whatif): per scenario and rank, compute, communication and waiting.

    timelines(report)            # one row per (scenario, rank) on one time axis, each step's end marked
    flows(report, rank=0)        # each call its own bar: calls in flight at once on rows of their own
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from commlib.ui.language import speaks
from commlib.ui.ticks import set_ticks

COMPUTE, COMM, WAIT = "C0", "C2", "#bbbbbb"   # profile_spans' colours (chapter 9); waits grey and hatched


@speaks
def timelines(report: dict, scenarios=None, ax=None, steps: int | None = None):
    """Draw report["scenarios"] (those named in `scenarios`, default all but the identity replay): for each rank,
    compute (blue), communication (green) and the part of it spent waiting for a later rank (grey, hatched),
    in ms from the rank's start, with the step's end marked; broken_barh, one call per kind and row.
    steps: the training steps the traces hold (default report["steps"]): the marks say the step, the axis the
    whole trace."""
    rows = [s for s in report["scenarios"] if (s["name"] in scenarios if scenarios else s["name"] != "identity replay")]
    ranks = sorted({r for s in rows for r in s["ranks"]})
    k = steps or report.get("steps", 1)
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 0.42 * len(rows) * len(ranks) + 1.1))
    labels, y, longest = [], 0, 0.0
    for s in rows:
        for r in ranks:
            spans = s["ranks"][r]["spans"]
            for kind, color, hatch, h in (("compute", COMPUTE, None, 0.7), ("comm", COMM, None, 0.36),
                                          ("waiting", WAIT, "////", 0.36)):
                bars = [(a / 1e3, (b - a) / 1e3) for a, b in spans[kind]]
                ax.broken_barh(bars, (y - h / 2, h), facecolors=color, edgecolor="none" if hatch is None else "#777777",
                               hatch=hatch, lw=0.0, alpha=0.85, label=kind if y == 0 else None)
            end = s["ranks"][r]["step_us"] / 1e3
            ax.plot([end, end], [y - 0.45, y + 0.45], color="black", lw=1.2)
            longest = max(longest, end)
            labels.append(f"{s['name'][:22]} · rank {r}")
            y -= 1
        y -= 0.4   # a gap between scenarios
    set_ticks(ax, "y", [-i - 0.4 * (i // len(ranks)) for i in range(len(labels))], labels, fontsize=8)
    ax.set_xlim(0, longest * 1.02)
    ax.set_xlabel("ms from the rank's start" + (f" ({k} training steps)" if k > 1 else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ax.set_title("each scenario's replay: compute (blue), communication (green), waiting for a later rank "
                 "(grey); | the end", fontsize=9)
    return ax


@speaks
def flows(report: dict, scenarios=None, rank=None, ax=None):
    """Each collective call of one rank as its own bar, for each scenario named (default: the identity replay and
    every scenario): calls in flight at once stacked on separate rows, so two that share a NIC show side by side;
    each bar labelled with its duration in ms."""
    rows = [s for s in report["scenarios"] if (s["name"] in scenarios if scenarios else s["name"] != "measured")]
    rank = min(rows[0]["ranks"]) if rank is None else rank
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 1.0 + 0.9 * len(rows)))
    labels, y, longest = [], 0.0, 0.0
    for s in rows:
        calls = sorted((float(a), float(b)) for a, b in s["ranks"][rank]["spans"]["calls"])
        free = []   # per stacked row: where its last bar ends
        for a, b in calls:
            k = next((i for i, end in enumerate(free) if end <= a + 1e-9), len(free))
            free[k:k + 1] = [b]
            top = y - k * 0.4
            ax.broken_barh([(a / 1e3, (b - a) / 1e3)], (top - 0.17, 0.34), facecolors=COMM, edgecolor="black", lw=0.5)
            ax.text((a + b) / 2e3, top, f"{(b - a) / 1e3:.2f}", ha="center", va="center", fontsize=7)
            longest = max(longest, b)
        labels.append((y - 0.2, f"{s['name'][:24]} · rank {rank}"))
        y -= 1.2
    set_ticks(ax, "y", [p for p, _ in labels], [t for _, t in labels], fontsize=8)
    ax.set_xlim(0, longest / 1e3 * 1.03)
    ax.set_xlabel("ms from the rank's start")
    ax.set_title("each collective call (ms): calls in flight at once on rows of their own", fontsize=9)
    return ax
