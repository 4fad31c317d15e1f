"""RoPE (three layouts), xPos, and the context-extension scalings (PI, NTK, dynamic NTK, YaRN, ReRoPE).

Known values are computed by hand from the papers' formulas, never read back from the implementation.
"""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe, known_pes, pe_examples
from lengthx.pe.rotary import (RoPE, apply_rotary, rope_complex, rope_decay_bound, rope_interleaved, rope_inv_freq,
                               rope_matrix, rope_rotate_half, rotary_dim, rotary_table)
from lengthx.pe.scaling import (dynamic_ntk_inv_freq, ntk_base, ntk_inv_freq, pi_inv_freq, rope_wavelengths,
                                yarn_correction_range, yarn_inv_freq)
from lengthx.pe.xpos import xpos_qk, xpos_zeta

F64 = torch.float64


def rnd(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def half_perm(d):
    "P: interleaved dimension 2i -> i, 2i+1 -> i + d/2 (the rotate-half layout)."
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


# ---------------------------------------------------------------- frequencies and the three layouts
def test_inv_freq_known_values():
    assert torch.allclose(rope_inv_freq(4), torch.tensor([1.0, 0.01], dtype=F64))
    assert torch.allclose(rope_inv_freq(8, base=100.0), torch.tensor([1.0, 100 ** -0.25, 0.1, 100 ** -0.75], dtype=F64))
    assert rope_inv_freq(16).dtype == F64


@pytest.mark.parametrize("dim", [0, 3, 7])
def test_inv_freq_rejects_odd_dims(dim):
    with pytest.raises(ValueError, match="even"):
        rope_inv_freq(dim)


def test_rotation_of_a_unit_vector_is_cos_sin():
    x = torch.tensor([[1.0, 0.0]], dtype=F64)
    inv = torch.tensor([1.0], dtype=F64)
    want = torch.tensor([[math.cos(3.0), math.sin(3.0)]], dtype=F64)
    for fn in (rope_interleaved, rope_complex, rope_rotate_half):
        assert torch.allclose(fn(x, torch.tensor([3]), inv), want, atol=1e-12), fn.__name__


def test_layouts_agree():
    d = 32
    x, inv, pos = rnd(7, d), rope_inv_freq(d), torch.tensor([0, 1, 2, 50, 999, 4096, 30000])
    by_matrix = torch.stack([rope_matrix(float(m), inv) @ x[i] for i, m in enumerate(pos)])
    assert torch.allclose(rope_interleaved(x, pos, inv), by_matrix, atol=1e-10)
    assert torch.allclose(rope_complex(x, pos, inv), by_matrix, atol=1e-10)
    P = half_perm(d)
    assert torch.allclose(rope_rotate_half(x[:, P], pos, inv), by_matrix[:, P], atol=1e-10)
    assert not torch.allclose(rope_rotate_half(x, pos, inv), by_matrix, atol=1e-2)


def test_batched_positions_broadcast_over_heads():
    d, T = 16, 9
    x = rnd(2, 3, T, d, dtype=torch.float32)
    pos = torch.stack([torch.arange(T), torch.arange(T) + 5])
    inv = rope_inv_freq(d)
    for fn in (rope_rotate_half, rope_interleaved, rope_complex):
        out = fn(x, pos, inv)
        assert out.shape == x.shape
        for b in range(2):
            assert torch.allclose(out[b], fn(x[b], pos[b], inv), atol=1e-6), fn.__name__
    assert torch.allclose(rope_rotate_half(x, Positions(pos), inv), rope_rotate_half(x, pos, inv))


def test_relative_property_and_norms():
    d, T = 16, 20
    q, k, inv, t = rnd(T, d), rnd(T, d, seed=1), rope_inv_freq(d), torch.arange(T)
    s0 = rope_rotate_half(q, t, inv) @ rope_rotate_half(k, t, inv).T
    s1 = rope_rotate_half(q, t + 123, inv) @ rope_rotate_half(k, t + 123, inv).T
    assert torch.allclose(s0, s1, atol=1e-9)
    assert torch.allclose(rope_complex(q, t, inv).norm(dim=-1), q.norm(dim=-1), atol=1e-12)
    assert torch.equal(rope_interleaved(q, torch.zeros(T, dtype=torch.long), inv), q)


def test_partial_rotation_leaves_the_tail():
    x, inv = rnd(5, 16), rope_inv_freq(8)   # rotate the first 8 of 16 dims
    for fn in (rope_rotate_half, rope_interleaved, rope_complex):
        out = fn(x, torch.arange(1, 6), inv)
        assert torch.equal(out[:, 8:], x[:, 8:]) and not torch.allclose(out[:, :8], x[:, :8], atol=1e-3)
    with pytest.raises(ValueError, match="rotates 32 dimensions"):
        rope_rotate_half(x, torch.arange(5), rope_inv_freq(32))


def test_decay_bound_at_zero_and_holds():
    d = 64
    assert torch.isclose(rope_decay_bound(torch.tensor(0), d), torch.tensor((d / 2 + 1) / 2, dtype=F64))
    dist = torch.arange(0, 1000).double()
    h = torch.complex(rnd(d // 2), rnd(d // 2, seed=3))
    lhs = (h * torch.polar(torch.ones(1, dtype=F64), dist[:, None] * rope_inv_freq(d))).sum(-1).abs()
    step = torch.cat([h, h.new_zeros(1)]).diff().abs().max()
    assert (lhs <= step * rope_decay_bound(dist, d) * d / 2 + 1e-9).all()


# ---------------------------------------------------------------- the PE module
def test_rotary_dim_validation():
    assert rotary_dim(64) == 64 and rotary_dim(64, 0.5) == 32 and rotary_dim(64, 0.25) == 16
    with pytest.raises(ValueError, match="head dimension must be even"):
        rotary_dim(15)
    with pytest.raises(ValueError, match="must be even"):
        rotary_dim(12, 0.25)   # 3 dims
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        rotary_dim(16, 1.5)
    with pytest.raises(ValueError, match="head dimension must be even"):
        build_pe("rope", n_heads=2, head_dim=15)
    with pytest.raises(ValueError):
        build_pe("xpos", n_heads=2, head_dim=9)


def test_pe_matches_function_and_cache_is_safe():
    pe = build_pe("rope", n_heads=2, head_dim=16)
    q, k = rnd(2, 3, 2, 24, 16, dtype=torch.float32)
    inv = rope_inv_freq(16)
    ar = Positions.arange(3, 24)
    assert torch.allclose(pe.rotate(q, k, ar)[0], rope_interleaved(q, ar.token, inv), atol=1e-6)
    assert list(pe._cache) == [(24, q.device, torch.float32)]
    # other positions of the same length must be computed, not served from the 0..T-1 cache
    for tok in (torch.arange(24).expand(3, 24) + 7, torch.sort(torch.randperm(100)[:24])[0].expand(3, 24)):
        p = Positions(tok)
        assert torch.allclose(pe.rotate(q, k, p)[1], rope_interleaved(k, tok, inv), atol=1e-6)
    # rows that differ are not mistaken for an arange
    mixed = torch.stack([torch.arange(24), torch.arange(24) * 2, torch.arange(24)])
    assert torch.allclose(pe.rotate(q, k, Positions(mixed))[0], rope_interleaved(q, mixed, inv), atol=1e-6)
    # bfloat16 goes through the in-place path with bfloat16 tables
    out = pe.rotate(q.bfloat16(), k.bfloat16(), ar)[0]
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), rope_interleaved(q, ar.token, inv), atol=0.05)


def test_apply_rotary_both_paths_and_gradients():
    pos = torch.stack([torch.arange(5), torch.arange(5) + 11])
    ang = pos.double()[:, None, :, None] * rope_inv_freq(6)    # [B, 1, T, 3]: rotate 6 of 8 dims
    cos, sin = ang.cos(), ang.sin()
    x = rnd(2, 3, 5, 8).requires_grad_()
    want = rope_interleaved(x, pos, rope_inv_freq(6))
    assert isinstance(rotary_table(cos, sin, F64), torch.Tensor) and rotary_table(cos, sin, F64).is_complex()
    assert isinstance(rotary_table(cos, sin, torch.bfloat16), tuple)
    for table in ((cos, sin), rotary_table(cos, sin, F64)):
        assert torch.allclose(apply_rotary(x, table), want, atol=1e-12)
        assert torch.autograd.gradcheck(lambda t: apply_rotary(t, table), (x,))
    # non-contiguous views are read correctly: permuted (as q inside the model) and with odd strides (copied first)
    for view in (rnd(2, 5, 3, 3, 8).transpose(1, 3)[:, 0], rnd(2, 3, 5, 9)[..., :8]):
        assert torch.allclose(apply_rotary(view, rotary_table(cos, sin, F64)), rope_interleaved(view, pos, rope_inv_freq(6)), atol=1e-12)


def test_partial_rotary_pe():
    pe = build_pe("rope:frac=0.5", n_heads=2, head_dim=16)
    q, k = rnd(2, 1, 2, 10, 16, dtype=torch.float32)
    rq, _ = pe.rotate(q, k, Positions.arange(1, 10))
    assert pe.rot_dim == 8 and torch.equal(rq[..., 8:], q[..., 8:])


def test_families_registered():
    assert {"rope", "xpos", "yarn", "rerope"} <= set(known_pes())
    ex = set(pe_examples("all"))
    assert {"rope", "rope:pi=4", "rope:ntk=8", "rope:dynamic=4", "rope:frac=0.5", "xpos", "yarn:s=8", "rerope:w=16"} <= ex
    with pytest.raises(ValueError, match="at most one"):
        build_pe("rope:pi=2:ntk=2", n_heads=2, head_dim=8)
    with pytest.raises(ValueError, match="accepts"):
        build_pe("rope:zzz=1", n_heads=2, head_dim=8)


# ---------------------------------------------------------------- scalings
def test_pi_is_position_division():
    x, m = rnd(30, 16), torch.arange(30)
    assert torch.allclose(rope_rotate_half(x, m, pi_inv_freq(16, 1e4, 8)), rope_rotate_half(x, m / 8, rope_inv_freq(16)), atol=1e-12)


@pytest.mark.parametrize("fn", [lambda s: pi_inv_freq(16, 1e4, s), lambda s: ntk_inv_freq(16, 1e4, s),
                                lambda s: yarn_inv_freq(16, 1e4, s, 64)])
def test_scales_below_one_are_refused(fn):
    with pytest.raises(ValueError, match=">= 1"):
        fn(0.5)


def test_ntk_known_points():
    assert math.isclose(ntk_base(128, 1e4, 8), 1e4 * 8 ** (128 / 126))
    inv, ntk = rope_inv_freq(128), ntk_inv_freq(128, 1e4, 8)
    assert torch.isclose(ntk[0], inv[0]) and torch.isclose(ntk[-1], inv[-1] / 8)
    assert torch.allclose(ntk_inv_freq(64, 1e4, 1), rope_inv_freq(64))
    with pytest.raises(ValueError, match="> 2"):
        ntk_inv_freq(2, 1e4, 4)


def test_dynamic_ntk():
    plain = rope_inv_freq(64)
    for L in (1, 100, 512):
        assert torch.equal(dynamic_ntk_inv_freq(64, 1e4, 4, L, 512), plain)
    # alpha' = 4 * 1024/512 - 3 = 5
    assert torch.allclose(dynamic_ntk_inv_freq(64, 1e4, 4, 1024, 512), rope_inv_freq(64, 1e4 * 5 ** (64 / 62)))


def test_yarn_llama_example():
    # by hand: 128 ln(4096 / (2π·32)) / (2 ln 1e4) = 20.94 -> floor 20; 128 ln(4096 / 2π) / (2 ln 1e4) = 45.03 -> ceil 46
    assert yarn_correction_range(128, 1e4, 4096) == (20, 46)
    inv = rope_inv_freq(128)
    y, f = yarn_inv_freq(128, 1e4, 8, 4096)
    assert torch.equal(y[:21], inv[:21])                       # fast pairs: untouched
    assert torch.allclose(y[46:], inv[46:] / 8, rtol=1e-12)     # slow pairs: interpolated by s
    mid = slice(21, 46)
    assert ((y[mid] < inv[mid]) & (y[mid] > inv[mid] / 8)).all() and (y.diff() < 0).all()
    assert math.isclose(f, 0.1 * math.log(8) + 1) and abs(f - 1.2079) < 1e-4
    y1, f1 = yarn_inv_freq(128, 1e4, 1, 4096)
    assert torch.allclose(y1, inv, rtol=1e-15) and f1 == 1.0


def test_wavelengths():
    lam = rope_wavelengths(128)
    assert torch.isclose(lam[0], torch.tensor(2 * math.pi, dtype=F64))
    assert ((lam <= 4096).sum() == 46)   # pairs 0..45 complete a turn inside 4096 tokens


def test_yarn_pe_scales_logits_by_factor_squared():
    ya = build_pe("yarn:s=8", n_heads=2, head_dim=16, max_len=64)
    plain = RoPE(ya.ctx, inv_freq=ya.inv_freq)
    q, k = rnd(2, 1, 2, 12, 16, dtype=torch.float32)
    p = Positions.arange(1, 12)
    s_y = ya.logits(*ya.rotate(q, k, p), p, p, 1.0)
    s_p = plain.logits(*plain.rotate(q, k, p), p, p, 1.0)
    assert torch.allclose(s_y, (0.1 * math.log(8) + 1) ** 2 * s_p, atol=1e-4)


def test_dynamic_pe_is_plain_up_to_max_len():
    dyn, rope = build_pe("rope:dynamic=4", n_heads=2, head_dim=16, max_len=32), build_pe("rope", n_heads=2, head_dim=16)
    q, k, v = rnd(3, 1, 2, 32, 16, dtype=torch.float32)
    p = Positions.arange(1, 32)
    assert torch.allclose(attention(q, k, v, dyn, p), attention(q, k, v, rope, p), atol=1e-6)
    q, k = rnd(2, 1, 2, 96, 16, dtype=torch.float32)
    p = Positions.arange(1, 96)
    assert torch.allclose(dyn.rotate(q, k, p)[0], rope_interleaved(q, p.token, dynamic_ntk_inv_freq(16, 1e4, 4, 96, 32)), atol=1e-5)


def test_rerope():
    T = 30
    q, k, v = rnd(3, 2, 2, T, 16, dtype=torch.float32)
    p = Positions.arange(2, T)
    rope = build_pe("rope", n_heads=2, head_dim=16)
    ref = attention(q, k, v, rope, p, path="naive")
    assert torch.allclose(attention(q, k, v, build_pe(f"rerope:w={T}", n_heads=2, head_dim=16), p, path="naive"), ref, atol=1e-5)
    pe = build_pe("rerope:w=6", n_heads=2, head_dim=16)
    assert pe.uses_logits and not pe.uses_rotate
    with pytest.raises(ValueError, match="cannot run"):
        attention(q, k, v, pe, p, path="sdpa")
    same_q, same_k = q[:, :, :1].expand_as(q), k[:, :, :1].expand_as(k)
    S = pe.logits(same_q, same_k, p, p, 1.0)
    R = rope.logits(*rope.rotate(same_q, same_k, p), p, p, 1.0)
    rel = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    assert torch.allclose(S[..., rel.abs() < 6], R[..., rel.abs() < 6], atol=1e-5)
    far = S[..., rel >= 6]
    assert torch.allclose(far, R[..., 6, 0, None].expand_as(far), atol=1e-5)
    assert torch.allclose(attention(q, k, v, pe, p, path="chunked", block=7), attention(q, k, v, pe, p, path="naive"), atol=1e-5)
    with pytest.raises(ValueError, match=">= 1"):
        build_pe("rerope:w=0", n_heads=2, head_dim=16)


# ---------------------------------------------------------------- xPos
def test_xpos_zeta_torchscale_values():
    z = xpos_zeta(64)
    assert torch.isclose(z[0], torch.tensor(2 / 7, dtype=F64))              # (0 + 0.4·64) / (1.4·64)
    assert torch.isclose(z[-1], torch.tensor(87.6 / 89.6, dtype=F64))       # (62 + 25.6) / 89.6
    assert (z < 1).all() and (z.diff() > 0).all()


def test_xpos_relative_and_decaying():
    d, T = 16, 16
    inv, t = rope_inv_freq(d), torch.arange(T)
    q, k = rnd(T, d), rnd(T, d, seed=1)
    a, b = xpos_qk(q, k, t, inv)
    a2, b2 = xpos_qk(q, k, t + 777, inv, centre=100.0)
    assert torch.allclose(a @ b.T, a2 @ b2.T, atol=1e-9)
    # the damping: compared with RoPE, each pair is scaled by ζ^{(m-n)/γ}
    one = torch.ones(1, d, dtype=F64)
    dist = torch.arange(0, 3000, 500)
    qx, _ = xpos_qk(one.expand(len(dist), d), one.expand(len(dist), d), dist, inv, scale_base=64.0)
    _, kx = xpos_qk(one, one, torch.zeros(1, dtype=torch.long), inv, scale_base=64.0)
    logits = (qx @ kx.T)[:, 0]
    envelope = (2 * xpos_zeta(d) ** (dist.double()[:, None] / 64)).sum(-1)
    assert (logits.abs() <= envelope + 1e-9).all() and (envelope.diff() < 0).all() and envelope[-1] < 0.01 * envelope[0]  # slowest pair: 2·(20.4/22.4)^(2500/64) ≈ 0.05
    # γ -> ∞ is RoPE
    a3, b3 = xpos_qk(q, k, t, inv, scale_base=1e15)
    assert torch.allclose(a3 @ b3.T, rope_interleaved(q, t, inv) @ rope_interleaved(k, t, inv).T, atol=1e-9)


def test_xpos_pe():
    pe = build_pe("xpos", n_heads=2, head_dim=16)
    q, k = rnd(2, 2, 2, 20, 16, dtype=torch.float32)
    p = Positions.arange(2, 20)
    a, b = pe.rotate(q, k, p)
    ea, eb = xpos_qk(q, k, p, rope_inv_freq(16), 512.0, centre=10.0)
    assert torch.allclose(a, ea, atol=1e-5) and torch.allclose(b, eb, atol=1e-5)
    assert pe.uses_rotate and not pe.uses_bias and not pe.uses_logits



def test_xpos_narrow_dtype_overflow_raises_not_inf():
    "Centred xPos tables cast to float16 overflow first in the query table at position 0, (7/2)^(⌈L/2⌉/γ) > 65504: raise, never hand inf on."
    from lengthx.pe.xpos import xpos_max_length
    L16 = xpos_max_length(torch.float16)
    assert L16 == 2 * math.floor(512 * math.log(65504) / math.log(3.5))        # 9064 for γ = 512
    assert xpos_max_length(torch.float16, 64.0) < L16 < xpos_max_length(torch.float32)
    pe = build_pe("xpos", n_heads=1, head_dim=8)
    tq, tk = pe.tables_for(Positions.arange(1, L16), torch.float16)             # the bound itself is finite
    assert all(torch.isfinite(t).all() for t in (*tq, *tk))
    with pytest.raises(ValueError, match="overflow"):
        pe.tables_for(Positions.arange(1, L16 + 1), torch.float16)             # one more token: inf in the old code
    with pytest.raises(ValueError, match="overflow"):                           # non-arange positions: the largest counts
        pe.tables_for(Positions(torch.arange(L16 + 600, L16 + 640)[None]), torch.float16)
    tq32, tk32 = pe.tables_for(Positions.arange(1, L16 + 1), torch.float32)     # float32 has room
    assert all(torch.isfinite(t).all() for t in (tq32, tk32))
    q = torch.randn(1, 1, L16 + 1, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="overflow"):
        pe.rotate(q, q, Positions.arange(1, L16 + 1))

def test_model_runs_under_inference_mode_and_grad():
    from lengthx.model import GPT, GPTConfig
    for spec in ("rope", "xpos", "rerope:w=4"):
        m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=32, pe=spec, max_len=16))
        idx = torch.randint(0, 256, (2, 16))
        with torch.inference_mode():
            ref = m(idx)
        _, loss = m(idx, idx)
        loss.backward()
        assert torch.allclose(m(idx), ref, atol=1e-5) and m.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- errata checks (chapters 10-12)
def test_rope_with_query_and_key_biases_adds_three_terms():
    "(R_m(q+a))ᵀ R_n(k+b) = RoPE logit + q_mᵀR_{n−m}b + aᵀR_{n−m}k_n + aᵀR_{n−m}b; only the last is a function of m − n alone."
    T, d = 9, 8
    inv, t = rope_inv_freq(d), torch.arange(T)
    qs, ks, a, b = rnd(T, d, seed=1), rnd(T, d, seed=2), rnd(d, seed=3), rnd(d, seed=4)
    R = lambda v: rope_interleaved(v.expand(T, d), t, inv)
    terms = [R(qs) @ R(b).T, R(a) @ R(ks).T, R(a) @ R(b).T]
    assert torch.allclose(R(qs + a) @ R(ks + b).T, R(qs) @ R(ks).T + sum(terms), atol=1e-10)
    bb = terms[2]
    assert all(torch.allclose(bb.diagonal(o), bb.diagonal(o)[:1].expand(T - abs(o)), atol=1e-12) for o in range(-T + 1, T))
    for cross in terms[:2]:
        assert not torch.allclose(cross.diagonal(-1), cross.diagonal(-1)[:1].expand(T - 1), atol=1e-6)


def test_xpos_exponential_form():
    "xPos maps: query pair i times e^{λ_i m}, key pair i times e^{−conj(λ_i) n}, with λ_i = ln(ζ_i)/γ + iθ_i."
    d, T, gamma = 16, 20, 64.0
    inv, t = rope_inv_freq(d), torch.arange(T)
    q, k = rnd(T, d, seed=5), rnd(T, d, seed=6)
    lam = torch.complex(torch.log(xpos_zeta(d)) / gamma, inv)
    as_c = lambda v: torch.view_as_complex(v.reshape(*v.shape[:-1], -1, 2).contiguous())
    fq, fk = xpos_qk(q, k, t, inv, gamma)
    assert torch.allclose(as_c(fq), as_c(q) * torch.exp(lam * t[:, None]), atol=1e-12)
    assert torch.allclose(as_c(fk), as_c(k) * torch.exp(-lam.conj() * t[:, None]), atol=1e-12)


def test_rerope_logn_scale_values():
    from lengthx.pe.scaling import rerope_logn_scale
    L = 64
    f = rerope_logn_scale(torch.arange(4 * L), L)
    assert (f[:L] == 1).all()                                              # log(m+1)/log L ≤ 1 for m ≤ L − 1
    for m in (L, 2 * L - 1, 4 * L - 1):
        assert abs(f[m].item() - math.log(m + 1) / math.log(L)) < 1e-12
    with pytest.raises(ValueError, match="training length"):
        rerope_logn_scale(torch.arange(3), 1)


def test_rerope_logn_is_rerope_on_scaled_queries():
    "ReRoPELogN = Su's patch: the query at m multiplied by max(1, log(m+1)/log L) before both score matrices."
    from lengthx.pe.scaling import ReRoPELogN
    T, L, w = 40, 10, 6
    q, k, v = rnd(3, 2, 2, T, 16, dtype=torch.float32)
    p = Positions.arange(2, T)
    plain = build_pe(f"rerope:w={w}", n_heads=2, head_dim=16)
    logn = ReRoPELogN(plain.ctx, w, train_len=L)
    m = torch.arange(T, dtype=torch.float64)
    f = torch.where(m + 1 > L, torch.log(m + 1) / math.log(L), torch.ones_like(m)).float()   # independent formula
    ref = plain.logits(q * f[:, None], k, p, p, 0.25)
    got = logn.logits(q, k, p, p, 0.25)
    assert torch.allclose(got, ref, atol=1e-5)
    assert torch.equal(got[..., :L, :], plain.logits(q, k, p, p, 0.25)[..., :L, :])     # unchanged up to L − 1
    assert not torch.allclose(got[..., L:, :], plain.logits(q, k, p, p, 0.25)[..., L:, :], atol=1e-3)
    with torch.no_grad():
        assert torch.allclose(attention(q, k, v, logn, p, path="chunked", block=7), attention(q, k, v, logn, p, path="naive"), atol=1e-5)
    assert logn.uses_logits and ReRoPELogN(plain.ctx, w).train_len == plain.ctx.max_len


@pytest.mark.parametrize("nb", ["02_absolute", "10_rope", "11_xpos", "12_context_extension"])
def test_no_control_characters_in_chapter_text(nb):
    "A TAB typed for the `\\t` of `\\theta` renders as 'mheta': no control character may hide in a chapter's source."
    import json, re
    from pathlib import Path
    cells = json.loads((Path(__file__).parents[1] / "nbs" / f"{nb}.ipynb").read_text())["cells"]
    bad = [(i, m.group()) for i, c in enumerate(cells) for m in re.finditer(r"[\x00-\x08\x0b-\x1f\x7f]|\t", "".join(c["source"]))]
    assert not bad, bad
