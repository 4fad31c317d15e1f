"""Chapter 12's position rules and schedules: Self-Extend against its definition, PoSE's ids, dynamic linear scaling."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.pe.rotary import rope_inv_freq
from lengthx.pe.scaling import dynamic_linear_inv_freq, pi_inv_freq, pose_positions, self_extend_relative


def loop_relative(m: int, n: int, G: int, w: int) -> float:
    "Self-Extend's relative position, case by case (the paper's formula, mirrored for keys ahead)."
    if abs(m - n) < w: return float(m - n)
    shift = w - w / G
    return m // G - n // G + (shift if m > n else -shift)


@pytest.mark.parametrize("G,w", [(4, 8), (3, 5), (1, 6), (8, 32)])
def test_self_extend_relative_matches_loop(G, w):
    T = 70
    got = self_extend_relative(torch.arange(T)[:, None], torch.arange(T)[None, :], G, w)
    want = torch.tensor([[loop_relative(m, n, G, w) for n in range(T)] for m in range(T)], dtype=torch.float64)
    assert torch.equal(got, want)


def test_self_extend_logits_are_rope_at_the_grouped_distance():
    "One query and one key vector everywhere: each logit equals the RoPE logit at P(m, n)."
    H, D, T, G, w = 2, 16, 40, 4, 8
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, 1, D, generator=g).expand(1, H, T, D).contiguous()
    k = torch.randn(1, H, 1, D, generator=g).expand(1, H, T, D).contiguous()
    pe = build_pe(f"self_extend:g={G}:w={w}", n_heads=H, head_dim=D)
    S = pe.logits(q, k, Positions.arange(1, T), Positions.arange(1, T), 1.0)
    for m, n in [(39, 0), (39, 30), (39, 31), (39, 32), (12, 4), (7, 0), (3, 20)]:
        r = torch.tensor([[loop_relative(m, n, G, w)]], dtype=torch.float64)
        ref = torch.einsum("bhqd,bhkd->bhqk", pe._rotated(q[:, :, :1], r), k[:, :, :1])[0, :, 0, 0]
        assert torch.allclose(S[0, :, m, n], ref, atol=1e-4), (m, n)


def test_self_extend_is_rope_with_group_one_and_differs_otherwise():
    H, D, T = 2, 16, 48
    q, k, v = torch.randn(3, 2, H, T, D)
    pos = Positions.arange(2, T)
    rope = attention(q, k, v, build_pe("rope", n_heads=H, head_dim=D), pos, path="naive")
    assert torch.allclose(attention(q, k, v, build_pe("self_extend:g=1:w=4", n_heads=H, head_dim=D), pos, path="naive"), rope, atol=1e-5)
    out = attention(q, k, v, build_pe("self_extend:g=4:w=4", n_heads=H, head_dim=D), pos, path="naive")
    assert not torch.allclose(out, rope, atol=1e-3)
    assert torch.allclose(out[:, :, :4], rope[:, :, :4], atol=1e-5)       # the first w queries see only neighbours


@pytest.mark.parametrize("length,target,chunks", [(32, 512, 2), (32, 128, 3), (16, 16, 2), (10, 1000, 5), (1, 8, 2)])
def test_pose_positions(length, target, chunks):
    torch.manual_seed(0)
    for _ in range(200):
        ids = pose_positions(length, target, chunks)
        steps = ids.diff()
        assert ids[0] == 0 and ids[-1] <= target - 1 and (steps >= 1).all()
        assert (steps > 1).sum() <= chunks - 1                             # runs of consecutive ids, one skip between runs
    if target > length > 1:
        far = max(int(pose_positions(length, target, chunks)[-1]) for _ in range(500))
        assert far > 0.9 * (target - 1)                                    # the ids reach the far end of the target


def test_pose_wrapper_trains_skipped_and_evaluates_plain():
    pe = build_pe("pose:target=64:rope", n_heads=2, head_dim=8, max_len=16)
    ids = torch.zeros(64, 16, dtype=torch.long)
    pe.train(); tr = pe.make_positions(ids).token
    assert tr.shape == (64, 16) and (tr.diff(dim=1) >= 1).all() and tr.max() <= 63 and (tr.diff(dim=1) > 1).any()
    assert len({tuple(r.tolist()) for r in tr}) > 1                          # a draw per row
    pe.eval(); assert torch.equal(pe.make_positions(ids).token, Positions.arange(64, 16).token)


def test_dynamic_linear():
    assert torch.equal(dynamic_linear_inv_freq(16, 1e4, 20, 32), rope_inv_freq(16))
    assert torch.equal(dynamic_linear_inv_freq(16, 1e4, 128, 32), pi_inv_freq(16, 1e4, 4))
    pe = build_pe("dynamic_linear:original_max_len=16", n_heads=1, head_dim=16, max_len=16)
    assert pe.length_dependent and torch.allclose(pe.frequencies(48)[0], rope_inv_freq(16) / 3)
