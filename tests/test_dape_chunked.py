"""The chunked path trains: DAPE and CDAPE give the same outputs AND gradients on `chunked` as on `naive`, and under
autograd the chunked path keeps one query block's activations, not the T×T map's (chapter 1's `_chunked`)."""
import pytest
import torch

from lengthx.attention import attention, build_pe
from lengthx.model import GPT, GPTConfig

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
    T, block, B, width = 96, 16, 2, 32
    naive, chunked = saved_numels(spec, "naive", T, block), saved_numels(spec, "chunked", T, block)
    assert max(naive) >= B * width * T * T                 # naive keeps f's [B, 32, T, T] hidden activation
    assert max(chunked) < B * width * block * T            # chunked keeps nothing as large as one block's
    assert sum(chunked) < sum(naive) / 10


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
