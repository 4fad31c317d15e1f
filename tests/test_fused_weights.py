"DAPE/CDAPE attention weights from one CPU kernel pass (scale, bias, refine, mask and softmax of a query row together) against the steps one by one."
import pytest
import torch

import lengthx.pe.fused as fused
from lengthx.attention import Positions, ToeplitzBlock, attention, build_pe, causal_mask, toeplitz_block

SPECS = ["dape:kerple_log", "dape:variant=concat:kerple_log", "dape:variant=add_residual:alibi", "dape:nope", "dape:fire",
         "dape:width=5:kerple_log", "cdape:k=3:kerple_log", "cdape:k=5:variant=concat:alibi", "cdape:k=3:variant=add_residual:kerple_log"]
TOL = fused.REFINE_TOL["cpu"]


def reference_weights(pe, q, k, scale, bias, mask):
    "softmax(mask(refine(scale·qkᵀ + B))) by f.reference: the equations of chapters 40 and 41, written plainly."
    f = pe.f[0]
    ref = (lambda *p: f.reference(*p, mask=mask)) if hasattr(f, "conv1") else (lambda *p: f.reference(*p))
    a = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is None: r = a + ref(a)
    else:
        a = a + bias
        if pe.variant == "add_residual": r = a + ref(a)
        else:
            s = a - bias
            r = (s if pe.variant == "concat" else a) + ref(s, bias.expand_as(s))
    if mask is not None: r = r.masked_fill(~mask, float("-inf"))
    return r.softmax(-1)


def spied(monkeypatch):
    "Count the kernel's calls."
    calls = []
    real = fused.cpu_attend_forward
    monkeypatch.setattr(fused, "cpu_attend_forward", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


def randomized(spec, H=4, max_len=512):
    "A PE whose f has weights away from its init, so every hidden unit sits on both sides of its kink."
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=H, head_dim=8, max_len=max_len).eval()
    for p in pe.f.parameters(): p.data.normal_(0, 0.3)
    return pe


def close(got, want, atol=1e-6):
    assert (got - want).abs().max() <= TOL * want.abs().max() + atol, f"max |Δ| {(got - want).abs().max():.3g}"


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("H", [4, 3])                     # 3: an odd head count, the last head of a pair alone
@pytest.mark.parametrize("shared", [True, False])         # a bias read once for the batch, or one per sequence
@pytest.mark.parametrize("causal", [True, False])
def test_kernel_weights_equal_reference(spec, H, shared, causal, monkeypatch):
    "Odd shapes over two key tiles: the kernel's weights equal the plain softmax of the plain logits, zeros where a key is hidden."
    pe = randomized(spec, H)
    B, Tq, Tk = 2, 37, 150
    q, k = torch.randn(B, H, Tq, 8), torch.randn(B, H, Tk, 8)
    bias = torch.randn(1 if shared else B, H, Tq, Tk) if pe.inner.uses_bias else None
    mask = causal_mask(Tq, Tk, q_offset=Tk - Tq) if causal else None
    calls = spied(monkeypatch)
    with torch.no_grad():
        got = pe.fused_weights(q, k, 0.35, bias, mask)
        want = reference_weights(pe, q, k, 0.35, bias, mask)
    assert len(calls) == 1
    close(got, want)
    if causal: assert (got.masked_select(~mask) == 0).all()
    torch.testing.assert_close(got.sum(-1), torch.ones(B, H, Tq))


@pytest.mark.parametrize("spec", ["dape:kerple_log", "dape:variant=concat:kerple_log", "cdape:k=3:kerple_log", "dape:fire"])
def test_a_toeplitz_block_read_in_place_equals_its_dense_form(spec):
    "The block's row read with a negative query stride (and, for k = 1, its W_B·B once per offset) equals the laid-out block."
    pe = randomized(spec)
    T, start, end = 300, 100, 230                           # 130 queries: not a multiple of the kernel's 128-key tile
    row = torch.randn(4, 2 * T - 1)
    blk = ToeplitzBlock(row, T, start, end, end)
    assert torch.equal(blk.dense(), toeplitz_block(row, T, start, end, end))
    q, k = torch.randn(2, 4, end - start, 8), torch.randn(2, 4, end, 8)
    mask = causal_mask(end - start, end, q_offset=start)
    with torch.no_grad():
        got = pe.fused_weights(q, k, 0.35, blk, mask)
        want = reference_weights(pe, q, k, 0.35, blk.dense()[None], mask)
    close(got, want)


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:variant=concat:kerple_log", "dape:fire"])
@pytest.mark.parametrize("path,T,block", [("naive", 45, 256), ("chunked", 300, 64), ("chunked", 257, 128)])
def test_attention_with_the_kernel_equals_attention_without(spec, path, T, block, monkeypatch):
    "The model's attention at inference: output with the one-pass weights equals the step-by-step path (the refine kernel off as well)."
    pe = randomized(spec)
    q, k, v = (torch.randn(2, 4, T, 8) for _ in range(3))
    pos = Positions.arange(2, T)
    calls = spied(monkeypatch)
    with torch.no_grad():
        got = attention(q, k, v, pe, pos, path=path, block=block)
        n = len(calls)
        with fused.eager_refine(): want = attention(q, k, v, pe, pos, path=path, block=block)
    assert n == (1 if path == "naive" else -(-T // block)) and len(calls) == n
    close(got, want, atol=1e-5)


def test_only_at_inference(monkeypatch):
    "With gradients wanted the core keeps the steps (the refine kernel's autograd Function), so training is unchanged."
    pe = randomized("dape:nope")
    q, k, v = (torch.randn(1, 4, 40, 8, requires_grad=True) for _ in range(3))
    calls = spied(monkeypatch)
    attention(q, k, v, pe, Positions.arange(1, 40), path="naive").sum().backward()
    assert calls == [] and q.grad is not None
    assert pe.fused_weights(q, k, 0.35, None, None) is None


def test_switches_and_fallbacks(monkeypatch):
    "LENGTHX_FUSED=refine or off, float64 and a mask that is not a prefix each answer None; every other PE answers None."
    pe = randomized("dape:nope")
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    mask = causal_mask(6, 6)
    with torch.no_grad():
        assert pe.fused_weights(q, k, 0.35, None, mask) is not None
        for mode in ("refine", "off"):
            monkeypatch.setenv("LENGTHX_FUSED", mode)
            assert pe.fused_weights(q, k, 0.35, None, mask) is None
        monkeypatch.delenv("LENGTHX_FUSED")
        assert pe.fused_weights(q.double(), k.double(), 0.35, None, mask) is None
        odd = mask.clone(); odd[3, 1] = False
        assert pe.fused_weights(q, k, 0.35, None, odd) is None
        assert build_pe("kerple_log", n_heads=4, head_dim=8).fused_weights(q, k, 0.35, None, mask) is None
        with pytest.raises(ValueError, match="uses a bias"):   # f reads 2h channels: a missing bias is an error, not a crash
            randomized("dape:kerple_log").fused_weights(q, k, 0.35, None, mask)


def test_large_logits_and_a_row_with_no_key():
    "Logits far apart (the exponential's clamp, weights that underflow to zero) match; a row that sees no key is NaN, as softmax gives."
    pe = randomized("dape:nope")
    q, k = 6 * torch.randn(1, 4, 5, 8), 6 * torch.randn(1, 4, 40, 8)
    mask = causal_mask(5, 40, q_offset=35)
    with torch.no_grad():
        close(pe.fused_weights(q, k, 1.0, None, mask), reference_weights(pe, q, k, 1.0, None, mask))
        none = mask.clone(); none[0] = False
        got, want = pe.fused_weights(q, k, 1.0, None, none), reference_weights(pe, q, k, 1.0, None, none)
    assert torch.isnan(got[:, :, 0]).all() and torch.isnan(want[:, :, 0]).all()
    close(got[:, :, 1:], want[:, :, 1:])


def test_a_subclass_with_its_own_refine_keeps_the_steps(monkeypatch):
    "A DAPE whose refine differs (CDAPE without its tril, appendix G) is not given the kernel's weights: its own refine runs."
    from lengthx.pe.cdape import CDAPE

    class Untrilled(CDAPE):
        def refine(self, scores, bias, mask, layer=0): return super().refine(scores, bias, None, layer)

    pe = randomized("cdape:k=3:kerple_log")
    leaky = Untrilled(pe.ctx, pe.inner)
    leaky.load_state_dict(pe.state_dict())
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    with torch.no_grad():
        assert leaky.fused_weights(q, k, 0.35, torch.zeros(1, 4, 6, 6), causal_mask(6, 6)) is None
        assert pe.fused_weights(q, k, 0.35, torch.zeros(1, 4, 6, 6), causal_mask(6, 6)) is not None
        pe.refine = lambda *a, **kw: type(pe).refine(pe, *a, **kw)   # a refine set on the instance (a spy) is run, not bypassed
        assert pe.fused_weights(q, k, 0.35, torch.zeros(1, 4, 6, 6), causal_mask(6, 6)) is None


def test_a_pe_with_its_own_logits_or_a_wrapper_that_changes_a_step_keeps_the_steps(monkeypatch):
    "KERPLE bias+weight changes the dot product (its own `logits`), so DAPE around it runs the steps; so does a wrapper with its own bias."
    from lengthx.attention import WrappedPE
    calls = spied(monkeypatch)
    pe = randomized("dape:kerple_biaswt")
    assert pe.uses_logits
    q, k, v = (torch.randn(1, 4, 30, 8) for _ in range(3))
    pos = Positions.arange(1, 30)
    with torch.no_grad():
        got = attention(q, k, v, pe, pos, path="naive")
        with fused.kernel_mode("refine"): want = attention(q, k, v, pe, pos, path="naive")
    assert calls == []
    torch.testing.assert_close(got, want)

    class Shifted(WrappedPE):
        def bias(self, pos_q, pos_k, layer=0): return self.inner.bias(pos_q, pos_k, layer) + 1.0

    dape = randomized("dape:kerple_log")
    with torch.no_grad():
        assert WrappedPE(dape.ctx, dape).fused_weights(q, k, 0.35, torch.zeros(1, 4, 30, 30), None) is not None
        assert Shifted(dape.ctx, dape).fused_weights(q, k, 0.35, torch.zeros(1, 4, 30, 30), None) is None


def test_a_bias_that_does_not_fit_is_an_error():
    "A Toeplitz block of the wrong size, rows for the wrong head count, or a bias for another batch size raise, not read out of bounds."
    pe = randomized("dape:kerple_log")
    q, k = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    with torch.no_grad():
        with pytest.raises(ValueError, match="does not fit"):
            pe.fused_weights(q, k, 0.35, ToeplitzBlock(torch.randn(4, 19), 10, 0, 8, 8), None)
        with pytest.raises(ValueError, match="does not fit"):
            pe.fused_weights(q, k, 0.35, ToeplitzBlock(torch.randn(3, 19), 10, 0, 10, 10), None)
        with pytest.raises(ValueError, match="does not fit"):
            pe.fused_weights(q, k, 0.35, torch.randn(3, 4, 10, 10), None)
        one_row = ToeplitzBlock(torch.randn(1, 19), 10, 0, 10, 10)            # one row for every head: read with stride 0
        close(pe.fused_weights(q, k, 0.35, one_row, None), reference_weights(pe, q, k, 0.35, one_row.dense()[None].expand(1, 4, 10, 10), None))
