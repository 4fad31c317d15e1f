"""`extend` honours a static KV cache (transformers' StaticCache, `generate(cache_implementation="static")`): the cache hands
the attention its whole preallocated buffer, and the key positions must count back from the last key written, not from
the buffer's end. Proven against Hugging Face on tiny random-weight models built from config classes (offline)."""
import warnings

import pytest
import torch

pytest.importorskip("transformers")
import transformers as tf

from lengthx.pretrained import extend, padded_batch, tiny_hf

warnings.filterwarnings("ignore", message=".*maximum length.*")
GEN = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)


def score_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a.scores, b.scores))


def generate(model, ids, mask, cache: str, spec=None):
    if spec is None: return model.generate(ids, attention_mask=mask, cache_implementation=cache, **GEN)
    with extend(model, spec): return model.generate(ids, attention_mask=mask, cache_implementation=cache, **GEN)


@pytest.mark.parametrize("family", ["Llama", "Mistral, sliding window", "Gemma 2"])
@pytest.mark.parametrize("pad", [0, 5])
def test_static_generate_equals_hugging_face_under_the_identity_spec(family, pad):
    "Windows (Mistral, Gemma 2: prompt + answer longer than the window) and left padding included."
    model = tiny_hf(family)
    ids, mask = padded_batch(T=30, pad=pad)
    ref, ours = generate(model, ids, mask, "static"), generate(model, ids, mask, "static", "rope")
    assert torch.equal(ours.sequences, ref.sequences) and score_diff(ours, ref) < 1e-4, score_diff(ours, ref)


@pytest.mark.parametrize("spec", ["yarn:s=4", "rerope:w=8", "rope:dynamic=1"])
def test_a_real_extension_gives_the_same_tokens_with_either_cache(spec):
    model = tiny_hf("Llama")
    ids, mask = padded_batch(T=30, pad=5)
    dyn, sta = generate(model, ids, mask, "dynamic", spec), generate(model, ids, mask, "static", spec)
    assert torch.equal(dyn.sequences, sta.sequences) and score_diff(dyn, sta) < 1e-4, score_diff(dyn, sta)
    assert score_diff(sta, generate(model, ids, mask, "static")) > 1e-3   # and the extension did change the model


def _forwards(model, ids):
    "Logits of a prefill, a one-token step and a three-token step into one StaticCache (no attention mask)."
    cache = tf.StaticCache(config=model.config, max_cache_len=40)
    with torch.no_grad():
        return [model(x, past_key_values=cache).logits for x in (ids, ids[:, :1], ids[:, :3])]


def test_static_cache_forwards_without_a_mask_equal_hugging_face():
    model = tiny_hf("Llama")
    ids, _ = padded_batch(T=12, pad=0)
    ref = _forwards(model, ids)
    with extend(model, "rope"): ours = _forwards(model, ids)
    assert all((a - b).abs().max() < 1e-4 for a, b in zip(ours, ref)), [(a - b).abs().max().item() for a, b in zip(ours, ref)]
