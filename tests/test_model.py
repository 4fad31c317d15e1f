"""The GPT model: configuration and input validation, the FLOP estimate against a FLOP count, presets."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lengthx.model import GPT, PRESET_ALIASES, PRESETS, GPTConfig, flops_per_token


@pytest.mark.parametrize("field,value", [("max_len", 0), ("max_len", -3), ("vocab_size", 0), ("n_layer", 0),
                                         ("n_head", 0), ("d_model", 0), ("mlp_ratio", 0), ("n_layer", 2.5),
                                         ("vocab_size", True), ("max_len", "1024")])
def test_bad_sizes_are_one_line_errors_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"GPTConfig.{field}") as e:
        GPTConfig(**{field: value})
    assert "\n" not in str(e.value)


def test_other_bad_fields():
    with pytest.raises(ValueError, match="n_head must divide d_model"): GPTConfig(n_head=5, d_model=64)
    with pytest.raises(ValueError, match="dropout"): GPTConfig(dropout=1.0)
    with pytest.raises(ValueError, match="dropout"): GPTConfig(dropout=-0.1)
    with pytest.raises(ValueError, match="attn_path"): GPTConfig(attn_path="fast")
    with pytest.raises(ValueError, match="GPTConfig.pe"): GPTConfig(pe="")


@pytest.fixture(scope="module")
def tiny():
    return GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe="alibi", max_len=32)).eval()


@pytest.mark.parametrize("ids,lo,hi", [([[0, 256]], 0, 256), ([[-1, 5]], -1, 5), ([[300, 1000]], 300, 1000)])
def test_out_of_vocabulary_ids_are_one_line_errors(tiny, ids, lo, hi):
    with pytest.raises(ValueError, match=rf"token ids must be in 0\.\.255 .* got ids in {lo}\.\.{hi}") as e:
        tiny(torch.tensor(ids))
    assert "\n" not in str(e.value)


def test_bad_id_tensors(tiny):
    with pytest.raises(ValueError, match="integer token ids"): tiny(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"\[B, T\]"): tiny(torch.zeros(4, dtype=torch.long))
    assert tiny(torch.tensor([[0, 255, 7]])).shape == (1, 3, 256)   # the edges of the vocabulary are fine


@pytest.mark.parametrize("n_layer,d_model,T", [(1, 32, 64), (2, 64, 96), (3, 48, 40)])
def test_flop_estimate_matches_counted_matmul_flops(n_layer, d_model, T):
    "6N + 12·L·T·d with N = 12·L·d² + V·d is what torch counts for one naive-path training step (matmuls only)."
    cfg = GPTConfig(n_layer=n_layer, n_head=4, d_model=d_model, pe="nope", max_len=T)
    m, B = GPT(cfg), 2
    ids = torch.randint(0, 256, (B, T))
    with FlopCounterMode(display=False) as fc:
        _, loss = m(ids, ids, path="naive"); loss.backward()
    counted = fc.get_total_flops() / (B * T)
    assert abs(counted - flops_per_token(cfg, T)) / counted < 0.01, (counted, flops_per_token(cfg, T))
    assert abs(counted - (flops_per_token(cfg, T) - 6 * n_layer * T * d_model)) / counted > 0.01   # 6·L·T·d would fail


def test_preset_alias_and_honest_size():
    assert PRESET_ALIASES == {"gpt2-125m": "gpt2-small"}
    assert GPTConfig.preset("gpt2-125m", pe="nope") == GPTConfig.preset("gpt2-small", pe="nope")
    c = GPTConfig.preset("gpt2-small")
    assert (c.n_layer, c.n_head, c.d_model) == (12, 12, 768) and set(PRESETS) >= {"tiny", "small", "gpt2-small", "gpt2-125m"}
    with pytest.raises(ValueError, match="unknown preset"): GPTConfig.preset("gpt2-xl")


def test_shared_bias_is_computed_once_per_forward():
    for spec, expected in (("alibi", 1), ("kerple_log:per_layer=true", 3)):
        m = GPT(GPTConfig(n_layer=3, n_head=2, d_model=16, pe=spec, max_len=32)).eval()
        calls, inner = [], m.pe.bias
        m.pe.bias = lambda *a, **kw: calls.append(1) or inner(*a, **kw)
        with torch.no_grad(): m(torch.randint(0, 256, (1, 20)), path="sdpa")
        assert len(calls) == expected, spec



@pytest.mark.parametrize("pe,T", [("alibi", 40), ("fire", 40), ("fire", 80), ("kerple_log:per_layer=true", 40),
                                  (["alibi", "kerple_log"], 40), ("t5", 40)])
def test_bias_paths_agree_with_the_shared_bias_and_without_it(pe, T):
    "naive (shared T×T bias), sdpa (shared key-reversed or dense mask), chunked and auto: the same logits, shared or not."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=3, n_head=4, d_model=32, pe=pe, max_len=32)).eval()   # fire at T=80: past its threshold L
    ids = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = m(ids, path="naive")
        outs = [m(ids, path=p) for p in ("sdpa", "chunked", "auto")]
        m._shared = lambda *a: (None, None)   # every layer asks its PE
        outs += [m(ids, path="naive"), m(ids, path="sdpa")]
    assert ref.std() > 0.1
    for o in outs: torch.testing.assert_close(o, ref, atol=2e-5, rtol=0)

# --- a position design per layer (GPTConfig(pe=[...])) ---------------------------------------------------------------
from lengthx.attention import build_pe
from lengthx.model import LayerPattern, check_model_spec, layer_specs, pattern_spec, pattern_specs

IROPE = ["rope", "rope", "rope", "nope"]


def _model(pe, n_layer=4, seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_layer=n_layer, n_head=4, d_model=32, pe=pe, max_len=32, **kw)).eval()


def test_pattern_is_stored_as_one_canonical_string():
    assert pattern_spec(IROPE) == GPTConfig(n_layer=4, pe=IROPE).pe == "rope/rope/rope/nope"
    assert pattern_spec([" ROPE ", "nope", "rope", "nope"]) == "rope/nope"          # the shortest repeating cycle
    assert pattern_spec(["rope", "nope", "rope"]) == "rope/nope/rope"               # not a repetition: kept
    assert pattern_spec(["alibi"]) == pattern_spec("alibi") == GPTConfig(pe=" ALIBI ").pe == "alibi"
    assert pattern_spec("rope / nope") == "rope/nope" and pattern_specs("window:w=4:rope/nope") == ["window:w=4:rope", "nope"]
    cfg = GPTConfig(n_layer=4, pe=("rope", "rope", "nope"))
    assert layer_specs(cfg) == ["rope", "rope", "nope", "rope"]                       # a cycle shorter than n_layer
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("pe,match", [([], "non-empty"), (["rope", ""], "non-empty"), (["rope", 3], "non-empty"),
                                      (["rope", "ropee"], "unknown positional encoding 'ropee'"),
                                      ("rope//nope", "non-empty"), (["rope", "nope", "alibi"], "n_layer=2")])
def test_bad_patterns_are_one_line_errors(pe, match):
    with pytest.raises(ValueError, match=match) as e: GPTConfig(n_layer=2, pe=pe)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("pe,match", [(["rope", "randomized:rope"], "different positions"),
                                      (["rope", "bipe:alibi"], "different positions"),
                                      (["rope", "sinusoidal"], "input embedding")])
def test_incompatible_layer_pes_are_refused(pe, match):
    with pytest.raises(ValueError, match=match): GPT(GPTConfig(n_layer=2, pe=pe))
    with pytest.raises(ValueError, match=match): check_model_spec(GPTConfig(n_layer=2, pe=pe))


@pytest.mark.parametrize("plain,twin", [("rope", "rope:base=10000.0"), ("alibi", "alibi:scale=1.0")])
def test_a_pattern_of_equal_pes_equals_the_plain_spec_bit_for_bit(plain, twin):
    "Two distinct specs that compute the same thing, one per layer, give exactly the plain spec's logits, on every path."
    a, b = _model(plain), _model([plain, twin])
    assert isinstance(b.pe, LayerPattern) and b.layer_pe(0) is not b.layer_pe(1)
    b.load_state_dict(a.state_dict(), strict=False)
    x = torch.randint(0, 256, (2, 24))
    with torch.no_grad():
        for path in (None, "naive", "sdpa", "chunked"):
            assert torch.equal(a(x, path=path), b(x, path=path)), path


def _by_hand(model: GPT, specs: list, x: torch.Tensor) -> torch.Tensor:
    "The model's forward with each block given a PE built on its own from that layer's spec."
    c = model.cfg
    pos = torch.arange(x.shape[1]).expand_as(x)
    from lengthx.attention import Positions
    h = model.tok(x)
    for i, blk in enumerate(model.blocks):
        pe = build_pe(specs[i], n_heads=c.n_head, head_dim=c.head_dim, d_model=c.d_model, n_layers=c.n_layer, max_len=c.max_len)
        h = blk(h, pe, Positions(pos), "naive")
    return model.head(model.ln_f(h))


@pytest.mark.parametrize("pe", [IROPE, ["window:w=4:rope", "rope:base=1000000"], ["rope", "window:w=3:nope", "alibi"]])
def test_each_layer_runs_its_own_spec(pe):
    m = _model(pe)
    specs = layer_specs(m.cfg)
    x = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        ref = _by_hand(m, specs, x)
        assert (m(x) - ref).abs().max() < 1e-5
        assert (m(x, path="chunked") - ref).abs().max() < 1e-5
        rolled = specs[1:] + specs[:1]        # the same PEs on the wrong layers give other logits
        assert (_by_hand(m, rolled, x) - ref).abs().max() > 1e-4


@pytest.mark.parametrize("pe", [IROPE, ["window:w=4:rope", "window:w=4:rope", "rope:base=1000000"], ["kerple_log", "nope"]])
def test_pattern_is_causal(pe):
    m = _model(pe)
    a = torch.randint(0, 256, (2, 24))
    b = a.clone(); b[:, 13:] = torch.randint(0, 256, (2, 11))
    with torch.no_grad(): la, lb = m(a), m(b)
    assert torch.allclose(la[:, :13], lb[:, :13], atol=1e-5) and not torch.allclose(la[:, 13:], lb[:, 13:], atol=1e-4)


def test_gradients_reach_every_layer_and_every_pe():
    m = _model(["kerple_log", "rope", "fire"]).train()
    x = torch.randint(0, 256, (2, 16))
    _, loss = m(x, x)
    loss.backward()
    assert all(b.attn.qkv.weight.grad.abs().sum() > 0 for b in m.blocks)
    for pe in m.pe.pes:
        ps = list(pe.parameters())
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ps), pe.spec
    assert sum(1 for pe in m.pe.pes for _ in pe.parameters()) > 0


def test_shared_bias_once_per_distinct_pe():
    m = _model(["alibi", "rope", "alibi", "kerple_log"])
    calls = {}
    for pe in m.pe.pes:
        if pe.uses_bias:
            inner = pe.bias
            def counting(*a, _inner=inner, _s=pe.spec, **kw):
                calls[_s] = calls.get(_s, 0) + 1
                return _inner(*a, **kw)
            pe.bias = counting
    with torch.no_grad(): m(torch.randint(0, 256, (1, 20)), path="sdpa")
    assert calls == {"alibi": 1, "kerple_log": 1}


def test_pattern_survives_a_checkpoint(tmp_path):
    from lengthx.train import TrainConfig, load_model, save_checkpoint
    m = _model(IROPE[:3] + ["window:w=5:nope"])
    cfg = m.cfg
    opt = torch.optim.AdamW(m.parameters())
    save_checkpoint(tmp_path, m, opt, 1, cfg, TrainConfig(steps=1, length=16))
    back = load_model(tmp_path)
    assert back.cfg == cfg and back.cfg.pe == "rope/rope/rope/window:w=5:nope"
    x = torch.randint(0, 256, (2, 24))
    with torch.no_grad(): assert torch.equal(back(x), m(x))


def test_map_pes_wraps_every_layer_pe_sharing_its_parameters():
    from lengthx.model import map_pes
    from lengthx.pe.window import with_window
    m = _model(["kerple_log", "rope", "rope", "nope"])
    x = torch.randint(0, 256, (1, 20))
    kerple = m.pe.pes[0]
    with torch.no_grad():
        before = m(x)
        m.pe = map_pes(m.pe, lambda p: with_window(p, 1000))       # a window wider than the input changes nothing
        assert m.pe.spec == "window:w=1000:kerple_log/window:w=1000:rope/window:w=1000:rope/window:w=1000:nope"
        assert torch.allclose(m(x), before, atol=1e-5)
        assert m.layer_pe(0).inner is kerple and m.layer_pe(3).spec == "window:w=1000:nope"   # the trained module, wrapped
        m.pe = map_pes(m.pe, lambda p: with_window(p, 2))
        assert not torch.allclose(m(x), before, atol=1e-3)
