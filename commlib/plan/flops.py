"""FLOPs of a training step: the parameters' 6 x params x tokens and the causal attention scores'.

Pure Python. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC 2021, eq. (3): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)); the s/(6h) term is the attention's.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.plan.models import Model

RECOMPUTE = ("none", "selective", "full")


def _num(name: str, value) -> float:
    if type(value) in (int, float) and 0 <= value <= check.MAX_BYTES:  # the search's fast path; NaN fails it
        return float(value)
    return check.number(name, value, 0, high=check.MAX_BYTES)


def step_flops(model: Model, tokens, recompute="none") -> float:
    """Training FLOPs for `tokens` tokens: 6 * active params * tokens (forward 2, backward 4 per parameter and
    token); full recomputation runs the layers' forward once more, + 2 * layer params * tokens. For a dense
    GPT this is Narayanan et al. 2021's eq. (3) without its attention-score term s/(6h):
    72 Bslh^2 (1 + V/(12lh)), and with recomputation 96 Bslh^2 (1 + V/(16lh))."""
    check.instance("model", model, Model, "a plan.Model")
    n = _num("tokens", tokens)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    extra = 2 * (model.active_params - model.embedding_params) * n if recompute == "full" else 0.0
    return 6 * model.active_params * n + extra


def attention_flops(model: Model, batch, seq, recompute="none", causal=True) -> float:
    """FLOPs of the attention scores (QK^T and scores x V) for batch sequences of seq tokens, all layers: 4 b s^2 h
    forward per layer, 3x with backward (Narayanan et al. 2021, eq. (3)'s s/(6h) term), + one forward again
    with recomputation (selective recomputes exactly this part: Korthikanti et al. 2022, section 5); causal: half."""
    check.instance("model", model, Model, "a plan.Model")
    b, s = _num("batch", batch), _num("seq", seq)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    passes = 4 if recompute != "none" else 3
    return passes * 4 * b * s * s * model.hidden * model.layers * (0.5 if causal else 1.0)
