"""commlib.plan.models: parameter counts of the presets against the published ones."""

import pytest

from commlib import plan
from commlib.plan import models


@pytest.mark.parametrize("name, params, active", [
    ("gpt3_1.3b", 1.3e9, None),          # Brown et al. 2020, table 2.1
    ("gpt3_175b", 175e9, None),
    ("llama2_7b", 6_738_415_616, None),  # the checkpoint's count, LayerNorm weights (0.27M) included
    ("llama2_13b", 13_015_864_320, None),
    ("mixtral_8x7b", 46.7e9, 12.9e9),    # Jiang et al. 2024
])
def test_presets_have_their_published_size(name, params, active):
    m = models.MODELS[name]
    assert m.params == pytest.approx(params, rel=0.01)
    assert m.active_params == pytest.approx(active or params, rel=0.01)
    assert name in models.SOURCES and m.name


def test_grouped_query_attention_and_untied_embeddings():
    mha = models.Model(2, 64, 8, 16, 100)
    gqa = models.Model(2, 64, 8, 16, 100, kv_heads=2, tied=False)
    assert mha.attention_params == 4 * 64 * 64
    assert gqa.attention_params == 2 * 64 * 64 + 2 * 64 * 16          # k and v: 2 of 8 heads
    assert gqa.params - gqa.layers * gqa.attention_params == mha.params - mha.layers * mha.attention_params + 100 * 64
    assert plan.Model is models.Model
