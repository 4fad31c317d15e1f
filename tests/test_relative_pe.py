"""Method-specific properties of the learned and content-dependent relative encodings: Shaw et al. (key and
value terms, the `value` hook), Transformer-XL (the relative shift), CoPE (gated counts), DAPE's f(B)-only
ablation and the trained Gaussian kernel. The shared contract (causality, paths, 8x length, gradients) is in
test_pe_contract.py; run it with `-k "shaw or transformer_xl or cope or dape_fb or kerple_gauss"`."""
import math

import pytest
import torch

import lengthx.attention as lx
from lengthx.attention import Positions, attention, build_pe, pick_path
from lengthx.model import GPT, GPTConfig
from lengthx.pe.cope import cope_gates, cope_positions, interpolate_positions
from lengthx.pe.kerple import cpd_margin, gaussian_kernel, gram
from lengthx.pe.relative import rel_skew, shaw_index, sinusoid_table

CONTENT = ["shaw", "shaw:value=false", "transformer_xl", "transformer_xl:untie=true", "cope"]


def qkv(B=2, H=4, T=24, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g) for _ in range(3)]


def perturbed(spec, **kw):
    "A PE whose parameters are moved off their initialization (CoPE's table starts at zero)."
    torch.manual_seed(1)
    pe = build_pe(spec, n_heads=4, head_dim=8, **{"max_len": 64, **kw})
    with torch.no_grad():
        for p in pe.parameters(): p.add_(0.3 * torch.randn_like(p))
    return pe


@pytest.mark.parametrize("spec", CONTENT)
def test_logits_depend_on_offsets_only(spec):
    "Shifting every position by a constant leaves the logits unchanged: a relative encoding."
    pe = perturbed(spec)
    q, k, _ = qkv()
    a, b = Positions.arange(2, 24), Positions.arange(2, 24, offset=37)
    torch.testing.assert_close(pe.logits(q, k, a, a, 0.3), pe.logits(q, k, b, b, 0.3))


@pytest.mark.parametrize("spec", CONTENT)
def test_fused_paths_refuse_and_auto_avoids_them(spec):
    pe = perturbed(spec)
    q, k, v = qkv()
    for path in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="naive"):
            attention(q, k, v, pe, Positions.arange(2, 24), path=path)
    assert pick_path(pe, 100, torch.device("cpu")) == "naive"
    assert pick_path(pe, 5000, torch.device("cpu")) == "chunked"
    assert pick_path(pe, 5000, torch.device("cuda")) == "chunked"


@pytest.mark.parametrize("spec", CONTENT + ["dape_fb:kerple_log", "kerple_gauss"])
def test_chunked_equals_naive_long(spec):
    "Blocks of queries against the keys they see give the naive result at a length several blocks long."
    pe = perturbed(spec)
    q, k, v = qkv(B=1, T=300)
    pos = Positions.arange(1, 300)
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")
        torch.testing.assert_close(attention(q, k, v, pe, pos, path="chunked", block=64), ref, atol=2e-5, rtol=1e-5)


# ---------------------------------------------------------------- Shaw
def test_shaw_clip_index():
    idx = shaw_index(Positions.arange(1, 9), Positions.arange(1, 9), 2)[0]
    for i in range(9):
        for j in range(9):
            assert idx[i, j] == max(-2, min(2, j - i)) + 2


def test_shaw_keys_beyond_the_clip_look_alike():
    "Two keys farther than k from the query get the same position term: only content separates them."
    pe = perturbed("shaw:clip=3:value=false")
    q, k, _ = qkv(T=12)
    k[:, :, 1] = k[:, :, 0]                              # same content at distances 11 and 10 from the last query
    s = pe.logits(q, k, Positions.arange(2, 12), Positions.arange(2, 12), 1.0)
    torch.testing.assert_close(s[:, :, -1, 0], s[:, :, -1, 1])
    k[:, :, 9] = k[:, :, 8]                              # distances 2 and 3: inside the clip, different terms
    s = pe.logits(q, k, Positions.arange(2, 12), Positions.arange(2, 12), 1.0)
    assert (s[:, :, -1, 8] - s[:, :, -1, 9]).abs().max() > 1e-3


def test_shaw_output_equals_its_definition():
    "z_i = Σ_j α_ij (v_j + a^V_ij), α from q·(k + a^K)/√d, written pair by pair (causal)."
    q, k, v = qkv(B=1, H=2, T=7, D=4)
    pe = build_pe("shaw:clip=2", n_heads=2, head_dim=4)
    with torch.no_grad(): pe.w_k.normal_(); pe.w_v.normal_()
    z = torch.zeros_like(q)
    for i in range(7):
        c = [max(-2, min(2, j - i)) + 2 for j in range(i + 1)]
        e = torch.stack([(q[0, :, i] * (k[0, :, j] + pe.w_k[0, c[j]])).sum(-1) / 2.0 for j in range(i + 1)], -1)
        a = e.softmax(-1)                                                         # [H, i+1]
        z[0, :, i] = sum(a[:, j, None] * (v[0, :, j] + pe.w_v[0, c[j]]) for j in range(i + 1))
    for path in ("naive", "chunked"):
        torch.testing.assert_close(attention(q, k, v, pe, Positions.arange(1, 7), path=path, block=3), z)


def test_value_hook_through_wrappers():
    "A wrapper forwards `value`: DAPE around Shaw with f = 0 is Shaw; without the hook the output would differ."
    torch.manual_seed(0)
    shaw = build_pe("shaw:clip=3", n_heads=4, head_dim=8)
    torch.manual_seed(0)
    dape = build_pe("dape:shaw:clip=3", n_heads=4, head_dim=8)
    with torch.no_grad():
        for f in dape.f:
            for p in f.fc2.parameters(): p.zero_()
    assert dape.uses_value and dape.uses_logits
    q, k, v = qkv()
    pos = Positions.arange(2, 24)
    torch.testing.assert_close(attention(q, k, v, dape, pos), attention(q, k, v, shaw, pos))
    assert not lx.build_pe("shaw:value=false", n_heads=4, head_dim=8).uses_value
    assert not lx.build_pe("rope", n_heads=4, head_dim=8).uses_value


def test_shaw_key_only_has_no_value_parameters():
    assert sum(p.numel() for p in build_pe("shaw:clip=4:value=false", n_heads=4, head_dim=8, n_layers=3).parameters()) == 3 * 9 * 8
    assert sum(p.numel() for p in build_pe("shaw:clip=4", n_heads=4, head_dim=8, n_layers=3).parameters()) == 2 * 3 * 9 * 8


# ---------------------------------------------------------------- Transformer-XL
@pytest.mark.parametrize("tq,tk", [(1, 1), (1, 9), (5, 5), (4, 11), (9, 3)])
def test_rel_skew_is_direct_lookup(tq, tk):
    x = torch.randn(2, tq, tq + tk - 1)
    out = rel_skew(x, tk)
    for i in range(tq):
        for j in range(tk):
            assert torch.equal(out[:, i, j], x[:, i, j + tq - 1 - i])


def test_transformer_xl_shift_and_lookup_branches_agree(monkeypatch):
    "Each position set takes the branch its shape calls for, and every branch equals (q+v)·W_R R_{i−j} pair by pair."
    pe = perturbed("transformer_xl")
    q, _, _ = qkv(T=10)
    spread = torch.tensor([0, 1, 4, 5, 9, 10, 11, 20, 21, 40])
    cases = {   # position set -> the einsum its branch runs
        "bhqd,hnd->bhqn": Positions.arange(2, 10, offset=3),                      # consecutive: the shift
        "bhqd,hqkd->bhqk": Positions(spread.expand(2, 10)),                        # spread wide, shared rows: W_R R per pair, once
        "bhqd,hbqkd->bhqk": Positions(torch.stack([spread, torch.tensor([3, 7, 8, 15, 30, 33, 50, 60, 61, 90])])),  # per row
        "gather": Positions(torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 10]).expand(2, 10)),   # one gap: q against each distance
    }
    seen, einsum = [], torch.einsum
    monkeypatch.setattr(torch, "einsum", lambda eq, *a: (seen.append(eq), einsum(eq, *a))[1])
    for branch, pos in cases.items():
        seen.clear()
        got = pe.position_scores(q, pos, pos)
        assert seen == ["bhqd,hnd->bhqn" if branch == "gather" else branch]
        want = torch.zeros_like(got)
        for b in range(q.shape[0]):
            t = pos.token[b % pos.token.shape[0]]
            for i in range(10):
                for j in range(10):
                    r = (sinusoid_table((t[i] - t[j])[None], 32) @ pe.w_r[0]).view(4, 8)
                    want[b, :, i, j] = (q[b, :, i] * r).sum(-1)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_transformer_xl_clamp():
    pe = perturbed("transformer_xl:clamp=5")
    r = pe.r_heads(torch.arange(-9, 10))
    torch.testing.assert_close(r[:, 0], r[:, 4])                   # −9 and −5
    torch.testing.assert_close(r[:, -1], r[:, -5])                 # 9 and 5
    assert (r[:, 10] - r[:, 9]).abs().max() > 1e-4                # 1 and 0 differ


def test_transformer_xl_untie_gives_layers_their_own_biases():
    pe = perturbed("transformer_xl:untie=true", n_layers=2)
    q, k, _ = qkv()
    pos = Positions.arange(2, 24)
    assert pe.u.shape == (2, 4, 8)
    with torch.no_grad(): pe.w_r[1].copy_(pe.w_r[0])               # same W_R, so only u and v differ
    assert (pe.logits(q, k, pos, pos, 1.0, 0) - pe.logits(q, k, pos, pos, 1.0, 1)).abs().max() > 1e-3


def test_transformer_xl_in_an_encoder_sees_direction():
    "Bidirectional attention: keys before and after the query at the same distance get different position terms."
    pe = perturbed("transformer_xl")
    q, _, _ = qkv(T=9)
    s = pe.position_scores(q, Positions.arange(2, 9), Positions.arange(2, 9))
    assert (s[:, :, 4, 2] - s[:, :, 4, 6]).abs().max() > 1e-3


# ---------------------------------------------------------------- CoPE
def test_cope_counts_are_gated_sums():
    g = cope_gates(torch.randn(1, 2, 8, 8), torch.ones(8, 8).tril())
    p = cope_positions(g)
    for i in range(8):
        for j in range(i + 1):
            torch.testing.assert_close(p[..., i, j], g[..., i, j:i + 1].sum(-1))


def test_cope_with_open_gates_is_a_learned_distance_embedding():
    "All gates 1: p_ij = i − j + 1 and the position term is q_i·e[min(i − j + 1, npos − 1)]."
    T, npos = 9, 6
    p = cope_positions(torch.ones(T, T).tril()[None, None]).clamp(max=npos - 1)
    z = torch.randn(1, 1, T, npos)
    term = interpolate_positions(z, p)
    for i in range(T):
        for j in range(i + 1):
            assert term[0, 0, i, j] == z[0, 0, i, min(i - j + 1, npos - 1)]


def test_cope_gradients_reach_table_and_gates():
    pe = perturbed("cope")
    q, k, v = (t.requires_grad_() for t in qkv(T=16))
    attention(q, k, v, pe, Positions.arange(2, 16)).square().sum().backward()
    assert pe.emb.grad.abs().sum() > 0 and k.grad.abs().sum() > 0
    kk = k.detach().clone().requires_grad_()                        # the counts alone depend on k through the gates
    pos = Positions.arange(2, 16)
    pe.positions(torch.einsum("bhqd,bhkd->bhqk", q.detach(), kk) * 0.3, pos, pos).sum().backward()
    assert kk.grad.abs().sum() > 0


def test_cope_encoder_keys_ahead_count_nothing():
    pe = perturbed("cope")
    q, k, _ = qkv(T=10)
    pos = Positions.arange(2, 10)
    p = pe.positions(torch.einsum("bhqd,bhkd->bhqk", q, k) * 0.3, pos, pos)
    upper = torch.ones(10, 10).triu(1).bool()
    assert (p[..., upper] == 0).all() and (p[..., ~upper] > 0).all()
    m = GPT(GPTConfig(n_layer=1, n_head=4, d_model=32, pe="cope", max_len=16, causal=False)).eval()
    assert torch.isfinite(m(torch.randint(0, 256, (1, 40)))).all()


def test_cope_clamps_beyond_npos():
    pe = perturbed("cope:npos=4")
    q, k, _ = qkv(T=30)
    pos = Positions.arange(2, 30)
    assert pe.positions(torch.full((2, 4, 30, 30), 9.0), pos, pos).max() == 3


# ---------------------------------------------------------------- DAPE f(B) only
def test_dape_fb_ignores_the_scores():
    pe = perturbed("dape_fb:kerple_log", n_layers=2)
    pos = Positions.arange(1, 20)
    b = pe.inner.bias(pos, pos)
    s1, s2 = torch.randn(2, 4, 20, 20), 10 * torch.randn(2, 4, 20, 20)
    add = lambda s: pe.refine(s + b, b, None, layer=1) - (s + b)
    torch.testing.assert_close(add(s1), add(s2))
    assert add(s1).abs().max() > 1e-4


def test_dape_fb_needs_a_bias():
    with pytest.raises(ValueError, match="bias"):
        build_pe("dape_fb:rope", n_heads=4, head_dim=8)


# ---------------------------------------------------------------- Gaussian kernel
def test_gaussian_is_pd_bounded_and_clamped():
    pe = build_pe("kerple_gauss", n_heads=4, head_dim=8)
    pos = Positions.arange(1, 50)
    b = pe.bias(pos, pos)
    r1 = pe.params["r1"]
    assert (b >= 0).all() and (b <= r1 + 1e-6).all() and (b[:, 0, 1] > 0).all()   # in [0, r1] (far entries underflow to 0)
    torch.testing.assert_close(b.diagonal(dim1=-2, dim2=-1), r1[:, :, 0].expand(4, 50))
    K = gram(lambda d: gaussian_kernel(d, 3.0, 0.2), torch.arange(40).double())
    assert cpd_margin(K) > -1e-9 and torch.linalg.eigvalsh(K).min() > -1e-9
    with torch.no_grad(): pe.params["r2"].fill_(-1.0)
    pe.bias(pos, pos)
    assert (pe.params["r2"] >= 0.0099).all()


# ---------------------------------------------------------------- models and checkpoints
@pytest.mark.parametrize("spec", ["shaw", "transformer_xl", "cope", "dape_fb:kerple_log", "kerple_gauss"])
def test_checkpoint_round_trip(spec, tmp_path):
    from lengthx.train import TrainConfig, load_model, train
    cfg = GPTConfig(n_layer=2, n_head=4, d_model=32, pe=spec, max_len=16)
    tokens = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0))
    model, _ = train(cfg, TrainConfig(steps=3, batch_size=2, length=16, warmup=1, seed=0, device="cpu"), tokens=tokens,
                     run_dir=tmp_path / "run", progress=False)
    again = load_model(tmp_path / "run")
    idx = torch.randint(0, 256, (1, 40))
    with torch.no_grad():
        torch.testing.assert_close(again(idx), model.eval()(idx))
    torch.manual_seed(0)                                            # train() seeds the same way before building
    init = GPT(cfg).pe.state_dict()
    trained = again.pe.state_dict()
    assert trained and any(not torch.equal(trained[n], init[n]) for n in init)   # the PE's parameters were trained and saved


def test_bipe_passes_segment_positions_to_the_value_term():
    "BiPE around Shaw: the key and the value term both read segment indices, not token positions."
    torch.manual_seed(0)
    bipe = build_pe("bipe:shaw:clip=2", n_heads=4, head_dim=8, max_len=64)
    assert bipe.uses_value and bipe.uses_logits
    ids = torch.randint(0, 256, (2, 24))
    ids[:, ::4] = 10                                                   # a separator every 4 tokens: 6 segments
    pos = bipe.make_positions(ids)
    w = torch.rand(2, 4, 24, 24).softmax(-1)
    seg = Positions(pos.segment)
    torch.testing.assert_close(bipe.value(w, None, pos, pos), bipe.inner.value(w, None, seg, seg))
    assert (bipe.value(w, None, pos, pos) - bipe.inner.value(w, None, pos, pos)).abs().max() > 1e-4


def test_cope_counts_in_float32_under_bfloat16():
    "Counts of hundreds of gates keep their fraction: positions are float32 whatever the scores' dtype."
    pe = perturbed("cope", max_len=1024)
    s = torch.randn(1, 2, 400, 400)
    pos = Positions.arange(1, 400)
    p16, p32 = pe.positions(s.bfloat16(), pos, pos), pe.positions(s, pos, pos)
    assert p16.dtype == torch.float32
    assert (p16 - p32).abs().max() < 0.05 * p32.max() and (p16 - p32).abs().max() < 2.0   # only the scores' rounding
