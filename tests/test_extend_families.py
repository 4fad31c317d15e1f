"""`extend` honours or refuses: on a tiny random model of every family it either equals Hugging Face's own output
(padding masks, sliding windows, soft-capping, logit scales, fused QKV, partial and interleaved rotary, NoPE layers,
Gemma 3's two rotaries; plain RoPE and HF's scaled types past the trained length; greedy decoding with the cache), or
it refuses in one line before any forward and leaves the model exactly as it was."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

import lengthx.pretrained as P
from lengthx.pretrained import TINY_FAMILIES, extend, hf_agreement, hf_twin, padded_batch, tiny_hf

HONOURED = [f for f in TINY_FAMILIES if f not in ("Falcon", "GPT-2", "BLOOM")]
SCALED = ["rope:pi=4", "rope:dynamic=2", "yarn:s=4", "llama3:s=4", "longrope:s=4"]   # every type HF implements
TOL = 1e-4


@pytest.fixture(scope="module")
def models():
    return {f: tiny_hf(f) for f in TINY_FAMILIES}


def _logits(model, ids, mask=None):
    with torch.no_grad(): return model(ids, attention_mask=mask).logits


@pytest.mark.parametrize("family", HONOURED)
def test_rope_changes_nothing_with_and_without_padding(models, family):
    "Spec 'rope' is the model as shipped: unpadded, and on the real tokens of a left-padded batch (the mask must matter)."
    m = models[family]
    ids, mask = padded_batch()
    shipped, shipped_padded = _logits(m, ids), _logits(m, ids, mask)
    real = mask.bool()
    assert (shipped_padded - shipped)[real].abs().max() > 1e-2, "padding must change HF's output, or the test proves nothing"
    with extend(m, "rope"):
        ours, ours_padded = _logits(m, ids), _logits(m, ids, mask)
    assert (ours - shipped).abs().max() < TOL, (family, (ours - shipped).abs().max().item())
    assert (ours_padded - shipped_padded)[real].abs().max() < TOL, (family, (ours_padded - shipped_padded)[real].abs().max().item())
    assert torch.equal(_logits(m, ids, mask), shipped_padded), "restored exactly"


@pytest.mark.parametrize("family", HONOURED)
def test_scaled_specs_equal_hf_past_the_trained_length(models, family):
    "Each HF rope type, 40 tokens against a trained length of 16, on a padded batch: equal to HF's, and a real change."
    ids, mask = padded_batch()
    for spec in SCALED:
        diff, change = hf_agreement(models[family], spec, ids, mask)
        assert diff < TOL, (family, spec, diff)
        assert change > 100 * diff and change > 1e-3, (family, spec, change)


@pytest.mark.parametrize("family", ["Mistral, sliding window", "Gemma 2", "Gemma 3"])
def test_window_and_cap_matter(models, family):
    "The sliding window and Gemma 2's soft cap change HF's logits (so agreement above is evidence they are honoured)."
    m = models[family]
    ids, _ = padded_batch(pad=0)
    shipped = _logits(m, ids)
    cfg = m.config
    for attr, off in [("sliding_window", 10 ** 6), ("attn_logit_softcapping", None)]:
        if getattr(cfg, attr, None) is None: continue
        old = getattr(cfg, attr)
        setattr(cfg, attr, off)
        for mod in m.modules():   # the attention modules copy these at construction
            if hasattr(mod, "sliding_window") and attr == "sliding_window" and mod.sliding_window: mod.sliding_window = off
            if hasattr(mod, "attn_logit_softcapping") and attr == "attn_logit_softcapping": mod.attn_logit_softcapping = off
        try: changed = (_logits(m, ids) - shipped).abs().max().item()
        finally:
            setattr(cfg, attr, old)
            for mod in m.modules():
                if hasattr(mod, "sliding_window") and attr == "sliding_window" and mod.sliding_window == off: mod.sliding_window = old
                if hasattr(mod, "attn_logit_softcapping") and attr == "attn_logit_softcapping": mod.attn_logit_softcapping = old
        assert changed > 1e-2, (family, attr, changed)
    assert torch.equal(_logits(m, ids), shipped)


def test_gemma3_spec_applies_to_global_layers_only(models):
    "Gemma 3: the facts are the global layers' (base 1e6), the twin changes only them, and extend equals it."
    m = models["Gemma 3"]
    assert P.rotary_facts(m).base == 1e6 and P.rotary_facts(m, "sliding_attention").base == 1e4
    twin = hf_twin(m, "rope:pi=4")
    assert twin.config.rope_parameters["sliding_attention"] == m.config.rope_parameters["sliding_attention"]
    assert twin.config.rope_parameters["full_attention"]["rope_type"] == "linear"


@pytest.mark.parametrize("family", ["Llama", "Gemma 2", "Mistral, sliding window", "GPT-NeoX"])
@pytest.mark.parametrize("spec", ["rope", "yarn:s=4"])
def test_greedy_decoding_with_the_cache_equals_full_forwards(models, family, spec):
    "generate (KV cache, one token a step, past the window and the trained length) gives the full forward's greedy tokens."
    m = models[family]
    prompt = torch.randint(2, 128, (20,), generator=torch.Generator().manual_seed(5))
    with extend(m, spec):
        out = m.generate(prompt[None], attention_mask=torch.ones(1, 20, dtype=torch.long), max_new_tokens=10,
                         do_sample=False, pad_token_id=0)[0].tolist()
        seq = prompt.tolist()
        for _ in range(10): seq.append(int(_logits(m, torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq, (family, spec)


@pytest.mark.parametrize("family", ["Llama", "Gemma 2"])
def test_left_padded_generation_equals_hf(models, family):
    "A left-padded batch generated with the cache under 'rope' gives the tokens Hugging Face gives (key positions from the mask)."
    m = models[family]
    ids, mask = padded_batch(T=20)
    kw = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    ref = m.generate(ids, **kw)
    with extend(m, "rope"): ours = m.generate(ids, **kw)
    assert torch.equal(ours, ref)


def _state(m):
    return (m.config._attn_implementation, [(n, type(x)) for n, x in m.named_modules()],
            [n for n, x in m.named_modules() if hasattr(x, "_lengthx")], getattr(m, "_lengthx_extension", None))


@pytest.mark.parametrize("family,msg", [("Falcon", "own code, not through Hugging Face's attention interface"),
                                        ("GPT-2", "no rotary position embedding"), ("BLOOM", "no rotary position embedding")])
def test_refusals_are_one_line_and_leave_the_model_untouched(models, family, msg):
    m = models[family]
    ids, _ = padded_batch(pad=0)
    before, logits = _state(m), _logits(m, ids)
    with pytest.raises(ValueError, match=msg) as e: extend(m, "rope")
    assert "\n" not in str(e.value) and type(m).__name__ in str(e.value)
    assert _state(m) == before and torch.equal(_logits(m, ids), logits)


def test_a_failure_midway_restores_the_model(models, monkeypatch):
    "An exception after the rotary embedding was replaced undoes every change made so far."
    m = models["Llama"]
    before = _state(m)
    def broken(model, impl): raise RuntimeError("attention implementation could not be set")
    monkeypatch.setattr(P, "_set_attn", broken)
    with pytest.raises(RuntimeError, match="could not be set"): extend(m, "yarn:s=4")
    assert _state(m) == before


def test_layout_probe_reads_each_family(models):
    "rotary_layout: rotate-half gives chapter 13's permutation, Cohere's interleaved layout the identity, GLM half of it."
    facts = lambda f: P.rotary_facts(models[f])
    def perm(f):
        m = models[f]
        attn = next(x for x in m.modules() if hasattr(x, "layer_idx") and type(x).__name__.endswith("Attention"))
        return P.rotary_layout(attn, P._rotary_module(m), facts(f).head_dim)
    p, r = perm("Llama")
    x = torch.arange(16.)
    assert r == 16 and torch.equal(x[p], P.half_to_interleaved(x, 16))
    p, r = perm("Cohere")
    assert r == 16 and torch.equal(p, torch.arange(16))
    p, r = perm("GLM")
    assert r == 8 and torch.equal(p, torch.arange(16))
    p, r = perm("GPT-NeoX")
    assert r == 4 and torch.equal(x[p], P.half_to_interleaved(x, 4))
