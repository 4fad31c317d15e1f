"""lengthx.pretrained's long-document grid: the same targets at every length, documents that hold every window,
keys shared across methods and lengths, and a resumable grid whose rows are what the parts compute."""
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from lengthx.pretrained import (extend, long_docs_grid, long_documents, passkey_keys, same_target_nll)

L = 16


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=L, bos_token_id=0, eos_token_id=1, pad_token_id=1,
                      rope_parameters={"rope_theta": 100.0, "rope_type": "default"})
    return LlamaForCausalLM(cfg).eval()


class _CharTok:
    "A stand-in tokenizer: one token per character (ids = code points mod 62, + 2)."
    eos_token_id = 1
    def __call__(self, s, add_special_tokens=False):
        return type("Enc", (), {"input_ids": [ord(c) % 62 + 2 for c in s]})()


def _by_hand(model, doc: torch.Tensor, T: int, k: int) -> float:
    "The last k targets' summed NLL from a plain forward over the T tokens before them."
    ids = doc[len(doc) - 1 - T:]
    with torch.no_grad(): logits = model(ids[None, :-1]).logits[0]
    return F.cross_entropy(logits[-k:], ids[-k:], reduction="sum").item()


def test_same_targets_at_every_length(tiny):
    doc = torch.randint(2, 64, (41,), generator=torch.Generator().manual_seed(1))
    got = same_target_nll(tiny, doc, [16, 32], k=8)
    for T in (16, 32): assert math.isclose(got[str(T)], _by_hand(tiny, doc, T, 8), rel_tol=1e-5), T
    far = doc.clone(); far[len(doc) - 1 - 32] = (far[len(doc) - 1 - 32] + 1 - 2) % 62 + 2   # in the 2L context only
    moved = same_target_nll(tiny, far, [16, 32], k=8)
    assert moved["16"] == got["16"] and moved["32"] != got["32"]
    last = doc.clone(); last[-1] = (last[-1] + 1 - 2) % 62 + 2                                  # a scored target
    assert all(same_target_nll(tiny, last, [16, 32], k=8)[T] != got[T] for T in ("16", "32"))
    with pytest.raises(ValueError, match="cannot score"): same_target_nll(tiny, doc, [16, 64], k=8)
    with pytest.raises(ValueError, match="cannot score"): same_target_nll(tiny, doc, [16, 32], k=17)


def test_long_documents_hold_every_window():
    tok = _CharTok()
    docs = long_documents(tok, 20_000, 3, seed=0)
    names = [n for n, _ in docs]
    assert len(set(names)) == 3 and all(len(d) == 20_000 for _, d in docs)
    assert not any(n.startswith("encodings/") or n == "html/entities.py" for n in names)
    assert long_documents(tok, 20_000, 3, seed=0)[0][0] == names[0]
    assert [n for n, _ in long_documents(tok, 20_000, 3, seed=1)] != names
    with pytest.raises(ValueError, match="only"): long_documents(tok, 20_000, 10_000)


def test_passkey_keys_are_shared_and_spread():
    keys = passkey_keys(5, seed=3)
    assert keys == passkey_keys(5, seed=3) and keys != passkey_keys(5, seed=4)
    assert [d for _, d in keys] == [0, 0.25, 0.5, 0.75, 1] and all(len(k) == 5 and k.isdigit() for k, _ in keys)
    assert passkey_keys(1)[0][1] == 0.5


def test_grid_rows_resume_and_equal_their_parts(tiny):
    S = dict(model="tiny", train_len=L, lengths=[16, 32], k=8, n_windows=2, seed=0, methods=["rope", "yarn:s=2"],
             passkey=dict(lengths=[400, 500], trials=2), caps={"rope": 16})
    kept = {}
    def step(key, fn):
        if key not in kept: kept[key] = fn()
        return kept[key]
    g = long_docs_grid(S, progress=False, loaded=(tiny, _CharTok()), step=step)
    assert len(kept) == 2 * 2 + 2 and g["documents"] == [n for n, _ in long_documents(_CharTok(), 33, 2, 0)]
    docs = long_documents(_CharTok(), 33, 2, 0)
    for i, (_, doc) in enumerate(docs):   # rope through extend is the model as shipped
        assert math.isclose(g["ppl"]["rope"]["nll"]["16"][i], _by_hand(tiny, doc, 16, 8), rel_tol=1e-4)
    assert list(g["ppl"]["rope"]["nll"]) == ["16"] and list(g["passkey"]["rope"]) == []   # the cap: rope read at 16 only
    assert list(g["ppl"]["yarn:s=2"]["nll"]) == ["16", "32"] and list(g["passkey"]["yarn:s=2"]) == ["400", "500"]
    with extend(tiny, "yarn:s=2"): want = same_target_nll(tiny, docs[1][1], [32], 8)["32"]
    assert math.isclose(g["ppl"]["yarn:s=2"]["nll"]["32"][1], want, rel_tol=1e-6)
    assert g["keys"] == [list(k) for k in passkey_keys(2, 0)] and len(g["passkey"]["yarn:s=2"]["400"]["correct"]) == 2
    def no_work(key, fn): return kept[key]
    assert long_docs_grid(S, progress=False, loaded=(tiny, _CharTok()), step=no_work) == g


def test_the_decision_table_names_only_settings_hugging_face_has():
    from lengthx.pretrained import RotaryFacts, attention_kind, hf_setting
    f = RotaryFacts(base=1e5, head_dim=64, n_heads=9, n_kv_heads=3, original_max_len=8192, rot_dim=64)
    assert hf_setting("yarn:s=2", f).startswith("rope_theta=100000, rope_type=yarn, factor=2")
    assert hf_setting("rope:dynamic=1", f) == "rope_theta=100000, rope_type=dynamic, factor=1"
    assert hf_setting("yarn:dynamic=true", f) == hf_setting("dca", f) == hf_setting("logn:rope", f) == "—"
    assert [attention_kind(s, f) for s in ("rope", "yarn:s=2", "dca", "string", "rerope:logn=true")] == \
        ["fused", "fused", "in parts", "in parts", "in parts"]
