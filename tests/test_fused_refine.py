"The fused DAPE/CDAPE refine kernel (C++ on the CPU, Triton under its interpreter) against the plain `reference` form: values and every gradient."
import pytest
import torch

import lengthx.pe.fused as fused
from lengthx.attention import Positions, attention, build_pe, causal_mask
from lengthx.pe.cdape import tril_masked

SPECS = ["dape:kerple_log", "dape:variant=concat:kerple_log", "dape:variant=add_residual:alibi", "dape:nope", "dape:width=5:kerple_log",
         "cdape:k=3:kerple_log", "cdape:k=5:variant=concat:alibi", "cdape:k=3:variant=add_residual:kerple_log", "cdape:nope"]


# on a GPU the compiled Triton kernel runs the same tests (the interpreter test below proves the program on every machine)
on_gpu = pytest.mark.skipif(not torch.cuda.is_available() or fused.triton is None, reason="needs a CUDA GPU and triton")
DEVICES = ["cpu", pytest.param("cuda", marks=on_gpu)]
TOL = fused.REFINE_TOL   # float32, relative: the GPU's atomics add the weight gradients in no fixed order


@pytest.fixture
def exact_cuda():
    "float32 products on the GPU without TF32 (cuDNN's convolutions use it by default), so the reference is exact float32."
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def reference_logits(pe, scores, bias, mask):
    "The refined logits written plainly with f.reference: concatenate, (tril,) nn.Linear / nn.Conv2d, LeakyReLU, again."
    f = pe.f[0]
    ref = (lambda *p: f.reference(*p, mask=mask)) if hasattr(f, "conv1") else (lambda *p: f.reference(*p))
    if bias is None or pe.variant == "add_residual": return scores + ref(scores)
    s = scores - bias
    return (s if pe.variant == "concat" else scores) + ref(s, bias.expand_as(s))


def grads_of(fn, leaves, seed=1):
    "Output (visible keys only) and the gradients of every leaf under a fixed random cotangent."
    for t in leaves: t.grad = None
    out, mask = fn()
    if mask is not None: out = out.masked_fill(~mask, 0.0)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).to(out.device, out.dtype)
    (out * g).sum().backward()
    return [out.detach().float()] + [torch.zeros(1, device=out.device) if t.grad is None else t.grad.float().clone() for t in leaves]


def assert_close_all(got, want, rtol, atol=1e-6):
    "Each tensor within rtol of its largest reference value (plus atol: a gradient that is zero in exact arithmetic)."
    for i, (a, b) in enumerate(zip(got, want)):
        scale = b.abs().max()
        assert (a - b).abs().max() <= rtol * scale + atol, f"tensor {i}: max |Δ| {(a - b).abs().max():.3g} vs scale {scale:.3g}"


def case(spec, B, H, Tq, Tk, causal, shared, dtype=torch.float32, seed=0, device="cpu"):
    torch.manual_seed(seed)
    pe = build_pe(spec, n_heads=H, head_dim=8).to(dtype)
    for p in pe.parameters(): p.data.normal_(0, 0.3)   # not the init: every unit on both sides of its kink
    pe = pe.to(device)
    s = torch.randn(B, H, Tq, Tk, dtype=dtype).to(device).requires_grad_()
    b = torch.randn(1 if shared else B, H, Tq, Tk, dtype=dtype).to(device).requires_grad_()
    bias = b if pe.inner.uses_bias else None
    mask = causal_mask(Tq, Tk, q_offset=Tk - Tq).to(device) if causal else None
    return pe, s, b, bias, mask, [s, b] + list(pe.f[0].parameters())


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("B,Tq,Tk,causal,shared", [(2, 37, 37, True, True),      # odd length, one tile
                                                   (1, 5, 300, True, False),     # keys across three 128-key tiles, offset mask
                                                   (2, 129, 129, True, False),   # a tile edge at 128
                                                   (1, 20, 20, False, True)])    # no mask
@pytest.mark.parametrize("device", DEVICES)
def test_kernel_equals_reference(spec, B, Tq, Tk, causal, shared, device, exact_cuda):
    "The C++ kernel (CPU) or the compiled Triton kernel (GPU): outputs and every gradient against the plain form."
    pe, s, b, bias, mask, leaves = case(spec, B, 4, Tq, Tk, causal, shared, device=device)
    assert fused.kernel_ready(s), fused.build_info()
    got = grads_of(lambda: (fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant), mask), leaves)
    want = grads_of(lambda: (reference_logits(pe, s + b, bias, mask), mask), leaves)
    assert_close_all(got, want, TOL[device])


def test_kernel_masks_hidden_keys_with_minus_inf():
    pe, s, b, bias, mask, _ = case("cdape:k=3:kerple_log", 1, 4, 9, 9, True, True)
    out = fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant)
    assert torch.isneginf(out[..., ~mask]).all() and torch.isfinite(out[..., mask]).all()


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:variant=concat:kerple_log"])
@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_within_tolerance(spec, device, exact_cuda):
    "bf16 in and out, float32 inside: within 2% of the largest value of the float32 reference on the same bf16 inputs A = S + B and B."
    pe, s, b, bias, mask, _ = case(spec, 2, 4, 33, 33, True, True, dtype=torch.bfloat16, device=device)
    a = (s + b).detach().requires_grad_()
    got = grads_of(lambda: (fused.fused_refine(pe.f[0], a, b, mask, pe.variant), mask), [a, b] + list(pe.f[0].parameters()))
    assert a.grad.dtype == b.grad.dtype == torch.bfloat16
    pe32 = pe.float()
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    want = grads_of(lambda: (reference_logits(pe32, a32, b32, mask), mask), [a32, b32] + list(pe32.f[0].parameters()))
    assert_close_all(got, want, 2e-2)


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log", "dape:variant=concat:fire"])
@pytest.mark.parametrize("path", ["naive", "chunked"])
@pytest.mark.parametrize("device", DEVICES)
def test_attention_gradients_match_eager(spec, path, device, monkeypatch, exact_cuda):
    "Through attention: the output and the gradients of q, k, v, the base PE's and f's parameters, kernel against eager; the kernel ran."
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=4, head_dim=8, max_len=64).to(device)
    q, k, v = (torch.randn(2, 4, 45, 8, device=device, requires_grad=True) for _ in range(3))
    pos = Positions.arange(2, 45, device=device)
    leaves = [q, k, v] + list(pe.parameters())
    calls = []
    real = fused.FusedRefine.apply
    monkeypatch.setattr(fused.FusedRefine, "apply", lambda *a: calls.append(1) or real(*a))
    run = lambda: (attention(q, k, v, pe, pos, path=path, block=16), None)
    got = grads_of(run, leaves)
    assert len(calls) == (6 if path == "chunked" else 1)   # chunked: 3 query blocks, each run again in backward
    with fused.eager_refine():
        want = grads_of(run, leaves)
    assert len(calls) == (6 if path == "chunked" else 1)   # switched off: not called
    assert_close_all(got, want, TOL[device], atol=1e-5)   # f's output bias: zero gradient (softmax ignores a shift), ~1e-7 in float32


def test_without_a_compiler_the_eager_path_runs(monkeypatch, capsys):
    "A failed build: one line on stderr, then DAPE's eager refine, with the same result as the reference."
    monkeypatch.setattr(fused, "_CPU", {})
    def no_compiler(): raise RuntimeError("g++: command not found")
    monkeypatch.setattr(fused, "_compile_cpu", no_compiler)
    pe, s, b, bias, mask, _ = case("dape:kerple_log", 1, 4, 12, 12, True, True)
    out = pe.refine(s + b, bias, mask)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "eager path" in lines[0] and "g++" in lines[0]
    assert "error" in fused.build_info() and fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant) is None
    torch.testing.assert_close(out, reference_logits(pe, s + b, bias, mask))
    pe.refine(s + b, bias, mask)
    assert capsys.readouterr().err == ""   # said once


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("LENGTHX_FUSED", "off")
    pe, s, b, bias, mask, _ = case("cdape:k=3:kerple_log", 1, 4, 12, 12, True, True)
    assert fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant) is None
    out = pe.refine(s + b, bias, mask)
    assert torch.isfinite(out).all()   # the eager form: no −inf written above the diagonal


def test_a_mask_that_is_not_a_prefix_falls_back():
    pe, s, b, bias, mask, _ = case("dape:kerple_log", 1, 4, 6, 6, True, True)
    odd = mask.clone(); odd[3, 1] = False
    assert fused.visible_counts(odd, 6, 6) is None and fused.fused_refine(pe.f[0], s + b, bias, odd, pe.variant) is None
    assert fused.visible_counts(mask, 6, 6).tolist() == [1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(fused.triton is None, reason="triton is not installed")
@pytest.mark.parametrize("spec,causal,shared", [("dape:kerple_log", True, True), ("cdape:k=3:variant=concat:kerple_log", True, False),
                                                ("cdape:k=3:nope", False, True)])
def test_triton_kernel_equals_reference_under_interpreter(spec, causal, shared):
    "The GPU kernel, run by Triton's interpreter on the CPU: outputs and gradients on a small odd shape over two key tiles."
    pe, s, b, bias, mask, leaves = case(spec, 2, 4, 7, 70, causal, shared)
    got = grads_of(lambda: (fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant, interpret=True), mask), leaves)
    want = grads_of(lambda: (reference_logits(pe, s + b, bias, mask), mask), leaves)
    assert_close_all(got, want, TOL["cpu"])


def test_a_subclass_that_rewrites_f_keeps_its_own_forward():
    "Chapter 41's variants (a conv without the hidden tril, left padding) subclass ScoreConv: the kernel must not stand in for them."
    from torch.nn import functional as F
    from lengthx.pe.cdape import CDAPE, ScoreConv

    class InputTrilOnly(ScoreConv):
        def forward(self, *parts, mask=None):
            x = torch.cat([p.expand(2, *p.shape[1:]) for p in parts], dim=1)
            return self.conv2(F.leaky_relu(self.conv1(tril_masked(x, mask)), self.slope))

    pe, s, b, bias, mask, _ = case("cdape:k=3:kerple_log", 2, 4, 12, 12, True, True)
    f = InputTrilOnly(8, 32, 4, 3); f.load_state_dict(pe.f[0].state_dict())
    assert fused.fused_refine(f, s + b, bias, mask, pe.variant) is None
    assert fused.fused_refine(pe.f[0], s + b, bias, mask, pe.variant) is not None


def _has_ptxas() -> bool:
    "Triton's wheel ships NVIDIA's assembler, which compiling for a GPU this machine lacks needs."
    import pathlib
    return fused.triton is not None and any(pathlib.Path(fused.triton.__file__).parent.glob("backends/nvidia/bin/ptxas"))


@pytest.mark.skipif(not _has_ptxas(), reason="triton with its bundled ptxas is not installed")
@pytest.mark.parametrize("k", [1, 3])
def test_backward_kernel_fits_hopper_shared_memory(k):
    "Compiled for sm_90 without a GPU: the backward as launched fits in a program's 227 KiB (pipelined, CDAPE's did not: 472 KiB)."
    assert fused.kernel_shared_bytes("bwd", 8, k) <= fused.SM90_SHARED
