"""Additive-bias PEs: T5 buckets, ALiBi slopes, Sandwich, FIRE, randomized positions (chapters 20, 22, 23)."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.model import GPT, GPTConfig
from lengthx.pe.absolute import sinusoidal_table
from lengthx.pe.bias import alibi_slopes, relative_position_bucket, relative_positions
from lengthx.pe.fire import fire_normalized_distance, sandwich_kernel, sandwich_ratios
from lengthx.pe.random import randomized_positions


# ---------------------------------------------------------------- T5 buckets
def _bucket_scalar(r, bidirectional, num_buckets=32, max_distance=128):
    "Independent scalar form of the Mesh-TF/HF rule, in Python floats."
    base = 0
    if bidirectional:
        num_buckets //= 2
        base = num_buckets if r > 0 else 0
        n = abs(r)
    else:
        n = max(-r, 0)
    exact = num_buckets // 2
    if n < exact:
        return base + n
    return base + min(num_buckets - 1, exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)))


@pytest.mark.parametrize("r, want", [(0, 0), (-1, 1), (-15, 15), (-16, 16), (-32, 21), (-64, 26), (-127, 31),
                                     (-128, 31), (-100_000, 31), (1, 0), (500, 0)])
def test_t5_causal_bucket_values(r, want):
    assert relative_position_bucket(torch.tensor(r), bidirectional=False).item() == want


@pytest.mark.parametrize("r, want", [(0, 0), (-1, 1), (1, 17), (-7, 7), (7, 23), (-8, 8), (8, 24),
                                     (-200, 15), (200, 31), (-10**6, 15), (10**6, 31)])
def test_t5_bidirectional_bucket_values(r, want):
    assert relative_position_bucket(torch.tensor(r), bidirectional=True).item() == want


@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("nb, md", [(32, 128), (16, 32), (64, 512)])
def test_t5_buckets_match_scalar_rule(bi, nb, md):
    rel = torch.arange(-3000, 3001)
    got = relative_position_bucket(rel, bidirectional=bi, num_buckets=nb, max_distance=md).tolist()
    assert got == [_bucket_scalar(r, bi, nb, md) for r in rel.tolist()]
    assert 0 <= min(got) and max(got) == nb - 1


def test_t5_causal_buckets_monotone_and_saturate():
    b = relative_position_bucket(-torch.arange(1000), bidirectional=False)
    assert (b.diff() >= 0).all() and (b[128:] == 31).all() and b.unique().numel() == 32


def test_t5_bucket_rejects_too_few_buckets():
    with pytest.raises(ValueError, match="num_buckets"):
        relative_position_bucket(torch.arange(3), bidirectional=True, num_buckets=2)


def test_t5_module_rejects_too_few_buckets_when_built():
    # the one bucket-count check (relative_position_bucket's) runs when the module is built, not at its first forward
    from lengthx.attention import PEContext
    from lengthx.pe.bias import T5BiasPE
    ctx = PEContext(n_heads=2, head_dim=8, d_model=16)
    with pytest.raises(ValueError, match="bidirectional buckets need num_buckets >= 4, got 3"):
        T5BiasPE(ctx, num_buckets=3, max_distance=128, bidirectional=True)
    with pytest.raises(ValueError, match="causal buckets need num_buckets >= 2, got 1"):
        T5BiasPE(ctx, num_buckets=1, max_distance=128)
    assert T5BiasPE(ctx, num_buckets=4, max_distance=128, bidirectional=True).table.weight.shape == (4, 2)


def test_t5_last_bucket_starts_below_max_distance():
    # bucket 31 begins where 16·ln(n/16)/ln 8 reaches 15, n = ceil(16·8^(15/16)) = 113, not at max_distance 128
    b = relative_position_bucket(-torch.arange(200), bidirectional=False)
    start = int((b == 31).nonzero()[0])
    assert start == math.ceil(16 * 8 ** (15 / 16)) and b[start - 1] == 30 and start < 128


def test_t5_bias_reads_table_and_is_shift_invariant():
    pe = build_pe("t5", n_heads=3, head_dim=8)
    p, p5 = Positions.arange(1, 200), Positions.arange(1, 200, offset=5)
    b = pe.bias(p, p)
    assert b.shape == (3, 200, 200) and torch.equal(b, pe.bias(p5, p5))
    assert torch.equal(b[:, 150, 150 - 40], pe.table.weight[relative_position_bucket(torch.tensor(-40), bidirectional=False)])
    assert torch.equal(b[:, 199, 0], b[:, 199, 50])  # both beyond max_distance: bucket 31


# ---------------------------------------------------------------- ALiBi
def test_alibi_slopes_official_values():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    s12 = torch.tensor([2.0 ** -k for k in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5])
    assert torch.allclose(alibi_slopes(12), s12)
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    assert alibi_slopes(6).tolist() == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    assert torch.allclose(alibi_slopes(16), torch.tensor([2.0 ** (-(k + 1) / 2) for k in range(16)]))


def test_alibi_slopes_any_head_count_and_errors():
    for n in range(1, 100):
        s = alibi_slopes(n)
        assert s.shape == (n,) and (s > 0).all() and (s < 1).all() and s.unique().numel() == n
    with pytest.raises(ValueError):
        alibi_slopes(0)


def test_alibi_bias_closed_form_on_irregular_positions():
    pe = build_pe("alibi", n_heads=4, head_dim=8)
    p = Positions(torch.tensor([[0, 2, 7, 30]]))
    b = pe.bias(p, p)
    assert b[0, 3, 1].item() == -0.25 * 28 and b[3, 2, 0].item() == -(2 ** -8) * 7 and torch.equal(b, b.transpose(1, 2))


def test_relative_positions_sign_and_batch_collapse():
    p = Positions.arange(4, 5)
    r = relative_positions(p, p)
    assert r.shape == (1, 5, 5) and r[0, 1, 4] == 3 and r[0, 4, 1] == -3   # key − query
    q = Positions(torch.tensor([[0, 1], [3, 9]]))
    assert relative_positions(q, q).shape == (2, 2, 2)


# ---------------------------------------------------------------- score_mod closed forms on non-trivial positions
@pytest.mark.parametrize("spec", ["t5", "t5:bidirectional=true", "alibi", "sandwich", "fire", "kerple_log",
                                  "kerple_power", "kerple_3log", "kerple_log:per_layer=true"])
def test_flex_score_mod_follows_positions(spec):
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=4, head_dim=8, n_layers=2, max_len=16).eval()
    tok = torch.stack([torch.tensor([0, 1, 5, 9, 10, 20, 40, 41, 60, 99]), torch.arange(3, 13)])  # rows differ
    pos = Positions(tok)
    assert pe.bias(pos, pos).shape == (2, 4, 10, 10)
    q, k, v = (torch.randn(2, 4, 10, 8) for _ in range(3))
    for layer in (0, 1):
        ref = attention(q, k, v, pe, pos, path="naive", layer=layer)
        for path in ("sdpa", "flex", "chunked"):
            assert (attention(q, k, v, pe, pos, path=path, layer=layer, block=4) - ref).abs().max() < 1e-5, path


# ---------------------------------------------------------------- Sandwich
def test_sandwich_kernel_is_sinusoid_dot_product():
    t = torch.arange(0, 300)
    P = sinusoidal_table(t, 64).double()
    S = sandwich_kernel((t[:, None] - t[None, :]).abs(), dbar=64)
    assert torch.allclose(P @ P.T, S, atol=1e-4) and torch.allclose(S.diagonal(), torch.full((300,), 32.0, dtype=torch.float64))
    assert torch.linalg.eigvalsh(S).min() > -1e-6 * S.abs().max() * 300


def test_sandwich_bias_values():
    pe = build_pe("sandwich", n_heads=4, head_dim=8)
    assert torch.allclose(sandwich_ratios(4), torch.tensor([2.0, 4.0, 6.0, 8.0], dtype=torch.float64))
    p = Positions.arange(1, 50)
    b = pe.bias(p, p)
    want = (sandwich_kernel(torch.tensor(17)) - 64) / 2.0
    assert abs(b[0, 30, 13].item() - want.item()) < 1e-5 and (b.diagonal(dim1=-2, dim2=-1) == 0).all()
    with pytest.raises(ValueError, match="even"):
        build_pe("sandwich:dbar=7", n_heads=2, head_dim=8)


# ---------------------------------------------------------------- FIRE
def test_fire_normalized_distance_known_value():
    x = fire_normalized_distance(torch.tensor(63), torch.tensor(0), 0.1, 64.0).item()
    assert abs(x - math.log(1 + 6.3) / (math.log(1 + 6.4) + 1e-6)) < 1e-6


@pytest.mark.parametrize("c, L", [(0.1, 16.0), (5.0, 3.0), (1e-3, 200.0), (-0.5, 16.0)])
def test_fire_input_in_unit_interval_at_any_length(c, L):
    for T in (16, 64, 512):
        i = torch.arange(T)
        x = fire_normalized_distance(i[:, None], i[None, :], c, L)
        vis = x[torch.ones(T, T, dtype=torch.bool).tril()]
        assert vis.min() >= 0 and vis.max() <= 1


def test_fire_relative_inside_window_and_trainable():
    torch.manual_seed(0)
    pe = build_pe("fire", n_heads=4, head_dim=8, max_len=32)
    p = Positions.arange(1, 100)
    b = pe.bias(p, p)
    assert torch.allclose(b[:, 20, 5], b[:, 30, 15], atol=1e-6) and not torch.allclose(b[:, 60, 45], b[:, 95, 80], atol=1e-5)
    b[..., torch.ones(100, 100, dtype=torch.bool).tril()].sum().backward()
    assert pe.c.grad is not None and pe.c.grad != 0 and pe.L_mult.grad is not None and pe.L_mult.grad != 0


# ---------------------------------------------------------------- randomized positions
def test_randomized_positions_sorted_distinct_in_range():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        p = randomized_positions(40, 160, g)
        assert p.dtype == torch.long and p.shape == (40,) and (p.diff() > 0).all() and 0 <= p.min() and p.max() < 160
    assert torch.equal(randomized_positions(6, 6), torch.arange(6))
    assert randomized_positions(0, 5).numel() == 0
    a = randomized_positions(10, 1000, torch.Generator().manual_seed(7))
    assert torch.equal(a, randomized_positions(10, 1000, torch.Generator().manual_seed(7)))


def test_randomized_positions_uniform_inclusion():
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(40)
    for _ in range(3000):
        counts[randomized_positions(10, 40, g)] += 1
    assert ((counts / 3000) - 0.25).abs().max() < 0.04


def test_randomized_positions_errors():
    with pytest.raises(ValueError, match="max_len"):
        randomized_positions(11, 10)
    with pytest.raises(ValueError):
        randomized_positions(-1, 10)


def test_randomized_pe_train_vs_eval():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="randomized:alibi", max_len=16))
    assert m.pe.max_len == 64
    ids = torch.zeros(3, 16, dtype=torch.long)
    m.train()
    p = m.pe.make_positions(ids)
    assert (p.token.diff(dim=1) > 0).all() and p.token.max() < 64 and torch.equal(p.token[0], p.token[1])
    m.eval()
    assert torch.equal(m.pe.make_positions(ids).token, Positions.arange(3, 16).token)
    with pytest.raises(ValueError, match="max_len"):
        build_pe("randomized:max_len=8:alibi", n_heads=2, head_dim=8).train().make_positions(ids)


def test_randomized_pe_refuses_offset_while_drawing():
    "A drawing call with offset > 0 cannot continue an earlier call's draw (it used to redraw, non-monotone across calls)."
    torch.manual_seed(0)
    ids = torch.zeros(2, 8, dtype=torch.long)
    for spec, train in (("randomized:alibi", True), ("randomized:eval_random=true:alibi", False)):
        pe = build_pe(spec, n_heads=2, head_dim=8, max_len=16).train(train)
        with pytest.raises(ValueError, match="offset=8"):
            pe.make_positions(ids, offset=8)
        assert (pe.make_positions(ids).token.diff(dim=1) > 0).all()      # offset 0 still draws
    plain = build_pe("randomized:alibi", n_heads=2, head_dim=8, max_len=16).eval()
    assert torch.equal(plain.make_positions(ids, offset=8).token, Positions.arange(2, 8, offset=8).token)


def test_fire_unrolled_score_mod_matches_naive():
    "The scalar (GPU) form of FIRE's score_mod computes the same bias as the materialized MLP."
    torch.manual_seed(0)
    pe = build_pe("fire:init_L=4", n_heads=2, head_dim=8).eval()
    pe.flex_unrolled = True
    pos = Positions(torch.tensor([[0, 2, 3, 9, 10, 30]]).expand(2, 6))
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    with torch.no_grad():
        assert (attention(q, k, v, pe, pos, path="flex") - attention(q, k, v, pe, pos, path="naive")).abs().max() < 1e-5


# ---------------------------------------------------------------- errata checks (chapters 20, 22, 23)
def test_alibi_official_key_position_bias_gives_the_same_attention():
    "The official causal ALiBi adds m·j (key position only); it equals −m|i − j| up to m·i, a row constant."
    T = 50
    al = build_pe("alibi", n_heads=4, head_dim=8)
    p = Positions.arange(1, T)
    official = al.slopes[:, None, None] * torch.arange(T, dtype=torch.float32)
    logits = torch.randn(4, T, T, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    soft = lambda b: (logits + b).masked_fill(~mask, float("-inf")).softmax(-1)
    assert torch.allclose(soft(al.bias(p, p)), soft(official), atol=1e-6)


@pytest.mark.parametrize("H", [1, 4, 8, 12, 16])
def test_sandwich_last_head_gets_one_over_H(H):
    pe = build_pe("sandwich", n_heads=H, head_dim=8)
    p = Positions.arange(1, 40)
    B = pe.bias(p, p)
    assert torch.allclose(B[-1] * H, B[0], atol=1e-4) and sandwich_ratios(H)[-1] == 8


def test_sandwich_nemo_index_range_differs_by_one_term():
    "NeMo sums i = 1..d̄/2, we sum i = 0..d̄/2−1: the difference is cos(Δ·10⁻⁴) − cos(Δ)."
    dd = torch.arange(0, 3000, dtype=torch.float64)
    nemo = torch.cos(dd[:, None] * 10000.0 ** (-2 * torch.arange(1, 65, dtype=torch.float64) / 128)).sum(-1)
    assert torch.allclose(nemo - sandwich_kernel(dd), torch.cos(dd * 1e-4) - torch.cos(dd), atol=1e-9)


@pytest.mark.parametrize("delta", [2, 10, 100, 5000])
def test_sandwich_slow_frequencies_are_the_high_indices(delta):
    "Δ·ω_i ≤ 1 exactly for i ≥ (d̄/2)·ln Δ / ln 10⁴ (ω_i = 10⁴^(−2i/d̄))."
    from lengthx.pe.absolute import sinusoidal_frequencies
    w = sinusoidal_frequencies(128)
    slow = (delta * w <= 1).nonzero().flatten().tolist()
    assert slow == list(range(math.ceil(64 * math.log(delta) / math.log(1e4)), 64))


@pytest.mark.parametrize("spec", ["fire", "dape:fire"])
def test_fire_runs_in_float64(spec):
    torch.manual_seed(0)
    m32 = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe=spec, max_len=16)).eval()
    m64 = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe=spec, max_len=16)).eval()
    m64.load_state_dict(m32.state_dict())
    m64.double()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y64 = m64(ids, path="naive")
        assert y64.dtype == torch.float64 and torch.allclose(y64.float(), m32(ids, path="naive"), atol=1e-4)


def test_fire_normalized_distance_follows_c_dtype():
    i, j = torch.tensor([9]), torch.tensor([2])
    assert fire_normalized_distance(i, j, torch.tensor(0.1, dtype=torch.float64), 4.0).dtype == torch.float64
    assert fire_normalized_distance(i, j, 0.1, 4.0).dtype == torch.get_default_dtype()
    want = math.log1p(0.7) / (math.log1p(0.9) + 1e-6)
    assert abs(fire_normalized_distance(i, j, torch.tensor(0.1, dtype=torch.float64), 4.0).item() - want) < 1e-12


def test_randomized_eval_random_is_the_authors_procedure():
    "eval_random=true draws sorted positions at evaluation too; without it evaluation uses 0..L−1; at L = N both coincide."
    ids = torch.zeros(2, 16, dtype=torch.long)
    rnd = build_pe("randomized:eval_random=true:alibi", n_heads=2, head_dim=8, max_len=16).eval()
    torch.manual_seed(0)
    a, b = rnd.make_positions(ids).token, rnd.make_positions(ids).token
    assert (a.diff(dim=1) > 0).all() and a.max() < 64 and not torch.equal(a, b)
    plain = build_pe("randomized:alibi", n_heads=2, head_dim=8, max_len=16).eval()
    assert torch.equal(plain.make_positions(ids).token, Positions.arange(2, 16).token)
    full = build_pe("randomized:max_len=16:eval_random=true:alibi", n_heads=2, head_dim=8, max_len=16).eval()
    assert torch.equal(full.make_positions(ids).token, Positions.arange(2, 16).token)
    with pytest.raises(ValueError, match="max_len"):
        rnd.make_positions(torch.zeros(2, 65, dtype=torch.long))


@pytest.mark.parametrize("nb", ["20_t5_alibi", "21_kerple", "22_sandwich_fire", "23_randomized"])
def test_no_control_characters_in_chapter_text(nb):
    import json, re
    from pathlib import Path
    cells = json.loads((Path(__file__).parents[1] / "nbs" / f"{nb}.ipynb").read_text())["cells"]
    bad = [(i, m.group()) for i, c in enumerate(cells) for m in re.finditer(r"[\x00-\x08\x0b-\x1f\x7f]|\t", "".join(c["source"]))]
    assert not bad, bad
