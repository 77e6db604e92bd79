"""Draw assets/knowledge_map.svg: the three sources of communication overhead, each with its remedies.

    python assets/make_knowledge_map.py      # rewrites knowledge_map.svg beside this file

The output is deterministic (no date, fixed ids), so a rerun that changes nothing leaves git clean.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).with_name("knowledge_map.svg")

# (title, what it is, chapter(s), remedies)
PROBLEMS = [
    ("Communication patterns",
     "Which collective moves which bytes:\nAllReduce = ReduceScatter + AllGather;\nring sends 2(p-1)/p · n per rank",
     "Ch. 1", ["Pick the collective that fits\n(ReduceScatter + AllGather for sharding)",
               "Pick the algorithm. NCCL: Ring, Tree,\nNVLS, CollNet, PAT, per call. MPI:\nrecursive doubling, Rabenseifner"]),
    ("Latency + bandwidth",
     "t = α + n·β per message;\nsmall messages pay α, big ones pay n·β;\nbusbw vs the link's per-direction GB/s",
     "Ch. 2, 8", ["Fewer, bigger messages (buckets)",
                  "Fewer bytes: FP16 / BF16 gradients\n(safely: Ch. 4), larger batches,\ngradient accumulation",
                  "Faster links: NVLink within a node,\nInfiniBand across nodes"]),
    ("Overlap",
     "Exposed communication = the part\nnot hidden behind backward compute;\nthe last bucket is never hidden",
     "Ch. 6, 8", ["Bucketed, asynchronous all-reduce\nfrom gradient hooks (DDP)",
                  "Bucket size: latency per bucket\nvs a long exposed tail",
                  "Profile: measure exposed comm,\ncompare with the α-β model"]),
]

COLORS = ["#4C72B0", "#DD8452", "#55A868"]


def draw() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(12, 7.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 7.2)
    ax.axis("off")
    root = (6.0, 6.65)
    ax.text(*root, "Communication overhead in distributed training", ha="center", va="center",
            fontsize=15, weight="bold",
            bbox=dict(boxstyle="round,pad=0.45", fc="#F2F2F2", ec="#333333"))
    for i, (title, what, chapter, remedies) in enumerate(PROBLEMS):
        x = 0.3 + i * 4.0
        color = COLORS[i]
        box = FancyBboxPatch((x, 4.05), 3.5, 1.85, boxstyle="round,pad=0.05", fc=color, ec=color, alpha=0.15)
        ax.add_patch(box)
        ax.text(x + 1.75, 5.62, title, ha="center", va="center", fontsize=12.5, weight="bold", color=color)
        ax.text(x + 1.75, 4.85, what, ha="center", va="center", fontsize=8.8, linespacing=1.35)
        ax.text(x + 3.45, 4.15, chapter, ha="right", va="bottom", fontsize=8.5, style="italic", color="#555555")
        ax.add_patch(FancyArrowPatch((root[0], root[1] - 0.3), (x + 1.75, 5.98), arrowstyle="-|>",
                                     mutation_scale=14, color="#555555", lw=1.2))
        ax.text(x + 1.9, 3.75, "remedies", ha="left", va="center", fontsize=9, style="italic", color="#555555")
        for j, remedy in enumerate(remedies):
            y = 3.05 - j * 1.05
            ax.add_patch(FancyBboxPatch((x + 0.15, y - 0.4), 3.2, 0.8, boxstyle="round,pad=0.04",
                                        fc="white", ec=color, lw=1.3))
            ax.text(x + 1.75, y, remedy, ha="center", va="center", fontsize=8.4, linespacing=1.25)
        ax.add_patch(FancyArrowPatch((x + 1.75, 4.0), (x + 1.75, 3.5), arrowstyle="-|>",
                                     mutation_scale=12, color=color, lw=1.2))
    ax.text(6.0, 0.12, "FP16 reductions (Ch. 4) cut the bytes in half, but partial sums can overflow at 65504: "
            "accumulate in FP32, pre-divide, or use BF16.", ha="center", va="center", fontsize=8.8, color="#333333")
    return fig


def main() -> Path:
    plt.rcParams["svg.hashsalt"] = "commlib"
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable, crisp
    fig = draw()
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return OUT


if __name__ == "__main__":
    print(main())
