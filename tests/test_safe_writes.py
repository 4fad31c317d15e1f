"""No write of lengthx goes through a symbolic link: a link planted at the name of every file the package writes
(the run lock, run.json, metrics, checkpoint files, a sweep's lock, results and figure, reproduce's lock, result and
partial files, token caches, tokenizer files) leaves the file it points to as it was, content and mode; the link is
either replaced by a file of lengthx's own or refused with a one-line error naming it."""
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import MODEL, TOKENS, train_cfg  # noqa: E402

import lengthx.sweep as SW  # noqa: E402
import lengthx.train as T  # noqa: E402
from lengthx import experiments as X  # noqa: E402
from lengthx.data import (ByteTokenizer, append_bytes, atomic_write_bytes, cached_tokens, exclusive_lock,  # noqa: E402
                          save_figure)
from lengthx.evaluate import PROTOCOL  # noqa: E402
from lengthx.results import read_results, write_results  # noqa: E402

KEEP = b"outside the run directory: never to be written\n"


class Planted:
    "A file outside the directory under test (content KEEP, mode 0600) and a symlink to it at `path`."
    def __init__(self, tmp: Path, path: Path):
        self.target = tmp / "outside" / path.name
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.write_bytes(KEEP); self.target.chmod(0o600)
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(self.target)

    def check(self, refused: Exception | None) -> None:
        "The target is untouched; the link was refused with an error naming it, or replaced by a regular file."
        assert self.target.read_bytes() == KEEP, f"{self.path.name}: written through the link"
        assert stat.S_IMODE(self.target.stat().st_mode) == 0o600, f"{self.path.name}: the target's mode changed"
        if refused is not None: assert self.path.name in str(refused) or "none is valid" in str(refused)
        else: assert not self.path.is_symlink() and self.path.is_file(), f"{self.path.name}: neither refused nor replaced"


def _run(fn):
    "The error `fn` raised (ValueError, or a checkpoint refusal), or None."
    try: fn()
    except (ValueError, T.CheckpointError) as e: return e
    return None


TRAIN_FILES = [T.LOCK, T.RUN_JSON, T.METRICS, T.CKPT_JSON, *T._names(2)]


@pytest.mark.parametrize("name", TRAIN_FILES)
def test_training_never_writes_through_a_planted_link(tmp_path, name):
    run = tmp_path / "run"
    p = Planted(tmp_path, run / name)
    err = _run(lambda: T.train(MODEL, train_cfg(steps=2, ckpt_every=2), tokens=TOKENS, run_dir=run, progress=False))
    p.check(err)
    if name == T.LOCK: assert isinstance(err, ValueError) and "symbolic link" in str(err)


@pytest.fixture
def tiny_sweep(monkeypatch):
    "run_sweep on the tiny test corpus: one PE, 2 steps, 2 windows at 1x and 2x."
    monkeypatch.setattr(SW, "corpus_split", lambda corpus, split: TOKENS)
    b = SW.Budget("tiny", train_len=16, steps=2, batch_size=2, lr=3e-3, warmup=1)
    prot = replace(PROTOCOL, n_windows=2, max_factor=2)
    return lambda out: SW.run_sweep(["nope"], b, out, protocol=prot, progress=False, figure=True)


@pytest.mark.parametrize("name", [".lock", "results.json", "sweep.png", "runs/nope/.lock", "runs/nope/metrics.jsonl"])
def test_sweep_never_writes_through_a_planted_link(tmp_path, tiny_sweep, name):
    out = tmp_path / "sw"
    p = Planted(tmp_path, out / name)
    err = _run(lambda: tiny_sweep(out))
    p.check(err)
    if name.endswith(".lock"): assert isinstance(err, ValueError)
    if name == "sweep.png": assert err is None and p.path.read_bytes()[:4] == b"\x89PNG"
    if name == "results.json": assert isinstance(err, ValueError) and "damaged" in str(err)   # a link to non-JSON: refused


def test_sweep_replaces_a_dangling_results_link_and_keeps_modes(tmp_path, tiny_sweep):
    out = tmp_path / "sw"
    out.mkdir()
    (out / "results.json").symlink_to(tmp_path / "elsewhere.json")      # would create a file outside if followed
    tiny_sweep(out)
    assert not (tmp_path / "elsewhere.json").exists()
    for name in ("results.json", "sweep.png"):
        assert not (out / name).is_symlink() and stat.S_IMODE((out / name).stat().st_mode) == 0o644


@pytest.mark.parametrize("name", ["runs/smoke/.reproduce.lock", "recall_smoke.json", "runs/smoke/recall.partial.json"])
def test_reproduce_never_writes_through_a_planted_link(tmp_path, name):
    out = tmp_path / "rp"
    p = Planted(tmp_path, out / name)
    err = _run(lambda: X.reproduce(["recall"], "smoke", out, allow_dirty=True, progress=False))
    p.check(err)
    assert err is not None   # the lock is refused; a result or partial file that is not a result is refused as damaged


def test_token_cache_and_tokenizer_replace_a_planted_link(tmp_path):
    cache = Planted(tmp_path, tmp_path / "cache" / "tokens.safetensors")
    with pytest.warns(UserWarning, match="rebuilding"):
        got = cached_tokens(cache.path, lambda: TOKENS[:100], 256, {"split": "train"})
    assert torch.equal(got, TOKENS[:100])
    cache.check(None)
    tokenizers = pytest.importorskip("tokenizers")
    from lengthx.data import BPETokenizer
    tok = Planted(tmp_path, tmp_path / "tok" / "bpe.json")
    BPETokenizer.train(["def f(x):\n    return x\n"] * 20, vocab_size=300).save(tok.path)
    tok.check(None)


def test_low_level_writers_replace_or_refuse_links_and_set_the_mode(tmp_path):
    import matplotlib.pyplot as plt
    d = tmp_path / "d"
    for name, write in [("a.bin", lambda p: atomic_write_bytes(p, b"new", 0o644)),
                        ("r.json", lambda p: write_results(p, {"x": 1})),
                        ("f.png", lambda p: save_figure(plt.figure(), p, 0o644))]:
        p = Planted(tmp_path, d / name)
        write(p.path)
        p.check(None)
        assert stat.S_IMODE(p.path.stat().st_mode) == 0o644
    assert read_results(d / "r.json") == {"x": 1}
    for name, write in [(".lock", lambda p: exclusive_lock(p, "dir d").__enter__()),
                        ("m.jsonl", lambda p: append_bytes(p, b"{}\n", "metrics"))]:
        p = Planted(tmp_path, d / name)
        p.check(_run(lambda: write(p.path)))
    hard = d / "hard.lock"
    os.link(p.target, hard)                                             # a hard link to the file outside
    with pytest.raises(ValueError, match="hard link"):
        with exclusive_lock(hard, "dir d"): pass
    assert p.target.read_bytes() == KEEP
    append_bytes(d / "fresh.jsonl", b"1\n"); append_bytes(d / "fresh.jsonl", b"2\n")
    assert (d / "fresh.jsonl").read_bytes() == b"1\n2\n"
