"""Dual Chunk Attention, STRING and StreamingLLM's sinks (cache positions): each logits form is RoPE at the relative
position its map gives, that map equals one re-derived from the authors' code (ChunkLlama's three tables, STRING's
decoding split, a simulated StartRecentKVCache); each attend form (parts merged by log-sum-exp) equals the logits
form without building them, on every layout it accepts; each reduces to RoPE where it should; and `extend` runs each
on a tiny Hugging Face Llama, with greedy decoding through the KV cache giving the full forward's tokens."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, attention_at, build_pe
from lengthx.pe.rotary import apply_rotary, rotary_table
from lengthx.pe.scaling import DCA, STRING, Sinks, dca_relative, sinks_relative, string_relative
from test_parts import _no_logits   # the PE's logits hook made to raise: a path that still returns built no T×T scores

G = lambda seed: torch.Generator().manual_seed(seed)


def qkv(B=2, H=2, T=40, Dh=16, seed=0):
    g = G(seed)
    return tuple(torch.randn(B, H, T, Dh, generator=g) for _ in range(3))


# -- the maps, re-derived from the authors' code ------------------------------------------------------------------

def chunkllama_relative(T, chunk_size, local_window):
    "ChunkLlama: q_t = arange(c), qc_t = (q_t + c).clamp(max=chunk_size), k_t = arange % c; intra / successive / inter (qc_t[c-1])."
    c = chunk_size - local_window
    q_t, qc_t, k_t = torch.arange(c), (torch.arange(c) + c).clamp(max=chunk_size), torch.arange(T) % c
    P = torch.zeros(T, T, dtype=torch.long)
    for i in range(T):
        for j in range(i + 1):
            ci, cj = i // c, j // c
            P[i, j] = (q_t[i % c] if ci == cj else qc_t[i % c] if ci == cj + 1 else qc_t[c - 1]) - k_t[j]
    return P


def string_decode_relative(T, shift, local):
    "STRING's decoding step: the first i + 1 − S keys with the query at i − S + W, the last S at i."
    P = torch.zeros(T, T, dtype=torch.long)
    for i in range(T):
        for j in range(i + 1): P[i, j] = i - shift + local - j if j < i + 1 - shift else i - j
    return P


def streaming_cache_relative(T, n_sink, window):
    "A StartRecentKVCache(start=n_sink, recent=window − 1) fed one token at a time: distances inside the cache, NaN evicted."
    P, cache = torch.full((T, T), float("nan"), dtype=torch.float64), []
    for i in range(T):
        cache.append(i)
        for place, j in enumerate(cache): P[i, j] = len(cache) - 1 - place
        if len(cache) > n_sink + window - 1: cache = cache[:n_sink] + cache[len(cache) - (window - 1):]
    return P


T = 45
M, N = torch.arange(T)[:, None], torch.arange(T)[None, :]
CAUSAL = N <= M


@pytest.mark.parametrize("C,W", [(12, 2), (9, 0), (16, 11), (5, 4), (2, 1), (60, 5)])
def test_dca_map_is_chunkllamas(C, W):
    assert torch.equal(dca_relative(M, N, C, W)[CAUSAL], chunkllama_relative(T, C, W)[CAUSAL])
    assert dca_relative(M, N, C, W)[CAUSAL].max() <= C   # never read beyond C


@pytest.mark.parametrize("S,W", [(13, 4), (1, 0), (13, 0), (20, 19), (39, 5), (2, 1)])   # W < S <= T − 1: distance S itself is tested
def test_string_map_is_the_decoding_split(S, W):
    assert torch.equal(string_relative(M, N, S, W)[CAUSAL], string_decode_relative(T, S, W)[CAUSAL])


@pytest.mark.parametrize("ns,w", [(4, 8), (0, 5), (2, 1), (1, 30), (3, 3)])   # each evicts some key before a later query
def test_sinks_map_is_the_streaming_cache(ns, w):
    got, want = sinks_relative(M, N, ns, w)[CAUSAL], streaming_cache_relative(T, ns, w)[CAUSAL]
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(-1), want.nan_to_num(-1))


def rope_at(pe, q, k, P):
    "Scaled scores of q rotated by P[m, n] against unrotated k, pair by pair (−inf where P is NaN)."
    cos, sin = pe.tables(P.nan_to_num(0), 0)
    qr = apply_rotary(q[:, :, :, None, :], rotary_table(cos, sin, q.dtype))
    return (torch.einsum("bhmnd,bhnd->bhmn", qr, k) / math.sqrt(q.shape[-1])).masked_fill(P.isnan(), float("-inf"))


@pytest.mark.parametrize("spec,rel", [("dca:chunk=12:local=2", lambda: dca_relative(M, N, 12, 2)),
                                      ("dca:chunk=7:local=0", lambda: dca_relative(M, N, 7, 0)),
                                      ("string:shift=13:local=4", lambda: string_relative(M, N, 13, 4)),
                                      ("sinks:n=4:window=8", lambda: sinks_relative(M, N, 4, 8))])
def test_logits_are_rope_at_the_mapped_position(spec, rel):
    q, k, _ = qkv(T=T, seed=1)
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=64)
    pos = Positions.arange(2, T)
    got = pe.logits(q, k, pos, pos, 1 / math.sqrt(16))[..., CAUSAL]
    want = rope_at(pe, q, k, rel().double())[..., CAUSAL]
    assert torch.equal(got.isinf(), want.isinf())
    assert (got - want).nan_to_num(0).abs().max() < 1e-5


def test_dca_reads_keys_ahead_at_their_true_distance():
    "Bidirectional DCA: a key ahead is read at m − n (here m = 9, n = 11, s = 10: −2, not m mod s − n mod s = 8)."
    assert dca_relative(torch.tensor(9), torch.tensor(11), 12, 2) == -2
    P = dca_relative(M, N, 12, 2)
    assert torch.equal(P[~CAUSAL], (M - N).expand(T, T)[~CAUSAL])
    q, k, _ = qkv(T=T, seed=2)
    pe = build_pe("dca:chunk=12:local=2", n_heads=2, head_dim=16, max_len=64)
    pos = Positions.arange(2, T)
    assert (pe.logits(q, k, pos, pos, 1 / math.sqrt(16)) - rope_at(pe, q, k, P.double())).abs().max() < 1e-5


def test_dca_order_is_lost_past_the_local_window():
    "C = 12, W = 2: the query at 38 reads key 29 (9 back) at 3 like key 35, and key 28 closer than key 33."
    row = dca_relative(torch.tensor(38), torch.arange(20, 39), 12, 2)
    assert row[29 - 20] == row[35 - 20] == 3 and row[28 - 20] < row[33 - 20]


# -- parts equal logits, without building them ----------------------------------------------------------------------

SPECS = ["dca:chunk=48:local=4", "dca:chunk=7:local=0", "dca:chunk=100:local=30", "dca:chunk=601:local=1",
         "string:shift=40:local=8", "string:shift=3:local=1", "string:shift=1:local=0",
         "sinks:n=4:window=30", "sinks:n=1:window=3", "sinks:n=0:window=64", "sinks:n=10:window=1"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("offset", [0, 7])
def test_parts_equal_logits_without_building_them(spec, causal, offset):
    q, k, v = qkv(T=500, seed=3)   # 500 > the 256-query block: several blocks, several chunks
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=64)
    pos = Positions.arange(2, 500, offset=offset)
    ref = attention(q, k, v, pe, pos, path="naive", causal=causal)
    if spec.startswith("dca") and not causal:   # DCA is a causal method: bidirectional attention keeps the logits
        assert pe.attend(q, k, v, pos, pos, 0.25, False) is None
        return
    with torch.no_grad(): got = attention(q, k, v, _no_logits(pe), pos, path="chunked", causal=causal)
    assert (got - ref).abs().max() < 2e-5


@pytest.mark.parametrize("spec", ["dca:chunk=48:local=4", "string:shift=40:local=8", "sinks:n=4:window=30"])
@pytest.mark.parametrize("Tq", [1, 7, 60, 300])
def test_cached_queries_in_parts_are_the_last_rows(spec, Tq):
    "Decoding with a cache (queries at the last Tq of 300 positions, keys from 0): the parts give full attention's rows."
    Tk = 300
    q, k, v = qkv(B=1, T=Tk, seed=4)
    pe = build_pe(spec, n_heads=2, head_dim=16, max_len=64).eval()
    pos = Positions.arange(1, Tk)
    with torch.no_grad():
        ref = attention(q, k, v, pe, pos, path="naive")[:, :, Tk - Tq:]
        got = attention_at(q[:, :, Tk - Tq:], k, v, _no_logits(pe), pos[Tk - Tq:], pos)
    assert (got - ref).abs().max() < 2e-5


def test_rows_starting_at_different_positions_fall_back_to_the_logits():
    "Chunks and sinks are absolute positions: rows whose keys start at different positions take the logits path."
    q, k, v = qkv(B=2, T=30, seed=5)
    pos = Positions(torch.stack([torch.arange(30), torch.arange(30) + 5]))
    for spec in ("dca:chunk=12:local=2", "sinks:n=4:window=6"):
        pe = build_pe(spec, n_heads=2, head_dim=16, max_len=64)
        assert pe.attend(q, k, v, pos, pos, 0.25, True) is None
        with torch.no_grad():
            assert (attention(q, k, v, pe, pos, path="chunked") - attention(q, k, v, pe, pos, path="naive")).abs().max() < 1e-5


# -- reductions ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["naive", "chunked"])
def test_reductions_to_rope_and_real_changes(path):
    T2 = 300
    q, k, v = qkv(B=1, T=T2, seed=6)
    pos = Positions.arange(1, T2)
    def out(spec):
        with torch.no_grad(): return attention(q, k, v, build_pe(spec, n_heads=2, head_dim=16, max_len=64), pos, path=path)
    rope = out("rope")
    for spec in (f"dca:chunk={T2 + 8}:local=8", f"string:shift={T2 + 1}:local=3", "string:shift=40:local=40",
                 f"sinks:n=4:window={T2}", f"sinks:n=0:window={T2 + 50}"):
        assert (out(spec) - rope).abs().max() < 1e-5, spec
    for spec in ("dca:chunk=48:local=4", f"dca:chunk={T2 - 10}:local=0", "string:shift=40:local=8", f"string:shift={T2 - 1}:local=0",
                 "sinks:n=4:window=32", f"sinks:n=0:window={T2 - 20}"):
        assert (out(spec) - rope).abs().max() > 1e-3, spec   # the last ten queries capped, the farthest pair shifted, far keys out of reach


def test_bad_options_are_one_line_errors():
    for spec, msg in [("dca:chunk=8:local=8", "local < chunk"), ("string:shift=4:local=5", "local <= shift"),
                      ("sinks:window=0", ">= 1")]:
        with pytest.raises(ValueError, match=msg) as e: build_pe(spec, n_heads=2, head_dim=16, max_len=64)
        assert "\n" not in str(e.value)


def test_defaults_follow_the_authors():
    L = 4096
    b = lambda spec: build_pe(spec, n_heads=2, head_dim=16, max_len=L)
    d, s, k = b("dca"), b("string"), b("sinks")
    assert isinstance(d, DCA) and (d.chunk, d.local) == (3 * L // 4, 3 * L // 4 // 12)   # C = 3L/4, W = L/16
    assert isinstance(s, STRING) and (s.shift, s.local) == (int(0.33 * L), 128)
    assert isinstance(k, Sinks) and (k.n_sink, k.window) == (4, L - 4)


# -- extend on a Hugging Face model ---------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()
from lengthx.pretrained import extend, tiny_hf  # noqa: E402


@pytest.fixture(scope="module")
def llama():
    return tiny_hf("Llama")


def _logits(model, ids):
    with torch.no_grad(): return model(ids).logits


@pytest.mark.parametrize("spec", ["dca:chunk=12:local=2", "dca", "string:shift=5:local=2", "string",
                                  "sinks:n=2:window=6", "sinks"])
def test_extend_greedy_decoding_with_the_cache_equals_full_forwards(llama, spec):
    "30 tokens on a model trained on 16: several DCA chunks, STRING's shifted part, evicted keys; the spec changes the model."
    prompt = torch.randint(2, 128, (20,), generator=G(5))
    with extend(llama, spec) as ext:
        assert type(ext.pe) in (DCA, STRING, Sinks)
        out = llama.generate(prompt[None], attention_mask=torch.ones(1, 20, dtype=torch.long), max_new_tokens=10,
                             do_sample=False, pad_token_id=0)[0].tolist()
        seq = prompt.tolist()
        for _ in range(10): seq.append(int(_logits(llama, torch.tensor([seq]))[0, -1].argmax()))
        ours = _logits(llama, torch.tensor([seq]))
    assert out == seq, spec
    assert (ours - _logits(llama, torch.tensor([seq]))).abs().max() > 1e-2, "the extension changed nothing"


@pytest.mark.parametrize("spec", [f"dca:chunk=40:local=2", "string:shift=40:local=3", "sinks:n=4:window=40"])
def test_extend_is_the_model_as_shipped_where_the_map_is_the_identity(llama, spec):
    ids = torch.randint(2, 128, (1, 30), generator=G(6))
    shipped = _logits(llama, ids)
    with extend(llama, spec): ours = _logits(llama, ids)
    assert (ours - shipped).abs().max() < 1e-4
