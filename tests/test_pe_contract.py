"""The contract every registered positional encoding must keep (every example spec of every family).

1. causal: changing tokens after position t leaves the model's logits up to t unchanged;
2. every attention path that the PE allows agrees with the naive path to 1e-5 (float32);
3. at 8x the training length the model runs with finite outputs, or (learned table) fails with a clear error.
"""
import math

import pytest
import torch

from lengthx.attention import build_pe, check_paths_agree, known_pes, pe_examples
from lengthx.model import GPT, GPTConfig

SPECS = pe_examples("all")
TRAIN_LEN = 16


def tiny(spec: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe=spec, max_len=TRAIN_LEN, **kw)).eval()


def test_registry_is_populated():
    assert {"nope", "sinusoidal", "learned"} <= set(known_pes())
    assert len(SPECS) >= len(known_pes())


@pytest.mark.parametrize("spec", SPECS)
def test_causal(spec):
    m = tiny(spec)
    g = torch.Generator().manual_seed(1)
    # bytes with plenty of separators so bilevel PEs see several segments
    a = torch.randint(0, 256, (2, TRAIN_LEN), generator=g)
    a[:, ::5] = 10
    b = a.clone()
    b[:, 9:] = torch.randint(0, 256, (2, TRAIN_LEN - 9), generator=g)
    with torch.no_grad():
        la, lb = m(a), m(b)
    assert torch.allclose(la[:, :9], lb[:, :9], atol=1e-5), f"{spec}: future tokens changed past logits"
    assert not torch.allclose(la[:, 9:], lb[:, 9:], atol=1e-4), f"{spec}: changed tokens changed nothing"


@pytest.mark.parametrize("spec", SPECS)
def test_paths_agree(spec):
    diffs = check_paths_agree(spec, length=40)
    assert "chunked" in diffs and all(d <= 1e-5 for d in diffs.values()), diffs


@pytest.mark.parametrize("spec", SPECS)
def test_model_paths_agree(spec):
    m = tiny(spec)
    idx = torch.randint(0, 256, (2, TRAIN_LEN))
    with torch.no_grad():
        ref = m(idx, path="naive")
        for p in ("sdpa", "chunked"):
            if p == "sdpa" and (m.pe.uses_refine or m.pe.uses_logits or m.pe.uses_normalize):
                with pytest.raises(ValueError):
                    m(idx, path=p)
                continue
            assert (m(idx, path=p) - ref).abs().max() <= 1e-5, (spec, p)


@pytest.mark.parametrize("spec", SPECS)
def test_runs_at_8x_length(spec):
    m = tiny(spec)
    idx = torch.randint(0, 256, (1, 8 * TRAIN_LEN))
    if spec.split(":")[0] == "learned":
        with pytest.raises(ValueError, match="rows"):
            m(idx)
        return
    with torch.no_grad():
        out = m(idx)
    assert out.shape == (1, 8 * TRAIN_LEN, 256) and torch.isfinite(out).all(), spec


@pytest.mark.parametrize("spec", SPECS)
def test_trains_one_step(spec):
    "Gradients reach the PE's own parameters (if it has any) and the loss is finite."
    m = tiny(spec).train()
    idx = torch.randint(0, 256, (2, TRAIN_LEN))
    _, loss = m(idx, torch.roll(idx, -1, 1), path="naive")
    loss.backward()
    assert math.isfinite(loss.item())
    for name, p in m.pe.named_parameters():
        assert p.grad is not None, f"{spec}: PE parameter {name} got no gradient"


def test_unknown_spec_lists_close_names():
    with pytest.raises(ValueError, match="Did you mean 'nope'"):
        build_pe("nop", n_heads=2, head_dim=8)
    with pytest.raises(ValueError, match="Known:"):
        build_pe("zzzz", n_heads=2, head_dim=8)


def test_bad_path_is_rejected():
    m = tiny("nope")
    with pytest.raises(ValueError, match="unknown attention path"):
        m(torch.zeros(1, 4, dtype=torch.long), path="fast")
