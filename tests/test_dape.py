"""DAPE and CDAPE (chapters 40, 41): the equations, no leakage, chunked = naive, costs, ΔP, Proposition 3."""
import math

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from lengthx.attention import PE, PEContext, Positions, attention, build_pe, causal_mask, check_paths_agree, pe_examples
from lengthx.model import GPT, GPTConfig
from lengthx.pe.cdape import CDAPE, ScoreConv, delta_p, tril_masked
from lengthx.pe.dape import DAPE, DAPE_FIRE_SLOPE, DAPE_VARIANTS, ScoreMLP, dape_flops, dape_logits, leaky_fire

H = 4


class ToyBias(PE):
    "B_ij = −2^(−h)·|i−j|: an additive PE owned by this test."
    def bias(self, pos_q, pos_k, layer=0):
        d = (pos_q.token[0][:, None] - pos_k.token[0][None, :]).abs().float()
        return -(2.0 ** -torch.arange(1, self.ctx.n_heads + 1.0))[:, None, None] * d


class NoTrilCDAPE(CDAPE):
    "The leaky variant (appendix G): the convolution sees future keys."
    def refine(self, scores, bias, mask, layer=0): return super().refine(scores, bias, None, layer)


def ctx(n_layers=1, h=H):
    return PEContext(n_heads=h, head_dim=8, d_model=8 * h, n_layers=n_layers)


def qkv(T=32, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, 8, generator=g) for _ in range(3)]


def future_change(pe, t=20, T=32):
    "Largest change of attention outputs at positions <= t when keys and values after t change."
    q, k, v = qkv(T)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, t + 1:] = torch.randn_like(k2[:, :, t + 1:]); v2[:, :, t + 1:] += 1.0
    pos = Positions.arange(2, T)
    with torch.no_grad():
        a, b = attention(q, k, v, pe, pos, path="naive"), attention(q, k2, v2, pe, pos, path="naive")
    return (a[:, :, :t + 1] - b[:, :, :t + 1]).abs().max().item(), (a[:, :, t + 1:] - b[:, :, t + 1:]).abs().max().item()


# ---- the equations --------------------------------------------------------------------------------------------

def test_split_mlp_equals_concatenated_mlp():
    torch.manual_seed(0)
    f = ScoreMLP(2 * H, 16, H)
    s, b = torch.randn(3, H, 5, 7), torch.randn(1, H, 5, 7)
    x = rearrange(torch.cat([s, b.expand_as(s)], 1), "b c q k -> b q k c")
    ref = rearrange(f.fc2(F.leaky_relu(f.fc1(x), 0.01)), "b q k h -> b h q k")
    assert torch.allclose(f(s, b), ref, atol=1e-6)
    with pytest.raises(ValueError, match="channels"):
        f(s)


@pytest.mark.parametrize("variant", DAPE_VARIANTS)
def test_refine_implements_each_equation(variant):
    torch.manual_seed(0)
    pe = DAPE(ctx(), ToyBias(ctx()), variant)
    s = torch.randn(2, H, 9, 9)
    b = ToyBias(ctx()).bias(Positions.arange(1, 9), Positions.arange(1, 9))
    f = pe.f[0]
    expected = {"concat": lambda: s + f(s, b[None]), "concat_residual": lambda: s + b + f(s, b[None]),
                "add_residual": lambda: s + b + f(s + b)}[variant]()
    assert torch.allclose(pe.refine(s + b, b, None), expected, atol=1e-5)
    assert torch.allclose(dape_logits(s, b, f, variant), expected, atol=1e-5)
    # a per-sequence bias [B, H, Tq, Tk] broadcasts the same way
    assert torch.allclose(pe.refine(s + b, b.expand(2, -1, -1, -1), None), expected, atol=1e-5)


def test_residual_minus_concat_is_the_bias():
    torch.manual_seed(0)
    f = ScoreMLP(2 * H, 8, H)
    s, b = torch.randn(2, H, 6, 6), torch.randn(H, 6, 6)
    assert torch.allclose(dape_logits(s, b, f, "concat_residual") - dape_logits(s, b, f, "concat"), b.expand_as(s), atol=1e-5)


@pytest.mark.parametrize("spec", ["alibi", "kerple_log", "nope", "rope"])
def test_zero_f_is_exactly_the_base(spec):
    q, k, v = qkv(40)
    pos = Positions.arange(2, 40)
    torch.manual_seed(1); base = build_pe(spec, n_heads=H, head_dim=8, max_len=64)
    for family in ("dape", "cdape"):
        torch.manual_seed(1); pe = build_pe(f"{family}:{spec}", n_heads=H, head_dim=8, max_len=64)
        with torch.no_grad():
            for f in pe.f:
                last = f.fc2 if isinstance(f, ScoreMLP) else f.conv2
                for p in last.parameters(): p.zero_()
        for path in ("naive", "chunked"):
            assert torch.equal(attention(q, k, v, pe, pos, path=path, block=16), attention(q, k, v, base, pos, path=path, block=16))


def test_dape_fire_uses_the_dape_codes_leaky_relu():
    "dape:fire and cdape:fire put LeakyReLU(0.01) in FIRE's MLP (the DAPE repo's FIRE_C / FIRE_DAPEV2); plain fire keeps ReLU."
    assert type(build_pe("fire", n_heads=H, head_dim=8).mlp[1]) is nn.ReLU
    for spec in ("dape:fire", "cdape:fire"):
        act = build_pe(spec, n_heads=H, head_dim=8).inner.mlp[1]
        assert type(act) is nn.LeakyReLU and act.negative_slope == DAPE_FIRE_SLOPE == 0.01
    torch.manual_seed(0)
    pe = build_pe("dape:fire", n_heads=H, head_dim=8, max_len=32)
    fire, pos = pe.inner, Positions.arange(1, 20)
    x = fire.normalized(pos, pos)[0]                                            # [Tq, Tk]
    w1, b1, w2, b2 = fire.mlp[0].weight[:, 0], fire.mlp[0].bias, fire.mlp[2].weight, fire.mlp[2].bias
    by_hand = lambda act: torch.einsum("qku,hu->hqk", act(x[..., None] * w1 + b1), w2) + b2[:, None, None]
    leaky = by_hand(lambda t: F.leaky_relu(t, 0.01))
    assert torch.allclose(pe.bias(pos, pos), leaky, atol=1e-5)
    assert not torch.allclose(leaky, by_hand(F.relu), atol=1e-6)                # the activation matters here
    for cls in (DAPE, CDAPE):
        assert type(cls(ctx(), build_pe("fire", n_heads=H, head_dim=8), fire_slope=None).inner.mlp[1]) is nn.ReLU
    alibi = build_pe("alibi", n_heads=H, head_dim=8)
    assert leaky_fire(alibi) is alibi                                           # other PEs pass unchanged


def test_dape_mlp_is_elementwise():
    torch.manual_seed(0)
    f = ScoreMLP(2 * H, 8, H)
    s = torch.randn(1, H, 6, 6, requires_grad=True); b = torch.randn(1, H, 6, 6, requires_grad=True)
    f(s, b)[0, 1, 2, 3].backward()
    for g in (s.grad, b.grad):
        assert {tuple(i) for i in g[0].nonzero()[:, 1:].tolist()} == {(2, 3)}


def test_cdape_k1_equals_dape():
    torch.manual_seed(0)
    c, d = CDAPE(ctx(), ToyBias(ctx()), k=1, width=8), DAPE(ctx(), ToyBias(ctx()), width=8)
    with torch.no_grad():
        for conv, lin in ((c.f[0].conv1, d.f[0].fc1), (c.f[0].conv2, d.f[0].fc2)):
            lin.weight.copy_(conv.weight[:, :, 0, 0]); lin.bias.copy_(conv.bias)
    s, b = torch.randn(2, H, 10, 10), ToyBias(ctx()).bias(Positions.arange(1, 10), Positions.arange(1, 10))
    m = causal_mask(10, 10)
    with torch.no_grad():
        assert torch.allclose(c.refine(s + b, b, m)[..., m], d.refine(s + b, b, m)[..., m], atol=1e-5)


def test_cdape_receptive_field_stays_in_row_and_left_of_diagonal():
    torch.manual_seed(0)
    for k in (3, 5):
        pe = CDAPE(ctx(), PE(ctx()), k=k)
        s = torch.randn(1, H, 12, 12, requires_grad=True)
        pe.refine(s, None, causal_mask(12, 12))[0, 0, 8, 8].backward()
        rows, cols = s.grad[0].abs().sum(0).nonzero().unbind(1)
        assert set(rows.tolist()) == {8} and set(cols.tolist()) == set(range(8 - 2 * (k // 2), 9))


def test_tril_masked():
    x = torch.ones(1, 2, 3, 5)
    m = causal_mask(3, 5, q_offset=2)
    assert torch.equal(tril_masked(x, m)[0, 0], m.float()) and tril_masked(x, None) is x


# ---- no leakage, chunked = naive ------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda c: DAPE(c, ToyBias(c)), lambda c: DAPE(c, PE(c)),
                                  lambda c: CDAPE(c, ToyBias(c)), lambda c: CDAPE(c, PE(c), k=5)])
def test_future_keys_do_not_change_past_outputs(make):
    torch.manual_seed(0)
    past, future = future_change(make(ctx()))
    assert past < 1e-6 and future > 1e-3


def test_no_tril_variant_leaks():
    torch.manual_seed(0)
    real, leaky = CDAPE(ctx(), ToyBias(ctx())), NoTrilCDAPE(ctx(), ToyBias(ctx()))
    leaky.load_state_dict(real.state_dict())
    assert future_change(real)[0] < 1e-6
    assert future_change(leaky)[0] > 1e-3
    # the leak is at the boundary: position t reads q_t·k_{t+1}
    assert "notrilcdape" not in pe_examples("all") and all("notril" not in s for s in pe_examples("all"))


@pytest.mark.parametrize("spec", ["dape:kerple_log", "dape:variant=concat:alibi", "dape:variant=add_residual:t5",
                                  "cdape:k=3:kerple_log", "cdape:k=5:alibi", "cdape:rope"])
@pytest.mark.parametrize("block", [1, 7, 16])
def test_chunked_equals_naive(spec, block):
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=H, head_dim=8, max_len=64).eval()
    q, k, v = qkv(37)
    pos = Positions.arange(2, 37)
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")
        assert (attention(q, k, v, pe, pos, path="chunked", block=block) - ref).abs().max() <= 1e-5


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log"])
def test_model_chunked_equals_naive_beyond_training_length(spec):
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=32, pe=spec, max_len=16)).eval()
    idx = torch.randint(0, 256, (1, 100))
    with torch.no_grad():
        assert (m(idx, path="chunked") - m(idx, path="naive")).abs().max() <= 1e-5


def test_prefix_logits_do_not_depend_on_later_tokens():
    "The second tril: the last token of a prefix gets the same output as inside the longer sequence."
    torch.manual_seed(0)
    pe = CDAPE(ctx(), ToyBias(ctx()))
    q, k, v = qkv(30, B=1)
    pos = Positions.arange(1, 30)
    with torch.no_grad():
        full = attention(q, k, v, pe, pos, path="naive")
        pre = attention(q[:, :, :21], k[:, :, :21], v[:, :, :21], pe, pos[:21], path="naive")
    assert (pre - full[:, :, :21]).abs().max() < 1e-6


@pytest.mark.parametrize("spec", [s for s in pe_examples("all") if s.split(":")[0] in ("dape", "cdape")])
def test_every_example_spec_paths_agree(spec):
    assert check_paths_agree(spec)["chunked"] <= 1e-5


# ---- registry, options, errors --------------------------------------------------------------------------------

def test_registry_examples_and_shapes():
    ex = pe_examples("all")
    assert "dape:kerple_log" in pe_examples("default") and "cdape:k=3:kerple_log" in pe_examples("default")
    assert {"dape:alibi", "dape:fire", "dape:t5", "dape:nope", "dape:rope", "cdape:k=3:alibi", "cdape:nope", "cdape:rope"} <= set(ex)
    pe = build_pe("dape:kerple_log", n_heads=8, head_dim=8, n_layers=3)
    assert len(pe.f) == 3 and pe.f[0].fc1.in_features == 16 and pe.f[0].fc1.out_features == 32 and pe.f[0].fc2.out_features == 8
    assert build_pe("dape:nope", n_heads=8, head_dim=8).f[0].fc1.in_features == 8
    c = build_pe("cdape:k=5:width=16:alibi", n_heads=4, head_dim=8, n_layers=2)
    assert isinstance(c, CDAPE) and c.f[1].conv1.kernel_size == (1, 5) and c.f[1].conv1.padding == (0, 2)
    assert c.f[1].conv1.in_channels == 8 and c.f[1].conv1.out_channels == 16
    assert build_pe("cdape:nope", n_heads=4, head_dim=8).k == 3
    assert c.uses_refine and c.uses_bias and not build_pe("dape:rope", n_heads=4, head_dim=8).uses_bias


def test_clear_errors():
    with pytest.raises(ValueError, match="variant"):
        build_pe("dape:variant=sum:alibi", n_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="odd kernel"):
        build_pe("cdape:k=4:alibi", n_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="already refines"):
        build_pe("dape:cdape:alibi", n_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="wraps another PE"):
        build_pe("dape", n_heads=4, head_dim=8)
    pe = build_pe("dape:alibi", n_heads=4, head_dim=8, n_layers=2)
    with pytest.raises(IndexError, match="2 layers"):
        pe.refine(torch.zeros(1, 4, 3, 3), torch.zeros(4, 3, 3), None, layer=2)
    with pytest.raises(ValueError, match="received none"):
        pe.refine(torch.zeros(1, 4, 3, 3), None, None)


def test_every_layer_has_its_own_f_and_gets_gradients():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=32, pe="cdape:k=3:kerple_log", max_len=16))
    idx = torch.randint(0, 256, (2, 16))
    m(idx, idx)[1].backward()
    assert m.pe.f[0] is not m.pe.f[1]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.pe.f.parameters())


# ---- cost --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("b,h,n,d", [(1, 4, 32, 32), (3, 8, 20, 16)])
def test_dape_flops_formula_matches_counter(b, h, n, d):
    from torch.utils.flop_counter import FlopCounterMode
    c = ctx(h=h)
    s, bias = torch.randn(b, h, n, n), ToyBias(c).bias(Positions.arange(1, n), Positions.arange(1, n))
    for pe, args, with_bias in ((DAPE(c, ToyBias(c), width=d), (s + bias, bias, None), True),
                                (DAPE(c, PE(c), width=d), (s, None, None), False)):
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            pe.refine(*args)
        assert fc.get_total_flops() == dape_flops(b, h, n, n, d, with_bias=with_bias)
    # the O(h·N²·D) scaling: doubling N quadruples, doubling D doubles
    assert dape_flops(1, h, 2 * n, 2 * n, d) == 4 * dape_flops(1, h, n, n, d)
    assert dape_flops(1, h, n, n, 2 * d) == 2 * dape_flops(1, h, n, n, d)


# ---- ΔP -----------------------------------------------------------------------------------------------------------

class Bigram(nn.Module):
    def __init__(self):
        super().__init__(); self.table = nn.Parameter(torch.randn(256, 256))
    def forward(self, idx): return self.table[idx]


def test_delta_p_known_values():
    torch.manual_seed(0)
    tokens = torch.randint(0, 256, (3000,))
    for L, r in delta_p(Bigram(), tokens, [32, 64, 200], train_len=32).items():   # no context: no gain
        assert r["delta"] == 0.0 and r["full"] == r["local"] > 1
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="alibi", max_len=32)).eval()
    r = delta_p(m, tokens, [32, 96], train_len=32)
    assert r[32]["delta"] == 0.0 and r[96]["delta"] != 0.0
    assert math.isclose(r[96]["delta"], r[96]["local"] - r[96]["full"])
    with pytest.raises(ValueError, match="shorter"):
        delta_p(m, tokens, [16], train_len=32)
    with pytest.raises(ValueError, match="tokens"):
        delta_p(m, tokens[:50], [64], train_len=32)


def test_delta_p_anchor_scores_the_same_targets_at_every_length():
    "With an anchor, every length scores the same last train_len targets: the Bigram's per-token perplexity is equal at every L (without it, windows move)."
    torch.manual_seed(0)
    tokens = torch.randint(0, 256, (3000,))
    anchored = delta_p(Bigram(), tokens, [32, 64, 200], train_len=32, n_windows=5, anchor=200)
    assert len({r["full"] for r in anchored.values()}) == 1          # a context-free model: same targets, same perplexity
    free = delta_p(Bigram(), tokens, [32, 64, 200], train_len=32, n_windows=5)
    assert len({r["full"] for r in free.values()}) > 1                # unanchored windows score other bytes per length
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="alibi", max_len=32)).eval()
    r = delta_p(m, tokens, [32, 96], train_len=32, n_windows=3, anchor=96)
    assert r[32]["local"] == r[96]["local"] and r[32]["full"] == r[32]["local"]
    with pytest.raises(ValueError, match="anchor"):
        delta_p(m, tokens, [128], train_len=32, anchor=96)


# ---- Proposition 3 ----------------------------------------------------------------------------------------------

def test_proposition3_one_layer_cdape_recall_without_pe():
    "W_Q = W_K = W_V = I, kernel [1, −1] on keys (j−1, j): the trigger x_N = x_1 attends to x_2."
    torch.manual_seed(0)
    d, N = 256, 16
    E = F.normalize(torch.randn(40, d), dim=-1) * math.sqrt(12 * math.sqrt(d))
    X = E[torch.cat([torch.tensor([0, 1]), torch.randperm(38)[:N - 3] + 2, torch.tensor([0])])]
    c = PEContext(n_heads=1, head_dim=d, d_model=d)
    pe = CDAPE(c, PE(c), k=3, width=2)
    a = pe.f[0].slope
    with torch.no_grad():
        for p in pe.parameters(): p.zero_()
        pe.f[0].conv1.weight[0, 0, 0] = torch.tensor([1.0, -2.0, 0.0])     # S + f(S) = S_{j-1} − S_j
        pe.f[0].conv1.weight[1, 0, 0] = torch.tensor([-1.0, 2.0, 0.0])
        pe.f[0].conv2.weight[0, 0, 0, 1], pe.f[0].conv2.weight[0, 1, 0, 1] = 1 / (1 + a), -1 / (1 + a)
        out, w = attention(X[None, None], X[None, None], X[None, None], pe, Positions.arange(1, N), path="naive", return_weights=True)
        _, w0 = attention(X[None, None], X[None, None], X[None, None], PE(c), Positions.arange(1, N), path="naive", return_weights=True)
    assert w[0, 0, -1].argmax() == 1 and w[0, 0, -1, 1] > 0.9
    assert F.cosine_similarity(out[0, 0, -1], X[1], dim=0) > 0.9
    assert w0[0, 0, -1, 1] < 0.01          # without the convolution the trigger does not look at x_2


def test_fire_slope_is_a_spec_option():
    "`dape:fire_slope=0:fire` is FIRE's own ReLU (slope 0); the default is the DAPE code's LeakyReLU(0.01)."
    for spec in ("dape:fire_slope=0:fire", "cdape:fire_slope=0:fire"):
        act = build_pe(spec, n_heads=H, head_dim=8).inner.mlp[1]
        assert isinstance(act, (nn.ReLU, nn.LeakyReLU)) and getattr(act, "negative_slope", 0.0) == 0.0
    assert build_pe("dape:fire", n_heads=H, head_dim=8).inner.mlp[1].negative_slope == 0.01
