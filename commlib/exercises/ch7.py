"""Checkers for chapter 7's exercises (what each parallelism sends and stores): each returns a Verdict and
rejects a wrong answer with a hint that names the likely mistake. They never raise on an answer."""

from __future__ import annotations

from numbers import Real

from commlib import _validate as check
from commlib.exercises.answers import Verdict, _is, _missing, _plain, close
from commlib.exercises.answers import _number as _value  # (Python number, None) or (None, the hint)


# ------------------------------------------------------------------------------ 7.1 ZeRO memory
def ch7_zero3_memory(answer, params: float = 7e9, dp: int = 16) -> Verdict:
    """Bytes of parameters, gradients and Adam states per GPU under ZeRO-3 with mixed precision: 16 P / N."""
    from commlib import plan

    params = check.number("params", params, 0, strict=True, high=check.MAX_BYTES)
    dp = check.integer("dp", dp, 1, check.MAX_RANKS)
    x, bad = _value(answer, "the number of bytes")
    if bad is not None:
        return bad
    p, n = params, dp
    want = plan.model_state_bytes(p, n, 3)
    if close(x, want, rel=0.01):
        return Verdict(True, f"(2 + 2 + 12) P / N = 16 x {p:g} / {n} = {want / 1e9:g} GB: ZeRO-3 shards all three. "
                             f"DDP would hold {plan.model_state_bytes(p) / 1e9:g} GB.")
    if close(x, want / 1e9, rel=0.01):
        return Verdict(False, "give bytes, not GB (1 GB = 1e9 bytes).")
    mistakes = [(16 * p, "that is every GPU holding everything (DDP): ZeRO-3 divides all of it by N."),
                (plan.model_state_bytes(p, n, 1), "that is ZeRO-1 (4P + 12P/N): stage 3 shards the fp16 parameters "
                                                  "and gradients too."),
                (plan.model_state_bytes(p, n, 2), "that is ZeRO-2 (2P + 14P/N): stage 3 also shards the fp16 "
                                                  "parameters."),
                (4 * p / n, "you counted the fp16 parameters and gradients only: Adam's fp32 master weights, momentum "
                            "and variance add 12 bytes per parameter."),
                (12 * p / n, "that is the optimizer state only (12 bytes per parameter); add the fp16 parameters "
                             "and gradients (2 + 2)."),
                (8 * p / n, "mixed-precision Adam keeps 16 bytes per parameter: 2 (fp16 weights) + 2 (fp16 "
                            "gradients) + 4 + 4 + 4 (fp32 weights, momentum, variance)."),
                (16 * p * (n - 1) / n, "that is what each GPU does *not* hold; it keeps 1/N of everything.")]
    for value, hint in mistakes:
        if close(x, value, rel=0.01):
            return Verdict(False, hint)
    return Verdict(False, "mixed-precision Adam: 2 + 2 + 12 bytes per parameter, and ZeRO-3 splits all of it "
                          "over the N data-parallel GPUs.")


# ------------------------------------------------------------------------------ 7.2 TP bytes
def ch7_tp_bytes(answer, batch: int = 1, seq: int = 4096, hidden: int = 4096, tp: int = 8,
                 act_bytes: int = 2) -> Verdict:
    """Bytes one rank sends per transformer layer, forward plus backward, under Megatron TP (ring all-reduces):
    4 all-reduces of b s h: 8 b s h (t-1)/t * act_bytes."""
    from commlib import plan

    b, s, h = (check.integer(k, v, 1, 2**40) for k, v in (("batch", batch), ("seq", seq), ("hidden", hidden)))
    t = check.integer("tp", tp, 1, check.MAX_RANKS)
    act_bytes = check.number("act_bytes", act_bytes, 0, strict=True, high=64, unit="bytes")
    x, bad = _value(answer, "the number of bytes")
    if bad is not None:
        return bad
    want = plan.tp_bytes_per_rank(b, s, h, t, act_bytes)
    bsh = b * s * h * act_bytes
    if close(x, want, rel=0.01):
        return Verdict(True, f"4 all-reduces (2 forward, 2 backward) of b·s·h = {bsh / 2**20:g} MiB, each sending "
                             f"2(t-1)/t of it: {want / 2**20:g} MiB per layer. Sequence parallelism sends the same.")
    mistakes = [(want / 2, "that is forward only (the g operators' two all-reduces): backward has two more, in "
                           "the f operators."),
                (want / act_bytes, f"that counts elements; each is {act_bytes:g} bytes."),
                (8 * bsh, "a ring all-reduce sends 2(t-1)/t of the tensor, not twice all of it."),
                (4 * bsh, "each all-reduce sends 2(t-1)/t · b·s·h (a ring), and there are 4 of them."),
                (want / 4, "that is one all-reduce; a layer has 4 (attention and MLP, forward and backward)."),
                (want / t, "the activations are not split over the TP ranks: every rank all-reduces the full b·s·h."),
                (want * 2, "4 all-reduces per layer (2 forward, 2 backward), not 8.")]
    for value, hint in mistakes:
        if close(x, value, rel=0.01):
            return Verdict(False, hint)
    return Verdict(False, "count the all-reduces of one layer (Megatron's f and g operators) and the bytes a ring "
                          "all-reduce sends per rank: 2(t-1)/t · n.")


# ------------------------------------------------------------------------------ 7.3 the bubble
def ch7_bubble(answer, pp: int = 4, microbatches: int = 8) -> Verdict:
    """The idle fraction of a pipelined step, GPipe or 1F1B: (p-1)/(m+p-1)."""
    from commlib import plan

    x, bad = _value(answer, "the idle fraction")
    if bad is not None:
        return bad
    p, m = pp, microbatches
    want = plan.pipeline_bubble(p, m)
    if close(x, want, rel=1e-3):
        return Verdict(True, f"(p-1)/(m+p-1) = {p - 1}/{m + p - 1} = {want:.4g} of the step, for GPipe and 1F1B "
                             f"alike.")
    if close(x, 100 * want, rel=1e-3):
        return Verdict(False, "give a fraction between 0 and 1, not a percentage.")
    if close(x, (p - 1) / m, rel=1e-3):
        return Verdict(False, "(p-1)/m is the bubble relative to the ideal (busy) time, as Narayanan et al. write it; "
                              "as a share of the whole step it is (p-1)/(m+p-1).")
    if close(x, (p - 1) / (m + p), rel=1e-3) or close(x, p / (m + p - 1), rel=1e-3):
        return Verdict(False, "the step lasts m + p - 1 slots of (forward + backward), and each stage idles in p - 1.")
    if close(x, 1 / m, rel=1e-3) or close(x, 1 / p, rel=1e-3):
        return Verdict(False, "draw the schedule: the last stage starts after p - 1 forwards, and the first finishes "
                              "p - 1 backwards after the others.")
    return Verdict(False, "count the slots: the step takes m + p - 1, each stage works in m of them.")


# ------------------------------------------------------------------------------ 7.4 live activations
def ch7_in_flight(answer, pp: int = 4, microbatches: int = 8) -> Verdict:
    """(GPipe, 1F1B): the most micro-batches whose activations the first stage holds at once: (m, min(p, m))."""
    from commlib import plan

    bad = _missing(answer)
    if bad is not None:
        return bad
    two = Verdict(False, "give two numbers, (GPipe, 1F1B), e.g. (3, 2).")
    if _is(answer, (str, bytes)) or not hasattr(type(answer), "__len__") or not hasattr(type(answer), "__iter__"):
        return two
    try:
        got = list(answer)
    except Exception:  # noqa: BLE001 (a learner's object may fail to iterate in any way)
        return two
    if len(got) != 2 or not all(_is(v, Real) and not _is(v, bool) for v in got):
        return two
    got = [_value(v, "each number")[0] for v in got]  # plain ints and floats: no learner's __eq__ runs below
    if None in got:
        return two
    p, m = pp, microbatches
    want = (plan.microbatches_in_flight(p, m, "gpipe"), plan.microbatches_in_flight(p, m, "1f1b"))
    if tuple(got) == want:
        return Verdict(True, f"GPipe runs all {m} forwards before any backward: {m} sets of activations. 1F1B starts "
                             f"backward after p = {p} forwards on stage 0 and frees one per backward: {want[1]}.")
    if tuple(got) == want[::-1]:
        return Verdict(False, "the other way round: GPipe holds more.")
    if got[0] != want[0]:
        return Verdict(False, "GPipe runs every forward before the first backward: how many activations are alive "
                              "then?")
    if got[1] == 1:
        return Verdict(False, "that is the last stage; stage 0 runs p - 1 warm-up forwards, then one more before its "
                              "first backward.")
    if got[1] == p - 1:
        return Verdict(False, "p - 1 warm-up forwards, then the steady state's forward before the first backward: "
                              "one more.")
    return Verdict(False, "1F1B's first stage runs p - 1 warm-up forwards, then alternates one forward and one "
                          "backward (and never more than m).")


# ------------------------------------------------------------------------------ 7.5 what fits
def fits_options() -> dict:
    """The configurations of exercise 7.5 (Llama-2 7B, 2 DGX H100 nodes, global batch 128)."""
    from commlib import plan

    return {"A": plan.Config(dp=16, zero_stage=0, microbatches=8),
            "B": plan.Config(dp=16, zero_stage=3, microbatches=1),
            "C": plan.Config(dp=16, zero_stage=2, microbatches=2),
            "D": plan.Config(dp=16, zero_stage=1, microbatches=8)}


def ch7_which_fits(answer, model: str = "llama2_7b", node: str = "dgx_h100", nodes: int = 2,
                   global_batch: int = 128) -> Verdict:
    """The letter of the one configuration in fits_options() whose memory per GPU fits the GPUs."""
    from commlib import plan

    bad = _missing(answer)
    if bad is not None:
        return bad
    options = fits_options()
    answer = _plain(answer)
    if not _is(answer, str) or answer.strip().upper() not in options:
        return Verdict(False, f"answer with one letter of {list(options)}.")
    m, hw = plan.MODELS[model], plan.hardware(node, nodes)
    est = {k: plan.estimate(m, hw, c, global_batch) for k, c in options.items()}
    def parts(e):
        mem = e.memory
        extra = f" + {mem['logits'] / 1e9:.1f} (fp32 logits)" if mem.get("logits") else ""
        extra += f" + {mem['zero3_gathered'] / 1e9:.1f} (ZeRO-3's gathered layers)" if mem["zero3_gathered"] else ""
        return (f"{mem['model_states'] / 1e9:.1f} (model states) + {mem['activations'] / 1e9:.1f} (activations)"
                f"{extra} = {mem['total'] / 1e9:.1f} GB")

    e = est[answer.strip().upper()]
    if e.fits:
        listing = "; ".join(f"{k}: {parts(v)}" for k, v in est.items())
        return Verdict(True, f"per GPU, against {hw.gpu_memory / 1e9:g} GB: {listing}.")
    if e.memory["model_states"] > hw.gpu_memory:
        return Verdict(False, f"its model states alone take {e.memory['model_states'] / 1e9:.1f} GB per GPU: 16 bytes "
                              "per parameter, unsharded.")
    b = global_batch // (e.config.dp * e.config.microbatches)
    return Verdict(False, f"the model states fit, but a micro-batch of {b} sequences of {m.seq} tokens needs its "
                          f"activations too: {parts(e)} > {hw.gpu_memory / 1e9:g} GB.")
