"""Chapter 12's Llama 3.1 and LongRoPE scalings against Hugging Face transformers' implementation (skipped without it)."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.pe.rotary import rope_inv_freq
from lengthx.pe.scaling import LongRoPE, llama3_inv_freq, longrope_inv_freq, ntk_by_parts_inv_freq, yarn_inv_freq

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import (_compute_llama3_parameters, _compute_longrope_parameters,  # noqa: E402
                                              _compute_yarn_parameters)


def hf_config(head_dim: int, **rope) -> LlamaConfig:
    return LlamaConfig(hidden_size=head_dim, num_attention_heads=1, max_position_embeddings=1 << 20, rope_parameters=rope)


@pytest.mark.parametrize("d,base,L,s,lo,hi", [(128, 5e5, 8192, 8.0, 1.0, 4.0), (16, 1e4, 32, 4.0, 1.0, 4.0),
                                              (64, 1e4, 512, 16.0, 2.0, 16.0), (32, 1e6, 1024, 2.5, 0.5, 3.0)])
def test_llama3_matches_hf(d, base, L, s, lo, hi):
    inv, f = _compute_llama3_parameters(hf_config(d, rope_type="llama3", rope_theta=base, factor=s, low_freq_factor=lo,
                                                  high_freq_factor=hi, original_max_position_embeddings=L))
    ours = llama3_inv_freq(d, base, s, L, lo, hi)
    assert torch.allclose(ours.float(), inv, rtol=1e-6, atol=0) and f == 1.0
    assert not torch.allclose(ours, rope_inv_freq(d, base))       # the scaling does something


@pytest.mark.parametrize("seq_len", [None, 1, 32, 33, 1000])
def test_longrope_matches_hf(seq_len):
    short, long = [1.0, 1.0, 1.1, 1.3, 1.5, 2.0, 3.0, 4.0], [1.0, 1.2, 1.9, 3.1, 4.4, 6.0, 7.5, 9.0]
    cfg = hf_config(16, rope_type="longrope", rope_theta=1e4, factor=8.0, short_factor=short, long_factor=long,
                    original_max_position_embeddings=32)
    inv, f = _compute_longrope_parameters(cfg, seq_len=seq_len)
    ours, g = longrope_inv_freq(16, 1e4, short, long, seq_len or 0, 32, 8.0)
    assert torch.allclose(ours.float(), inv, rtol=1e-6, atol=0)
    assert abs(g - f) < 1e-12 and abs(g - math.sqrt(1 + math.log(8) / math.log(32))) < 1e-12


def test_longrope_spec_switches_set_with_length():
    "The module picks the long set exactly when the largest position + 1 exceeds original_max_len, as HF does."
    short, long = [1.0, 1.0, 1.0, 2.0], [1.0, 2.0, 4.0, 4.0]
    ctx = build_pe("rope", n_heads=1, head_dim=8, max_len=16).ctx
    pe = LongRoPE(ctx, 4.0, torch.tensor(short), torch.tensor(long), original_max_len=16)
    cfg = hf_config(8, rope_type="longrope", rope_theta=1e4, factor=4.0, short_factor=short, long_factor=long,
                    original_max_position_embeddings=16)
    for n in (16, 17):
        inv, f = pe.frequencies(n)
        hf_inv, hf_f = _compute_longrope_parameters(cfg, seq_len=n)
        assert torch.allclose(inv.float(), hf_inv, rtol=1e-6) and abs(f - hf_f) < 1e-12
    assert not torch.allclose(pe.frequencies(16)[0], pe.frequencies(17)[0])


def test_yarn_is_ntk_by_parts_and_matches_hf():
    cfg = hf_config(64, rope_type="yarn", rope_theta=1e4, factor=8.0, original_max_position_embeddings=256)
    cfg.max_position_embeddings = 8 * 256
    inv, f = _compute_yarn_parameters(cfg)
    ours, g = yarn_inv_freq(64, 1e4, 8.0, 256)
    assert torch.equal(ours, ntk_by_parts_inv_freq(64, 1e4, 8.0, 256))
    assert torch.allclose(ours.float(), inv, rtol=1e-6) and abs(g - f) < 1e-6


def test_llama3_spec_runs_on_every_path():
    pe = build_pe("llama3:s=4:original_max_len=16", n_heads=2, head_dim=16, max_len=16)
    assert torch.allclose(pe.inv_freq, llama3_inv_freq(16, 1e4, 4, 16))
    q, k, v = torch.randn(3, 1, 2, 40, 16)
    pos = Positions.arange(1, 40)
    ref = attention(q, k, v, pe, pos, path="naive")
    for p in ("sdpa", "chunked"):
        assert (attention(q, k, v, pe, pos, path=p, block=7) - ref).abs().max() < 1e-5


def test_longrope_spec_is_its_seed():
    "The spec: plain RoPE × attention factor up to original_max_len, the NTK-by-parts frequencies beyond."
    pe = build_pe("longrope:s=4:original_max_len=16", n_heads=1, head_dim=8, max_len=16)
    f = math.sqrt(1 + math.log(4) / math.log(16))
    assert torch.equal(pe.frequencies(16)[0], rope_inv_freq(8)) and abs(pe.frequencies(16)[1] - f) < 1e-12
    assert torch.allclose(pe.frequencies(17)[0], ntk_by_parts_inv_freq(8, 1e4, 4, 16))
