"""Log-n attention (`logn:<rotary spec>`, chapter 12): κ(m) = max(1, ln(m+1)/ln L) on the queries around any frequency rule."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, attention_at, build_pe, check_paths_agree
from lengthx.pe.scaling import LogNRoPE

L, T = 24, 96
INNER = ["rope", "yarn:s=4", "rope:dynamic=4", "yarn:dynamic=true", "ntk_by_parts:s=8", "llama3:s=4", "rope:pi=2"]


def _qkv(n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(3, 1, 2, n, 16, generator=torch.Generator().manual_seed(seed)))


def _logits(pe, q, k, pos):
    return pe.logits(*pe.rotate(q, k, pos), pos, pos, 1.0)


@pytest.mark.parametrize("inner", INNER)
def test_inner_rule_bit_for_bit_up_to_L(inner):
    "κ = 1 at every position below L: the wrapped rule's logits and attention output, exactly."
    w, i = (build_pe(s, n_heads=2, head_dim=16, max_len=L) for s in (f"logn:{inner}", inner))
    q, k, v = _qkv(L)
    pos = Positions.arange(1, L)
    assert torch.equal(_logits(w, q, k, pos), _logits(i, q, k, pos))
    assert torch.equal(attention(q, k, v, w, pos, path="naive"), attention(q, k, v, i, pos, path="naive"))


@pytest.mark.parametrize("inner", INNER)
def test_rows_scaled_by_kappa_past_L(inner):
    "Past L, row m of the logits is the inner rule's row times max(1, ln(m+1)/ln L); the keys are not scaled."
    w, i = (build_pe(s, n_heads=2, head_dim=16, max_len=L) for s in (f"logn:{inner}", inner))
    q, k, _ = _qkv(T, 1)
    pos = Positions.arange(1, T)
    Sw, Si = _logits(w, q, k, pos), _logits(i, q, k, pos)
    for m in range(T):
        kappa = max(1.0, math.log(m + 1) / math.log(L))
        assert torch.allclose(Sw[..., m, :], kappa * Si[..., m, :], rtol=1e-5, atol=1e-5), m
    assert torch.equal(w.rotate(q, k, pos)[1], i.rotate(q, k, pos)[1])       # keys as the inner rule rotates them
    assert (Sw[..., -1, :] - Si[..., -1, :]).abs().max() > 1e-2


def test_factor_values_and_options():
    w = build_pe("logn:original_max_len=8:rope", n_heads=2, head_dim=16, max_len=L)
    assert isinstance(w, LogNRoPE) and w.train_len == 8 and not w.length_dependent
    assert build_pe("logn:rope:dynamic=4", n_heads=2, head_dim=16, max_len=L).length_dependent
    q = torch.ones(1, 2, 40, 16)
    pos = Positions.arange(1, 40)
    plain = build_pe("rope", n_heads=2, head_dim=16).rotate(q, q, pos)[0]
    ratio = (w.rotate(q, q, pos)[0].norm(dim=-1) / plain.norm(dim=-1))[0, 0]
    want = torch.tensor([max(1.0, math.log(m + 1) / math.log(8)) for m in range(40)])
    assert torch.allclose(ratio, want, rtol=1e-6) and ratio[7] == 1.0 and ratio[8] > 1.0


@pytest.mark.parametrize("bad", ["logn:rerope", "logn:self_extend", "logn:alibi", "logn:nope", "logn:original_max_len=1:rope"])
def test_refuses_what_it_cannot_wrap(bad):
    with pytest.raises(ValueError): build_pe(bad, n_heads=2, head_dim=16, max_len=L)


@pytest.mark.parametrize("inner", ["rope", "yarn:dynamic=true"])
def test_paths_and_decoding(inner):
    check_paths_agree(f"logn:{inner}")
    w = build_pe(f"logn:{inner}", n_heads=2, head_dim=16, max_len=L)
    q, k, v = _qkv(T, 2)
    pos = Positions.arange(1, T)
    with torch.no_grad():
        full = attention(q, k, v, w, pos, path="naive")[:, :, -1:]
        step = attention_at(q[:, :, -1:], k, v, w, pos[T - 1:], pos)       # one decoding step after a cache of T − 1 keys
    assert (step - full).abs().max() < 1e-5


def test_extend_hf_llama():
    "Through `extend`: a tiny HF Llama's logits unchanged at T ≤ L, changed past L; logn:yarn:dynamic=true likewise."
    pytest.importorskip("transformers")
    from lengthx.pretrained import extend, tiny_hf
    hf = tiny_hf("Llama")
    Lh = hf.config.max_position_embeddings
    ids = torch.randint(2, 128, (2, 3 * Lh), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        shipped, shipped_short = hf(ids).logits, hf(ids[:, :Lh]).logits
        for spec in ("logn:rope", "logn:yarn:dynamic=true"):
            with extend(hf, spec): ext, ext_short = hf(ids).logits, hf(ids[:, :Lh]).logits
            assert (ext_short - shipped_short).abs().max() < 1e-5, spec
            assert (ext - shipped).abs().max() > 1e-2, spec
        with extend(hf, "rope"): plain = hf(ids).logits
        with extend(hf, "logn:rope"): ln = hf(ids).logits
    assert (plain[:, :Lh] - ln[:, :Lh]).abs().max() < 1e-6 and (plain - ln).abs().max() > 1e-2
