"""Chapter 4 (FP16 reductions): when a sum overflows, the pre-divide factor, a safe strategy.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import _choice, _is, _number, _plain, Verdict


def ch4_overflow_world_size(answer, value: float = 3000.0) -> Verdict:
    """The smallest number of ranks whose fp16 sum of `value` (one per rank) overflows."""
    p = _fp16_overflow_ranks(value)
    answer, bad = _number(answer, "the number of ranks")
    if bad is not None:
        return bad
    if answer == p:
        return Verdict(True, f"{p} x {value:g} = {p * value:g} > 65504 (fp16's max): the sum is inf, although the "
                             f"mean, {value:g}, fits easily.")
    if answer == p - 1:
        return Verdict(False, f"{p - 1} x {value:g} = {(p - 1) * value:g} still fits under 65504.")
    if abs(answer - 65504 / value) < 1:
        return Verdict(False, "ranks come in whole numbers: the smallest p whose sum passes 65504.")
    return Verdict(False, "the sum of p copies passes fp16's largest finite value, 65504, at which p?")


def _fp16_overflow_ranks(value) -> int:
    """The smallest p whose sequential fp16 sum of p copies of value is inf: precision.simulate_reduction's
    "sequential" order (each hop rounds to fp16), one hop at a time. A value whose running sum stops growing
    (swamping: it is under half a unit in the last place of the sum) never overflows: ValueError."""
    import torch

    check.number("value", value, low=0, strict=True)
    v = torch.tensor(value, dtype=torch.float16)
    if not torch.isfinite(v) or v == 0:
        raise ValueError(f"value must be a number > 0 that fp16 represents (<= 65504, >= 6e-8), got {value!r}")
    total, p = v, 1
    while torch.isfinite(total):
        grown = v + total
        if grown == total:
            raise ValueError(f"value must be large enough for an fp16 sum of copies to overflow: with value={value!r} "
                             f"the running sum stops at {float(total):g} (swamping)")
        total, p = grown, p + 1
    return p


def ch4_predivide_factor(answer, world_size: int = 32) -> Verdict:
    """FSDP's gradient predivide factor for world_size."""
    from commlib import precision

    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    f = precision.predivide_factor(world_size)
    answer, bad = _number(answer, "the factor")
    if bad is not None:
        return bad
    if answer == f:
        return Verdict(True, f"f = {f}: divide by {f} before the sum and by {world_size}/{f} = {world_size / f:g} after.")
    if answer == world_size:
        return Verdict(False, "that is plain pre-division (all of it before the sum). FSDP splits it in two.")
    if answer == world_size ** 0.5:
        return Verdict(False, "close to the idea (about sqrt(p)), but f is a power of two: double f while p % f == 0 "
                              "and p / f > f.")
    return Verdict(False, "start at f = 1 and double it while p % f == 0 and p / f > f.")


def ch4_safe_strategy(answer, world_size: int = 64) -> Verdict:
    """The strategy that, on world_size ranks, neither overflows gradients ~3000 nor flushes more of gradients
    ~1e-6 than casting to fp16 does, while sending 2 bytes per value."""
    from commlib import precision

    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    answer, bad = _choice(_strategy(answer), precision.STRATEGIES)
    if bad is not None:
        return bad
    big = precision.experiment(world_size, 3000.0, answer)
    small = precision.experiment(world_size, 1e-6, answer)
    base = precision.experiment(world_size, 1e-6, "fp32_accumulate")["flushed_to_zero"]
    overflow = big["inf"] + big["nan"]
    if answer == "fp32_accumulate":
        return Verdict(False, "it is safe, but its partial sums travel in fp32: 4 bytes per value, twice the traffic.")
    if overflow:
        return Verdict(False, f"{answer} loses {overflow} values to overflow with gradients ~3000 on {world_size} ranks.")
    if small["flushed_to_zero"] > base:
        return Verdict(False, f"{answer} flushes {small['flushed_to_zero']} small gradients to zero "
                              f"(casting to fp16 alone flushes {base}).")
    return Verdict(True, f"{answer}: no overflow, nothing flushed, 2 bytes per value. The price is precision: "
                         f"mean relative error {big['mean_rel_error']:.1e} (8 significant bits).")


def _strategy(answer):
    """A strategy's name in any case or with spaces around it ("BF16 ") as precision.STRATEGIES spells it; any
    other answer unchanged, for _choice to judge."""
    text = _plain(answer) if _is(answer, str) else None
    return text.strip().lower() if isinstance(text, str) else answer
