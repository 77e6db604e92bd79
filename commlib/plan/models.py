"""The model a plan trains: a GPT-style decoder's shape, its parameter counts, and published models.

Pure Python. Presets carry their source; plan.step_flops turns a shape into FLOPs per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlib import _validate as check

LIMITS = {"layers": (1, 10**6), "hidden": (1, 10**7), "heads": (1, 10**6), "seq": (1, 2**40), "vocab": (1, 10**9),
          "ffn": (0, 10**8), "experts": (0, 10**6), "topk": (1, 10**6), "kv_heads": (0, 10**6)}  # (least, most)


@dataclass(frozen=True)
class Model:
    """A GPT-style decoder: layers x (attention + MLP 2h*ffn, or `experts` MLPs of which each token uses topk)
    + embeddings vocab*h (twice if not tied). Attention: q and output h^2 each, k and v h^2 kv_heads/heads
    each (4h^2 for multi-head attention, kv_heads = 0; less with grouped-query attention). A gated MLP
    (SwiGLU: three h x f matrices) is ffn = 3f/2. Biases and LayerNorms are left out (under 0.1% here)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int = 50257
    ffn: int = 0          # 0: 4 * hidden
    experts: int = 0      # 0: a dense MLP
    topk: int = 1
    kv_heads: int = 0     # 0: heads (multi-head attention)
    tied: bool = True     # one vocab x h matrix for the input embedding and the output layer (GPT); Llama has two
    name: str = field(default="", compare=False)
    block: str = "gpt"    # "gpt": GeLU MLP, LayerNorm, dropout; "llama": SwiGLU MLP (ffn = 3f/2), RMSNorm, no dropout

    @property
    def mlp_width(self) -> int:
        """The MLP's inner width f: ffn (or 4h) for GPT's GeLU MLP, 2 ffn / 3 for a SwiGLU MLP (three h x f)."""
        ffn = self.ffn or 4 * self.hidden
        return 2 * ffn // 3 if self.block == "llama" else ffn

    def __post_init__(self):
        for attr, (low, high) in LIMITS.items():
            object.__setattr__(self, attr, check.integer(attr, getattr(self, attr), low, high))
        if self.kv_heads and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}): 0 (= heads) or a divisor, "
                             f"got {self.kv_heads}")
        if self.experts and self.topk > self.experts:
            raise ValueError(f"topk must be <= experts ({self.experts}), got {self.topk}")
        if not isinstance(self.tied, bool):
            raise TypeError(f"tied must be a bool, got {type(self.tied).__name__}")

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def attention_params(self) -> int:
        h = self.hidden
        return 2 * h * h + 2 * h * (h * (self.kv_heads or self.heads) // self.heads)

    @property
    def mlp_params(self) -> int:
        return 2 * self.hidden * (self.ffn or 4 * self.hidden)

    @property
    def expert_params(self) -> int:
        return self.layers * self.experts * self.mlp_params

    @property
    def dense_params(self) -> int:
        mlp = 0 if self.experts else self.mlp_params
        return self.layers * (self.attention_params + mlp) + self.embedding_params

    @property
    def params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token goes through: the FLOPs count 6 * active_params per token."""
        return self.dense_params + self.layers * min(self.topk, self.experts) * self.mlp_params


MODELS = {  # name: (shape, source)
    "gpt3_1.3b": Model(24, 2048, 24, 2048, 50257, name="GPT-3 XL 1.3B"),
    "llama2_7b": Model(32, 4096, 32, 4096, 32000, ffn=11008 * 3 // 2, tied=False, name="Llama-2 7B", block="llama"),
    "llama2_13b": Model(40, 5120, 40, 4096, 32000, ffn=13824 * 3 // 2, tied=False, name="Llama-2 13B",
                        block="llama"),
    "gpt3_175b": Model(96, 12288, 96, 2048, 51200, name="GPT-3 175B"),
    "mixtral_8x7b": Model(32, 4096, 32, 4096, 32000, ffn=14336 * 3 // 2, experts=8, topk=2, kv_heads=8,
                          tied=False, name="Mixtral 8x7B", block="llama"),
}
SOURCES = {
    "gpt3_1.3b": "Brown et al. 2020, 'Language Models are Few-Shot Learners', table 2.1 (GPT-3 XL)",
    "llama2_7b": "Touvron et al. 2023, 'Llama 2', and its config.json: 32 layers, hidden 4096, 32 heads, SwiGLU 11008, "
                 "vocabulary 32000, context 4096; untied embeddings (6.74B parameters)",
    "llama2_13b": "Touvron et al. 2023, 'Llama 2', and its config.json: 40 layers, hidden 5120, 40 heads, SwiGLU 13824",
    "gpt3_175b": "Brown et al. 2020, table 2.1; vocabulary padded to 51200 as in Narayanan et al. 2021",
    "mixtral_8x7b": "Jiang et al. 2024, 'Mixtral of Experts', table 1: 32 layers, hidden 4096, 32 heads, 8 KV heads, "
                    "SwiGLU 14336, 8 experts, top-2 (46.7B parameters, 12.9B active)",
}
