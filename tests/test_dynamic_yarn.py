"""Dynamic YaRN (`yarn:dynamic=true`, chapter 12): RoPE up to L, static YaRN at T = sL, the authors' rule, through `extend`."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe, check_paths_agree
from lengthx.pe.rotary import RoPE, rope_inv_freq
from lengthx.pe.scaling import DynamicYaRNRoPE, dynamic_yarn_inv_freq, dynamic_yarn_scale, yarn_inv_freq

L = 32


def _logits(pe, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    pos = Positions.arange(q.shape[0], q.shape[2])
    return pe.logits(*pe.rotate(q, k, pos), pos, pos, 1.0)


def _qk(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = torch.randn(2, 1, 2, n, 16, generator=torch.Generator().manual_seed(seed))
    return q, k


@pytest.mark.parametrize("n", [1, 7, L])
def test_rope_bit_for_bit_up_to_L(n):
    "At T ≤ L: RoPE's θ, factor 1 and logits, exactly (a static factor or the s=1 ramp would differ)."
    dy, rope = (build_pe(sp, n_heads=2, head_dim=16, max_len=L) for sp in ("yarn:s=4:dynamic=true", "rope"))
    inv, f = dy.frequencies(n)
    assert torch.equal(inv, rope_inv_freq(16)) and f == 1.0
    q, k = _qk(n)
    assert torch.equal(_logits(dy, q, k), _logits(rope, q, k))
    v = torch.randn(1, 2, n, 16)
    pos = Positions.arange(1, n)
    assert torch.equal(attention(q, k, v, dy, pos, path="naive"), attention(q, k, v, rope, pos, path="naive"))


@pytest.mark.parametrize("d,Lw", [(128, 4096), (64, 256)])
def test_rope_theta_exact_at_llama_sizes(d, Lw):
    "At T ≤ L the θ's are RoPE's own: YaRN's ramp at s = 1, θ·ρ + θ·(1 − ρ), is off by an ulp in some pairs at these sizes."
    dy = build_pe("yarn:dynamic=true", n_heads=1, head_dim=d, max_len=Lw)
    for n in (1, Lw // 3, Lw):
        inv, f = dy.frequencies(n)
        assert torch.equal(inv, rope_inv_freq(d)) and f == 1.0
        q, k = torch.randn(2, 1, 1, 8, d, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
        pos = Positions(torch.arange(n - 8, n)[None].clamp_min(0))
        rope = build_pe("rope", n_heads=1, head_dim=d, max_len=Lw)
        assert torch.equal(dy.rotate(q, k, pos)[0], rope.rotate(q, k, pos)[0])


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_static_yarn_at_s_times_L(s):
    "At T = sL (s the ceiling): static yarn:s=s, frequencies, factor and logits."
    dy, st = (build_pe(sp, n_heads=2, head_dim=16, max_len=L) for sp in (f"yarn:s={s:g}:dynamic=true", f"yarn:s={s:g}"))
    n = int(s * L)
    inv, f = dy.frequencies(n)
    assert torch.equal(inv, st.inv_freq) and f == st.attn_factor and f > 1
    q, k = _qk(n, 1)
    assert torch.equal(_logits(dy, q, k), _logits(st, q, k))
    assert torch.equal(dy.frequencies(10 * n)[0], st.inv_freq)          # past sL the ceiling holds
    assert not torch.equal(dy.frequencies(n - 1)[0], st.inv_freq)      # below it the scale follows T


@pytest.mark.parametrize("n", [33, 48, 64, 100, 200])
def test_attention_factor_follows_length(n):
    "The cos/sin factor is 0.1·ln(T/L) + 1 and the logits are the same θ's without it times its square."
    dy = build_pe("yarn:s=8:dynamic=true", n_heads=2, head_dim=16, max_len=L)
    inv, f = dy.frequencies(n)
    assert abs(f - (0.1 * math.log(n / L) + 1)) < 1e-14
    assert torch.allclose(inv, yarn_inv_freq(16, 1e4, n / L, L)[0], rtol=0, atol=0)
    q, k = _qk(n, 2)
    raw = RoPE(dy.ctx, inv_freq=inv)
    assert torch.allclose(_logits(dy, q, k), f ** 2 * _logits(raw, q, k), rtol=1e-5, atol=1e-5)


def test_hand_computed_case():
    "d=16, base 1e4, L=32: low=0, high=2, ρ=(0, 1/2, 1, …); at T=4L θ_1 = θ_1·(1/8 + 1/2), θ_i≥2 = θ_i/4, factor 0.1 ln 4 + 1."
    th = rope_inv_freq(16)
    inv, f = dynamic_yarn_inv_freq(16, 1e4, 4 * L, L)
    assert inv[0] == th[0] and abs(inv[1].item() - 10000 ** (-2 / 16) * 0.625) < 1e-15
    assert torch.allclose(inv[2:], th[2:] / 4, rtol=1e-15, atol=0) and abs(f - 1.1386294361119891) < 1e-15


def authors_scales(lengths: list[int], original_max_len: int, max_position_embeddings: int) -> list[float]:
    "jquesnelle/yarn's LlamaDynamicYaRNScaledRotaryEmbedding (finetuned=False): rescale to seq_len/L when seq_len passes its cache."
    cached, scale, out = max_position_embeddings, 1.0, []
    for n in lengths:
        if n > cached: cached, scale = n, n / original_max_len
        out.append(scale)
    return out


def test_authors_rule_on_growing_lengths_and_the_departure():
    "Same scale as the authors' module whenever a forward is the longest so far; plain RoPE again after a long one (theirs keeps it)."
    grow = [10, 32, 40, 64, 96, 256]
    assert [dynamic_yarn_scale(n, L) for n in grow] == authors_scales(grow, L, L)
    back = [96, 20]
    assert authors_scales(back, L, L) == [3.0, 3.0] and [dynamic_yarn_scale(n, L) for n in back] == [3.0, 1.0]


def test_module_and_spec():
    dy = build_pe("yarn:dynamic=true", n_heads=2, head_dim=16, max_len=L)
    assert isinstance(dy, DynamicYaRNRoPE) and dy.max_scale == 8.0 and dy.length_dependent
    assert dy.original_max_len == L and build_pe("yarn:dynamic=true:original_max_len=8", n_heads=2, head_dim=16).original_max_len == 8
    assert type(build_pe("yarn:s=4", n_heads=2, head_dim=16, max_len=L)) is RoPE   # static YaRN unchanged
    for bad in ("yarn:dynamic=true:s=0.5", "yarn:dynamic=true:beta_fast=1:beta_slow=2"):
        with pytest.raises(ValueError): build_pe(bad, n_heads=2, head_dim=16, max_len=L)
    q, k = _qk(4 * L, 3)
    long, short = _logits(dy, q, k), _logits(dy, q[:, :, :L], k[:, :, :L])   # a long forward, then a short one: no memory
    rope = build_pe("rope", n_heads=2, head_dim=16, max_len=L)
    assert torch.equal(short, _logits(rope, q[:, :, :L], k[:, :, :L])) and not torch.allclose(long[..., :L, :L], short)
    check_paths_agree("yarn:dynamic=true")


def test_extend_hf_llama():
    "Through `extend`: a tiny HF Llama's logits unchanged at T ≤ L, changed past L, equal to HF's static YaRN at factor T/L."
    pytest.importorskip("transformers")
    from lengthx.pretrained import extend, hf_twin, tiny_hf
    hf = tiny_hf("Llama")
    Lh = hf.config.max_position_embeddings
    ids = torch.randint(2, 128, (2, 3 * Lh), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        shipped, shipped_short = hf(ids).logits, hf(ids[:, :Lh]).logits
        with extend(hf, "yarn:dynamic=true"): ext, ext_short = hf(ids).logits, hf(ids[:, :Lh]).logits
        with extend(hf, "yarn:s=3"): static_short = hf(ids[:, :Lh]).logits
        twin = hf_twin(hf, "yarn:s=3")(ids).logits
    assert (ext_short - shipped_short).abs().max() < 1e-5
    assert (static_short - shipped_short).abs().max() > 1e-2          # static YaRN does change short inputs
    assert (ext - shipped).abs().max() > 1e-2
    assert (ext - twin).abs().max() < 1e-4
