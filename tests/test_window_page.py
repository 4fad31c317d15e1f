"""Chapter 25's window, piece by piece: the -1e4 logit gives exactly zero weight in float32, bfloat16 and float16 while
staying finite; the FlexAttention score_mod is the dense bias in closed form (distance >= w masked, < w not); the band
declines where it is not a band of indices; band_attend's pieces for a causal window cover every visible pair once
and reach at most w - 1 + block keys per block; and `window_calls` still names its calls as the committed parts
measurement does (a renamed label would leave chapters 25 and 71 reading keys the result file does not hold)."""
import json
from pathlib import Path

import pytest
import torch

from lengthx.attention import Positions, band_attend, build_pe, causal_mask
from lengthx.bench import window_calls
from lengthx.pe.window import WINDOW_NEG, window_band, window_bias, window_score_mod

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spread", [0.0, 30.0, 1000.0])
def test_beyond_the_window_weighs_exactly_zero_and_stays_finite(dtype, spread):
    s = torch.tensor([0.0, spread, WINDOW_NEG + spread, WINDOW_NEG], dtype=dtype)
    p = s.softmax(-1)
    assert torch.isfinite(s).all() and (p[2:] == 0).all() and torch.isfinite(p).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("S", [30.0, 1000.0])
def test_a_far_key_raw_scored_above_every_visible_one_still_weighs_zero(dtype, S):
    "The bound needs S over all keys' raw logits: a far key may outscore every visible one before the window is added."
    raw = torch.tensor([0.0, S / 2, S, -S / 2])                    # keys 2, 3 beyond w; key 2 above both visible ones
    s = (raw + torch.tensor([0.0, 0.0, WINDOW_NEG, WINDOW_NEG])).to(dtype)
    p = s.softmax(-1)
    assert torch.isfinite(s).all() and (p[2:] == 0).all() and torch.isfinite(p).all()


@pytest.mark.parametrize("w", [1, 3, 7])
def test_score_mod_is_the_dense_bias_in_closed_form(w):
    T = 12
    pos = Positions(torch.stack([torch.arange(T), torch.arange(T) * 2]))     # two rows, different spacings
    mod = window_score_mod(None, pos.token, w)
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    for b in range(2):
        got = mod(torch.zeros(T, T), b, 0, qi, ki)
        want = window_bias(Positions(pos.token[b:b + 1]), Positions(pos.token[b:b + 1]), w)[0]
        assert torch.equal(got, want)
        d = (pos.token[b][:, None] - pos.token[b][None, :]).abs()
        assert (got[d == w - 1] == 0).all() and (got[d == w] == WINDOW_NEG).all()   # the edge on the right side


def test_score_mod_adds_to_the_inner_score_mod():
    T, w = 10, 4
    pos = Positions.arange(1, T)
    mod = window_score_mod(lambda s, b, h, qi, ki: s + 1.0, pos.token, w)
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    assert torch.equal(mod(torch.zeros(T, T), 0, 0, qi, ki), 1.0 + window_bias(pos, pos, w)[0])


def test_band_declines_positions_that_are_not_one_run():
    pe = build_pe("kerple_log", n_heads=2, head_dim=4, max_len=16).eval()
    q = torch.randn(1, 2, 6, 4)
    shuffled, run = Positions(torch.tensor([[0, 2, 3, 5, 8, 9]])), Positions.arange(1, 6)
    with torch.no_grad():   # attention takes the band only at inference
        assert window_band(q, q, q, pe, shuffled, shuffled, 0.5, True, 3) is None
        assert window_band(q, q, q, pe, run, run, 0.5, True, 3) is not None


@pytest.mark.parametrize("T,w,block", [(48, 10, 8), (37, 1, 5), (40, 16, 4), (30, 50, 8), (64, 9, 64)])
def test_band_pieces_cover_the_window_once_and_no_further_than_w_plus_block(T, w, block):
    pieces = []
    def record(s, e, j0, j1):
        pieces.append((s, e, j0, j1)); return torch.zeros(e - s, j1 - j0)
    x = torch.randn(1, 1, T, 4)
    band_attend(x, x, x, 1.0, 0, w - 1, 0, block=block, bias=record)
    covered = torch.zeros(T, T, dtype=torch.long)
    for s, e, j0, j1 in pieces: covered[s:e, j0:j1] += 1
    P = Positions.arange(1, T)
    visible = (window_bias(P, P, w)[0] == 0) & causal_mask(T, T)
    assert covered.max() == 1 and (covered[visible] == 1).all()
    assert all((covered[s:s + block] > 0).any(0).sum() <= w - 1 + block for s in range(0, T, block))


def test_window_calls_name_their_calls_as_the_committed_measurement_does():
    rec = json.loads((ROOT / "nbs" / "results" / "parts_cpu.json").read_text())
    committed = {name for res in rec["result"]["window"].values() for r in res["rounds"] for name in r}
    inner = rec["settings"]["window"]["inner"]
    calls = window_calls(32, w=8, inner=inner)
    assert set(calls) == committed and list(calls)[0] == inner
