"""Draw assets/knowledge_map.svg: the four sources of communication overhead, each with its remedies.

    python assets/make_knowledge_map.py                 # rewrites knowledge_map.svg beside this file
    python assets/make_knowledge_map.py --lang zh_CN    # knowledge_map.zh_CN.svg, the Chinese edition's

The output is deterministic (no date, fixed ids), so a rerun that changes nothing leaves git clean.
"""

import sys
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
ROOT_TITLE = "Communication overhead in distributed training"
FOOTER = ("FP16 reductions (Ch. 4) halve the bytes, but partial sums can overflow at 65504: "
          "accumulate in FP32, pre-divide, or use BF16.\nCh. 10: when communication never finishes (hangs, mismatches). "
          "Ch. 11 puts it all together on a real model and cluster.")

# The zh_CN edition's labels, in the terms of locales/zh_CN/glossary.md
ZH_CN = {
    ROOT_TITLE: "分布式训练中的通信开销",
    "remedies": "对策",
    "Communication patterns": "通信模式",
    "Which collective moves which bytes:\nAllReduce = ReduceScatter\n+ AllGather; ring: 2(p-1)/p · n":
        "哪种集合通信搬运哪些字节：\nAllReduce = ReduceScatter\n+ AllGather；Ring：2(p-1)/p · n",
    "Ch. 1, 7, 8": "第 1、7、8 章",
    "Pick the collective: ZeRO/FSDP\nshard (ReduceScatter + AllGather);\nTP, PP, EP send activations":
        "选对集合通信：ZeRO/FSDP 分片\n（ReduceScatter + AllGather）；\nTP、PP、EP 发送激活值",
    "Pick the algorithm. NCCL: Ring,\nTree, NVLS, CollNet, PAT. MPI:\nrecursive doubling, Rabenseifner":
        "选对算法。NCCL：Ring、Tree、\nNVLS、CollNet、PAT。MPI：\n递归倍增、Rabenseifner",
    "Latency + bandwidth": "延迟 + 带宽",
    "t = c + α·hops + n·β;\nsmall messages pay α, big ones n·β;\nbusbw vs the per-direction link rate":
        "t = c + α·跳数 + n·β；\n小消息主要付 α，大消息付 n·β；\nbusbw 对比链路的单向速率",
    "Ch. 2, 4, 5, 9": "第 2、4、5、9 章",
    "Fewer, bigger messages (buckets);\nlarger batches, accumulation":
        "更少、更大的消息（桶）；\n更大的 batch，梯度累积",
    "Fewer bytes: BF16 / FP16 gradients\n(safely: Ch. 4); compression:\nPowerSGD, top-k, 8-bit (Ch. 5)":
        "更少的字节：BF16 / FP16 梯度\n（安全用法见第 4 章）；梯度压缩：\nPowerSGD、top-k、8 位（第 5 章）",
    "Topology": "拓扑",
    "NVLink inside a node, NICs\nbetween nodes: a node's NICs add\nup for AllReduce, not AllToAll":
        "节点内用 NVLink，节点间用 NIC：\n一个节点的多块 NIC 带宽可叠加，\n对 AllReduce 成立，对 AllToAll 不成立",
    "Ch. 3, 8": "第 3、8 章",
    "Keep traffic inside the node:\nTP on NVLink, DP across nodes": "让流量留在节点内：\nTP 走 NVLink，DP 跨节点",
    "Rings through every NIC,\nhierarchical, in-network\nreduction (NVLS, SHARP)":
        "Ring 经过每块 NIC；\n分层规约；网络内规约\n（NVLS、SHARP）",
    "Overlap": "计算与通信重叠",
    "Exposed communication: the part\nnot hidden behind backward;\nthe last bucket never is":
        "暴露的通信：没有隐藏在反向传播\n背后的部分；\n最后一个桶永远无法隐藏",
    "Ch. 6, 7, 8, 9": "第 6、7、8、9 章",
    "Bucketed async all-reduce from\ngradient hooks (DDP); bucket size:\nα per bucket vs the tail":
        "由梯度 hook 分桶发起异步\nAllReduce（DDP）；桶的大小：\n每桶一个 α 与尾部的权衡",
    "Profile: measure exposed comm,\ncompare with the model; prefetch\n(FSDP) costs memory":
        "性能分析：测出暴露的通信，\n与模型对比；预取（FSDP）\n多占显存",
    FOOTER: ("FP16 规约（第 4 章）使字节减半，但部分和超过 65504 就会溢出：以 FP32 累加、预先除以 p，或改用 BF16。\n"
             "第 10 章：通信永远结束不了时（挂起、调用不匹配）。第 11 章在真实模型和集群上把这一切综合起来。"),
}
LANGS = {None: (lambda s: s, "knowledge_map.svg"), "zh_CN": (ZH_CN.__getitem__, "knowledge_map.zh_CN.svg")}


def draw(t=lambda s: s) -> plt.Figure:
    """The map, every label passed through t (a translation)."""
    fig, ax = plt.subplots(figsize=(13, 6.4))
    ax.set_xlim(0, 13)
    ax.set_ylim(0.6, 7.2)
    ax.axis("off")
    root = (6.5, 6.65)
    ax.text(*root, t(ROOT_TITLE), ha="center", va="center",
            fontsize=15, weight="bold",
            bbox=dict(boxstyle="round,pad=0.45", fc="#F2F2F2", ec="#333333"))
    for i, (title, what, chapter, remedies) in enumerate(PROBLEMS):
        x = 0.15 + i * 3.2
        color = COLORS[i]
        box = FancyBboxPatch((x, 4.05), 3.0, 1.85, boxstyle="round,pad=0.05", fc=color, ec=color, alpha=0.15)
        ax.add_patch(box)
        ax.text(x + 1.5, 5.62, t(title), ha="center", va="center", fontsize=12, weight="bold", color=color)
        ax.text(x + 1.5, 4.85, t(what), ha="center", va="center", fontsize=8.3, linespacing=1.35)
        ax.text(x + 2.95, 4.15, t(chapter), ha="right", va="bottom", fontsize=8, style="italic", color="#555555")
        ax.add_patch(FancyArrowPatch((root[0], root[1] - 0.3), (x + 1.5, 5.98), arrowstyle="-|>",
                                     mutation_scale=14, color="#555555", lw=1.2))
        ax.text(x + 1.65, 3.75, t("remedies"), ha="left", va="center", fontsize=9, style="italic", color="#555555")
        for j, remedy in enumerate(remedies):
            y = 3.0 - j * 1.15
            ax.add_patch(FancyBboxPatch((x + 0.08, y - 0.47), 2.84, 0.94, boxstyle="round,pad=0.04",
                                        fc="white", ec=color, lw=1.3))
            ax.text(x + 1.5, y, t(remedy), ha="center", va="center", fontsize=7.9, linespacing=1.25)
        ax.add_patch(FancyArrowPatch((x + 1.5, 4.0), (x + 1.5, 3.5), arrowstyle="-|>",
                                     mutation_scale=12, color=color, lw=1.2))
    ax.text(6.5, 0.7, t(FOOTER), ha="center", va="center", fontsize=8.6, color="#333333")
    return fig


def main(lang: str | None = None) -> Path:
    if lang not in LANGS:
        raise ValueError(f"lang: {lang!r}; choose one of {', '.join(k for k in LANGS if k)} (or none: English)")
    t, name = LANGS[lang]
    out = OUT.with_name(name)
    plt.rcParams["svg.hashsalt"] = "commlib"
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable, crisp
    if lang == "zh_CN":  # measure the Chinese labels with a CJK font; the reader's browser draws them with its own
        plt.rcParams["font.sans-serif"] = ["Noto Sans CJK SC", "Noto Serif CJK SC", "DejaVu Sans"]
    fig = draw(t)
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args not in ([], ["--lang", "zh_CN"]):
        print("usage: python assets/make_knowledge_map.py [--lang zh_CN]", file=sys.stderr)
        sys.exit(2)
    print(main(args[1] if args else None))
