"""Chapter 44's reference forms of FoX, stick-breaking and PaTH, each against its defining loop and its limits:
FoX with every gate 1 is NoPE and with a constant gate is ALiBi of slope −log f; stick-breaking weights equal the
product formula by loop and sum to at most 1 (finite at huge logits); PaTH's prefix-product form equals the loop
of Householder maps, β = 0 is NoPE, β = 2 is a reflection."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.pe.bias import alibi_slopes
from lengthx.pe.successors import (fox_attention, fox_bias, forget_gate, householder, path_logits,
                                   stick_breaking_attention, stick_breaking_weights)


def qkv(B=2, H=4, T=12, D=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, B, H, T, D, generator=g, dtype=dtype).unbind(0)


def test_fox_bias_is_the_double_sum():
    log_f = forget_gate(torch.randn(2, 9, 16), torch.randn(3, 16), torch.randn(3))
    assert (log_f <= 0).all()
    d = fox_bias(log_f)
    for i in range(9):
        for j in range(i + 1):
            assert torch.allclose(d[..., i, j], log_f[..., j + 1:i + 1].sum(-1), atol=1e-5)


def test_fox_limits_are_nope_and_alibi():
    q, k, v = qkv()
    B, H, T, D = q.shape
    pos = Positions.arange(B, T)
    nope = attention(q, k, v, build_pe("nope", n_heads=H, head_dim=D), pos, path="naive")
    alibi = attention(q, k, v, build_pe("alibi", n_heads=H, head_dim=D), pos, path="naive")
    assert torch.allclose(fox_attention(q, k, v, torch.zeros(B, H, T)), nope, atol=1e-5)
    assert torch.allclose(fox_attention(q, k, v, (-alibi_slopes(H))[None, :, None].expand(B, H, T)), alibi, atol=1e-5)
    assert not torch.allclose(fox_attention(q, k, v, torch.full((B, H, T), -0.5)), alibi, atol=1e-3)


def _loop(q, k, attend_current):
    z = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).double()
    out = torch.zeros_like(z)
    for i in range(z.shape[-1]):
        left = torch.ones(z.shape[:-2], dtype=torch.float64)
        for j in range(i if attend_current else i - 1, -1, -1):
            out[..., i, j] = torch.sigmoid(z[..., i, j]) * left
            left = left * (1 - torch.sigmoid(z[..., i, j]))
    return out


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_equals_the_product_formula(attend_current):
    q, k, v = qkv(seed=3)
    a = stick_breaking_weights(q, k, attend_current)
    assert torch.allclose(a.double(), _loop(q, k, attend_current), atol=1e-6)
    assert (a >= 0).all() and (a.sum(-1) <= 1 + 1e-6).all()
    out, rest = stick_breaking_attention(q, k, v, attend_current)
    assert torch.allclose(out, a @ v, atol=1e-6) and torch.allclose(rest, 1 - a.sum(-1))
    if not attend_current: assert (a[..., 0, :] == 0).all()      # the first query has nothing before it


def test_stick_breaking_is_stable_at_huge_logits():
    q, k, _ = qkv(seed=4)
    a = stick_breaking_weights(40 * q, 40 * k)
    assert torch.isfinite(a).all() and (a.sum(-1) <= 1 + 1e-6).all()


def _path_loop(q, k, w, beta):
    Hs = householder(w, beta)
    T = q.shape[-2]
    out = torch.zeros(*q.shape[:-1], T, dtype=q.dtype)
    for j in range(T):
        kj = k[..., j, :]
        for i in range(j, T):
            if i > j: kj = (Hs[..., i, :, :] @ kj[..., None])[..., 0]
            out[..., i, j] = (q[..., i, :] * kj).sum(-1) / math.sqrt(q.shape[-1])
    return out


@pytest.mark.parametrize("lo,hi", [(0.0, 0.9), (1.1, 2.0)])
def test_path_prefix_form_equals_the_householder_loop(lo, hi):
    q, k, w = qkv(T=10, seed=5, dtype=torch.float64)
    beta = lo + (hi - lo) * torch.rand(q.shape[:-1], dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    assert torch.allclose(path_logits(q, k, w, beta), _path_loop(q, k, w, beta), atol=1e-8)


def test_path_limits():
    q, k, w = qkv(T=8, seed=7, dtype=torch.float64)
    zero = torch.zeros(q.shape[:-1], dtype=torch.float64)
    assert torch.allclose(path_logits(q, k, w, zero), (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).tril())
    Hr = householder(w, zero + 2.0)
    assert torch.allclose(Hr @ Hr.transpose(-1, -2), torch.eye(q.shape[-1], dtype=torch.float64).expand_as(Hr), atol=1e-12)
    beta = zero + 0.5
    assert not torch.allclose(path_logits(q, k, w, beta), path_logits(q, k, w, zero), atol=1e-3)
