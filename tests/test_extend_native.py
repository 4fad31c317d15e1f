"""extend(model, "native"): a Hugging Face model's attention through lengthx with the model's own per-layer design
(NoPE layers, sliding windows, chunks, per-layer-type bases and scaling, proportional RoPE, sinks, temperature, YaRN
as shipped) reproduces HF's logits past every window and chunk; each ingredient is needed (a mutated plan fails);
extension specs rescale only the layers the model rescales; what cannot be matched is refused in one line."""
import warnings

import pytest
import torch

pytest.importorskip("transformers")
import transformers

from lengthx.attention import build_pe
from lengthx.pretrained import (NATIVE_FAMILIES, _attention_modules, extend, native_agreement, native_layer_specs,
                                scaled_layers, split_layer_spec, tiny_hf, tiny_native)

transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", module="transformers")

T = 48   # past six windows and chunks of 8 tokens, and the temperature floors of 8 and 16
IDS = torch.randint(2, 128, (2, T), generator=torch.Generator().manual_seed(0))
TOL = 1e-4


@pytest.fixture(scope="module")
def models():
    return {f: tiny_native(f) for f in NATIVE_FAMILIES}


@pytest.mark.parametrize("family", list(NATIVE_FAMILIES))
def test_native_equals_hugging_face(models, family):
    assert native_agreement(models[family], IDS) < TOL


@torch.no_grad()
def mutated(model, change) -> float:
    "Max |logit difference| from HF when `change(module, layer_pe, layer_spec)` alters the native plan of some layers."
    want = model(IDS, use_cache=False).logits
    with extend(model, "native") as ext:
        for m in _attention_modules(model): change(m, m._lengthx, ext.layer_specs[m.layer_idx])
        got = model(IDS, use_cache=False).logits
    return (got - want).abs().max().item()


def rebuild(m, lp, spec: str) -> None:
    lp.pe = build_pe(spec, n_heads=m.config.num_attention_heads, head_dim=m.head_dim, max_len=64)


def test_a_wrong_window_fails(models):
    def change(m, lp, spec):
        if spec.startswith("window:w=8:"): rebuild(m, lp, spec.replace("window:w=8:", "window:w=9:"))
    assert mutated(models["Gemma 3"], change) > 1e-2


def test_a_missing_nope_layer_fails(models):
    def change(m, lp, spec):   # SmolLM3's fourth layer rotates like the others, and so do Cohere2's global ones
        if spec == "nope": rebuild(m, lp, "rope:base=10000"); lp.perm = torch.arange(m.head_dim)
    assert mutated(models["SmolLM3"], change) > 1e-2
    assert mutated(models["Cohere2"], change) > 1e-3


def test_a_wrong_base_fails(models):
    def change(m, lp, spec):   # Gemma 3's global layer with the local base and no linear scaling
        if spec.startswith("rope:base=1000000"): rebuild(m, lp, "rope:base=10000")
    assert mutated(models["Gemma 3"], change) > 1e-2


def test_a_missing_sink_fails(models):
    def change(m, lp, spec): lp.sink = None
    assert mutated(models["gpt-oss"], change) > 1e-2


def test_a_missing_temperature_fails(models):
    def change(m, lp, spec):
        if spec.startswith("temp:"): rebuild(m, lp, split_layer_spec(spec)[1])
    assert mutated(models["Llama 4 (text)"], change) > 1e-2
    assert mutated(models["Ministral 3"], change) > 1e-2


def test_a_missing_chunk_or_proportion_fails(models):
    def unchunk(m, lp, spec):
        if spec.startswith("chunk:"): rebuild(m, lp, split_layer_spec(spec)[1])
    def full_rope(m, lp, spec):
        if spec.startswith("prope:"): rebuild(m, lp, "rope:base=1000000")
    assert mutated(models["Llama 4 (text)"], unchunk) > 1e-2
    assert mutated(models["Gemma 4 (text)"], full_rope) > 1e-2


def test_shipped_yarn_is_not_the_papers(models):
    def truncated(m, lp, spec): rebuild(m, lp, spec.replace(":truncate=false", ""))
    assert mutated(models["gpt-oss"], truncated) > 1e-4


def test_restore_gives_back_the_model_as_shipped(models):
    l4, m3 = models["Llama 4 (text)"], models["Ministral 3"]
    with torch.no_grad():
        before = [m(IDS, use_cache=False).logits for m in (l4, m3)]
        with extend(l4, "native"), extend(m3, "native"):
            assert not any(getattr(a, "attn_temperature_tuning", False) for a in _attention_modules(l4))
            assert m3.config.rope_parameters["llama_4_scaling_beta"] == 0.0   # lengthx applies the temperature instead
        after = [m(IDS, use_cache=False).logits for m in (l4, m3)]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(a.attn_temperature_tuning for a in _attention_modules(l4) if not a.use_rope)
    assert m3.config.rope_parameters["llama_4_scaling_beta"] == 0.5


def test_gemma3_yarn_rescales_the_global_layers_only(models):
    g3 = models["Gemma 3"]
    native, yarn = native_layer_specs(g3), native_layer_specs(g3, "yarn:s=4")
    assert scaled_layers(g3.config, native) == [5]
    assert yarn[:5] == native[:5] and yarn[5].startswith("yarn:s=4") and native[5] != yarn[5]
    assert native_agreement(g3, IDS, "yarn:s=4") < TOL     # equal to HF's Gemma 3 with YaRN on its global rope parameters
    with torch.no_grad():
        shipped = g3(IDS, use_cache=False).logits
        with extend(g3, "yarn:s=4"): scaled = g3(IDS, use_cache=False).logits
    assert (scaled - shipped).abs().max() > 1e-2


def test_extensions_keep_each_design(models):
    assert native_layer_specs(models["SmolLM3"], "yarn:s=4")[3] == "nope"
    assert native_layer_specs(models["Cohere2"], "yarn:s=4")[0].startswith("window:w=8:yarn:s=4")
    assert native_layer_specs(models["Ministral 3"], "rope:pi=2")[0].startswith("temp:beta=0.5:floor=16:rope:pi=2")
    assert native_agreement(models["gpt-oss"], IDS, "yarn:s=4") < TOL   # the sinks and windows stay
    assert native_agreement(models["Llama 4 (text)"], IDS, "llama3:s=4") < TOL


def test_refusals_are_one_clear_line(models):
    with pytest.raises(ValueError, match="proportional RoPE"): extend(models["Gemma 4 (text)"], "yarn:s=4")
    with pytest.raises(ValueError, match="normalizes q and k after rotating"): extend(models["Llama 4 (text)"], "yarn:s=4")
    with pytest.raises(ValueError, match="knows the designs of"): extend(tiny_hf("Llama"), "native")
    with pytest.raises(ValueError, match="adds a bias"): extend(models["Gemma 3"], "alibi")
    for m in models.values(): assert getattr(m, "_lengthx_extension", None) is None   # a refusal leaves the model unchanged


@pytest.mark.parametrize("family", list(NATIVE_FAMILIES))
def test_cached_generation_equals_hugging_face(models, family):
    "Decoding one token at a time from the cache (sliding and chunked caches hold fewer keys) gives HF's own tokens."
    m, prompt = models[family], IDS[:1, :20]
    kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=0)   # to position 36: past chunk and window ends
    want = m.generate(prompt, **kw)
    with extend(m, "native"): got = m.generate(prompt, **kw)
    assert torch.equal(got, want)


def test_left_padded_batches(models):
    "Padding is HF's mask; on Llama 4 HF counts chunks from each row's first real token, which lengthx's chunk cannot: refused."
    ids, mask = IDS.clone(), torch.ones_like(IDS)
    ids[0, :5], mask[0, :5] = 0, 0
    for family, m in models.items():
        if family == "Llama 4 (text)":
            with extend(m, "native"), pytest.raises(ValueError, match="chunked attention"): m(ids, attention_mask=mask, use_cache=False)
            continue
        with torch.no_grad():
            want = m(ids, attention_mask=mask, use_cache=False).logits
            with extend(m, "native"): got = m(ids, attention_mask=mask, use_cache=False).logits
        assert (got - want)[mask.bool()].abs().max() < TOL, family


def test_llama4_position_ids_other_than_the_slots_are_refused(models):
    "HF's Llama 4 counts cache slots for chunks and temperature and reads position_ids for RoPE: shifted ids are refused."
    m = models["Llama 4 (text)"]
    shifted = torch.arange(T)[None].expand(2, T) + 5
    with extend(m, "native"), pytest.raises(ValueError, match="cache slots"): m(IDS, position_ids=shifted, use_cache=False)
    with torch.no_grad():   # the slots themselves, passed explicitly, still agree with HF
        want = m(IDS, position_ids=torch.arange(T)[None].expand(2, T), use_cache=False).logits
        with extend(m, "native"): got = m(IDS, position_ids=torch.arange(T)[None].expand(2, T), use_cache=False).logits
    assert (got - want).abs().max() < TOL


def test_hf_rope_spec_reads_llama3_and_refuses_an_unread_proportional_factor():
    from lengthx.pe.current import hf_rope_spec
    spec = hf_rope_spec(dict(rope_type="llama3", rope_theta=500000.0, factor=16.0, original_max_position_embeddings=8192,
                             low_freq_factor=1.0, high_freq_factor=4.0))
    assert spec.startswith("llama3:s=16") and "original_max_len=8192" in spec
    build_pe(spec, n_heads=4, head_dim=16)   # a spec lengthx accepts
    assert hf_rope_spec(dict(rope_type="proportional", rope_theta=1e6, partial_rotary_factor=0.25)) == "prope:p=0.25:base=1000000"
    with pytest.raises(ValueError, match="factor"):
        hf_rope_spec(dict(rope_type="proportional", rope_theta=1e6, partial_rotary_factor=0.25, factor=8.0))
