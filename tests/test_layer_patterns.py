"""A layer pattern (`GPTConfig(pe=[...])`, chapters 14 and 50) keeps the contract every PE keeps, and goes end to end
through the package: `train` (memory plan, run directory, resume, `load_model`), `perplexity` on every path, the CLI,
the experiments' windowed yardstick and the CHE tasks.

Patterns: iRoPE without and with its chunks (Llama 4: RoPE in three layers of four, the fourth NoPE), SmolLM3-like
(a large RoPE base, every fourth layer NoPE), Cohere2-like (sliding-window RoPE layers and a global NoPE layer), and a
pattern of two additive biases, one of them learned (ALiBi and KERPLE-log)."""
import math
import subprocess
import sys

import pytest
import torch

from lengthx.evaluate import perplexity
from lengthx.experiments import windowed
from lengthx.model import GPT, GPTConfig, LayerPattern, build_model_pe, layer_specs
from lengthx.pe.window import WindowPE
from lengthx.tasks import CHEConfig, che_spec, run_che
from lengthx.train import TrainConfig, load_model, train

PATTERNS = {
    "irope": ["rope", "rope", "rope", "nope"],
    "irope_chunked": ["chunk:c=8:rope", "chunk:c=8:rope", "chunk:c=8:rope", "nope"],
    "smollm3": ["rope:base=5000000", "rope:base=5000000", "rope:base=5000000", "nope"],
    "cohere2": ["window:w=8:rope", "window:w=8:rope", "window:w=8:rope", "nope"],
    "learned_bias": ["alibi", "kerple_log"],
}
TRAIN_LEN = 16
TOKENS = torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))


def cfg(name: str, **kw) -> GPTConfig:
    return GPTConfig(n_layer=4, n_head=4, d_model=32, pe=PATTERNS[name], max_len=TRAIN_LEN, **kw)


def tiny(name: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(cfg(name, **kw)).eval()


def pe_params(m: GPT) -> dict:
    return {n: p for n, p in m.pe.named_parameters()}


@pytest.mark.parametrize("name", PATTERNS)
def test_is_a_pattern(name):
    "Each layer runs its own spec: the model holds a LayerPattern, not one PE for every layer."
    m = tiny(name)
    assert isinstance(m.pe, LayerPattern)
    want = [PATTERNS[name][i % len(PATTERNS[name])] for i in range(4)]
    assert [m.layer_pe(i).spec for i in range(4)] == want == layer_specs(m.cfg)


@pytest.mark.parametrize("name", PATTERNS)
def test_causal(name):
    m = tiny(name)
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (2, TRAIN_LEN), generator=g)
    b = a.clone()
    b[:, 9:] = torch.randint(0, 256, (2, TRAIN_LEN - 9), generator=g)
    with torch.no_grad():
        la, lb = m(a), m(b)
    assert torch.allclose(la[:, :9], lb[:, :9], atol=1e-5), f"{name}: future tokens changed past logits"
    assert not torch.allclose(la[:, 9:], lb[:, 9:], atol=1e-4), f"{name}: changed tokens changed nothing"


@pytest.mark.parametrize("name", PATTERNS)
def test_paths_agree(name):
    "naive, sdpa and chunked give the same logits, at the training length and past the chunked path's query block."
    m = tiny(name)
    for T in (TRAIN_LEN, 300):
        idx = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(T))
        with torch.no_grad():
            ref = m(idx, path="naive")
            for p in ("sdpa", "chunked"):
                assert (m(idx, path=p) - ref).abs().max() <= 1e-5, (name, T, p)


@pytest.mark.parametrize("name", PATTERNS)
def test_layers_differ(name):
    "The pattern is not one of its specs in every layer (a pattern that ran its first PE everywhere would pass the rest)."
    m = tiny(name)
    idx = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = m(idx)
        for spec in dict.fromkeys(PATTERNS[name]):
            torch.manual_seed(0)
            one = GPT(GPTConfig(n_layer=4, n_head=4, d_model=32, pe=spec, max_len=TRAIN_LEN)).eval()
            one.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("pe.")}, strict=False)
            if spec in ("alibi", "kerple_log"): continue   # their PE parameters differ in layout; the others have none
            assert (one(idx) - out).abs().max() > 1e-4, (name, spec)


@pytest.mark.parametrize("name", PATTERNS)
def test_gradients_reach_every_layers_pe(name):
    m = tiny(name).train()
    idx = torch.randint(0, 256, (2, TRAIN_LEN))
    _, loss = m(idx, torch.roll(idx, -1, 1))
    loss.backward()
    assert math.isfinite(loss.item())
    for n, p in pe_params(m).items():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}: PE parameter {n} got no gradient"
    if name == "learned_bias": assert pe_params(m), "kerple_log's parameters belong to the pattern"


@pytest.mark.parametrize("name", ["irope", "irope_chunked", "learned_bias"])
def test_train_resume_and_load(name, tmp_path):
    "train() with a run directory: stopped and resumed equals straight through; load_model gives the trained model back."
    tc = TrainConfig(steps=6, batch_size=2, length=TRAIN_LEN, warmup=1, log_every=1, ckpt_every=2, device="cpu")
    straight, full = train(cfg(name), tc, tokens=TOKENS, progress=False)
    run = tmp_path / "run"
    _, part = train(cfg(name), tc, tokens=TOKENS, run_dir=run, progress=False, stop_after=3)
    resumed, rest = train(cfg(name), tc, tokens=TOKENS, run_dir=run, progress=False)
    assert len(part) == 3 and [r["loss"] for r in rest] == pytest.approx([r["loss"] for r in full], rel=1e-6)
    loaded = load_model(run)
    assert loaded.cfg.pe == cfg(name).pe and isinstance(loaded.pe, LayerPattern)
    idx = torch.randint(0, 256, (2, TRAIN_LEN))
    with torch.no_grad():
        assert torch.allclose(loaded(idx), resumed.eval()(idx), atol=1e-6)
        assert torch.allclose(loaded(idx), straight.eval()(idx), atol=1e-4)


@pytest.mark.parametrize("name", PATTERNS)
def test_perplexity_on_every_path(name):
    "lengthx.evaluate.perplexity through each path the pattern allows, the same number, past the training length."
    m = tiny(name)
    vals = {}
    for p in ("naive", "sdpa", "chunked"):
        m.cfg.attn_path = p
        vals[p] = perplexity(m, TOKENS[:4000], 4 * TRAIN_LEN, protocol="nonoverlap", progress=False)
    assert all(math.isfinite(v) for v in vals.values())
    assert max(vals.values()) - min(vals.values()) <= 1e-4 * vals["naive"], vals


def test_windowed_yardstick_wraps_each_layer():
    "experiments.windowed puts every layer's PE of a pattern in the window (a window as wide as the input changes nothing)."
    m = tiny("irope")
    idx = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(idx)
        pe = m.pe
        m.pe = windowed(pe, 48)
        assert isinstance(m.pe, LayerPattern) and all(isinstance(m.layer_pe(i), WindowPE) for i in range(4))
        assert m.pe.spec == "window:w=48:rope/window:w=48:rope/window:w=48:rope/window:w=48:nope"
        assert torch.allclose(m(idx), ref, atol=1e-5)
        m.pe = windowed(pe, 8)
        assert (m(idx)[:, 8:] - ref[:, 8:]).abs().max() > 1e-3 and torch.allclose(m(idx)[:, :8], ref[:, :8], atol=1e-5)


def test_che_with_a_pattern():
    "A CHE spec with a pattern randomizes every layer's positions (NoPE layers too: positions are built once) and runs."
    spec = che_spec("rope/nope", True, 64)
    assert spec == "randomized:max_len=64:eval_random=true:rope/randomized:max_len=64:eval_random=true:nope"
    assert che_spec("nope/nope", True, 64) == "nope/nope" and che_spec("rope/nope", False, 64) == "rope/nope"
    c = CHEConfig(task="bucket_sort", pe=["rope", "nope"], n_layer=2, n_head=2, d_model=16, batch_size=4, train_max_len=10,
                  test_lens=(11,), eval_batch=4, max_pos=64, steps=2, warmup=1)
    assert c.pe == "rope/nope" and isinstance(build_model_pe(c.model_config()), LayerPattern)
    r = run_che(c)
    assert r["pe"] == "rope/nope" and r["spec"] == spec and 0 <= r["score"] <= 1


RUN = [sys.executable, "-c", "import sys; from lengthx.cli import main; sys.exit(main())"]


def test_cli_train_and_eval_a_pattern(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run(RUN + ["train", "--pe", "chunk:c=8:rope/rope/rope/nope", "--n-layer", "4", "--train-len", "16",
                              "--steps", "3", "--batch-size", "2", "--quiet", "--out", str(run)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "trained chunk:c=8:rope/rope/rope/nope" in r.stdout
    r = subprocess.run(RUN + ["eval", "--run", str(run), "--lengths", "16,64", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "chunk:c=8:rope/rope/rope/nope" in r.stderr and r.stdout.count("ppl=") == 2 and "n/a" not in r.stdout


@pytest.mark.parametrize("pe, says", [("rope/zzz", "layer pattern 'rope/zzz'"), ("rope//nope", "non-empty"),
                                      ("rope/learned", "input embedding"), ("randomized:rope/nope", "different positions"),
                                      ("rope/rope/rope/rope/nope", "n_layer=4")])
def test_cli_bad_pattern_is_one_line(pe, says, tmp_path):
    r = subprocess.run(RUN + ["train", "--pe", pe, "--n-layer", "4", "--out", str(tmp_path / "run")], capture_output=True,
                       text=True)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("lengthx train: error:") and says in lines[0], r.stderr
    assert not (tmp_path / "run").exists()
