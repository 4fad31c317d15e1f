"""BiPE (chapter 30): segment positions, the bilevel PE, and the Bi-NFA generator and checker."""
import itertools

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.model import GPT, GPTConfig
from lengthx.pe.bias import alibi_slopes
from lengthx.pe.bipe import (BiNFA, BiPE, NFA, binfa_accepts_bilevel, fixed_segment_positions, is_binfa, nfa_accepts,
                             random_binfa, sample_binfa_strings, segment_matrix, segment_positions)
from lengthx.pe.rotary import rope_inv_freq, rope_interleaved

S = 10  # a separator id


def loop_reference(row, seps):
    "Segment positions by walking the tokens: separators seen before t, tokens since the last separator."
    intra, inter, n, i = [], [], 0, 0
    for w in row:
        intra.append(i); inter.append(n)
        n, i = (n + 1, 0) if w in seps else (n, i + 1)
    return intra, inter


def test_worked_example():
    intra, inter = segment_positions(torch.tensor([[1, 2, S, 3, S, 4]]), (S,))
    assert intra.tolist() == [[0, 1, 2, 0, 1, 0]] and inter.tolist() == [[0, 0, 0, 1, 1, 2]]


def test_edge_cases_in_one_batch():
    ids = torch.tensor([[S, S, 1, 2, S, 3],      # leading separators
                        [1, S, S, S, 2, 3],      # consecutive separators
                        [1, 2, 3, 4, 5, 6],      # no separator: one segment
                        [1, 2, 3, 4, 5, S]])     # separator last: it closes segment 0
    intra, inter = segment_positions(ids, (S,))
    assert intra.tolist() == [[0, 0, 0, 1, 2, 0], [0, 1, 0, 0, 0, 1], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]]
    assert inter.tolist() == [[0, 1, 2, 2, 2, 3], [0, 0, 1, 2, 3, 3], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]


def test_matches_loop_reference_on_random_batches():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 5, (32, 40), generator=g)
    intra, inter = segment_positions(ids, (0, 3))
    for r in range(len(ids)):
        assert (intra[r].tolist(), inter[r].tolist()) == loop_reference(ids[r].tolist(), (0, 3))


def test_several_separators_and_empty_inputs():
    intra, inter = segment_positions(torch.tensor([1, 46, 2, 10, 3]), (10, 46))   # 1-D input
    assert intra.tolist() == [0, 1, 0, 1, 0] and inter.tolist() == [0, 0, 1, 1, 2]
    e_intra, e_inter = segment_positions(torch.zeros(3, 0, dtype=torch.long), (10,))
    assert e_intra.shape == (3, 0) and e_inter.shape == (3, 0)
    intra, inter = segment_positions(torch.tensor([[1, 2, 3]]), ())                # no separators configured
    assert intra.tolist() == [[0, 1, 2]] and inter.tolist() == [[0, 0, 0]]


def test_prefix_property_and_clipping():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 4, (8, 30), generator=g)
    a, n = segment_positions(ids, (0,))
    ids2 = ids.clone(); ids2[:, 12:] = torch.randint(0, 4, (8, 18), generator=g)
    a2, n2 = segment_positions(ids2, (0,))
    assert torch.equal(a[:, :13], a2[:, :13]) and torch.equal(n[:, :13], n2[:, :13])
    long = torch.ones(1, 50, dtype=torch.long)
    assert segment_positions(long, (0,), max_intra=9)[0].tolist() == [list(range(10)) + [9] * 40]


def test_fixed_segments():
    intra, inter = fixed_segment_positions(3, 7, 3)
    assert intra.shape == (3, 7) and intra[2].tolist() == [0, 1, 2, 0, 1, 2, 0] and inter[0].tolist() == [0, 0, 0, 1, 1, 1, 2]
    with pytest.raises(ValueError, match=">= 1"):
        fixed_segment_positions(1, 4, 0)
    pe = build_pe("bipe:fixed=4:rope", n_heads=2, head_dim=8)
    pos = pe.make_positions(torch.full((1, 9), S))                  # separators are ignored in fixed mode
    assert pos.segment.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 2]]


def test_make_positions_uses_context_separators_and_offset():
    ids = torch.tensor([[1, 59, 2, 10, 3]])
    semi = build_pe("bipe:rope", n_heads=2, head_dim=8, sep_ids=(59,)).make_positions(ids, offset=7)
    assert semi.segment.tolist() == [[0, 0, 1, 1, 1]] and semi.token.tolist() == [[7, 8, 9, 10, 11]]
    default = build_pe("bipe:rope", n_heads=2, head_dim=8).make_positions(ids)
    assert default.segment.tolist() == [[0, 0, 0, 0, 1]]
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="bipe:rope", sep_ids=(59,)))
    assert m.pe.ctx.sep_ids == (59,)


def test_intra_table_is_clipped_and_shared_between_segments():
    pe = build_pe("bipe:table_size=4:alibi", n_heads=2, head_dim=8)
    ids = torch.tensor([[1, 1, 1, 1, 1, 1, S, 1, 1]])
    pos = pe.make_positions(ids)
    assert pos.intra.tolist() == [[0, 1, 2, 3, 3, 3, 3, 0, 1]]
    e = pe.embed(torch.zeros(1, 9, 16), pos)
    assert torch.equal(e[0, 7], pe.table.weight[0]) and torch.equal(e[0, 0], e[0, 7]) and torch.equal(e[0, 5], pe.table.weight[3])


def test_last_row_is_the_authors_padding_row():
    "As nn.Embedding(1024, d, padding_idx=-1) in the authors' code: the row clipped positions land on is 0 and never trained."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="bipe:table_size=4:alibi", max_len=24, sep_ids=(0,)))
    assert m.pe.pad_last and m.pe.table.padding_idx == 3
    assert (m.pe.table.weight[3] == 0).all() and (m.pe.table.weight[:3] != 0).any()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
    x = torch.randint(1, 4, (2, 24)); x[:, 12] = 0                    # two long segments: intra >= 3 clips to row 3
    for _ in range(3):
        _, loss = m(x, torch.roll(x, -1, 1))
        opt.zero_grad(); loss.backward()
        g = m.pe.table.weight.grad
        assert g[3].abs().sum() == 0 and g[:3].abs().sum() > 0
        opt.step()
    assert (m.pe.table.weight[3] == 0).all()                           # AdamW's decay and update leave it at 0
    pos = m.pe.make_positions(x)
    e = m.pe.embed(torch.zeros(2, 24, 16), pos)
    assert (pos.intra >= 3).any() and (e[pos.intra >= 3] == 0).all() and (e[pos.intra < 3].abs().sum(-1) > 0).all()
    learned = BiPE(m.pe.ctx, build_pe("alibi", n_heads=2, head_dim=8), table_size=4, pad_last=False)
    assert learned.table.padding_idx is None and (learned.table.weight[3] != 0).any()
    learned.embed(torch.zeros(2, 24, 16), pos).sum().backward()
    assert learned.table.weight.grad[3].abs().sum() > 0


def test_bipe_alibi_bias_is_96_slopes_times_segment_distance():
    pe = build_pe("bipe:alibi", n_heads=4, head_dim=8)
    ids = torch.tensor([[1, S, 2, 3, S, 4], [S, S, 1, 1, 1, 1]])
    pos = pe.make_positions(ids)
    b = pe.bias(pos, pos)
    seg = pos.segment
    want = -96 * alibi_slopes(4)[None, :, None, None] * (seg[:, :, None] - seg[:, None, :]).abs()[:, None].float()
    assert torch.allclose(b, want)
    assert b[0, 0, 0, 1] == 0 and b[0, 0, 5, 0] == pytest.approx(-96 * 0.25 * 2)
    assert torch.allclose(build_pe("bipe:slope_scale=1:alibi", n_heads=4, head_dim=8).inner.slopes, alibi_slopes(4))
    assert torch.allclose(build_pe("bipe:alibi:scale=2", n_heads=4, head_dim=8).inner.slopes, 192 * alibi_slopes(4))
    with pytest.raises(ValueError, match="ALiBi"):
        build_pe("bipe:slope_scale=3:rope", n_heads=4, head_dim=8)


def test_bipe_rope_rotates_by_segment_index():
    pe = build_pe("bipe:rope", n_heads=2, head_dim=8)
    ids = torch.tensor([[1, 2, S, 3, S, S, 4, 5]])
    pos = pe.make_positions(ids)
    q, k = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8)
    rq, rk = pe.rotate(q, k, pos)
    assert torch.allclose(rq, rope_interleaved(q, pos.segment, rope_inv_freq(8)), atol=1e-6)
    assert torch.allclose(rq[:, :, :3], q[:, :, :3], atol=1e-6)          # segment 0: rotation by angle 0
    s_rot, s_raw = rq @ rk.transpose(-1, -2), q @ k.transpose(-1, -2)
    assert torch.allclose(s_rot[..., 3, 4], s_raw[..., 3, 4], atol=1e-5)  # same segment (1): plain q·k
    assert not torch.allclose(s_rot[..., 7, 0], s_raw[..., 7, 0], atol=1e-3)
    assert pe.uses_rotate and pe.uses_embed and not pe.uses_bias


@pytest.mark.parametrize("spec", ["bipe:alibi", "bipe:rope", "bipe:kerple_log", "bipe:fixed=3:alibi", "bipe:kerple_biaswt"])
def test_paths_agree_with_many_separators(spec):
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=4, head_dim=8, sep_ids=(0, 1)).eval()
    ids = torch.randint(0, 5, (2, 33))
    pos = pe.make_positions(ids)
    q, k, v = (torch.randn(2, 4, 33, 8) for _ in range(3))
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")
        paths = ["chunked"] if pe.uses_logits else ["sdpa", "flex", "chunked"]
        for p in paths:
            assert (attention(q, k, v, pe, pos, path=p, block=5) - ref).abs().max() <= 1e-5, (spec, p)


def test_model_is_causal_with_separators_and_table_gets_gradients():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, pe="bipe:alibi", max_len=24, sep_ids=(0,)))
    a = torch.randint(0, 4, (2, 24))
    b = a.clone(); b[:, 10:] = torch.randint(0, 4, (2, 14))
    with torch.no_grad():
        assert torch.allclose(m(a)[:, :10], m(b)[:, :10], atol=1e-5)
    _, loss = m(a, torch.roll(a, -1, 1))
    loss.backward()
    assert m.pe.table.weight.grad is not None and m.pe.table.weight.grad.abs().sum() > 0


def test_clear_errors():
    with pytest.raises(ValueError, match="wraps another PE"):
        build_pe("bipe", n_heads=2, head_dim=8)
    with pytest.raises(ValueError, match="relative inner PE"):
        build_pe("bipe:sinusoidal", n_heads=2, head_dim=8)
    pe = build_pe("bipe:alibi", n_heads=2, head_dim=8)
    with pytest.raises(ValueError, match="make_positions"):
        pe.bias(Positions.arange(1, 4), Positions.arange(1, 4))
    with pytest.raises(ValueError, match="make_positions"):
        pe.embed(torch.zeros(1, 4, 16), Positions.arange(1, 4))


# --- Bi-NFA -----------------------------------------------------------------------------------

def every_segment_has_ab() -> BiNFA:
    "Bi-NFA over a=0, b=1, separator 2: accept iff every segment contains 'ab' (set 1 guesses, set 2 is dead)."
    d = torch.zeros(4, 3, 4, dtype=torch.bool)
    for q, w, r in [(0, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 2), (2, 0, 2), (2, 1, 2), (3, 0, 3), (3, 1, 3),
                    (2, 2, 0), (0, 2, 3), (1, 2, 3), (3, 2, 3)]:
        d[q, w, r] = True
    return BiNFA(d, 0, torch.tensor([True, False, False, False]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 3]), 2)


def test_checker_on_hand_built_binfa_exhaustively():
    m = every_segment_has_ab()
    assert is_binfa(m)
    n = 0
    for L in range(1, 7):
        for t in itertools.product("ab|", repeat=L):
            w = "".join(t)
            if not w.endswith("|"): continue
            want = all("ab" in seg for seg in w[:-1].split("|"))
            ids = torch.tensor([["ab|".index(c) for c in w]])
            assert bool(nfa_accepts(m, ids)) == want == binfa_accepts_bilevel(m, ids[0]), w
            n += 1
    assert n == 364


def test_segment_matrix_of_hand_built_binfa():
    m = every_segment_has_ab()
    assert segment_matrix(m, torch.tensor([1, 0, 1, 2])).tolist() == [[True, True], [False, True]]    # "bab|": s may also stay
    assert segment_matrix(m, torch.tensor([1, 1, 2])).tolist() == [[False, True], [False, True]]      # "bb|"
    with pytest.raises(ValueError, match="separator"):
        segment_matrix(m, torch.tensor([0, 1]))


def test_plain_nfa_checker():
    d = torch.zeros(2, 2, 2, dtype=torch.bool)           # DFA: even number of symbol 0
    d[0, 0, 1] = d[1, 0, 0] = d[0, 1, 0] = d[1, 1, 1] = True
    nfa = NFA(d, 0, torch.tensor([True, False]))
    ids = torch.tensor([[0, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 0]])
    assert nfa_accepts(nfa, ids).tolist() == [True, False, True, False]


def test_random_binfa_rules_and_sampler():
    g = torch.Generator().manual_seed(0)
    m = random_binfa(3, 3, 3, generator=g)
    assert is_binfa(m) and m.n_states == 9 and m.n_symbols == 4 and m.sep == 3 and m.accept.any()
    broken = BiNFA(m.delta.clone(), m.start, m.accept, m.set_of, m.starts, m.sep)
    broken.delta[1, m.sep, 2] = True                      # separator to a non-start state
    assert not is_binfa(broken)
    x, y = sample_binfa_strings(m, 100, 20, 4, generator=g)
    assert x.shape == (100, 20) and int(y.sum()) == 50 and torch.equal(nfa_accepts(m, x), y)
    assert ((x == m.sep).sum(1) == 4).all() and (x[:, -1] == m.sep).all()
    assert all(binfa_accepts_bilevel(m, r) == bool(lab) for r, lab in zip(x[:30], y[:30]))


def test_sampler_errors():
    g = torch.Generator().manual_seed(0)
    m = random_binfa(2, 2, 2, generator=g)
    never = BiNFA(m.delta, m.start, torch.zeros_like(m.accept), m.set_of, m.starts, m.sep)
    with pytest.raises(ValueError, match="always answers the same"):
        sample_binfa_strings(never, 10, 8, 2, generator=g, max_tries=3)
    with pytest.raises(ValueError, match="length"):
        sample_binfa_strings(m, 10, 5, 3)
    with pytest.raises(ValueError, match="even"):
        sample_binfa_strings(m, 9, 8, 2)


def test_pad_last_is_a_spec_option():
    "`bipe:pad_last=false:...` gives the learned last row; the default is the authors' zero padding row."
    assert build_pe("bipe:alibi", n_heads=2, head_dim=8, d_model=16).table.padding_idx == 1023
    learned = build_pe("bipe:pad_last=false:table_size=4:alibi", n_heads=2, head_dim=8, d_model=16)
    assert learned.table.padding_idx is None and (learned.table.weight[3] != 0).any()
