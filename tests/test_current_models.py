"""Chapter 14's position designs against the models' own code in Hugging Face transformers: chunked and sliding
masks against HF's mask functions, p-RoPE and partial RoPE against HF's initializers, the attention temperature
against Ministral 3's function and Llama 4's expression, YaRN with truncate/mscale against `_compute_yarn_parameters`,
a learned sink against gpt-oss's eager attention, and every layer pattern read from a config against what the
model's attention does in that layer."""
import math
from types import SimpleNamespace

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe, causal_mask
from lengthx.model import GPT, GPTConfig, layer_specs
from lengthx.pe.current import (attn_temperature, chunk_bias, hf_layer_pattern, hf_rope_spec, partial_inv_freq,
                                proportional_inv_freq, sink_attention, sink_gate, streaming_bias, yarn_hf_inv_freq,
                                yarn_mscale)
from lengthx.pe.rotary import rope_inv_freq

transformers = pytest.importorskip("transformers")
from transformers import Cohere2Config, DeepseekV3Config, Gemma3TextConfig, GptOssConfig, GPTNeoXConfig, SmolLM3Config
from transformers.masking_utils import and_masks, causal_mask_function, chunked_overlay, sliding_window_causal_mask_function
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, _compute_yarn_parameters
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as oss_eager
from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
from transformers.models.ministral3.configuration_ministral3 import Ministral3Config
from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale


def visible(mask_fn, T):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return mask_fn(0, 0, i, j)


def seen_by(pe, T, offset=0):
    pos = Positions.arange(1, T, offset=offset)
    b = pe.bias(pos, pos)
    return causal_mask(T, T) & (b.reshape(-1, T, T)[0] == 0)


@pytest.mark.parametrize("c,T", [(1, 5), (4, 17), (8, 23), (30, 20)])
def test_chunk_equals_hf_chunked_mask(c, T):
    pe = build_pe(f"chunk:c={c}:rope", n_heads=2, head_dim=8)
    hf = visible(and_masks(chunked_overlay(c, torch.zeros(1, dtype=torch.long)), causal_mask_function), T)
    assert torch.equal(seen_by(pe, T), hf)
    assert not pe.relative_bias and not pe.toeplitz(Positions.arange(1, T))   # absolute positions: never Toeplitz


def test_chunk_reads_absolute_positions():
    "An offset shifts the chunk boundaries: the same distances see different keys (unlike a window)."
    a = chunk_bias(Positions.arange(1, 8), Positions.arange(1, 8), 4)
    b = chunk_bias(Positions.arange(1, 8, offset=2), Positions.arange(1, 8, offset=2), 4)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("w,T", [(1, 6), (3, 11), (5, 23)])
def test_window_equals_hf_sliding_mask(w, T):
    assert torch.equal(seen_by(build_pe(f"window:w={w}:nope", n_heads=2, head_dim=8), T),
                       visible(sliding_window_causal_mask_function(w), T))


def test_streaming_is_sinks_or_window():
    T, n, w = 20, 3, 4
    seen = seen_by(build_pe(f"streaming:n={n}:w={w}:nope", n_heads=2, head_dim=8), T)
    want = visible(sliding_window_causal_mask_function(w), T) | (causal_mask(T, T) & (torch.arange(T) < n)[None])
    assert torch.equal(seen, want) and seen.sum(1).max() == n + w


@pytest.mark.parametrize("head_dim,p,base", [(512, 0.25, 1e6), (64, 0.25, 1e4), (64, 0.5, 1e4), (32, 1.0, 500.0)])
def test_proportional_equals_hf(head_dim, p, base):
    cfg = SimpleNamespace(rope_parameters=dict(rope_type="proportional", rope_theta=base, partial_rotary_factor=p),
                          head_dim=head_dim, standardize_rope_params=lambda: None)
    hf, _ = ROPE_INIT_FUNCTIONS["proportional"](cfg)
    ours = proportional_inv_freq(head_dim, base, p)
    torch.testing.assert_close(ours.float(), hf, rtol=1e-6, atol=0)
    assert int((ours > 0).sum()) == int(p * head_dim // 2)


def test_gemma4_global_layers_and_partial_rope_differ():
    g4 = Gemma4TextConfig(num_hidden_layers=6)
    hf, _ = ROPE_INIT_FUNCTIONS["proportional"](g4, layer_type="full_attention")
    rp = g4.rope_parameters["full_attention"]
    torch.testing.assert_close(proportional_inv_freq(2 * hf.shape[0], rp["rope_theta"], rp["partial_rotary_factor"]).float(), hf,
                               rtol=1e-6, atol=0)
    neox = GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25)
    hf_partial, _ = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(neox)
    torch.testing.assert_close(partial_inv_freq(64, 10000.0, 0.25).float(), hf_partial, rtol=1e-6, atol=0)
    pr = proportional_inv_freq(64, 10000.0, 0.25)
    assert not torch.allclose(pr[pr > 0], partial_inv_freq(64, 10000.0, 0.25))


def test_prope_spec_rotates_only_its_pairs():
    pe = build_pe("prope:p=0.25", n_heads=1, head_dim=32)
    q = torch.randn(1, 1, 9, 32)
    qr, _ = pe.rotate(q, q, Positions.arange(1, 9, offset=5))
    assert torch.equal(qr[..., 8:], q[..., 8:]) and not torch.allclose(qr[..., :8], q[..., :8])
    torch.testing.assert_close(pe.inv_freq, proportional_inv_freq(32, 10000.0, 0.25))


def test_temperature_equals_ministral_and_llama4():
    m3 = Ministral3Config(num_hidden_layers=2).rope_parameters
    l4 = Llama4TextConfig(num_hidden_layers=4)
    pos = torch.arange(0, 300_000, 101)
    hf_m3 = get_llama_4_attn_scale(pos[None].float(), m3["llama_4_scaling_beta"], m3["original_max_position_embeddings"])[0, 0, :, 0]
    torch.testing.assert_close(attn_temperature(pos, m3["llama_4_scaling_beta"], m3["original_max_position_embeddings"]).float(),
                               hf_m3, rtol=1e-6, atol=0)
    hf_l4 = torch.log1p(torch.floor((pos.float() + 1.0) / l4.floor_scale)) * l4.attn_scale + 1.0   # Llama4TextAttention.forward
    torch.testing.assert_close(attn_temperature(pos, l4.attn_scale, l4.floor_scale, 1).float(), hf_l4, rtol=1e-6, atol=0)
    edge = torch.tensor([8191, 2 * 8192 - 1])   # the off-by-one: Llama 4 steps one position earlier
    assert (attn_temperature(edge, 0.1, 8192, 1) > attn_temperature(edge, 0.1, 8192, 0)).all()


def test_temp_spec_scales_query_rows_only():
    pe, inner = build_pe("temp:beta=0.3:floor=4:rope", n_heads=2, head_dim=8), build_pe("rope", n_heads=2, head_dim=8)
    q, k = torch.randn(2, 1, 2, 12, 8).unbind(0)
    pos = Positions.arange(1, 12)
    (qt, kt), (qr, kr) = pe.rotate(q, k, pos), inner.rotate(q, k, pos)
    assert torch.equal(kt, kr)
    torch.testing.assert_close(qt, qr * attn_temperature(pos.token, 0.3, 4)[:, None, :, None].float())
    assert build_pe("temp:nope", n_heads=2, head_dim=8, max_len=32).floor == 32    # unset floor: the training length


@pytest.mark.parametrize("rp", [
    dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False, original_max_position_embeddings=4096,
         rope_theta=150000.0),
    dict(rope_type="yarn", factor=40.0, beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0,
         original_max_position_embeddings=4096, rope_theta=10000.0),
    dict(rope_type="yarn", factor=16.0, mscale=1.0, mscale_all_dim=0.5, original_max_position_embeddings=2048, rope_theta=1e6),
    dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64, rope_theta=10000.0)])
def test_yarn_hf_equals_hf(rp):
    cfg = SimpleNamespace(rope_parameters=rp, head_dim=64, hidden_size=256, num_attention_heads=4,
                          max_position_embeddings=rp["original_max_position_embeddings"] * int(rp["factor"]),
                          standardize_rope_params=lambda: None)
    hf_inv, hf_factor = _compute_yarn_parameters(cfg)
    ours, factor = yarn_hf_inv_freq(64, rp["rope_theta"], rp["factor"], rp["original_max_position_embeddings"],
                                    rp.get("beta_fast", 32), rp.get("beta_slow", 1), rp.get("truncate", True),
                                    rp.get("mscale"), rp.get("mscale_all_dim"))
    torch.testing.assert_close(ours.float(), hf_inv, rtol=1e-6, atol=0)
    assert abs(factor - hf_factor) < 1e-12
    pe = build_pe(hf_rope_spec(rp), n_heads=4, head_dim=64)
    torch.testing.assert_close(pe.inv_freq.float(), hf_inv, rtol=1e-6, atol=0)
    assert abs(pe.attn_factor - hf_factor) < 1e-12


def test_truncate_changes_the_frequencies():
    a, _ = yarn_hf_inv_freq(64, 150000.0, 32.0, 4096, truncate=True)
    b, _ = yarn_hf_inv_freq(64, 150000.0, 32.0, 4096, truncate=False)
    assert (a - b).abs().max() > 1e-6
    assert yarn_mscale(40.0, 1.0) == 0.1 * math.log(40.0) + 1 and yarn_mscale(1.0, 3.0) == 1.0


def test_sink_equals_gpt_oss_and_the_gate_form():
    torch.manual_seed(0)
    B, H, T, D = 2, 3, 10, 8
    q, k, v = torch.randn(3, B, H, T, D).unbind(0)
    sink, mask = torch.randn(H), causal_mask(T, T)
    out, w = sink_attention(q, k, v, sink, mask)
    hf_out, hf_w = oss_eager(SimpleNamespace(sinks=sink, num_key_value_groups=1, training=False), q, k, v,
                             torch.zeros(T, T).masked_fill(~mask, float("-inf")), scaling=D ** -0.5)
    torch.testing.assert_close(w, hf_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, hf_out.transpose(1, 2), rtol=1e-5, atol=1e-6)
    # the column form: softmax over the scores plus one column a_h, the column dropped
    s = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~mask, float("-inf"))
    full = torch.cat([s, sink.reshape(1, H, 1, 1).expand(B, H, T, 1)], -1).softmax(-1)
    torch.testing.assert_close(w, full[..., :-1])
    plain = attention(q, k, v, build_pe("nope", n_heads=H, head_dim=D), Positions.arange(B, T), path="naive")
    torch.testing.assert_close(out, plain * sink_gate(s, sink), rtol=1e-5, atol=1e-6)
    assert (w.sum(-1) < 1).all()


CONFIGS = {
    "smollm3": SmolLM3Config(num_hidden_layers=8),
    "llama4": Llama4TextConfig(num_hidden_layers=8, attention_chunk_size=4),
    "cohere2": Cohere2Config(num_hidden_layers=8, sliding_window=5),
    "gemma3": Gemma3TextConfig(num_hidden_layers=12, sliding_window=5),
    "gemma4": Gemma4TextConfig(num_hidden_layers=12, sliding_window=5),
    "gpt_oss": GptOssConfig(num_hidden_layers=4, sliding_window=5),
    "ministral3": Ministral3Config(num_hidden_layers=2),
}


def _hf_mask(c, t):
    if t == "sliding_attention": return sliding_window_causal_mask_function(c.sliding_window)
    if t == "chunked_attention": return and_masks(chunked_overlay(c.attention_chunk_size, torch.zeros(1, dtype=torch.long)),
                                                  causal_mask_function)
    return causal_mask_function


@pytest.mark.parametrize("name", CONFIGS)
def test_layer_pattern_does_what_the_model_does(name):
    c, T = CONFIGS[name], 14
    specs = hf_layer_pattern(c)
    types = getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers
    assert len(specs) == c.num_hidden_layers
    pos = Positions.arange(1, T)
    for i, spec in enumerate(specs):
        pe = build_pe(spec, n_heads=2, head_dim=16, max_len=64)
        seen = seen_by(pe, T) if pe.uses_bias else causal_mask(T, T)
        assert torch.equal(seen, visible(_hf_mask(c, types[i]), T)), (i, spec)
        k = torch.randn(1, 2, T, 16)
        turned = pe.uses_rotate and not torch.equal(pe.rotate(k, k, pos)[1], k)
        want = bool(c.no_rope_layers[i]) if name in ("smollm3", "llama4") else types[i] == "sliding_attention" if name == "cohere2" else True
        assert turned == want, (i, spec)
    m = GPT(GPTConfig(n_layer=len(specs), n_head=2, d_model=32, pe=specs, max_len=64)).eval()
    assert layer_specs(m.cfg) == specs
    with torch.no_grad(): assert torch.isfinite(m(torch.randint(0, 256, (1, 20)))).all()


def test_gpt_oss_pattern_with_sinks_is_gpt_oss_attention_layer_by_layer():
    "With sinks=True every gpt-oss layer is `sink:<its spec>` (no other family's), and with the model's sink logits it is gpt-oss's eager attention."
    c = GptOssConfig(num_hidden_layers=4, sliding_window=5)
    plain, with_sink = hf_layer_pattern(c), hf_layer_pattern(c, sinks=True)
    assert with_sink == [f"sink:{s}" for s in plain]
    g3 = Gemma3TextConfig(num_hidden_layers=6)
    assert hf_layer_pattern(g3, sinks=True) == hf_layer_pattern(g3)
    torch.manual_seed(0)
    H, T, D = 2, 12, 16
    q, k, v = torch.randn(3, 1, H, T, D).unbind(0)
    sink, pos = torch.randn(H), Positions.arange(1, T)
    for spec in with_sink:
        pe = build_pe(spec, n_heads=H, head_dim=D, max_len=64)
        with torch.no_grad(): pe.sink.copy_(sink[None].expand_as(pe.sink))
        qr, kr = pe.rotate(q, k, pos)
        mask = causal_mask(T, T) & ((pe.bias(pos, pos)[0] == 0) if pe.uses_bias else True)
        want, _ = oss_eager(SimpleNamespace(sinks=sink, num_key_value_groups=1, training=False), qr, kr, v,
                            torch.zeros(T, T).masked_fill(~mask, float("-inf")), scaling=D ** -0.5)
        torch.testing.assert_close(attention(q, k, v, pe, pos, path="naive"), want.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_llama4_nope_layers_carry_the_temperature_and_gemma_bases():
    l4 = hf_layer_pattern(Llama4TextConfig(num_hidden_layers=4))
    assert l4[3] == "temp:beta=0.1:floor=8192:shift=1:nope" and l4[0] == "chunk:c=8192:rope:base=500000"
    g3 = hf_layer_pattern(Gemma3TextConfig(num_hidden_layers=6))
    assert g3[:5] == ["window:w=4096:rope:base=10000"] * 5 and g3[5] == "rope:base=1000000"
    assert hf_layer_pattern(Gemma4TextConfig(num_hidden_layers=6))[5] == "prope:p=0.25:base=1000000"
    with pytest.raises(ValueError, match="rope_type 'longrope'"):
        hf_rope_spec(dict(rope_type="longrope", rope_theta=1e4))
