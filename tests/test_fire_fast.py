"FIRE's bias from the MLP's linear pieces (and its Toeplitz rows below L) against the MLP itself: values and gradients."
import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from hypothesis import given, settings, strategies as st
from torch import nn

from lengthx.attention import Positions, build_pe, check_paths_agree
from lengthx.model import GPT, GPTConfig
from lengthx.pe.fire import (piecewise_linear_eval, piecewise_linear_gates, piecewise_linear_tables,
                             relu_mlp_breakpoints, toeplitz_rows, toeplitz_top)


def mlp_reference(x, w1, b1, W2, b2, slope=0.0):
    "f(x) through the hidden layer: [H, *x.shape]."
    return rearrange(F.leaky_relu(x[..., None] * w1 + b1, slope) @ W2.T + b2, "... h -> h ...")


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 48), heads=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
       zero_frac=st.floats(0, 1), slope=st.sampled_from([0.0, 0.01, 0.2]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_pieces_equal_the_mlp(width, heads, seed, zero_frac, slope, dtype):
    g = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(width, generator=g, dtype=dtype), torch.randn(width, generator=g, dtype=dtype)
    w1[torch.rand(width, generator=g) < zero_frac] = 0.0
    if width >= 2: w1[0], b1[0] = -3 * w1[1], -3 * b1[1]            # a tie, with the opposite orientation
    W2, b2 = torch.randn(heads, width, generator=g, dtype=dtype), torch.randn(heads, generator=g, dtype=dtype)
    kinks, A, B = piecewise_linear_tables(w1, b1, W2, b2, slope)
    assert kinks.numel() == int((w1 != 0).sum()) and A.shape == B.shape == (kinks.numel() + 1, heads)
    x = torch.cat([torch.randn(500, generator=g, dtype=dtype) * 3, kinks, kinks + 1e-3, kinks - 1e-3])
    ref = mlp_reference(x, w1, b1, W2, b2, slope)
    tol = (1e-5 if dtype == torch.float32 else 1e-12) * ref.abs().max().clamp(min=1)
    assert (piecewise_linear_eval(x, kinks, A, B) - ref).abs().max() <= tol


def test_gates_by_hand():
    "Kinks 0.05 (w > 0), 0.2 (w < 0), 0.5 (w > 0): which unit is on, piece by piece; flat units follow the sign of b1."
    w1, b1 = torch.tensor([1.0, -1.0, 2.0, 0.0, 0.0]), torch.tensor([-0.5, 0.2, -0.1, 1.0, -1.0])
    kinks, units = relu_mlp_breakpoints(w1, b1)
    assert torch.allclose(kinks, torch.tensor([0.05, 0.2, 0.5])) and units.tolist() == [2, 1, 0]
    _, gate = piecewise_linear_gates(w1, b1, slope=0.1)
    want = [[0.1, 1, 0.1, 1, 0.1], [0.1, 1, 1, 1, 0.1], [0.1, 0.1, 1, 1, 0.1], [1, 0.1, 1, 1, 0.1]]
    assert torch.equal(gate, torch.tensor(want))


def test_toeplitz_top_is_the_diagonal_layout():
    T, row = 7, torch.randn(3, 13)
    full = torch.stack([torch.stack([row[:, T - 1 + j - i] for j in range(T)], -1) for i in range(T)], -2)
    for r in (1, 4, 7): assert torch.equal(toeplitz_top(row, T, r), full[:, :r])


def test_toeplitz_rows_only_for_shared_consecutive_positions():
    L = torch.tensor(10.0)
    t = torch.arange(16)[None]
    assert toeplitz_rows(t, t, L) == 10 and toeplitz_rows(t + 5, t + 5, L) == 5 and toeplitz_rows(t + 10, t + 10, L) == 0
    assert toeplitz_rows(t[:, :4], t, L) == 0                                  # queries ≠ keys
    assert toeplitz_rows(t * 2, t * 2, L) == 0                                 # gaps: not Toeplitz
    assert toeplitz_rows(torch.cat([t, t + 1]), torch.cat([t, t + 1]), L) == 0 # rows differ


def _fire(spec="fire", max_len=64, seed=0, L_mult=1.0):
    torch.manual_seed(seed)
    pe = build_pe(spec, n_heads=4, head_dim=8, max_len=max_len)
    pe = getattr(pe, "inner", pe)
    with torch.no_grad():
        pe.mlp[0].weight.mul_(5); pe.mlp[0].weight[::4] = 0.0; pe.c.fill_(0.7); pe.L_mult.fill_(L_mult)
    return pe


@pytest.mark.parametrize("spec", ["fire", "fire:width=8", "dape:fire"])
@pytest.mark.parametrize("L_mult,qk", [(2.0, "same"), (0.5, "same"), (0.5, "block"), (1.0, "batch")])
def test_fire_bias_values_and_gradients_equal_the_mlp(spec, L_mult, qk):
    pe = _fire(spec, L_mult=L_mult)
    p = Positions.arange(1, 96)
    pq, pk = p, p
    if qk == "block": pq = Positions(p.token[:, 40:70])
    if qk == "batch": pq = pk = Positions(torch.stack([torch.arange(96), torch.arange(96) + 30]))
    params = [pe.c, pe.L_mult, *pe.mlp.parameters()]
    fast, ref = pe.bias(pq, pk), pe.mlp_bias(pq, pk)
    assert fast.shape == ref.shape and (fast - ref).abs().max() <= 1e-5 * ref.abs().max()
    w = torch.randn(ref.shape)
    g_fast = torch.autograd.grad((pe.bias(pq, pk) * w).sum(), params)
    g_ref = torch.autograd.grad((pe.mlp_bias(pq, pk) * w).sum(), params)
    for a, b in zip(g_fast, g_ref): assert (a - b).abs().max() <= 1e-4 * b.abs().max().clamp(min=1e-3)


def test_other_activation_falls_back_to_the_mlp():
    pe = _fire()
    pe.mlp[1] = nn.GELU()
    p = Positions.arange(1, 20)
    assert pe.activation_slope() is None and torch.equal(pe.bias(p, p), pe.mlp_bias(p, p))


def test_float64_bias_follows_the_parameters():
    pe = _fire(L_mult=0.5).double()
    p = Positions.arange(1, 80)
    b = pe.bias(p, p)
    assert b.dtype == torch.float64 and (b - pe.mlp_bias(p, p)).abs().max() <= 1e-12 * b.abs().max()


@pytest.mark.parametrize("spec", ["fire", "fire:init_L=8", "fire:width=4"])
def test_paths_agree(spec):
    assert max(check_paths_agree(spec).values()) <= 1e-5


def test_model_training_gradients_equal_with_the_mlp_bias():
    "A whole tiny model, trained one step's worth: every parameter's gradient with the pieces equals the MLP's."
    torch.manual_seed(0)
    m = GPT(GPTConfig.preset("tiny", pe="fire:init_L=20", max_len=48))
    ids = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(0))
    grads = []
    for use_mlp in (False, True):
        if use_mlp: m.pe.bias = m.pe.mlp_bias
        m.zero_grad(); _, loss = m(ids, ids, path="naive"); loss.backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("pe." in n for n in grads[0])
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], rtol=1e-4, atol=1e-6), n


def test_fire_mask_is_a_toeplitz_view_below_L_and_equal_to_the_dense_one():
    "Every query below L: sdpa reads a strided view of 2T−1 numbers per head; outputs and all gradients equal the dense mask's."
    from lengthx.attention import KeyReversedMask, additive_mask, attention
    from lengthx.pe.fire import FirePE
    torch.manual_seed(0)
    T, H = 40, 4
    pe = build_pe("fire", n_heads=H, head_dim=8, max_len=T).double()
    pos = Positions.arange(2, T)
    m = additive_mask(pe, pos, reversed_keys=True)
    assert isinstance(m, KeyReversedMask) and m.view.untyped_storage().nbytes() == H * (2 * T - 1) * 4
    assert not isinstance(additive_mask(pe, Positions.arange(2, T, offset=T), reversed_keys=True), KeyReversedMask)  # past L
    q, k, v = (torch.randn(2, H, T, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    def run():
        leaves = [q, k, v, *pe.parameters()]
        for t in leaves: t.grad = None
        out = attention(q, k, v, pe, pos, path="sdpa")
        (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)).sum().backward()
        return [out.detach()] + [t.grad.clone() for t in leaves]
    view = run()
    orig = FirePE.toeplitz
    FirePE.toeplitz = lambda self, pos: False
    try: dense = run()
    finally: FirePE.toeplitz = orig
    assert pe.toeplitz(pos) and len(view) == 4 + len(list(pe.parameters()))
    for a, b in zip(view, dense): assert (a - b).abs().max() <= 1e-10 * b.abs().max().clamp(min=1.0)


@pytest.mark.parametrize("act", [nn.LeakyReLU(0.3), nn.LeakyReLU(0.01), nn.GELU()])
@pytest.mark.parametrize("unrolled", [False, True])
def test_score_mod_uses_the_mlps_activation(act, unrolled):
    "flex's score_mod (both forms) computes the MLP with its own activation, as bias() does: not a ReLU for every MLP."
    from lengthx.attention import attention
    pe = _fire(L_mult=0.5)
    pe.mlp[1] = act
    pe.flex_unrolled = unrolled
    T = 24
    pos = Positions.arange(1, T)
    tok = pos.token
    mod = pe.score_mod(pos)
    with torch.no_grad():
        want = pe.bias(pos, pos)                                            # [H, T, T]
        got = torch.stack([torch.stack([torch.stack([mod(torch.tensor(0.0), 0, h, torch.tensor(i), torch.tensor(j))
                                                      for j in range(T)]) for i in range(T)]) for h in range(want.shape[0])])
        assert (got - want).abs().max() <= 1e-5 * want.abs().max()
        q, k, v = (torch.randn(1, 4, T, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
        ref = attention(q, k, v, pe, pos, path="naive")
        assert (attention(q, k, v, pe, pos, path="flex") - ref).abs().max() <= 1e-5


@pytest.mark.parametrize("spec", ["fire", "dape:fire"])
def test_whole_model_float64_follows_parameters(spec):
    "A tiny model cast to float64 computes FIRE's normalized distance in float64 too: its logits are float64 and match float32."
    torch.manual_seed(0)
    m32 = GPT(GPTConfig.preset("tiny", pe=spec, max_len=32)).eval()
    m64 = GPT(GPTConfig.preset("tiny", pe=spec, max_len=32)).eval()
    m64.load_state_dict(m32.state_dict()); m64.double()
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y64, y32 = m64(ids, path="naive"), m32(ids, path="naive")
    assert y64.dtype == torch.float64 and torch.allclose(y64.float(), y32, atol=1e-4)
    fire = getattr(m64.pe, "inner", m64.pe)                              # dape:fire wraps its FIRE
    p = Positions.arange(1, 32)
    assert fire.normalized(p, p).dtype == torch.float64
