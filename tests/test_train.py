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
from lengthx.train import (CheckpointError, RunMismatchError, TrainConfig, TrainingDiverged, decay_parameters,
                           load_checkpoint, load_model, lr_at, make_optimizer, resolve_device, train)

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


@pytest.mark.parametrize("field,value,words", [
    ("steps", "10", "TrainConfig.steps must be an integer, got '10' (str)"),
    ("steps", 2.5, "TrainConfig.steps must be an integer"), ("steps", True, "TrainConfig.steps must be an integer"),
    ("steps", -3, "TrainConfig.steps must be >= 1, got -3"), ("batch_size", 0, "TrainConfig.batch_size must be >= 1"),
    ("length", -1, "TrainConfig.length must be >= 1"), ("grad_accum", 0, "TrainConfig.grad_accum"),
    ("warmup", -1, "TrainConfig.warmup must be >= 0"), ("keep_last", 0, "TrainConfig.keep_last must be >= 1"),
    ("ckpt_every", -5, "TrainConfig.ckpt_every must be >= 0"), ("log_every", 0, "TrainConfig.log_every"),
    ("lr", 0, "TrainConfig.lr must be a finite number > 0"), ("lr", -1e-3, "TrainConfig.lr"),
    ("lr", float("nan"), "TrainConfig.lr must be a finite number"), ("lr", "1e-3", "TrainConfig.lr must be a number"),
    ("min_lr", -1.0, "TrainConfig.min_lr"), ("weight_decay", float("inf"), "TrainConfig.weight_decay"),
    ("eps", 0, "TrainConfig.eps must be a finite number > 0"), ("grad_clip", -1, "TrainConfig.grad_clip"),
    ("ckpt_seconds", 0, "TrainConfig.ckpt_seconds"), ("betas", (0.9,), "TrainConfig.betas must be two numbers"),
    ("betas", (0.9, 1.0), "TrainConfig.betas"), ("device", 0, "TrainConfig.device must be a string"),
    ("compile", "yes", "TrainConfig.compile")])
def test_every_bad_field_is_a_one_line_error_naming_it(field, value, words):
    with pytest.raises(ValueError) as e:
        TrainConfig(**{field: value})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_inputs_a_run_cannot_use_are_refused_before_work():
    with pytest.raises(ValueError, match=r"training length 64 exceeds the model's max_len 32"):
        train(MODEL, cfg(length=64), tokens=TOKENS, progress=False)
    bad = TOKENS.clone(); bad[5] = 300
    with pytest.raises(ValueError, match=r"the training tokens hold token id 300, outside the model's vocab_size 256"):
        train(MODEL, cfg(), tokens=bad, progress=False)
    bad[5] = -1
    with pytest.raises(ValueError, match=r"token id -1"): train(MODEL, cfg(), tokens=bad, progress=False)
    with pytest.raises(ValueError, match="integer token ids"): train(MODEL, cfg(), tokens=TOKENS.float(), progress=False)
    with pytest.raises(ValueError, match="validation tokens"):
        train(MODEL, cfg(), tokens=TOKENS, val_tokens=TOKENS[:10], progress=False)


def test_device_names_are_checked():
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(ValueError, match=r"unknown device 'gpu0'; available here: auto, cpu"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device 'cuda' is not available \(this torch build has no CUDA.*available here: auto, cpu"):
            resolve_device("cuda")
        with pytest.raises(ValueError, match="cuda:1"):
            train(MODEL, cfg(device="cuda:1"), tokens=TOKENS, progress=False)
    else:
        with pytest.raises(ValueError, match="does not exist"): resolve_device(f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(ValueError, match="'xla' is not available"): resolve_device("xla")


@pytest.mark.parametrize("pe", ["alibi", "kerple_log", "dape:kerple_log", "cdape:k=3:kerple_log", "learned", "fire", "t5"])
def test_weight_decay_only_on_linear_embedding_and_conv_weights(pe):
    model = GPT(GPTConfig(**{**MODEL.to_dict(), "pe": pe}))
    opt = make_optimizer(model, cfg(weight_decay=0.1), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    layers = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d)
    weights = {id(m.weight) for m in model.modules() if isinstance(m, layers)}
    assert {id(p) for p in decay["params"]} == weights == decay_parameters(model)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    names = {id(p): n for n, p in model.named_parameters()}
    for p in no_decay["params"]:    # biases, LayerNorm, and PE coefficients such as KERPLE's r1, r2
        assert names[id(p)].endswith(("bias", "r1", "r2")) or "ln" in names[id(p)] or "norm" in names[id(p)] or p.dim() < 2, names[id(p)]
    if "kerple" in pe:
        kerple = [n for n, p in model.named_parameters() if n.endswith((".r1", ".r2"))]
        assert kerple and all(id(dict(model.named_parameters())[n]) not in weights for n in kerple)
        assert all(dict(model.named_parameters())[n].dim() == 3 for n in kerple)   # matrices by shape, yet not decayed
    assert opt.defaults["betas"] == (0.9, 0.95)


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
            decay = c.weight_decay if id(p) in decay_parameters(ref) else 0.0
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
    # only the newest keep_last (default 2) checkpoints remain
    assert sorted(p.name for p in run.glob("*.safetensors")) == ["model-00000015.safetensors", "model-00000020.safetensors",
                                                               "optim-00000015.safetensors", "optim-00000020.safetensors"]
    assert sorted(p.name for p in run.glob("ckpt-*.json")) == ["ckpt-00000015.json", "ckpt-00000020.json"]


def test_sigint_checkpoints_the_last_completed_step(reference, tmp_path):
    "A real SIGINT at step 7 (between checkpoints at 5 and 10) keeps step 7; resuming reproduces the curve."
    run = tmp_path / "run"
    def interrupt(rec):
        if rec["step"] == 7: os.kill(os.getpid(), signal.SIGINT)
    before = signal.getsignal(signal.SIGINT)        # the default handler, or SIG_IGN in a pytest-xdist worker
    if before is signal.SIG_IGN: signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, callback=interrupt)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    finally:
        signal.signal(signal.SIGINT, before)
    assert json.loads((run / "checkpoint.json").read_text())["step"] == 7
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
    # the first steps of `resumed` ran in the killed process, those of `straight` in this one: a test worker that has loaded
    # other native code (OpenMP runtimes) may round a few float32 sums differently, so equal to float32 precision here;
    # a broken resume (wrong data order, optimizer state or step) differs in the first digits
    assert losses(resumed) == pytest.approx(losses(straight), rel=1e-6)
    assert len(losses(resumed)) == len(losses(straight)) == step + 3


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
    with pytest.raises(CheckpointError, match="holds checkpoints but none is valid.*corrupted"):  # resuming refuses too
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


# ---- checkpoints every N steps, keep-last-K, extension, integrity, locks, divergence, provenance ----

def weights(model): return {n: p.detach().clone() for n, p in model.named_parameters()}


def same_weights(a, b): return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_lr_schedule_extension_continues_from_the_current_rate():
    c = TrainConfig(steps=100, warmup=10, lr=1e-3, min_lr=1e-4)
    one = [[0, 100]]
    assert all(lr_at(s, c, one) == lr_at(s, c) for s in range(120))
    finished = [[0, 100], [100, 150]]                          # a finished run extended: stays at min_lr
    assert all(math.isclose(lr_at(s, c, finished), 1e-4) for s in range(100, 150))
    mid = [[0, 100], [60, 200]]                                # extended at step 60: a new cosine from lr(60)
    assert all(lr_at(s, c, mid) == lr_at(s, c) for s in range(60))
    assert math.isclose(lr_at(60, c, mid), lr_at(60, c)) and math.isclose(lr_at(200, c, mid), 1e-4)
    assert math.isclose(lr_at(130, c, mid), 1e-4 + (lr_at(60, c) - 1e-4) / 2)      # halfway down the new cosine
    assert all(lr_at(s + 1, c, mid) <= lr_at(s, c, mid) for s in range(10, 220))
    early = [[0, 100], [5, 300]]                               # extended during warmup: a fresh 300-step schedule
    assert all(math.isclose(lr_at(s, c, early), lr_at(s, TrainConfig(steps=300, warmup=10, lr=1e-3, min_lr=1e-4)))
               for s in range(300))


def test_a_finished_run_can_be_extended_and_resumes_exactly(tmp_path):
    "steps 20 -> 30: the extension runs at min_lr, and a kill inside it resumes to the same weights."
    run, again = tmp_path / "a", tmp_path / "b"
    msgs = []
    for d in (run, again): train(MODEL, cfg(), tokens=TOKENS, run_dir=d, progress=False)
    m1, h1 = train(MODEL, cfg(steps=30), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert [r["step"] for r in h1] == list(range(1, 31)) and all(math.isclose(r["lr"], 3e-4) for r in h1[20:])
    assert any("steps 20 -> 30" in m for m in msgs) and any(m.startswith("resuming from step 20 of 30") for m in msgs)
    assert read_state(run)["schedule"] == [[0, 20], [20, 30]]
    train(MODEL, cfg(steps=30), tokens=TOKENS, run_dir=again, progress=False, stop_after=24)
    m2, h2 = train(MODEL, cfg(steps=30), tokens=TOKENS, run_dir=again, progress=False)
    assert losses(h2) == losses(h1) and same_weights(weights(m1), weights(m2))
    with pytest.raises(ValueError, match="already at step 30; steps=25 cannot take steps back"):
        train(MODEL, cfg(steps=25), tokens=TOKENS, run_dir=run, progress=False)


def read_state(run): return json.loads((run / "checkpoint.json").read_text())


def test_resume_message_and_checkpoint_json_deleted(reference, tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, stop_after=12)
    (run / "checkpoint.json").unlink()                  # the newest checkpoint is still found (step 12)
    msgs = []
    m, full = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert msgs[-1].startswith("resuming from step 12 of 20") and any("checkpoint.json did not name" in x for x in msgs)
    assert losses(full) == losses(reference[1]) and same_weights(weights(m), weights(reference[0]))


def test_a_corrupted_newest_checkpoint_falls_back_to_the_previous(reference, tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, stop_after=12)   # checkpoints 10 and 12
    w = run / "model-00000012.safetensors"; data = bytearray(w.read_bytes()); data[-5] ^= 0x10; w.write_bytes(bytes(data))
    msgs = []
    m, full = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert any(x.startswith("skipping the checkpoint at step 12") and "corrupted" in x for x in msgs)
    assert any(x.startswith("resuming from step 10 of 20") for x in msgs)
    assert losses(full) == losses(reference[1]) and same_weights(weights(m), weights(reference[0]))
    lines = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines == list(range(1, 21))                  # no duplicated lines for steps 11 and 12


def test_checkpoint_json_is_signed_and_tagged(tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(steps=5), tokens=TOKENS, run_dir=run, progress=False)
    state = read_state(run)
    assert state["format"] == "lengthx-checkpoint/2" and state["lengthx"] == T.lengthx.__version__
    assert state["pe"] == MODEL.pe and state["model"] == MODEL.to_dict() | {"sep_ids": list(MODEL.sep_ids)}
    assert state["sha256"] == T.state_digest(state)
    for path in (run / "checkpoint.json", run / "ckpt-00000005.json"):
        original = path.read_text()
        path.write_text(original.replace('"pe": "alibi"', '"pe": "rope"'))          # swap the PE by hand
        with pytest.raises(CheckpointError, match="does not match its own SHA-256"): load_model(run, step=None if path.name == "checkpoint.json" else 5)
        path.write_text(original)
    load_model(run)
    edited = dict(state, lengthx="99.0.0"); edited["sha256"] = T.state_digest(edited)
    (run / "checkpoint.json").write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="saved by lengthx 99.0.0, newer than this"): load_model(run)
    old = {k: v for k, v in state.items() if k not in ("format", "sha256", "lengthx")}   # a checkpoint from before format 2
    (run / "checkpoint.json").write_text(json.dumps(old))
    with pytest.raises(CheckpointError, match="older checkpoint format.*weight layout may differ"): load_model(run)
    (run / "run.json").write_text(json.dumps({k: v for k, v in json.loads((run / "run.json").read_text()).items() if k != "format"}))
    with pytest.raises(CheckpointError, match="saved by an older lengthx.*weight layout may differ between formats"):
        train(MODEL, cfg(steps=6), tokens=TOKENS, run_dir=run, progress=False)


@pytest.mark.parametrize("other", ["rope", "nope", "yarn:s=4", "alibi:scale=2.0"])
def test_weights_never_load_into_another_model(tmp_path, other):
    run = tmp_path / "run"
    train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    want = GPTConfig(**{**MODEL.to_dict(), "pe": other})
    with pytest.raises(CheckpointError, match=rf"does not fit the model asked for: pe='alibi' in the checkpoint, '{other}' asked"):
        load_checkpoint(run, model=GPT(want))
    with pytest.raises(CheckpointError, match="does not fit"): load_model(run, expect=want)
    with pytest.raises(CheckpointError, match="d_model=32 in the checkpoint, 64 asked"):
        load_model(run, expect=GPTConfig(**{**MODEL.to_dict(), "d_model": 64}))
    m = GPT(MODEL); load_checkpoint(run, model=m)                       # the right model loads, in place
    assert same_weights(weights(m), weights(load_model(run, expect=GPTConfig(**{**MODEL.to_dict(), "attn_path": "naive"}))))


def test_keep_last_and_stale_files_are_cleaned(tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(steps=12, ckpt_every=2, keep_last=3), tokens=TOKENS, run_dir=run, progress=False)
    assert T.list_checkpoints(run) == [8, 10, 12]
    (run / ".model-00000014.safetensors.abc.tmp").write_bytes(b"x" * 1000)     # what a killed save leaves
    (run / "model-00000014.safetensors").write_bytes(b"half")
    msgs = []
    train(MODEL, cfg(steps=14, ckpt_every=2, keep_last=3), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert any("removed 2 file(s) left by an interrupted save" in m for m in msgs)
    assert not list(run.glob(".*.tmp")) and T.list_checkpoints(run) == [10, 12, 14]
    assert T.verify_checkpoint(run, 14)["step"] == 14


def test_time_based_checkpoints(tmp_path, monkeypatch):
    "ckpt_every=None saves when ckpt_seconds have passed; a fake clock makes every step last 0.4 s."
    clock = iter(range(10**6))
    monkeypatch.setattr(T.time, "perf_counter", lambda: next(clock) * 0.4)
    run = tmp_path / "run"
    train(MODEL, cfg(steps=12, ckpt_every=None, ckpt_seconds=2.0, keep_last=100), tokens=TOKENS, run_dir=run, progress=False)
    steps = T.list_checkpoints(run)
    assert steps[-1] == 12 and 2 <= len(steps) <= 6 and steps != list(range(1, 13))
    with pytest.raises(ValueError): TrainConfig(ckpt_every=None, ckpt_seconds=-1)


def test_a_second_writer_is_refused(tmp_path):
    from lengthx.data import LockedError, exclusive_lock
    run = tmp_path / "run"
    with exclusive_lock(run / ".lock", "someone else"):
        with pytest.raises(LockedError, match=rf"run directory '{run}' is in use by another lengthx process \(pid {os.getpid()}\)"):
            train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    train(MODEL, cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)   # released: the next writer runs


def nan_at(step):
    "A forward whose loss becomes NaN from optimizer step `step` on (1-based), as a broken PE would."
    forward, calls = GPT.forward, {"n": 0}
    def f(self, idx, targets=None, *a, **kw):
        out = forward(self, idx, targets, *a, **kw)
        if targets is not None and self.training:
            calls["n"] += 1
            if calls["n"] >= step: return out[0], out[1] * float("nan")
        return out
    return f


def test_divergence_names_step_pe_and_last_good_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setattr(GPT, "forward", nan_at(1))
    with pytest.raises(TrainingDiverged) as e:
        train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False)
    assert str(e.value) == (f"training diverged at step 1 with pe 'alibi': the loss is nan; "
                            f"last good checkpoint: none (nothing was kept in {str(run)!r})")
    assert isinstance(e.value, RuntimeError) and not (run / "run.json").exists()   # not reserved for the failed run
    monkeypatch.undo()
    train(GPTConfig(**{**MODEL.to_dict(), "pe": "rope"}), cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    run2 = tmp_path / "run2"
    monkeypatch.setattr(GPT, "forward", nan_at(13))
    with pytest.raises(TrainingDiverged, match=r"at step 13 with pe 'alibi': the loss is nan; last good checkpoint: step 10 in .*stays resumable"):
        train(MODEL, cfg(), tokens=TOKENS, run_dir=run2, progress=False)
    assert T.list_checkpoints(run2) == [5, 10] and read_state(run2)["step"] == 10
    monkeypatch.undo()
    _, h = train(MODEL, cfg(), tokens=TOKENS, run_dir=run2, progress=False)
    assert [r["step"] for r in h] == list(range(1, 21))
    with pytest.raises(TrainingDiverged, match="no run_dir"):
        monkeypatch.setattr(GPT, "forward", nan_at(3)); train(MODEL, cfg(), tokens=TOKENS, progress=False)


def test_package_provenance_only_from_lengthx_own_checkout(tmp_path, monkeypatch):
    import shutil
    import lengthx
    p = T.package_provenance()
    assert set(p) == {"lengthx", "source_sha256", "git_sha", "git_dirty", "git_diff_sha256"} and p["lengthx"] == lengthx.__version__
    assert len(p["source_sha256"]) == 64
    if (Path(lengthx.__file__).parent.parent / "settings.ini").exists() and p["git_sha"] is not None:
        assert len(p["git_sha"]) == 40 and isinstance(p["git_dirty"], bool)
    # the same package inside a user's own git repository: no git fields; an edit changes the source hash
    repo = tmp_path / "userrepo"
    shutil.copytree(Path(lengthx.__file__).parent, repo / "lengthx", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "settings.ini").write_text("[DEFAULT]\nlib_name = myproject\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env, capture_output=True)
    monkeypatch.setattr(lengthx, "__file__", str(repo / "lengthx" / "__init__.py"))
    q = T.package_provenance()
    assert q["git_sha"] is None and q["git_dirty"] is None and q["source_sha256"] == p["source_sha256"]
    with open(repo / "lengthx" / "train.py", "a") as f: f.write("\n# patched\n")
    assert T.package_provenance()["source_sha256"] != p["source_sha256"]
    # ... and a copy that *is* lengthx's checkout (settings.ini says so) records its commit and dirtiness
    (repo / "settings.ini").write_text("[DEFAULT]\nlib_name = lengthx\n")
    r = T.package_provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert r["git_sha"] == head and r["git_dirty"] is True and len(r["git_diff_sha256"]) == 64


def test_metrics_past_the_checkpoint_are_recomputed_with_a_message(reference, tmp_path):
    run = tmp_path / "run"
    train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, stop_after=12)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    fake = [json.dumps({**json.loads(lines[-1]), "step": s, "loss": 99.0}) for s in (13, 14)]   # records of a killed run
    (run / "metrics.jsonl").write_text("\n".join(lines + fake) + '\n{"step": 15, "lo')            # and a torn last line
    msgs = []
    _, h = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert "the metrics of steps 13..14 were not covered by a checkpoint; they are recomputed" in msgs
    assert losses(h) == losses(reference[1])
    assert [json.loads(l)["loss"] for l in (run / "metrics.jsonl").read_text().splitlines()] == losses(reference[1])


def test_resume_on_another_machine_says_rounding_may_differ(tmp_path):
    "A checkpoint records device, compile and process count; resuming with another one says the numbers agree only up to rounding."
    run = tmp_path / "run"
    train(MODEL, cfg(steps=5), tokens=TOKENS, run_dir=run, progress=False)
    state = json.loads((run / "checkpoint.json").read_text())
    assert state["machine"] == {"device": "cpu", "compile": False, "world": 1}
    said = []
    train(MODEL, cfg(steps=6), tokens=TOKENS, run_dir=run, progress=False, log=said.append)
    assert not any("up to rounding" in m for m in said)                       # same machine: nothing to say
    for path in (run / "checkpoint.json", run / "ckpt-00000006.json"):         # as if written on a GPU
        s = json.loads(path.read_text()); s["machine"] = {"device": "cuda", "compile": True, "world": 2}
        s["sha256"] = T.state_digest(s); path.write_text(json.dumps(s))
    said = []
    train(MODEL, cfg(steps=7), tokens=TOKENS, run_dir=run, progress=False, log=said.append)
    assert any("device cuda, compile=True, 2 process(es)" in m and "device cpu, compile=False, 1 process(es)" in m
               and "up to rounding" in m for m in said), said
