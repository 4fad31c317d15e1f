"""Attention in parts: the log-sum-exp merge equals one softmax over all keys, a band of keys equals the dense masked
softmax, and ReRoPE (with and without log-n), Self-Extend and the window computed in parts equal their materialized
forms on every position layout they accept, without ever building the T×T logits."""
import pytest
import torch

from lengthx.attention import (PE, Positions, attend_lse, attention, attention_at, band_attend, build_pe, causal_mask,
                               index_offset, merge_parts, parts_off, pick_path)
from lengthx.pe.window import WindowPE

G = lambda seed: torch.Generator().manual_seed(seed)


def qkv(B=2, H=3, T=37, Dh=16, seed=0, Tk=None):
    g = G(seed)
    return (torch.randn(B, H, T, Dh, generator=g), torch.randn(B, H, Tk or T, Dh, generator=g),
            torch.randn(B, H, Tk or T, Dh, generator=g))


@pytest.mark.parametrize("flash", [True, False])
def test_merge_of_random_groups_is_one_softmax_even_where_a_group_is_empty(flash):
    q, k, v = qkv()
    T, scale = q.shape[2], 0.25
    ref = torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~causal_mask(T, T), float("-inf")), -1) @ v
    deal = torch.randint(0, 3, (T, T), generator=G(1)).masked_fill(~causal_mask(T, T), -1)
    masks = [torch.zeros(T, T).masked_fill(deal != i, float("-inf")) for i in range(3)]
    assert all((m == float("-inf")).all(-1).any() for m in masks)   # every group is empty for some query (row 0 at least)
    out, lse = merge_parts([attend_lse(q, k, v, scale, mask=m, flash=flash) for m in masks])
    assert (out - ref).abs().max() < 1e-5
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(~causal_mask(T, T), float("-inf"))
    assert (lse - s.logsumexp(-1)).abs().max() < 1e-4


@pytest.mark.parametrize("flash", [True, False])
def test_a_group_no_query_sees_changes_nothing_and_gives_no_nan(flash):
    q, k, v = qkv()
    scale = 0.25
    alone = attend_lse(q, k, v, scale, causal=True, flash=flash)
    hidden = attend_lse(q, k, v, scale, mask=torch.full((q.shape[2], k.shape[2]), float("-inf")), flash=flash)
    assert torch.isneginf(hidden[1]).all() and (hidden[0] == 0).all()   # the CPU kernel itself reports lse 0 there
    out, lse = merge_parts([alone, hidden])
    assert (out - alone[0]).abs().max() < 1e-6 and (lse - alone[1]).abs().max() < 1e-6
    out, lse = merge_parts([hidden, hidden])
    assert not out.isnan().any() and (out == 0).all() and torch.isneginf(lse).all()


def dense_band(q, k, v, scale, lo, hi, offset=0):
    d = torch.arange(offset, offset + q.shape[2])[:, None] - torch.arange(k.shape[2])[None, :]
    seen = (d >= (lo if lo is not None else -10**9)) & (d <= (hi if hi is not None else 10**9))
    return torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~seen, float("-inf")), -1).nan_to_num(0.0) @ v


@pytest.mark.parametrize("lo,hi,offset", [(0, None, 0), (0, 4, 0), (5, None, 0), (-4, 4, 0), (None, -5, 0), (0, 6, 9),
                                          (7, None, 9), (0, 0, 0), (3, 3, 2)])
@pytest.mark.parametrize("block", [5, 8, 64])
def test_band_equals_the_dense_masked_softmax(lo, hi, offset, block):
    q, k, v = qkv(T=37, Tk=37 + offset, seed=2)
    out, lse = band_attend(q, k, v, 0.25, lo, hi, offset, block=block)
    assert (out - dense_band(q, k, v, 0.25, lo, hi, offset)).abs().max() < 1e-5


def test_index_offset_only_for_one_consecutive_run():
    assert index_offset(Positions.arange(2, 5, offset=3), Positions.arange(2, 8)) == 3
    assert index_offset(Positions(torch.tensor([[0, 2, 3]])), Positions.arange(1, 3)) is None
    assert index_offset(Positions(torch.tensor([[0, 1], [5, 6]])), Positions(torch.tensor([[0, 1], [0, 1]]))) is None


SPECS = ["rerope:w=8", "rerope:w=8:logn=true:original_max_len=16", "rerope:w=1000", "self_extend:g=3:w=8",
         "self_extend:g=4:w=5"]


def _no_logits(pe):
    "Make the PE's logits hook raise: a path that still returns computed no T×T scores."
    def boom(*a, **k): raise AssertionError("the T×T logits were built")
    pe.logits = boom
    return pe


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("offset", [0, 7])
def test_methods_in_parts_equal_their_logits_without_building_them(spec, causal, offset):
    q, k, v = qkv(B=2, H=2, T=600, Dh=16, seed=3)   # 600 > the 256-query block: several blocks, both bands
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=32)
    pos = Positions.arange(2, 600, offset=offset)
    ref = attention(q, k, v, pe, pos, path="naive", causal=causal)
    got = attention(q, k, v, _no_logits(pe), pos, path="chunked", causal=causal)
    assert (got - ref).abs().max() < 2e-5


@pytest.mark.parametrize("spec", ["rerope:w=8", "self_extend:g=3:w=8"])
def test_gradients_take_the_logits_path_and_match(spec):
    q, k, v = (t.requires_grad_() for t in qkv(T=40, seed=4))
    pe = build_pe(spec, n_heads=3, head_dim=16, max_len=32)
    pos = Positions.arange(2, 40)
    calls = []
    orig = pe.logits
    pe.logits = lambda *a, **kw: (calls.append(1), orig(*a, **kw))[1]
    (attention(q, k, v, pe, pos, path="chunked", block=16) ** 2).sum().backward()
    assert calls   # under autograd the parts (lse without a gradient) are not taken
    g1 = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v): t.grad = None
    (attention(q, k, v, pe, pos, path="naive") ** 2).sum().backward()
    assert all((a - t.grad).abs().max() < 1e-4 for a, t in zip(g1, (q, k, v)))


def test_positions_not_in_one_run_fall_back_to_the_logits():
    q, k, v = qkv(B=1, T=30, seed=5)
    pe = build_pe("rerope:w=4", n_heads=3, head_dim=16, max_len=32)
    pos = Positions(torch.sort(torch.randperm(90, generator=G(0))[:30]).values[None])
    assert pe.attend(q, k, v, pos, pos, 0.25, True) is None
    assert (attention(q, k, v, pe, pos, path="chunked") - attention(q, k, v, pe, pos, path="naive")).abs().max() < 1e-5


def test_parts_off_restores_the_steps_and_auto_picks_the_parts_at_inference():
    q, k, v = qkv(T=40, seed=6)
    pe = build_pe("rerope:w=8", n_heads=3, head_dim=16, max_len=32)
    with torch.no_grad():
        assert pick_path(pe, 40, q.device) == "chunked"
        with parts_off():
            assert pick_path(pe, 40, q.device) == "naive"
            with pytest.raises(AssertionError, match="T×T"):
                attention(q, k, v, _no_logits(build_pe("rerope:w=8", n_heads=3, head_dim=16, max_len=32)),
                          Positions.arange(2, 40), path="chunked")
    assert pick_path(pe, 40, q.device) == "naive"   # with gradients on, nothing changes


@pytest.mark.parametrize("spec", ["rope", "yarn:s=4", "alibi", "rerope:w=8", "rerope:w=8:logn=true:original_max_len=16",
                                  "self_extend:g=3:w=8", "window:w=6:kerple_log"])
@pytest.mark.parametrize("Tq", [1, 7, 300])
def test_attention_at_is_the_last_rows_of_full_attention(spec, Tq):
    T = 300
    q, k, v = qkv(B=1, H=2, T=T, Dh=16, seed=7)
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=32).eval()
    pos = Positions.arange(1, T)
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")[:, :, T - Tq:]
        got = attention_at(q[:, :, T - Tq:], k, v, pe, pos[T - Tq:], pos)
    assert (got - ref).abs().max() < 2e-5
    with pytest.raises(ValueError, match="at most as many queries"):
        attention_at(q, k[:, :, :5], v[:, :, :5], pe, pos, pos[:5])


@pytest.mark.parametrize("inner", ["nope", "alibi", "rope", "kerple_log", "t5", "xpos"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("w", [1, 6, 2000])
def test_window_band_equals_the_dense_window_and_never_builds_it(inner, causal, w, monkeypatch):
    T = 600
    q, k, v = qkv(B=2, H=4, T=T, Dh=8, seed=8)
    pe = build_pe(f"window:w={w}:{inner}", n_heads=4, head_dim=8, max_len=T).eval()
    pos = Positions.arange(2, T)
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive", causal=causal)
        monkeypatch.setattr(WindowPE, "bias", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("dense window")))
        for path in ("sdpa", "chunked"):
            assert (attention(q, k, v, pe, pos, path=path, causal=causal) - ref).abs().max() < 2e-5, path


def test_window_band_reads_the_inner_bias_only_on_the_band():
    T, w = 1024, 16
    q, k, v = qkv(B=1, H=4, T=T, Dh=8, seed=9)
    pe = build_pe(f"window:w={w}:alibi", n_heads=4, head_dim=8, max_len=T).eval()
    seen = []
    orig = pe.inner.bias
    pe.inner.bias = lambda pq, pk, layer=0: (seen.append(pq.shape[1] * pk.shape[1]), orig(pq, pk, layer))[1]
    with torch.no_grad(): attention(q, k, v, pe, Positions.arange(1, T), path="sdpa")
    assert seen and sum(seen) <= 2 * 256 * (256 + w)   # two cached band pieces (the first block, an interior one), not T² pairs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (tools/gpu_checks.sh runs it)")
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("how", ["plain", "causal", "band mask", "per-head mask"])
def test_attend_lse_cuda_kernel_equals_the_materialized_scores(dtype, tol, how):
    import lengthx.attention as A
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, t, 64, generator=g) for h, t in ((6, 300), (2, 517), (2, 517)))
    mask = None
    if how != "plain" and how != "causal":   # keys 40..140 behind each query; the first rows see nothing: lse −inf, output 0
        d = torch.arange(300)[:, None] + 217 - torch.arange(517)[None, :]
        mask = torch.zeros(300, 517).masked_fill(~((d >= 40) & (d <= 140)), float("-inf"))
        mask[:5] = float("-inf")
        if how == "per-head mask": mask = mask + torch.randn(6, 300, 517, generator=g)   # [H, Tq, Tk], as a bias band gives
    causal = how == "causal"
    A._KERNEL_FALLBACK.clear()
    cuda = lambda t: None if t is None else t.to("cuda", dtype)
    got = attend_lse(cuda(q), cuda(k), cuda(v), 0.125, causal=causal, mask=cuda(mask), flash=True)
    assert not A._KERNEL_FALLBACK, A._KERNEL_FALLBACK   # the kernel ran, no silent fallback
    ref = attend_lse(cuda(q).float(), cuda(k).float(), cuda(v).float(), 0.125, causal=causal,   # float32 reference of the same inputs
                     mask=None if mask is None else cuda(mask).float(), flash=False)
    assert (got[0].float() - ref[0]).abs().max() < tol
    seen = ref[1] > float("-inf")
    assert torch.equal(got[1] > float("-inf"), seen) and (got[1][seen] - ref[1][seen]).abs().max() < tol


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (tools/gpu_checks.sh runs it)")
@pytest.mark.parametrize("spec", ["rerope:w=8", "self_extend:g=3:w=8", "dca:chunk=12:local=2", "string:shift=8:local=2",
                                  "sinks:n=2:window=6", "window:w=16:kerple_log"])
def test_methods_in_parts_on_cuda_equal_their_logits_form(spec):
    import lengthx.attention as A
    A._KERNEL_FALLBACK.clear()
    q, k, v = (t.cuda() for t in qkv(B=2, H=2, T=600, Dh=16, seed=3))
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=32).cuda()
    pos = Positions.arange(2, 600, device="cuda")
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")
        got = attention(q, k, v, pe, pos, path="chunked")
    assert not A._KERNEL_FALLBACK and (got - ref).abs().max() < 2e-5
