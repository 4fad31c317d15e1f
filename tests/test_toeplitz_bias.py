"The Toeplitz construction of relative biases: the same values and gradients as the PE's own bias, and the same model."
import pytest
import torch

import lengthx.attention as lx
from lengthx.model import GPT, GPTConfig

RELATIVE = [s for s in lx.pe_examples("all") if lx.build_pe(s, n_heads=4, head_dim=8, max_len=64).relative_bias]


def _perturbed(spec: str) -> lx.PE:
    "A PE with its learnable parameters moved off their initialization (so a wrong layout cannot hide behind symmetry)."
    torch.manual_seed(0)
    pe = lx.build_pe(spec, n_heads=4, head_dim=8, max_len=64)
    with torch.no_grad():
        for p in pe.parameters(): p.add_(0.1 * torch.randn_like(p))
    return pe


def test_the_relative_families_are_flagged():
    assert {"t5", "kerple_log", "dape:kerple_log"} <= {s for s in RELATIVE if _learned_bias(s)}
    names = {s.split(":")[0] for s in RELATIVE}
    assert {"alibi", "t5", "kerple_log", "kerple_power", "sandwich", "window"} <= names
    assert not {"fire", "bipe"} & names


@pytest.mark.parametrize("spec", RELATIVE)
@pytest.mark.parametrize("T,offset", [(1, 0), (2, 0), (33, 7)])
def test_toeplitz_equals_the_direct_bias(spec, T, offset):
    pe = _perturbed(spec)
    pos = lx.Positions.arange(3, T, offset=offset)
    direct = pe.bias(pos, pos, 0)
    fast = lx.relative_bias_matrix(pe, pos, 0)
    torch.testing.assert_close(fast, direct, rtol=1e-6, atol=1e-6)
    for causal in (True, False):
        want = direct.masked_fill(~lx.causal_mask(T, T), float("-inf")) if causal else direct
        got = lx.additive_mask(pe, pos, causal=causal, layer=0)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def _learned_bias(spec: str) -> bool:
    pos = lx.Positions.arange(1, 4)
    return _perturbed(spec).bias(pos, pos, 0).requires_grad


@pytest.mark.parametrize("spec", [s for s in RELATIVE if _learned_bias(s)])
def test_toeplitz_gradients_equal_the_direct_bias(spec):
    pe = _perturbed(spec)
    pos = lx.Positions.arange(1, 24)
    w = torch.randn(pe.ctx.n_heads, 24, 24, generator=torch.Generator().manual_seed(1))
    params = [p for p in pe.parameters() if p.requires_grad]
    g_direct = torch.autograd.grad((pe.bias(pos, pos, 0) * w).sum(), params, allow_unused=True)
    g_fast = torch.autograd.grad((lx.relative_bias_matrix(pe, pos, 0) * w).sum(), params, allow_unused=True)
    for a, b in zip(g_direct, g_fast):
        if a is None: assert b is None; continue
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_sampled_positions_fall_back_to_the_direct_bias():
    pe = _perturbed("alibi")
    pos = lx.Positions(torch.tensor([[0, 2, 3, 9, 10]]))
    assert not lx.toeplitz_ok(pe, pos)
    torch.testing.assert_close(lx.relative_bias_matrix(pe, pos), pe.bias(pos, pos, 0))


@pytest.mark.parametrize("spec", ["alibi", "t5", "kerple_log", "window:w=8:alibi"])
def test_model_on_sdpa_matches_naive(spec):
    torch.manual_seed(0)
    m = GPT(GPTConfig.preset("tiny", pe=spec, max_len=64)).eval()
    idx = torch.randint(0, 256, (2, 300))
    with torch.no_grad():
        torch.testing.assert_close(m(idx, path="sdpa"), m(idx, path="naive"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", ["alibi", "t5", "kerple_log", "kerple_power:per_layer=true", "sandwich"])
@pytest.mark.parametrize("T", [7, 300, 513])
def test_key_reversed_view_matches_the_dense_mask(spec, T):
    "sdpa on keys read last-to-first with the Toeplitz view gives the dense mask's outputs and every gradient."
    pe = _perturbed(spec)
    pos = lx.Positions.arange(2, T)
    view = lx.additive_mask(pe, pos, reversed_keys=True)
    assert isinstance(view, lx.KeyReversedMask) and view.view.untyped_storage().nbytes() < 8 * 4 * 2 * T * 4
    torch.testing.assert_close(view.view.flip(-1), lx.additive_mask(pe, pos))
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, T, 8, generator=g, requires_grad=True) for _ in range(3))
    outs, grads = [], []
    for reversed_keys in (False, True):
        for t in (q, k, v): t.grad = None
        pe.zero_grad()
        m = lx.additive_mask(pe, pos, reversed_keys=reversed_keys)
        with torch.no_grad():
            outs.append(lx._sdpa_masked(q, k, v, m, True, 8 ** -0.5, 256))   # the blocked inference path
        y = lx._sdpa_masked(q, k, v, m, True, 8 ** -0.5, 256)                 # the training path
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)] + [p.grad.clone() for p in pe.parameters() if p.grad is not None])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    assert len(grads[0]) == len(grads[1])
    for a, b in zip(*grads): torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
