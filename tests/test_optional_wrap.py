"""Families whose inner PE is optional (`register_pe(..., wraps=True, inner_default=...)`): FoX around any softmax PE.

`fox` must stay the model it was (the same parameters drawn in the same order, bitwise the same logits) and equal
`fox:nope`; `fox:rope` and `fox:alibi` are checked against RoPE's rotation and ALiBi's bias plus FoX's sum of log
gates written out by a loop; an inner FoX cannot wrap is refused with one clear line; the spec grammar, the help
and the layer patterns show the new form.
"""

import pytest
import torch

from lengthx import attention as lx
from lengthx.attention import (PE, Positions, attention, build_pe, parse_spec, pe_help,
                               pe_options_markdown, register_pe)
from lengthx.cli import main
from lengthx.model import GPT, GPTConfig, layer_specs
from lengthx.pe.bias import alibi_slopes
from lengthx.pe.successors import FoX
from test_successor_specs import fox_loop_bias, softmax_ref   # the loop references, written once

B, H, T, D, DM = 2, 4, 10, 8, 32
PATHS = ("naive", "sdpa", "flex", "chunked")



def random_fox(spec, seed=1):
    "The PE of `spec` with gates that differ per token and head (the initial ones are all near 1/2)."
    torch.manual_seed(seed)
    pe = build_pe(spec, n_heads=H, head_dim=D, d_model=DM, n_layers=2)
    with torch.no_grad():
        pe.gate_w.normal_(0, 0.3)
        pe.gate_b.normal_(0, 1.0)
    return pe


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in [(B, H, T, D)] * 3 + [(B, T, DM)]]


def logits_of(spec_or_model):
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(): return spec_or_model(ids)


# ---- `fox` is unchanged, and is `fox:nope` ----------------------------------------------------------

def test_fox_is_the_model_it_was_and_fox_nope_is_the_same(monkeypatch):
    "Same seed: `fox`, `fox:nope` and a model whose `fox` is the registration before inners, FoX(ctx, PE(ctx)), agree bit for bit."
    def model(spec):
        torch.manual_seed(0)
        return GPT(GPTConfig(pe=spec, n_layer=2, n_head=H, d_model=DM)).eval()
    new, nope = model("fox"), model("fox:nope")
    assert isinstance(new.pe, FoX) and type(new.pe.inner) is PE and new.pe.spec == "fox" and nope.pe.spec == "fox:nope"
    with monkeypatch.context() as m:
        m.setattr(lx._REGISTRY["fox"], "builder", lambda ctx, inner: FoX(ctx, PE(ctx)))   # the old builder ignored any inner
        old = model("fox")
    for other in (nope, old):
        a, b = new.state_dict(), other.state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)   # the same parameters, drawn in the same order
        assert torch.equal(logits_of(new), logits_of(other))


# ---- FoX around another PE --------------------------------------------------------------------------

def test_fox_rope_is_ropes_rotation_plus_foxs_bias():
    "fox:rope on every path = softmax(R(q)·R(k)/√d + Σ log f) with R RoPE's own rotation and the log gates summed by a loop."
    pe, rope = random_fox("fox:rope"), build_pe("rope", n_heads=H, head_dim=D)
    assert pe.inner.spec == "rope" and pe.uses_rotate and pe.uses_gate and pe.uses_bias
    q, k, v, x = inputs()
    pos = Positions.arange(B, T)
    rq, rk = rope.rotate(q, k, pos)
    assert not torch.allclose(rq, q)                                    # the rotation is not the identity here
    for layer in (0, 1):
        ref = softmax_ref(rq, rk, v, fox_loop_bias(pe, x, layer))
        g = pe.gate(x, pos, layer)
        with torch.no_grad():
            for path in PATHS:
                out = attention(q, k, v, pe, g, path=path, layer=layer, block=4)
                assert torch.allclose(out.double(), ref, atol=1e-5), (layer, path)


@pytest.mark.parametrize("inner", ["alibi", "kerple_log"])
def test_fox_bias_adds_to_the_inner_bias(inner):
    "fox:alibi's bias = ALiBi's −m_h·(i − j) + Σ log f (causal part); fox:kerple_log's = its own KERPLE's + Σ log f; attention follows."
    pe = random_fox(f"fox:{inner}")
    assert pe.inner.spec == inner
    q, k, v, x = inputs(1)
    pos = Positions.arange(B, T)
    g = pe.gate(x, pos, 1)
    got = pe.bias(g, g, 1).double()
    if inner == "alibi":
        i = torch.arange(T)
        own = (-alibi_slopes(H)[:, None, None] * (i[:, None] - i[None, :]).clamp(min=0)).double()   # written out, not the module's
        assert torch.allclose(pe.inner.bias(pos, pos).double().tril(), own.tril(), atol=1e-6)
    else:
        own = pe.inner.bias(pos, pos, 1).double()
    want = fox_loop_bias(pe, x, 1) + own
    assert torch.allclose(got.tril(), want.tril(), atol=1e-5)
    ref = softmax_ref(q, k, v, want)
    with torch.no_grad():
        for path in PATHS:
            assert torch.allclose(attention(q, k, v, pe, g, path=path, layer=1, block=4).double(), ref, atol=1e-5), path


# ---- what FoX cannot wrap ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, says", [
    ("fox:stickbreak", "its weights are not a softmax"),
    ("fox:sink:nope", "its weights are not a softmax"),
    ("fox:dape:kerple_log", "refines the biased logits"),
    ("fox:cdape:k=3:alibi", "refines the biased logits"),
    ("fox:fox", "reads gates of its own"),
    ("fox:fox:rope", "reads gates of its own"),
])
def test_an_inner_fox_cannot_wrap_is_refused(spec, says):
    with pytest.raises(ValueError) as e:
        build_pe(spec, n_heads=H, head_dim=D, d_model=DM)
    msg = str(e.value)
    assert msg.startswith(f"bad PE spec {spec!r}: fox cannot wrap ") and says in msg and "\n" not in msg, msg


def test_the_way_round_that_works_builds():
    "The refusals point to these: FoX inside the sink or the refinement."
    for spec in ("sink:fox", "sink:fox:rope", "dape:fox:kerple_log"):
        pe = build_pe(spec, n_heads=H, head_dim=D, d_model=DM)
        assert pe.spec == spec and pe.uses_gate


# ---- the grammar -----------------------------------------------------------------------------------

def test_an_omitted_inner_is_the_familys_default():
    assert lx._REGISTRY["fox"].wraps and lx._REGISTRY["fox"].inner_default == "nope"
    assert parse_spec("fox") == parse_spec("fox:nope") == ("fox", {}, "nope")
    assert parse_spec(" FOX :rope") == ("fox", {}, "rope")
    assert parse_spec("fox:rope:pi=4") == ("fox", {}, "rope:pi=4")
    assert parse_spec("sink:fox") == ("sink", {}, "fox")
    # options before an inner still parse for the families that have both; a family with no default still needs one
    assert parse_spec("cdape:k=3:window:w=4:kerple_log") == ("cdape", {"k": 3}, "window:w=4:kerple_log")
    assert parse_spec("dape:variant=add_residual:alibi")[1] == {"variant": "add_residual"}
    for bad, says in [("dape", "'dape' wraps another PE"), ("sink", "'sink' wraps another PE"),
                      ("fox:k=1:rope", "unknown option 'k' for 'fox'"), ("fox:", "empty field"), ("fox:ropee", "Did you mean 'rope'")]:
        with pytest.raises(ValueError, match="bad PE spec") as e: parse_spec(bad)
        assert says in str(e.value), (bad, str(e.value))


def test_inner_default_needs_a_wrapping_family():
    with pytest.raises(TypeError, match="needs wraps=True"):
        register_pe("_test_optional", inner_default="nope")(lambda ctx: PE(ctx))
    assert "_test_optional" not in lx._REGISTRY


def test_a_layer_pattern_of_fox_rope_and_nope():
    cfg = GPTConfig(pe="fox:rope/nope", n_layer=2, n_head=H, d_model=DM)
    assert layer_specs(cfg) == ["fox:rope", "nope"]
    torch.manual_seed(0)
    m = GPT(cfg).eval()
    assert [m.pe.at(i).spec for i in range(2)] == ["fox:rope", "nope"] and isinstance(m.pe.at(0), FoX)
    assert m.pe.at(0).inner.spec == "rope" and m.pe.at(0).uses_rotate and not m.pe.at(1).uses_gate
    y = logits_of(m)
    assert torch.isfinite(y).all()


def test_help_and_errors_show_the_optional_inner(capsys):
    text = pe_help("fox")
    assert "spec: fox[:option=value]...[:<inner spec>]" in text and "fox = fox:nope" in text
    assert "spec: dape[:option=value]...:<inner spec>" in pe_help("dape")             # a required inner stays required
    assert all(e in text for e in ("fox:rope", "fox:alibi"))
    assert "| `fox` (wraps a PE, `nope` if none) |" in pe_options_markdown()
    assert main(["--help-pe", "fox"]) == 0 and "[:<inner spec>]" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"\[:inner spec\], e\.g\. dape:kerple_log, fox:rope"):
        build_pe("fxo", n_heads=H, head_dim=D)
    assert {"fox", "fox:rope", "fox:alibi", "fox:kerple_log"} <= set(lx.pe_examples("all"))
    assert "fox" in lx.pe_examples("default") and "fox:rope" not in lx.pe_examples("default")
