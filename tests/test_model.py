"""The GPT model: configuration and input validation, the FLOP estimate against a FLOP count, presets."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lengthx.model import GPT, PRESET_ALIASES, PRESETS, GPTConfig, flops_per_token


@pytest.mark.parametrize("field,value", [("max_len", 0), ("max_len", -3), ("vocab_size", 0), ("n_layer", 0),
                                         ("n_head", 0), ("d_model", 0), ("mlp_ratio", 0), ("n_layer", 2.5),
                                         ("vocab_size", True), ("max_len", "1024")])
def test_bad_sizes_are_one_line_errors_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"GPTConfig.{field}") as e:
        GPTConfig(**{field: value})
    assert "\n" not in str(e.value)


def test_other_bad_fields():
    with pytest.raises(ValueError, match="n_head must divide d_model"): GPTConfig(n_head=5, d_model=64)
    with pytest.raises(ValueError, match="dropout"): GPTConfig(dropout=1.0)
    with pytest.raises(ValueError, match="dropout"): GPTConfig(dropout=-0.1)
    with pytest.raises(ValueError, match="attn_path"): GPTConfig(attn_path="fast")
    with pytest.raises(ValueError, match="GPTConfig.pe"): GPTConfig(pe="")


@pytest.fixture(scope="module")
def tiny():
    return GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="alibi", max_len=32)).eval()


@pytest.mark.parametrize("ids,lo,hi", [([[0, 256]], 0, 256), ([[-1, 5]], -1, 5), ([[300, 1000]], 300, 1000)])
def test_out_of_vocabulary_ids_are_one_line_errors(tiny, ids, lo, hi):
    with pytest.raises(ValueError, match=rf"token ids must be in 0\.\.255 .* got ids in {lo}\.\.{hi}") as e:
        tiny(torch.tensor(ids))
    assert "\n" not in str(e.value)


def test_bad_id_tensors(tiny):
    with pytest.raises(ValueError, match="integer token ids"): tiny(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"\[B, T\]"): tiny(torch.zeros(4, dtype=torch.long))
    assert tiny(torch.tensor([[0, 255, 7]])).shape == (1, 3, 256)   # the edges of the vocabulary are fine


@pytest.mark.parametrize("n_layer,d_model,T", [(1, 32, 64), (2, 64, 96), (3, 48, 40)])
def test_flop_estimate_matches_counted_matmul_flops(n_layer, d_model, T):
    "6N + 12·L·T·d with N = 12·L·d² + V·d is what torch counts for one naive-path training step (matmuls only)."
    cfg = GPTConfig(n_layer=n_layer, n_head=4, d_model=d_model, pe="nope", max_len=T)
    m, B = GPT(cfg), 2
    ids = torch.randint(0, 256, (B, T))
    with FlopCounterMode(display=False) as fc:
        _, loss = m(ids, ids, path="naive"); loss.backward()
    counted = fc.get_total_flops() / (B * T)
    assert abs(counted - flops_per_token(cfg, T)) / counted < 0.01, (counted, flops_per_token(cfg, T))
    assert abs(counted - (flops_per_token(cfg, T) - 6 * n_layer * T * d_model)) / counted > 0.01   # 6·L·T·d would fail


def test_preset_alias_and_honest_size():
    assert PRESET_ALIASES == {"gpt2-125m": "gpt2-small"}
    assert GPTConfig.preset("gpt2-125m", pe="nope") == GPTConfig.preset("gpt2-small", pe="nope")
    c = GPTConfig.preset("gpt2-small")
    assert (c.n_layer, c.n_head, c.d_model) == (12, 12, 768) and set(PRESETS) >= {"tiny", "small", "gpt2-small", "gpt2-125m"}
    with pytest.raises(ValueError, match="unknown preset"): GPTConfig.preset("gpt2-xl")


def test_shared_bias_is_computed_once_per_forward():
    for spec, expected in (("alibi", 1), ("kerple_log:per_layer=true", 3)):
        m = GPT(GPTConfig(n_layer=3, n_head=2, d_model=16, pe=spec, max_len=32)).eval()
        calls, inner = [], m.pe.bias
        m.pe.bias = lambda *a, **kw: calls.append(1) or inner(*a, **kw)
        with torch.no_grad(): m(torch.randint(0, 256, (1, 20)), path="sdpa")
        assert len(calls) == expected, spec
