"""lengthx.train: schedule, optimizer groups, determinism, checkpoints, resume, interrupts."""
import inspect
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from _tiny import MODEL, TOKENS, train_cfg

import lengthx.train as T
from lengthx.data import ByteTokenizer
from lengthx.model import GPT, GPTConfig
from lengthx.train import (CheckpointError, RunMismatchError, TrainConfig, load_checkpoint, load_model, lr_at,
                           make_optimizer, resolve_device, train)

def cfg(**kw):
    return train_cfg(**{**dict(ckpt_every=5), **kw})


def losses(history): return [r["loss"] for r in history]


@pytest.fixture(scope="module")
def reference():
    "An uninterrupted 20-step run without a run directory."
    return train(MODEL, cfg(), tokens=TOKENS, progress=False)


def test_quick_flag_follows_environment():
    code = "import lengthx.train as t; print(t.QUICK)"
    env = {**os.environ, "LENGTHX_FULL": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert T.QUICK == (os.environ.get("LENGTHX_FULL") != "1")


def test_lr_schedule_known_points():
    c = TrainConfig(steps=1000, warmup=100, lr=6e-4, min_lr=6e-5)
    assert math.isclose(lr_at(0, c), 6e-6) and math.isclose(lr_at(49, c), 3e-4) and math.isclose(lr_at(99, c), 6e-4)
    assert math.isclose(lr_at(100, c), 6e-4)
    assert math.isclose(lr_at(550, c), (6e-4 + 6e-5) / 2)              # half of the cosine
    assert math.isclose(lr_at(325, c), 6e-5 + (6e-4 - 6e-5) * (1 + math.cos(math.pi / 4)) / 2)
    assert math.isclose(lr_at(1000, c), 6e-5)
    assert all(lr_at(s + 1, c) <= lr_at(s, c) for s in range(100, 1000))
    assert math.isclose(lr_at(0, TrainConfig(warmup=0, steps=10, lr=1e-3, min_lr=0.0)), 1e-3)


def test_config_validation_and_round_trip():
    c = cfg(betas=[0.8, 0.9])
    assert c.betas == (0.8, 0.9) and TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ValueError, match="dtype"): TrainConfig(dtype="half")
    with pytest.raises(ValueError, match="steps"): TrainConfig(steps=0)
    with pytest.raises(ValueError, match="min_lr"): TrainConfig(lr=1e-4, min_lr=1e-3)
    assert TrainConfig(lr=6e-5).min_lr == pytest.approx(6e-6)  # default: a tenth of the peak
    with pytest.raises(ValueError, match="fp16 training needs CUDA"): train(MODEL, cfg(dtype="fp16"), tokens=TOKENS, progress=False)
    with pytest.raises(ValueError, match="vocab_size"): train(GPTConfig(**{**MODEL.to_dict(), "vocab_size": 64}), cfg(), tokens=TOKENS, progress=False)


def test_weight_decay_only_on_matrices():
    model = GPT(MODEL)
    opt = make_optimizer(model, cfg(weight_decay=0.1), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert opt.defaults["betas"] == (0.9, 0.95)
    assert resolve_device("cpu").type == "cpu"


def test_same_seed_same_losses_and_training_learns(reference):
    model, hist = reference
    _, again = train(MODEL, cfg(), tokens=TOKENS, progress=False)
    assert losses(again) == losses(hist)                           # bitwise identical on CPU
    _, other = train(MODEL, cfg(seed=1), tokens=TOKENS, progress=False)
    assert losses(other) != losses(hist)
    assert [r["step"] for r in hist] == list(range(1, 21)) and hist[-1]["tokens"] == 20 * 4 * 32
    assert abs(hist[0]["loss"] - math.log(256)) < 0.3 and hist[-1]["loss"] < hist[0]["loss"] - 1.0
    assert [r["lr"] for r in hist] == [lr_at(s, cfg()) for s in range(20)]


def test_one_step_equals_a_hand_written_step():
    "Accumulation, clipping, the schedule and AdamW, recomputed by hand for the first step."
    c = cfg(steps=3, grad_accum=2, batch_size=2, grad_clip=0.5)
    model, h = train(MODEL, c, tokens=TOKENS, progress=False, stop_after=1)
    torch.manual_seed(c.seed)
    ref = GPT(MODEL)
    loss = 0.0
    for a in range(2):  # micro-batches 0 and 1 of step 0
        x, y = T.batch_at(TOKENS, a, 2, 32, c.seed)
        l = ref(x, y)[1]; (l / 2).backward(); loss += l.item() / 2
    grads = [p.grad for p in ref.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    lr = lr_at(0, c)
    with torch.no_grad():
        for p in ref.parameters():
            g = p.grad * min(1.0, 0.5 / (float(norm) + 1e-6))
            # AdamW first step: m/(1-b1) = g, v/(1-b2) = g^2, so the update is g/(|g|+eps)
            decay = c.weight_decay if p.dim() >= 2 else 0.0
            p.mul_(1 - lr * decay).sub_(lr * g / (g.abs() + c.eps))
    assert math.isclose(h[0]["loss"], loss, rel_tol=1e-6) and math.isclose(h[0]["grad_norm"], float(norm), rel_tol=1e-5)
    assert h[0]["tokens"] == 2 * 2 * 32 and float(norm) > 0.5  # clipping was active
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-6), n


def test_eval_loss_and_bf16_autocast_on_cpu():
    _, h = train(MODEL, cfg(steps=4, eval_every=2, eval_batches=2), tokens=TOKENS, val_tokens=TOKENS, progress=False)
    assert [("val_loss" in r) for r in h] == [False, True, False, True] and math.isfinite(h[-1]["val_loss"])
    _, hb = train(MODEL, cfg(steps=4, dtype="bf16"), tokens=TOKENS, progress=False)
    _, hf = train(MODEL, cfg(steps=4), tokens=TOKENS, progress=False)
    assert all(abs(a - b) < 0.05 for a, b in zip(losses(hb), losses(hf))) and losses(hb) != losses(hf)


def test_default_tokens_are_the_stdlib_train_split(tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHX_CACHE", str(tmp_path))
    _, h = train(GPTConfig(**{**MODEL.to_dict(), "max_len": 16}), cfg(steps=1, length=16), progress=False)
    assert len(h) == 1 and len(list(tmp_path.glob("stdlib-*-train-bytes-*.safetensors"))) == 1


def test_resume_gives_the_uninterrupted_curve(reference, tmp_path):
    ref_model, ref = reference
    run = tmp_path / "run"
    _, part = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, stop_after=12)
    assert len(part) == 12 and json.loads((run / "checkpoint.json").read_text())["step"] == 12
    _, full = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False)
    assert losses(full) == losses(ref)                             # exact, not approximately
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, 21)) and [r["loss"] for r in lines] == losses(ref)
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    assert torch.equal(load_model(run)(x), ref_model(x))
    # a finished run returns at once with its history
    _, again = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False)
    assert losses(again) == losses(ref)
    # only the latest checkpoint's tensor files remain
    assert sorted(p.name for p in run.glob("*.safetensors")) == ["model-00000020.safetensors", "optim-00000020.safetensors"]


def test_sigint_checkpoints_the_last_completed_step(reference, tmp_path):
    "A real SIGINT at step 7 (between checkpoints at 5 and 10) keeps step 7; resuming reproduces the curve."
    run = tmp_path / "run"
    def interrupt(rec):
        if rec["step"] == 7: os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, callback=interrupt)
    assert json.loads((run / "checkpoint.json").read_text())["step"] == 7
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    _, full = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False)
    assert losses(full) == losses(reference[1])


def test_sigterm_kill_of_a_subprocess_then_resume(tmp_path):
    "kill (SIGTERM) a training process from outside; it saves its last step and exits 143; resume matches."
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_train import MODEL, TOKENS, cfg
        from lengthx.train import train
        train(MODEL, cfg(steps=100000, ckpt_every=1000), tokens=TOKENS, run_dir={str(run)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 4):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    step = json.loads((run / "checkpoint.json").read_text())["step"]
    lines = [json.loads(l) for l in metrics.read_text().splitlines()]
    assert step >= 4 and [r["step"] for r in lines] == list(range(1, step + 1))
    c = cfg(steps=100000, ckpt_every=1000)
    _, resumed = train(MODEL, c, tokens=TOKENS, run_dir=run, progress=False, stop_after=step + 3)
    _, straight = train(MODEL, c, tokens=TOKENS, progress=False, stop_after=step + 3)
    assert losses(resumed) == losses(straight)


def test_a_different_run_is_refused(tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    with pytest.raises(RunMismatchError, match=r"model\.n_layer"):
        train(GPTConfig(**{**MODEL.to_dict(), "n_layer": 2}), cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    with pytest.raises(RunMismatchError, match=r"train\.lr"):
        train(MODEL, cfg(steps=2, lr=1e-2), tokens=TOKENS, run_dir=run, progress=False)
    with pytest.raises(RunMismatchError, match="training tokens differ"):
        train(MODEL, cfg(steps=2), tokens=TOKENS.flip(0), run_dir=run, progress=False)
    # logging and checkpoint intervals do not define the run
    train(MODEL, cfg(steps=2, log_every=7, ckpt_every=1), tokens=TOKENS, run_dir=run, progress=False)
    other = tmp_path / "other"; other.mkdir(); (other / "notes.txt").write_text("mine")
    with pytest.raises(RunMismatchError, match="not empty"):
        train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=other, progress=False)


def test_corrupted_or_missing_checkpoints_are_detected(tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    model, state = load_checkpoint(run)
    assert state["step"] == 2 and GPTConfig.from_dict(state["model"]) == MODEL and set(state["optimizer_state"]["state"])
    with pytest.raises(CheckpointError, match="no checkpoint"): load_checkpoint(tmp_path / "empty")
    weights = next(run.glob("model-*.safetensors"))
    data = bytearray(weights.read_bytes()); data[-3] ^= 0xFF; weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"): load_model(run)
    with pytest.raises(CheckpointError, match="corrupted"):  # resuming refuses too
        train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    weights.unlink()
    with pytest.raises(CheckpointError, match="missing"): load_model(run)
    (run / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupted"): load_model(run)


def test_no_pickle_anywhere():
    src = inspect.getsource(T)
    assert "torch.load" not in src and "import pickle" not in src


def test_optimizer_state_round_trip_is_exact():
    model = GPT(MODEL)
    opt = make_optimizer(model, cfg(), torch.device("cpu"))
    model(TOKENS[None, :32], TOKENS[None, 1:33])[1].backward(); opt.step()
    tensors, meta = T.flatten_optimizer_state(opt.state_dict())
    back = T.unflatten_optimizer_state(tensors, json.loads(json.dumps(meta)))
    opt2 = make_optimizer(GPT(MODEL), cfg(), torch.device("cpu")); opt2.load_state_dict(back)
    for (i, a), (j, b) in zip(opt.state_dict()["state"].items(), opt2.state_dict()["state"].items()):
        assert i == j and all(torch.equal(a[k], b[k]) for k in a)
    assert opt2.param_groups[0]["betas"] == (0.9, 0.95)
