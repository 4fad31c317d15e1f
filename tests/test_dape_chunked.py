"""The chunked path trains: DAPE and CDAPE give the same outputs AND gradients on `chunked` as on `naive`, and under
autograd the chunked path keeps one query block's activations, not the T×T map's (chapter 1's `_chunked`)."""
import pytest
import torch

from lengthx.attention import attention, build_pe
from lengthx.model import GPT, GPTConfig
from lengthx.pe.fused import eager_refine

SPECS = ["dape:kerple_log", "dape:variant=concat:alibi", "dape:variant=add_residual:t5", "dape:nope",
         "cdape:k=3:kerple_log", "cdape:k=5:variant=concat:alibi", "cdape:nope"]


def grads(spec: str, path: str, causal: bool, block: int, T: int = 37, B: int = 2, H: int = 4, D: int = 8):
    "Output and the gradients of every input and PE parameter of one attention call, with a fixed seed."
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=H, head_dim=D, max_len=64)
    for p in pe.parameters():   # random, non-zero parameters so that every term of f reaches the output
        with torch.no_grad(): p.normal_(0, 0.3)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    pos = pe.make_positions(torch.zeros(B, T, dtype=torch.long))
    out = attention(q, k, v, pe, pos, causal=causal, path=path, block=block)
    (out * torch.randn_like(out)).sum().backward()
    named = {"q": q.grad, "k": k.grad, "v": v.grad, **{n: p.grad for n, p in pe.named_parameters()}}
    return out.detach(), named


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("causal,block", [(True, 5), (True, 16), (False, 7), (True, 37)])
def test_chunked_outputs_and_gradients_equal_naive(spec, causal, block):
    o_ref, g_ref = grads(spec, "naive", causal, block)
    o, g = grads(spec, "chunked", causal, block)
    assert (o - o_ref).abs().max() < 1e-5
    assert g.keys() == g_ref.keys() and len(g) > 3          # q, k, v and at least one PE parameter
    for n in g_ref:
        assert g_ref[n] is not None and g[n] is not None, n
        assert g_ref[n].abs().max() > 0, n                   # the gradient is not trivially zero
        assert torch.allclose(g[n], g_ref[n], atol=1e-5, rtol=1e-4), (n, (g[n] - g_ref[n]).abs().max())


def saved_numels(spec: str, path: str, T: int = 96, block: int = 16, B: int = 2, H: int = 4, D: int = 8) -> list[int]:
    "Sizes of every tensor autograd saves for backward during one attention forward."
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=H, head_dim=D, max_len=T)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    pos = pe.make_positions(torch.zeros(B, T, dtype=torch.long))
    sizes = []
    def pack(t):
        sizes.append(t.numel()); return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attention(q, k, v, pe, pos, path=path, block=block)
    return sizes


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log"])
def test_chunked_training_memory_is_bounded_by_the_block(spec):
    T, block, B, width, H = 96, 16, 2, 32, 4
    with eager_refine():                                   # f written with torch ops (chapters 40, 41)
        naive, chunked = saved_numels(spec, "naive", T, block), saved_numels(spec, "chunked", T, block)
    assert max(naive) >= B * width * T * T                 # naive keeps f's [B, 32, T, T] hidden activation
    assert max(chunked) < B * width * block * T            # chunked keeps nothing as large as one block's
    assert sum(chunked) < sum(naive) / 10
    fused = saved_numels(spec, "naive", T, block)          # the fused kernel (chapter 43) recomputes the hidden map in backward
    assert max(fused) <= B * H * T * T and sum(fused) < sum(naive) / 4


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:alibi"])
def test_model_training_step_chunked_equals_naive(spec):
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe=spec, max_len=64))
    idx = torch.randint(0, 256, (2, 41))
    got = {}
    for path in ("naive", "chunked"):
        m.zero_grad()
        _, loss = m(idx, idx, path=path)
        loss.backward()
        got[path] = (loss.item(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert abs(got["naive"][0] - got["chunked"][0]) < 1e-5
    assert got["naive"][1].keys() == got["chunked"][1].keys()
    for n, g in got["naive"][1].items(): assert torch.allclose(got["chunked"][1][n], g, atol=1e-5, rtol=1e-4), n


# The fast forms of f (channel-first batched matmuls; CDAPE's columns and tap shift-sum) against the plain ones.
from lengthx.attention import CHUNK_INFER_LEN, CHUNK_TRAIN_LEN, causal_mask, pick_path  # noqa: E402
from lengthx.pe.cdape import ScoreConv  # noqa: E402
from lengthx.pe.dape import ScoreMLP  # noqa: E402


def fast_and_plain(f, parts, **kw):
    "Outputs and gradients (every input and parameter) of f's fast forward and of its plain reference, one cotangent."
    parts = [p.detach().requires_grad_() for p in parts]
    wrt = [*parts, *f.parameters()]
    fast, plain = f(*parts, **kw), f.reference(*parts, **kw)
    g = torch.randn_like(fast)
    return (fast, torch.autograd.grad((fast * g).sum(), wrt)), (plain, torch.autograd.grad((plain * g).sum(), wrt))


@pytest.mark.parametrize("bias_batch", [1, 3])
@pytest.mark.parametrize("make", [lambda: ScoreMLP(8, 16, 4), lambda: ScoreConv(8, 16, 4, k=1),
                                  lambda: ScoreConv(8, 16, 4, k=3), lambda: ScoreConv(8, 16, 4, k=5)])
@pytest.mark.parametrize("masked", [False, True])
def test_fast_f_equals_plain_f(make, bias_batch, masked):
    torch.manual_seed(1)
    f = make()
    for p in f.parameters():
        with torch.no_grad(): p.normal_(0, 0.3)
    s, b = torch.randn(3, 4, 7, 11), torch.randn(bias_batch, 4, 7, 11)
    kw = {"mask": causal_mask(7, 11, q_offset=4)} if masked and isinstance(f, ScoreConv) else {}
    (o, g), (o_ref, g_ref) = fast_and_plain(f, [s, b], **kw)
    assert o.shape == o_ref.shape == (3, 4, 7, 11)
    assert (o - o_ref).abs().max() < 1e-5
    assert len(g) == len(g_ref) == 2 + len(list(f.parameters()))
    for a, r in zip(g, g_ref):
        assert r.abs().max() > 0
        assert torch.allclose(a, r, atol=1e-5, rtol=1e-4), (a - r).abs().max()


def test_pick_path_chunks_refine_pes_at_inference_only():
    pe = build_pe("dape:kerple_log", n_heads=4, head_dim=8, max_len=64)
    cpu = torch.device("cpu")
    with torch.no_grad():
        assert pick_path(pe, CHUNK_INFER_LEN, cpu) == "naive" and pick_path(pe, CHUNK_INFER_LEN + 1, cpu) == "chunked"
    assert CHUNK_INFER_LEN < CHUNK_TRAIN_LEN
    assert pick_path(pe, CHUNK_TRAIN_LEN, cpu) == "naive"                # autograd on: chunked would recompute each block
    assert pick_path(pe, CHUNK_TRAIN_LEN + 1, cpu) == "chunked"          # ... until f's T×T hidden map would not fit
    assert pick_path(build_pe("kerple_log", n_heads=4, head_dim=8, max_len=64), CHUNK_INFER_LEN + 1, cpu) == "sdpa"


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log"])
def test_auto_inference_beyond_chunk_infer_len_equals_naive(spec):
    torch.manual_seed(0)
    T = CHUNK_INFER_LEN + 37                       # not a multiple of the block
    m = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe=spec, max_len=T)).eval()
    for p in m.pe.parameters():
        with torch.no_grad(): p.normal_(0, 0.3)
    idx = torch.randint(0, 256, (1, T))
    with torch.no_grad():
        assert pick_path(m.pe, T, idx.device) == "chunked"
        auto, naive = m(idx), m(idx, path="naive")
    assert (auto - naive).abs().max() < 1e-4
