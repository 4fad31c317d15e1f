"""Training faults a hostile or careless user can cause: a symlink planted at metrics.jsonl, another run's checkpoint
copied into a run directory, a checkpoint.json that claims a model its weight files do not hold, SIGTERM during a step."""
import json
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
from lengthx.train import CheckpointError, CheckpointSaveError, RunMismatchError, train


def test_a_symlink_planted_at_metrics_mid_run_is_refused_and_its_target_untouched(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    def plant(rec):
        if rec["step"] == 3:
            (run / T.METRICS).unlink()
            (run / T.METRICS).symlink_to(outside)
    with pytest.raises(CheckpointSaveError, match=r"metrics\.jsonl.*symbolic link"):
        train(MODEL, train_cfg(steps=6, ckpt_every=2), tokens=TOKENS, run_dir=run, progress=False, callback=plant)
    assert outside.read_text() == "not yours\n"                  # never written through
    assert json.loads((run / T.CKPT_JSON).read_text())["step"] == 2
    (run / T.METRICS).unlink()                                   # the link removed, the run resumes from its checkpoint
    _, hist = train(MODEL, train_cfg(steps=6, ckpt_every=2), tokens=TOKENS, run_dir=run, progress=False)
    assert hist[-1]["step"] == 6 and outside.read_text() == "not yours\n"


def _copy_checkpoint(src: Path, dst: Path, step: int) -> None:
    "Copy checkpoint `step` of run `src` (its files and the pointer) into run directory `dst`."
    for name in (*T._names(step), T.CKPT_JSON):
        (dst / name).write_bytes((src / name).read_bytes())


def test_another_runs_checkpoint_copied_in_is_refused_naming_the_settings(tmp_path):
    mine, other, theirs = tmp_path / "mine", tmp_path / "other", tmp_path / "theirs"
    train(MODEL, train_cfg(steps=4, ckpt_every=2), tokens=TOKENS, run_dir=mine, progress=False)
    train(MODEL, train_cfg(steps=8, ckpt_every=2, lr=1e-2, seed=1), tokens=TOKENS, run_dir=other, progress=False, stop_after=6)
    _copy_checkpoint(other, mine, 6)
    with pytest.raises(RunMismatchError, match=r"step 6 .*belongs to another run.*train\.lr: 0\.01 here, 0\.003 asked.*"
                                               r"train\.seed: 1 here, 0 asked"):
        train(MODEL, train_cfg(steps=8, ckpt_every=2), tokens=TOKENS, run_dir=mine, progress=False)
    # the same settings on other tokens: the checkpoint records its data
    train(MODEL, train_cfg(steps=8, ckpt_every=2), tokens=TOKENS.flip(0), run_dir=theirs, progress=False, stop_after=6)
    _copy_checkpoint(theirs, mine, 6)
    with pytest.raises(RunMismatchError, match="data: it was trained on other tokens"):
        train(MODEL, train_cfg(steps=8, ckpt_every=2), tokens=TOKENS, run_dir=mine, progress=False)
    for name in T._names(6): (mine / name).unlink()
    (mine / T.CKPT_JSON).write_bytes((mine / T._names(4)[2]).read_bytes())
    # the run's own checkpoint still resumes, and more steps (extending the run) are allowed
    _, hist = train(MODEL, train_cfg(steps=8, ckpt_every=2), tokens=TOKENS, run_dir=mine, progress=False)
    assert hist[-1]["step"] == 8


def test_a_resigned_checkpoint_claiming_a_huge_model_is_refused_before_building_it(tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(MODEL, train_cfg(steps=2), tokens=TOKENS, run_dir=run, progress=False)
    state = json.loads((run / T.CKPT_JSON).read_text())
    state["model"].update(d_model=16384, n_layer=48, n_head=128)   # ~155e9 parameters claimed; the file holds a tiny model
    state["sha256"] = T.state_digest(state)                         # re-signed: the state's own hash passes
    (run / T.CKPT_JSON).write_text(json.dumps(state))
    built = []
    class Guard(T.GPT):
        def __init__(self, cfg, *a, **k):
            if torch.empty(()).device.type != "meta":   # a real model, with memory
                built.append(cfg.d_model)
                if cfg.d_model == 16384: raise AssertionError("the claimed model was built")
            super().__init__(cfg, *a, **k)
    monkeypatch.setattr(T, "GPT", Guard)
    with pytest.raises(CheckpointError, match=r"claims a model its weight file does not hold .*d_model=16384, n_layer=48.*"
                                              r"n_layer=48 but the file holds 1 layer.*tok\.weight \[256, 32\] in the file, "
                                              r"\[256, 16384\] for the config"):
        T.load_model(run)
    assert built == []
    # the honest checkpoint loads (weights and config agree)
    train(MODEL, train_cfg(steps=2), tokens=TOKENS, run_dir=tmp_path / "ok", progress=False)
    built.clear()
    assert T.load_model(tmp_path / "ok").cfg.d_model == MODEL.d_model and built == [MODEL.d_model]


def sigterm_in_step_4(tmp_path, hold: str, ckpt_every: int, limit: float) -> tuple[int, float, str]:
    "Train in a child whose step-4 forward runs `hold` (Python source); SIGTERM it there; (exit status, seconds to exit, stderr)."
    run, marker = tmp_path / "run", tmp_path / "in_step_4"
    script = textwrap.dedent(f"""
        import sys, time, torch; sys.path.insert(0, {str(Path(__file__).parent)!r})
        import lengthx.model as M
        from _tiny import MODEL, TOKENS, train_cfg
        from lengthx.train import train
        real, calls = M.GPT.forward, [0]
        def slow(self, *a, **k):
            calls[0] += 1
            if calls[0] == 4:
                open({str(marker)!r}, "w").close()
                {hold}
            return real(self, *a, **k)
        M.GPT.forward = slow
        train(MODEL, train_cfg(steps=100, ckpt_every={ckpt_every}), tokens=TOKENS, run_dir={str(run)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300                      # a loaded machine may take long to import and train 3 steps
    while time.time() < deadline and not marker.exists() and proc.poll() is None: time.sleep(0.05)
    assert marker.exists(), "the training never reached step 4"
    time.sleep(0.5)                                   # inside step 4's hold now
    proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    try: rc = proc.wait(limit)
    except subprocess.TimeoutExpired:
        proc.kill(); proc.wait()
        pytest.fail("SIGTERM did not stop the step in progress")
    return rc, time.time() - t0, proc.stderr.read()


def resumes_like_a_straight_run(run, ckpt_every: int) -> list[int]:
    "Resume `run` to step 5 and check its losses equal an uninterrupted run's; the steps it logged."
    c = train_cfg(steps=100, ckpt_every=ckpt_every)
    _, resumed = train(MODEL, c, tokens=TOKENS, run_dir=run, progress=False, stop_after=5)
    _, straight = train(MODEL, c, tokens=TOKENS, progress=False, stop_after=5)
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in straight], rel=1e-6)
    return [r["step"] for r in resumed]


def test_sigterm_during_a_long_step_stops_at_once_and_the_run_resumes(tmp_path):
    "Step 4's forward sleeps two minutes; SIGTERM during it exits 143 within seconds, with steps 1..3 checkpointed."
    rc, waited, err = sigterm_in_step_4(tmp_path, "time.sleep(120)", ckpt_every=1000, limit=20)
    assert rc == 128 + signal.SIGTERM and waited < 20, (rc, waited, err)
    run = tmp_path / "run"
    assert json.loads((run / T.CKPT_JSON).read_text())["step"] == 3
    assert [json.loads(l)["step"] for l in (run / T.METRICS).read_text().splitlines()] == [1, 2, 3]
    assert resumes_like_a_straight_run(run, 1000) == [1, 2, 3, 4, 5]


def test_sigterm_during_one_long_torch_operation_exits_143_within_the_grace(tmp_path):
    "Step 4's forward is one C++ call of minutes (matrix_power never returns to Python): the watcher exits 143 soon after SIGTERM_GRACE, steps 1..3 kept by their checkpoints."
    hold = "torch.linalg.matrix_power(torch.eye(3000) * 0.5, (1 << 30) - 1)   # ~60 matmuls of 3000², one call"
    rc, waited, err = sigterm_in_step_4(tmp_path, hold, ckpt_every=1, limit=T.SIGTERM_GRACE + 15)
    assert rc == 128 + signal.SIGTERM and T.SIGTERM_GRACE - 0.5 <= waited < T.SIGTERM_GRACE + 15, (rc, waited, err)
    assert "one long operation" in err and "Traceback" not in err
    assert json.loads((tmp_path / "run" / T.CKPT_JSON).read_text())["step"] == 3
    resumes_like_a_straight_run(tmp_path / "run", 1)
