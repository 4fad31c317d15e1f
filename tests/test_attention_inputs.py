"attention() checks its inputs at the entry: one-line ValueErrors for shapes that disagree, and every good input still runs."
import time

import pytest
import torch

from lengthx.attention import PATHS, Positions, attention, attention_at, build_pe, pe_examples

B, H, T, DH = 2, 4, 6, 8


def qkv(b=B, h=H, t=T, dh=DH, tk=None, hk=None, dhk=None, tv=None):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, t, dh, generator=g)
    k = torch.randn(b, hk or h, tk or t, dhk or dh, generator=g)
    v = torch.randn(b, hk or h, tv or tk or t, dh, generator=g)
    return q, k, v


def one_line_value_error(fn, *words):
    "The call raises a ValueError (not a raw torch RuntimeError/IndexError, not silence) whose one-line message names `words`."
    with pytest.raises(ValueError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words: assert w in msg, (w, msg)
    return msg


@pytest.mark.parametrize("path", ["auto", "naive", "chunked", "sdpa"])
def test_wrong_head_size(path):
    pe = build_pe("nope", n_heads=H, head_dim=DH)
    q, k, v = qkv(dhk=DH // 2)
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T), path=path), "head size", str((B, H, DH)))


def test_kv_heads_must_be_repeated():
    pe = build_pe("rope", n_heads=H, head_dim=DH)
    q, k, v = qkv(hk=2)
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T)), "heads", "repeat grouped")


@pytest.mark.parametrize("path", ["naive", "chunked", "sdpa"])
def test_kv_longer_than_q_without_cache(path):
    pe = build_pe("alibi", n_heads=H, head_dim=DH)
    q, k, v = qkv(tk=T + 3)
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T), path=path), "6 queries and 9 keys", "attention_at")


@pytest.mark.parametrize("path", ["naive", "sdpa"])
def test_k_and_v_lengths_differ(path):
    pe = build_pe("nope", n_heads=H, head_dim=DH)
    q, k, v = qkv(tv=T - 1)
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T), path=path), "6 keys and 5 values")


@pytest.mark.parametrize("spec", ["rope", "alibi", "t5"])
def test_positions_shorter_than_t(spec):
    pe = build_pe(spec, n_heads=H, head_dim=DH)
    q, k, v = qkv()
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T - 2), path="naive"), "pos must cover the 6 queries", "(2, 4)")


@pytest.mark.parametrize("spec", ["alibi", "kerple_log", "t5", "fire"])
def test_pe_built_for_one_head(spec):
    "A PE built for 1 head would be broadcast over all heads (silently, for ALiBi and the kerples); now it is refused."
    pe = build_pe(spec, n_heads=1, head_dim=DH)
    q, k, v = qkv()
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T), path="naive"),
                         "built for 1 heads of size 8", "q has 4 heads of size 8")


@pytest.mark.parametrize("spec", ["rope", "xpos"])
def test_pe_built_for_another_head_size(spec):
    pe = build_pe(spec, n_heads=H, head_dim=2 * DH)
    q, k, v = qkv()
    one_line_value_error(lambda: attention(q, k, v, pe, Positions.arange(B, T), path="naive"), "size 16", "size 8")


def test_rank_of_k_checked():
    pe = build_pe("nope", n_heads=H, head_dim=DH)
    q, k, v = qkv()
    one_line_value_error(lambda: attention(q, k[0], v, pe, Positions.arange(B, T)), "got k of shape (4, 6, 8)")


def test_nope_is_exempt_from_head_facts():
    "NoPE has no attention hook and so no per-head state: one built with other facts gives the same output as a matching one."
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    want = attention(q, k, v, build_pe("nope", n_heads=H, head_dim=DH), pos, path="naive")
    got = attention(q, k, v, build_pe("nope", n_heads=1, head_dim=3), pos, path="naive")
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("spec", pe_examples())
def test_good_inputs_run_on_every_path(spec):
    pe = build_pe(spec, n_heads=H, head_dim=DH, max_len=64).eval()
    q, k, v = qkv()
    ids = torch.randint(0, 256, (B, T))
    pos = pe.make_positions(ids)
    if pe.uses_gate: pos = pe.gate(torch.randn(B, T, pe.ctx.d_model), pos)   # a gated PE (FoX) reads the layer's input first
    with torch.no_grad():
        for path in ("naive", "chunked", "auto"):
            assert attention(q, k, v, pe, pos, path=path).shape == (B, H, T, DH)


def test_cached_queries_still_go_through_attention_at():
    "Tq < Tk with a KV cache is attention_at's shape and keeps working."
    pe = build_pe("rope", n_heads=H, head_dim=DH)
    q, k, v = qkv(t=2, tk=T)
    out = attention_at(q, k, v, pe, Positions.arange(B, 2, offset=T - 2), Positions.arange(B, T))
    assert out.shape == (B, H, 2, DH)


def test_check_runs_no_tensor_operation():
    "The entry check is shape comparisons only: a good call dispatches no aten operation at all (nothing that scales with T)."
    from torch.utils._python_dispatch import TorchDispatchMode
    from lengthx.attention import check_attention_inputs

    class Count(TorchDispatchMode):
        def __init__(self): super().__init__(); self.ops = []
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func)); return func(*args, **(kwargs or {}))

    pe = build_pe("alibi", n_heads=H, head_dim=DH)
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    with Count() as seen: check_attention_inputs(q, k, v, pe, pos)
    assert seen.ops == []
    with Count() as control: q.sum()                   # the counter does see an operation when there is one
    assert control.ops
