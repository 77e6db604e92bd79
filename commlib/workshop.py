"""Chapter 9, the workshop: one real model on two real clusters, and the checkers of its questions.

The model has Llama-2-7B's 291 parameter tensors (65 of them RMSNorm weights) and BF16 gradients; a step is 4 x 4096 tokens per
GPU on H100s at 40% of their BF16 peak. tensors() ... exposed_s() compute the answers from commlib's
cost model and overlap simulator; check_*() compare a learner's answer with them, as
commlib.exercises does for chapters 0-8, and name the likely mistake.
"""

from __future__ import annotations

from commlib.answers import Verdict, _choice, _close, _number

MODEL = {"name": "a Llama-2-7B-sized model", "layers": 32, "grad_bytes": 2}
CLUSTERS = {  # name -> (ranks, link): a ring is as fast as its slowest link, per direction
    "8x H100, NVLink4": (8, "nvlink4"),
    "2 nodes x 8 H100, InfiniBand NDR (one 400 Gb/s NIC per GPU)": (16, "ib_ndr"),
}
STEP = {"tokens_per_gpu": 4 * 4096, "peak_flops": 989e12, "mfu": 0.40}  # H100 SXM, BF16 dense


def tensors() -> list[float]:
    """Parameter counts in forward order, tensor by tensor, Llama-2-7B's 291 (Touvron et al. 2023; the
    Hugging Face checkpoint's state dict): embedding, 32 x (input RMSNorm 4096; q, k, v, o: 4096 x 4096;
    post-attention RMSNorm 4096; gate, up, down: 4096 x 11008), final RMSNorm, LM head. 6,738,415,616."""
    d, ff, vocab = 4096, 11008, 32000
    layer = [d] + [d * d] * 4 + [d] + [d * ff] * 3
    return [vocab * d] + layer * MODEL["layers"] + [d, vocab * d]


def params() -> float:
    return float(sum(tensors()))


def backward_s() -> float:
    """Backward time per step: about 4 FLOPs per parameter per token (forward is 2 of the 6), at the given MFU."""
    s = STEP
    return 4 * params() * s["tokens_per_gpu"] / (s["peak_flops"] * s["mfu"])


def _cluster(cluster: str):
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {list(CLUSTERS)}, got {cluster!r}")
    return CLUSTERS[cluster]


def comm_s(cluster: str) -> float:
    from commlib import cost

    p, link = _cluster(cluster)
    return cost.collective_time("all_reduce", params() * MODEL["grad_bytes"], p, link, "ring")


def timeline(cluster: str, bucket_cap_mb: float | None = None):
    """The overlapped backward of the workshop model on `cluster`: tensors bucketed as DDP does from its second
    iteration on (None: DDP's default, 25 MiB with a 1 MiB first bucket), each tensor's backward time
    proportional to its size. -> overlap.Timeline"""
    from commlib import overlap

    p, link = _cluster(cluster)
    sizes = tensors()
    total = sum(sizes)
    compute, comm, _ = overlap.buckets_from_layers([n * MODEL["grad_bytes"] for n in sizes],
                                                   [backward_s() * n / total for n in sizes], p, link,
                                                   bucket_cap_mb=bucket_cap_mb)
    return overlap.simulate(compute, comm)


def exposed_s(cluster: str, bucket_cap_mb: float | None = None) -> float:
    return timeline(cluster, bucket_cap_mb).exposed_comm_s


def check_comm_time(answer, cluster: str) -> Verdict:
    """Seconds for one ring all-reduce of the workshop model's BF16 gradients on `cluster`."""
    from commlib import cost

    p, link = _cluster(cluster)
    answer, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    n = params() * MODEL["grad_bytes"]
    want = comm_s(cluster)
    bw = cost.LINKS[link].bandwidth
    if _close(answer, want, 0.03):
        return Verdict(True, f"2(p-1)/p x {n / 1e9:.2f} GB / {bw / 1e9:g} GB/s + c + 2(p-1)·α = {want * 1e3:.1f} ms.")
    if _close(answer, want * 2, 0.05):
        return Verdict(False, "BF16 gradients take 2 bytes per parameter, not 4.")
    if _close(answer, n / bw, 0.05):
        return Verdict(False, "n / B is one copy of the gradients over one link; a ring all-reduce sends 2(p-1)/p · n per rank.")
    if _close(answer, want / 2, 0.05) or _close(answer, n * 2 * (p - 1) / p / (2 * bw), 0.05):
        return Verdict(False, f"{bw / 1e9:g} GB/s is already per direction; do not double it.")
    return Verdict(False, "t = c + 2(p-1)·α + 2(p-1)/p · n / B, with n = parameters x 2 bytes and B per direction.")


def check_backward_time(answer) -> Verdict:
    """Seconds of backward per step for the workshop model and step (STEP)."""
    answer, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    want = backward_s()
    if _close(answer, want, 0.03):
        return Verdict(True, f"4 x {params():.4g} x {STEP['tokens_per_gpu']} / "
                             f"({STEP['peak_flops']:.3g} x {STEP['mfu']}) = {want:.3f} s.")
    if _close(answer, want * 1.5, 0.03):
        return Verdict(False, "6 FLOPs per parameter per token is forward + backward; backward alone is about 4.")
    if _close(answer, want * STEP["mfu"], 0.03):
        return Verdict(False, "that assumes the GPU reaches its peak; divide by the achieved fraction (MFU) too.")
    return Verdict(False, "backward ≈ 4 x parameters x tokens / (peak FLOP/s x MFU).")


def check_exposed(answer, cluster: str) -> Verdict:
    """Exposed communication (s) per step on `cluster` with DDP's default buckets, one tensor after another."""
    _cluster(cluster)
    answer, bad = _number(answer, "the exposed time in seconds")
    if bad is not None:
        return bad
    want = exposed_s(cluster)
    full = comm_s(cluster)
    if _close(answer, want, 0.05) or abs(answer - want) < 1e-4:
        return Verdict(True, f"{want * 1e3:.1f} ms of the {full * 1e3:.1f} ms all-reduce stays exposed: the last "
                             f"bucket's, which can only start when backward ends.")
    if _close(answer, full, 0.05):
        return Verdict(False, "with bucketed overlap most of it runs during backward; only the tail is exposed.")
    if answer == 0:
        return Verdict(False, "the last bucket is ready only when backward ends: its all-reduce is always exposed.")
    return Verdict(False, "build the buckets (overlap.buckets_from_layers) and simulate them (overlap.simulate).")


def check_best_bucket(answer, cluster: str, options=(25, 400, 1600, 6400)) -> Verdict:
    """Which bucket cap (MiB) gives the shortest overlapped step for the workshop model on `cluster`?"""
    _cluster(cluster)
    answer, bad = _choice(answer, list(options), "MiB")
    if bad is not None:
        return bad
    steps = {cap: timeline(cluster, cap).total_s for cap in options}
    best = min(steps.values())
    listing = ", ".join(f"{cap} MiB: {t * 1e3:.1f} ms" for cap, t in steps.items())
    matrices = [n for n in tensors() if n > 4096]  # the RMSNorm weights are 4096 each
    smallest = min(matrices) * MODEL["grad_bytes"]
    if steps[answer] <= best * 1.001:
        return Verdict(True, f"{listing}. Every weight matrix's gradient is {smallest / 2**20:.0f} MiB or more (the "
                             "norms' 8 KiB ride along with a neighbour), so small caps already give about one bucket "
                             "per matrix; big caps only make the last, exposed bucket bigger.")
    return Verdict(False, f"{answer} MiB is slower: its last bucket, ready only at the end of backward, is bigger. "
                          f"{listing}.")
