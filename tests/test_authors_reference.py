"""Chapter 44's FoX, stick-breaking and PaTH against the authors' own pure-PyTorch references, on the same weights
and inputs. The references are the `naive.py` files of fla-core (flash-linear-attention's ops, where the FoX,
stick-breaking and PaTH authors keep their kernels): each imports only torch and einops, so it is loaded by its
file path and fla's package `__init__` (which pulls in triton) never runs. Skipped only where fla-core is not
installed (`pip install --no-deps fla-core==0.6.0`; CI installs it).

Conventions mapped: fla lays tensors out [B, T, H, D] (lengthx: [B, H, T, D]); FoX's `g` is the log forget gate
(lengthx's `log_f`) and the current token is attended; stick-breaking's `attend_current=False` is lengthx's default
and both return (output, remainder); PaTH's caller L2-normalizes w (lengthx's `householder` normalizes inside),
β = 2σ(·) ∈ (0, 2), and `g = 0` leaves PaTH without a forget gate. The references compute in float32 inside,
so lengthx (float64 here) agrees with them to float32 rounding."""
from __future__ import annotations

import ast
import importlib.util
import math
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from lengthx.attention import Positions, attention, build_pe, causal_mask
from lengthx.pe.successors import fox_attention, path_logits, stick_breaking_attention

FILES = {"fox": ("fla/ops/forgetting_attn/naive.py", "naive_forgetting_attn"),
         "stickbreak": ("fla/ops/stickbreaking_attn/naive.py", "naive_stickbreaking_attn"),
         "path": ("fla/ops/path_attn/naive.py", "naive_path_attn")}
TOL = 1e-5    # float32 rounding inside the references is ~1e-7 here; every wrong convention tried moves outputs by > 1e-2


def reference_file(design: str) -> Path:
    "The authors' reference file for `design` inside the installed fla-core (skips only where fla-core is absent)."
    try: dist = distribution("fla-core")
    except PackageNotFoundError: pytest.skip("fla-core is not installed: pip install --no-deps fla-core==0.6.0")
    path = Path(dist.locate_file(FILES[design][0]))
    assert path.is_file(), f"fla-core {dist.version} has no {FILES[design][0]}"
    return path


def reference(design: str):
    "The reference function, loaded from its file alone (fla's package __init__, which imports triton, is not run)."
    spec = importlib.util.spec_from_file_location(f"authors_{design}", reference_file(design))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, FILES[design][1])


def bthd(x: torch.Tensor) -> torch.Tensor:
    "lengthx's [B, H, T, ...] as fla's [B, T, H, ...]."
    return rearrange(x, "b h t ... -> b t h ...")


def inputs(B=2, H=3, T=20, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, B, H, T, D, generator=g, dtype=torch.float64).unbind(0), g


def gap(a: torch.Tensor, b: torch.Tensor) -> float: return (a.double() - b.double()).abs().max().item()


@pytest.mark.parametrize("design", sorted(FILES))
def test_reference_files_need_only_torch_and_einops(design):
    "What makes them loadable on a CPU without triton: their imports."
    tree = ast.parse(reference_file(design).read_text(encoding="utf-8"))
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in mods} <= {"torch", "einops", "math", "__future__"}, mods


def test_fox_attention_equals_the_authors():
    (q, k, v, _), g = inputs()
    log_f = F.logsigmoid(torch.randn(q.shape[:-1], generator=g, dtype=torch.float64) + 2)   # gates around σ(2)
    ours = fox_attention(q, k, v, log_f)
    ref = reference("fox")(bthd(q), bthd(k), bthd(v), bthd(log_f))
    assert gap(bthd(ours), ref) < TOL, f"FoX vs the authors: max |diff| = {gap(bthd(ours), ref):.2e}"


def test_fox_spec_equals_the_authors():
    "The trainable `fox` spec, its gates from the layer input, on the attention path the models use."
    (q, k, v, _), g = inputs()
    B, H, T, D = q.shape
    q, k, v = q.float(), k.float(), v.float()
    fox = build_pe("fox", n_heads=H, head_dim=D, d_model=16, n_layers=1)
    x = torch.randn(B, T, 16, generator=g)
    with torch.no_grad():
        fox.gate_w.normal_(0, 0.5); fox.gate_b.normal_(1.0, 1.0)
        ours = attention(q, k, v, fox, fox.gate(x, Positions.arange(B, T)), path="naive")
        ref = reference("fox")(bthd(q), bthd(k), bthd(v), bthd(fox.log_forget(x)))
    assert gap(bthd(ours), ref) < TOL, f"fox spec vs the authors: max |diff| = {gap(bthd(ours), ref):.2e}"


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_equals_the_authors(attend_current):
    (q, k, v, _), _ = inputs()
    o, rem = stick_breaking_attention(q, k, v, attend_current=attend_current)
    ref_o, ref_rem = reference("stickbreak")(bthd(q), bthd(k), bthd(v), attend_current=attend_current)
    d_o, d_rem = gap(bthd(o), ref_o), gap(bthd(rem), ref_rem)
    assert d_o < TOL and d_rem < TOL, f"stick-breaking vs the authors: max |diff| output {d_o:.2e}, remainder {d_rem:.2e}"


def test_stickbreak_spec_equals_the_authors():
    "The `stickbreak` spec puts the remainder on the query's own value: the authors' o + rem·v."
    (q, k, v, _), _ = inputs()
    B, H, T, D = q.shape
    q, k, v = q.float(), k.float(), v.float()
    with torch.no_grad():
        ours = attention(q, k, v, build_pe("stickbreak", n_heads=H, head_dim=D), Positions.arange(B, T), path="naive")
    ref_o, ref_rem = reference("stickbreak")(bthd(q), bthd(k), bthd(v))
    ref = ref_o + ref_rem[..., None] * bthd(v)
    assert gap(bthd(ours), ref) < TOL, f"stickbreak spec vs the authors: max |diff| = {gap(bthd(ours), ref):.2e}"


@pytest.mark.parametrize("chunk_size", [4, 8, 64])
def test_path_equals_the_authors(chunk_size):
    "PaTH's softmax over path_logits against the authors' UT-transform form (blocks of chunk_size, T = 20 pads)."
    (q, k, v, w), g = inputs()
    B, H, T, D = q.shape
    beta = 2 * torch.sigmoid(torch.randn(B, H, T, generator=g, dtype=torch.float64))        # β ∈ (0, 2)
    s = path_logits(q, k, w, beta).masked_fill(~causal_mask(T, T, q.device), float("-inf"))
    ours = s.softmax(-1) @ v
    ref = reference("path")(bthd(q), bthd(k), bthd(v), bthd(F.normalize(w, dim=-1)), bthd(beta),
                            torch.zeros(B, T, H, dtype=torch.float64), scale=1 / math.sqrt(D), chunk_size=chunk_size)
    assert gap(bthd(ours), ref) < TOL, f"PaTH vs the authors (chunk {chunk_size}): max |diff| = {gap(bthd(ours), ref):.2e}"
