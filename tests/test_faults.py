"""Fault injection for training and data: SIGKILL at random steps, a kill in the middle of a save, a full disk,
two writers on one run directory, and byte flips / truncations of every checkpoint and cache file.

The property everywhere: the run directory always holds a checkpoint that verifies, a resumed run ends with the
weights an uninterrupted run ends with (bitwise), and damaged files are refused or rebuilt, never used.
The training process the tests kill is `python -m _tiny worker ...`."""
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import MODEL, TOKENS, WRITES, dying_write, fault_cfg as cfg  # noqa: E402

import lengthx.train as T  # noqa: E402
from lengthx.data import DataWarning, LockedError, cached_tokens  # noqa: E402
from lengthx.train import (CheckpointError, CheckpointSaveError, list_checkpoints, load_checkpoint,  # noqa: E402
                           load_model, train, verify_checkpoint)

from _tiny import EVERY, STEPS  # noqa: E402  (the checkpoint interval of every run here, and the run length)


def weights(model): return {n: p.detach().clone() for n, p in model.named_parameters()}


def same(a, b): return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


@pytest.fixture(scope="module")
def reference():
    "Uninterrupted runs of 40 and 20 steps (no run directory): the weights every recovery must reproduce."
    out = {}
    for steps in (STEPS, 20):
        m, h = train(MODEL, cfg(steps), tokens=TOKENS, progress=False)
        out[steps] = (weights(m), [r["loss"] for r in h])
    return out


# ---- the training process the tests kill -------------------------------------------------------------

def start_worker(run: Path, steps=STEPS, pause=0.0, fault="none") -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "_tiny", "worker", str(run), str(steps), str(pause), fault],
                            env=env, cwd=Path(__file__).parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def metric_steps(run: Path) -> list[int]:
    path = run / T.METRICS
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try: out.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError): pass
    return out


def wait_for_step(proc, run: Path, step: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if (s := metric_steps(run)) and s[-1] >= step: return
        time.sleep(0.005)
    raise AssertionError(f"worker did not reach step {step}: rc={proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}")


# ---- SIGKILL at random steps ----------------------------------------------------------------------------

def test_sigkill_at_a_random_step_then_death_inside_a_save(reference, tmp_path, capsys):
    "SIGKILL at a random step (a second writer is refused while it runs), then a process that dies halfway through a random"
    " write of a random save; the resumed run is bitwise the uninterrupted one."
    seed = int(os.environ.get("LENGTHX_FAULT_SEED", random.SystemRandom().randrange(10**6)))
    rng = random.Random(seed)
    run = tmp_path / "run"
    kill_at = rng.randrange(EVERY + 1, STEPS - 3 * EVERY)
    proc = start_worker(run, pause=0.03)
    wait_for_step(proc, run, kill_at)
    with pytest.raises(LockedError, match=rf"run directory '{run}' is in use by another lengthx process \(pid {proc.pid}\)"):
        train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False)          # one writer per run directory
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    done = metric_steps(run)[-1]                       # the last step whose record reached the disk
    state = T.find_checkpoint(run, log=lambda m: None)
    assert state is not None and verify_checkpoint(run, state["step"])["step"] == state["step"]
    lost, secs = done - state["step"], json.loads((run / T.METRICS).read_text().splitlines()[done - 1])["time"] - state["elapsed"]
    assert 0 <= lost <= EVERY, (kill_at, done, state["step"])
    # the next process resumes, then dies in the middle of write n of a later save
    at, n = state["step"] + EVERY * rng.randrange(1, 3), rng.randrange(1, 5)
    proc = start_worker(run, fault=f"save:{at}:{n}")
    assert proc.wait(120) == 137, proc.stderr.read()
    assert "resuming from step" in proc.stderr.read() and list(run.glob(".*.tmp"))
    msgs = []
    m, h = train(MODEL, cfg(), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    resumed = at if n == 4 else at - EVERY             # the state file is the commit point of a save
    assert any(x.startswith(f"resuming from step {resumed} of {STEPS}") for x in msgs), msgs
    assert not list(run.glob(".*.tmp"))
    assert same(weights(m), reference[STEPS][0]) and [r["loss"] for r in h] == reference[STEPS][1]
    assert [json.loads(l)["step"] for l in (run / T.METRICS).read_text().splitlines()] == list(range(1, STEPS + 1))
    with capsys.disabled():
        print(f"\n[fault seed {seed}] SIGKILL after step {done} (aimed at {kill_at}): resumed from checkpoint "
              f"{state['step']}, lost {lost} steps = {secs:.2f} s of training (interval {EVERY} steps); "
              f"death in the {WRITES[n]} write of save {at}: resumed from {resumed}")


# ---- a kill in the middle of a save ---------------------------------------------------------------------

class Killed(BaseException):
    "Stands for the process dying: nothing in lengthx catches it (it is not an Exception)."


@pytest.mark.parametrize("write", [1, 2, 3, 4], ids=list(WRITES.values()))
def test_kill_during_save_keeps_the_previous_checkpoint(reference, tmp_path, monkeypatch, write):
    "Every write of a save interrupted halfway (in-process; the subprocess test above does it with a real exit)."
    run = tmp_path / "run"
    def die(): raise Killed
    monkeypatch.setattr(T, "atomic_write_bytes", dying_write(10, write, die))
    with pytest.raises(Killed):
        train(MODEL, cfg(20), tokens=TOKENS, run_dir=run, progress=False)
    monkeypatch.undo()
    assert list(run.glob(".*.tmp"))                                   # the kill left a half-written temporary file
    assert load_model(run) is not None and verify_checkpoint(run, 5)["step"] == 5   # the previous checkpoint loads
    msgs = []
    m, h = train(MODEL, cfg(20), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    resumed = 10 if write == 4 else 5                                 # the state file is the commit point
    assert any(x.startswith(f"resuming from step {resumed} of 20") for x in msgs), msgs
    assert any(x.startswith("removed") for x in msgs) and not list(run.glob(".*.tmp"))
    assert same(weights(m), reference[20][0]) and [r["loss"] for r in h] == reference[20][1]


# ---- a full disk ----------------------------------------------------------------------------------------

def full_disk_at(monkeypatch, step: int, nth_write: int):
    "From the checkpoint at `step` on, the `nth_write`-th fsync fails with ENOSPC (data written, not durable)."
    state = {"armed": False, "n": 0}
    real = os.fsync

    def fsync(fd):
        if state["armed"]:
            state["n"] += 1
            if state["n"] >= nth_write: raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return lambda rec: state.update(armed=True) if rec["step"] == step else None


def test_full_disk_during_a_save_is_a_clear_error_and_keeps_the_previous_checkpoint(reference, tmp_path, monkeypatch):
    run = tmp_path / "run"
    with pytest.raises(CheckpointSaveError) as e:
        train(MODEL, cfg(20), tokens=TOKENS, run_dir=run, progress=False, callback=full_disk_at(monkeypatch, 10, 2))
    assert str(e.value) == "could not save checkpoint at step 10: No space left on device; last good checkpoint: step 5"
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert list_checkpoints(run) == [5] and verify_checkpoint(run)["step"] == 5
    assert not list(run.glob(".*.tmp")) and not list(run.glob("*-00000010.*"))   # the partial save was cleaned
    m, h = train(MODEL, cfg(20), tokens=TOKENS, run_dir=run, progress=False, log=lambda s: None)
    assert same(weights(m), reference[20][0])
    # a full disk on the very first save: nothing to keep, and the directory is not left reserved
    first = tmp_path / "first"
    with pytest.raises(CheckpointSaveError, match=r"^could not save checkpoint at step 5: No space left on device; last good checkpoint: none$"):
        train(MODEL, cfg(20), tokens=TOKENS, run_dir=first, progress=False, callback=full_disk_at(monkeypatch, 5, 1))
    monkeypatch.undo()
    assert sorted(p.name for p in first.iterdir() if not p.name.startswith(".")) == []


# ---- byte flips and truncations -------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FILES = ["model-00000010.safetensors", "optim-00000010.safetensors", "ckpt-00000010.json", T.CKPT_JSON,
         "model-00000005.safetensors", "ckpt-00000005.json"]
damage = st.tuples(st.sampled_from(FILES), st.sampled_from(["flip", "truncate"]), st.floats(0, 0.9999),
                   st.integers(1, 255))


def damaged_copy(src: Path, dst: Path, how) -> bool:
    "Copy a run directory and damage one file; True when the file's bytes changed."
    name, kind, where, mask = how
    shutil.copytree(src, dst)
    f = dst / name
    data = bytearray(f.read_bytes())
    i = int(where * len(data))
    if kind == "flip": data[i] ^= mask
    else: data = data[:i]
    f.write_bytes(bytes(data))
    return True


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("flips") / "run"
    m, _ = train(MODEL, cfg(10), tokens=TOKENS, run_dir=run, progress=False)
    return run, weights(m), json.loads((run / T.CKPT_JSON).read_text())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=damage)
def test_damaged_checkpoint_files_are_refused_or_recovered_never_used(finished_run, tmp_path, how):
    src, final, state = finished_run
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        run = Path(d) / "run"
        damaged_copy(src, run, how)
        try:                                       # loading: the exact checkpoint, or a refusal
            m, s = load_checkpoint(run)
            assert same(weights(m), final) and s["sha256"] == state["sha256"], how
        except CheckpointError as e:
            assert "\n" not in str(e)
        # resuming: the newest checkpoint that verifies; the run ends with the uninterrupted weights
        m, h = train(MODEL, cfg(10), tokens=TOKENS, run_dir=run, progress=False, log=lambda s: None)
        assert same(weights(m), final) and [r["step"] for r in h] == list(range(1, 11)), how
        assert same(weights(load_model(run)), final)   # and the directory is whole again


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 0.9999), mask=st.integers(1, 255), kind=st.sampled_from(["flip", "truncate"]))
def test_damaged_token_cache_is_rebuilt_never_used(tmp_path, where, mask, kind):
    tokens = TOKENS[:3000]
    calls = []
    build = lambda: (calls.append(1), tokens.clone())[1]
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        path = Path(d) / "entry.safetensors"
        assert torch.equal(cached_tokens(path, build, 256), tokens) and len(calls) == 1
        data = bytearray(path.read_bytes())
        i = int(where * len(data))
        if kind == "flip": data[i] ^= mask
        else: data = data[:i]
        path.write_bytes(bytes(data))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = cached_tokens(path, build, 256)
        assert torch.equal(again, tokens)
        if len(calls) == 2:                         # rebuilt: said so, in one line
            assert [w.category for w in caught] == [DataWarning] and "rebuilding it" in str(caught[0].message)
        else:                                       # read back: only when the damage left the content intact
            assert not caught

