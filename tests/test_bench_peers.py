"""`lengthx.bench`: lengthx against x-transformers and Hugging Face at the same shape — matched parameter counts,
logits of the right shape, one timed row per contender and mode with ratios to lengthx, and a missing library
reported as a row (and refused in one line by `lengthx bench peers` when both are missing)."""
import sys

import pytest
import torch

from lengthx import bench as B
from lengthx.cli import main
from lengthx.model import GPTConfig

TINY = GPTConfig.preset("tiny")
TOL = 0.03   # non-embedding parameters within 3% of lengthx's (SwiGLU width rounding, norms, biases)


def peers_of(pe: str, library: str) -> list[dict]:
    "The installed peers of one library for `pe` at the tiny shape (skips when the library is missing)."
    pytest.importorskip({"x-transformers": "x_transformers", "transformers": "transformers"}[library])
    rows = [r for r in B.peer_models(pe, "tiny", 64) if r["library"] == library]
    assert rows and all("model" in r for r in rows), rows
    return rows


@pytest.mark.parametrize("library", ["x-transformers", "transformers"])
@pytest.mark.parametrize("pe", B.PEER_PES)
def test_parameter_counts_match_lengthx(pe, library):
    lx = B.param_counts(B.lengthx_model(pe, "tiny", 64))
    for r in peers_of(pe, library):
        assert abs(r["params"]["non_embedding"] / lx["non_embedding"] - 1) < TOL, (r["name"], r["params"], lx)
        assert r["params"]["total"] - r["params"]["non_embedding"] == TINY.vocab_size * TINY.d_model   # one tied table


@pytest.mark.parametrize("library", ["x-transformers", "transformers"])
@pytest.mark.parametrize("pe", B.PEER_PES)
def test_every_peer_returns_logits_of_the_right_shape(pe, library):
    idx = torch.randint(0, TINY.vocab_size, (2, 24))
    for r in peers_of(pe, library):
        r["model"].eval()
        with torch.no_grad(): out = B.logits_of(r["model"], idx)
        assert out.shape == (2, 24, TINY.vocab_size) and torch.isfinite(out).all(), r["name"]


def test_hf_nope_really_has_no_rotary():
    "The HF NoPE peer is SmolLM3 with RoPE switched off in every layer (its default keeps RoPE in 3 of 4)."
    r = peers_of("nope", "transformers")[0]
    assert all(not layer.self_attn.use_rope for layer in r["model"].model.layers)


def test_swiglu_width_matches_a_gelu_mlp():
    for d in (64, 512, 768):
        h = B.swiglu_hidden(d, 4)
        assert abs(3 * d * h - 2 * d * 4 * d) <= 3 * d   # within one rounding step of 8d²


def test_bench_peers_rows_and_ratios():
    pytest.importorskip("x_transformers")
    res = B.bench_peers(["nope", "alibi"], "tiny", forward=(32, 1), train=(16, 2), reps=2, threads=1)
    lx = [r for r in res["rows"] if r["contender"] == "lengthx"]
    assert len(lx) == 4 and all(r["ratio"] == 1.0 for r in lx)
    for r in res["rows"]:
        if "error" in r: continue
        assert r["tokens_per_s"] > 0 and r["min_s"] <= r["median_s"] <= r["max_s"] and r["n"] == 2 and r["gflops"] > 0
        base = next(x for x in lx if x["pe"] == r["pe"] and x["mode"] == r["mode"])
        assert r["ratio"] == pytest.approx(r["tokens_per_s"] / base["tokens_per_s"])
    names = {(r["pe"], r["contender"]) for r in res["rows"]}
    for mode in ("forward", "train"):   # one row per contender and mode
        assert {(r["pe"], r["contender"]) for r in res["rows"] if r["mode"] == mode} == names
    assert len(res["rows"]) == 2 * len(names) and res["threads"] == 1


def test_threads_are_restored():
    before = torch.get_num_threads()
    B.bench_peers(["nope"], "tiny", ["forward"], forward=(16, 1), train=(16, 1), reps=1, threads=before + 1)
    assert torch.get_num_threads() == before


def test_missing_libraries_are_rows_not_crashes(monkeypatch):
    monkeypatch.setitem(sys.modules, "x_transformers", None)   # `import x_transformers` now raises ImportError
    monkeypatch.setitem(sys.modules, "transformers", None)
    res = B.bench_peers(["rope"], "tiny", forward=(16, 1), train=(16, 2), reps=1, threads=1)
    errs = [r for r in res["rows"] if "error" in r]
    assert {r["library"] for r in errs} == {"x-transformers", "transformers"} and len(errs) == 4   # 2 libraries × 2 modes
    assert all("not installed" in r["error"] and "lengthx[bench]" in r["error"] for r in errs)
    assert [r["contender"] for r in res["rows"] if "error" not in r] == ["lengthx", "lengthx"]
    assert len(res["missing"]) == 2 and [p["contender"] for p in res["params"]] == ["lengthx"]
    assert "missing" in B.peers_table(res)


def test_cli_refuses_in_one_line_when_no_peer_library_is_installed(monkeypatch, capsys):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("x_transformers", "transformers") else real(name, *a))
    assert main(["bench", "peers", "--preset", "tiny", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither is installed" in err[0] and "lengthx[bench]" in err[0]


def test_cli_rejects_a_pe_without_peers(capsys):
    pytest.importorskip("x_transformers")
    assert main(["bench", "peers", "--pes", "kerple_log", "--quiet"]) == 2
    assert "no peer for pe 'kerple_log'" in capsys.readouterr().err


def test_cli_bench_peers_writes_json(tmp_path, capsys):
    pytest.importorskip("x_transformers")
    assert main(["bench", "peers", "--preset", "tiny", "--pes", "nope", "--lengths", "32,16", "--reps", "1",
                 "--threads", "1", "--out", str(tmp_path), "--quiet"]) == 0
    import json
    d = json.loads((tmp_path / "bench-peers.json").read_text())
    assert d["what"] == "peers" and d["matmul"]["gflops"] > 0 and d["provenance"]["threads"] >= 1
    assert {(r["mode"], r["T"], r["B"]) for r in d["rows"]} == {("forward", 32, 1), ("train", 16, 8)}
