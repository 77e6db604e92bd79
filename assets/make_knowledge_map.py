"""Draw assets/knowledge_map.svg: the four sources of communication overhead, each with its remedies.

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
     "Which collective moves which bytes:\nAllReduce = ReduceScatter\n+ AllGather; ring: 2(p-1)/p · n",
     "Ch. 1, 7, 8", ["Pick the collective: ZeRO/FSDP\nshard (ReduceScatter + AllGather);\nTP, PP, EP send activations",
                  "Pick the algorithm. NCCL: Ring,\nTree, NVLS, CollNet, PAT. MPI:\nrecursive doubling, Rabenseifner"]),
    ("Latency + bandwidth",
     "t = c + α·hops + n·β;\nsmall messages pay α, big ones n·β;\nbusbw vs the per-direction link rate",
     "Ch. 2, 4, 5, 9", ["Fewer, bigger messages (buckets);\nlarger batches, accumulation",
                        "Fewer bytes: BF16 / FP16 gradients\n(safely: Ch. 4); compression:\nPowerSGD, top-k, 8-bit (Ch. 5)"]),
    ("Topology",
     "NVLink inside a node, NICs\nbetween nodes: a node's NICs add\nup for AllReduce, not AllToAll",
     "Ch. 3, 8", ["Keep traffic inside the node:\nTP on NVLink, DP across nodes",
               "Rings through every NIC,\nhierarchical, in-network\nreduction (NVLS, SHARP)"]),
    ("Overlap",
     "Exposed communication: the part\nnot hidden behind backward;\nthe last bucket never is",
     "Ch. 6, 7, 8, 9", ["Bucketed async all-reduce from\ngradient hooks (DDP); bucket size:\nα per bucket vs the tail",
                     "Profile: measure exposed comm,\ncompare with the model; prefetch\n(FSDP) costs memory"]),
]

COLORS = ["#4C72B0", "#DD8452", "#8172B3", "#55A868"]


def draw() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(13, 6.4))
    ax.set_xlim(0, 13)
    ax.set_ylim(0.6, 7.2)
    ax.axis("off")
    root = (6.5, 6.65)
    ax.text(*root, "Communication overhead in distributed training", ha="center", va="center",
            fontsize=15, weight="bold",
            bbox=dict(boxstyle="round,pad=0.45", fc="#F2F2F2", ec="#333333"))
    for i, (title, what, chapter, remedies) in enumerate(PROBLEMS):
        x = 0.15 + i * 3.2
        color = COLORS[i]
        box = FancyBboxPatch((x, 4.05), 3.0, 1.85, boxstyle="round,pad=0.05", fc=color, ec=color, alpha=0.15)
        ax.add_patch(box)
        ax.text(x + 1.5, 5.62, title, ha="center", va="center", fontsize=12, weight="bold", color=color)
        ax.text(x + 1.5, 4.85, what, ha="center", va="center", fontsize=8.3, linespacing=1.35)
        ax.text(x + 2.95, 4.15, chapter, ha="right", va="bottom", fontsize=8, style="italic", color="#555555")
        ax.add_patch(FancyArrowPatch((root[0], root[1] - 0.3), (x + 1.5, 5.98), arrowstyle="-|>",
                                     mutation_scale=14, color="#555555", lw=1.2))
        ax.text(x + 1.65, 3.75, "remedies", ha="left", va="center", fontsize=9, style="italic", color="#555555")
        for j, remedy in enumerate(remedies):
            y = 3.0 - j * 1.15
            ax.add_patch(FancyBboxPatch((x + 0.08, y - 0.47), 2.84, 0.94, boxstyle="round,pad=0.04",
                                        fc="white", ec=color, lw=1.3))
            ax.text(x + 1.5, y, remedy, ha="center", va="center", fontsize=7.9, linespacing=1.25)
        ax.add_patch(FancyArrowPatch((x + 1.5, 4.0), (x + 1.5, 3.5), arrowstyle="-|>",
                                     mutation_scale=12, color=color, lw=1.2))
    ax.text(6.5, 0.7, "FP16 reductions (Ch. 4) halve the bytes, but partial sums can overflow at 65504: "
            "accumulate in FP32, pre-divide, or use BF16.\nCh. 10: when communication never finishes (hangs, mismatches). "
            "Ch. 11 puts it all together on a real model and cluster.",
            ha="center", va="center", fontsize=8.6, color="#333333")
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
