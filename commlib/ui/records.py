"""Each rank's last Flight Recorder entries side by side, the culprits marked: the picture of a hang."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from commlib.cluster import flight_recorder
from commlib.ui.language import speaks


def _lines(snap: dict | None, last: int) -> list[tuple[str, str]]:
    """[(text, kind)] for one rank, oldest first: its last collectives ('record'), then what it still waits on:
    pending sends/recvs ('pending') or the torch.distributed call its main thread is in ('waiting')."""
    if not snap:
        return [("no snapshot:", "gone"), ("the rank was gone", "gone")]
    out = [(flight_recorder.describe(e), "record") for e in flight_recorder.records(snap)[-last:]]
    for e in (snap.get("p2p") or {}).get("pending", []):
        arrow = "<- " if e["op"] == "recv" else "-> "
        out.append((f"{e['op']} {arrow}rank {e['peer']} (pending)", "pending"))
    w = snap.get("waiting")
    if w and not w.get("p2p"):
        out.append((f"waits in {w['op']}", "waiting"))
    return out or [("(no records)", "record")]


_COLORS = {"record": "#dfe8f3", "pending": "#f6d6a8", "waiting": "#f6d6a8", "gone": "#dddddd"}


@speaks
def last_records(snapshots: dict, diagnosis: dict | None = None, last: int = 3, ax=None):
    """One column per rank: its last `last` collectives (oldest at the top), then the sends/recvs it still waits
    on (orange). The diagnosis's culprits get a red frame and a label. -> the Axes."""
    ranks = sorted(snapshots)
    columns = {r: _lines(snapshots[r], last) for r in ranks}
    rows = max(len(c) for c in columns.values())
    culprits = set((diagnosis or {}).get("ranks") or [])
    width = 2.6
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 2.7 * len(ranks), 1.3 + 0.5 * rows))
    for i, r in enumerate(ranks):
        x = i * (width + 0.3)
        for j, (text, kind) in enumerate(columns[r]):
            y = rows - 1 - j
            ax.add_patch(Rectangle((x, y), width, 0.8, fc=_COLORS[kind], ec="#555555", lw=0.8))
            ax.text(x + width / 2, y + 0.4, text, ha="center", va="center", fontsize=8, family="monospace")
        mine = r in culprits
        if mine:
            ax.add_patch(Rectangle((x - 0.08, -0.1), width + 0.16, rows + 0.05, fill=False, ec="#c0392b", lw=2.5))
        ax.text(x + width / 2, rows + 0.15, f"rank {r}" + (" (culprit)" if mine else ""), ha="center",
                va="bottom", fontsize=10, weight="bold", color="#c0392b" if mine else "black")
    ax.set_xlim(-0.3, len(ranks) * (width + 0.3))
    ax.set_ylim(-0.3, rows + 0.7)
    ax.axis("off")
    kind = (diagnosis or {}).get("kind")
    ax.set_title("last Flight Recorder entries per rank (oldest at the top); orange: still waiting"
                 + (f"; diagnosis: {kind}" if kind else ""), fontsize=9)
    return ax
