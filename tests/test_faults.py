"""Fault injection for training and data: SIGKILL at random steps, a kill in the middle of a save, a full disk,
two writers on one run directory, and byte flips / truncations of every checkpoint and cache file.

The property everywhere: the run directory always holds a checkpoint that verifies, a resumed run ends with the
weights an uninterrupted run ends with (bitwise), and damaged files are refused or rebuilt, never used.
The training process the tests kill is `python -m _tiny worker ...`."""
import contextlib
import errno
import io
import json
import math
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


def close(a, b): return a.keys() == b.keys() and all(torch.allclose(a[n], b[n], rtol=1e-5, atol=1e-7) for n in a)


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
    # the same weights and losses as the uninterrupted run, to MKL's last bit: its CPU GEMM may round the last bit
    # differently for the same numbers at another memory alignment (steps resumed from a file land elsewhere), which
    # was seen here as 1-ulp loss differences at a few steps; a wrong resume (step, learning rate, data position,
    # random state) moves them by orders of magnitude more
    assert close(weights(m), reference[STEPS][0])
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip([r["loss"] for r in h], reference[STEPS][1], strict=True))
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



# ---- faults found by fault trials: a corpus past 2^24 tokens, a token cache of another split, a checkpoint
# ---- that is not a file, a batch that cannot fit, a spec stored as typed, an out-of-range seed ---------------

def _in_child(code: str, timeout: float = 60, mem_gib: int = 6) -> subprocess.CompletedProcess:
    "Run `code` in a fresh Python whose address space is capped: a regression fails (MemoryError, timeout), never hangs or swaps."
    import resource
    def cap(): resource.setrlimit(resource.RLIMIT_AS, (mem_gib * 2**30, mem_gib * 2**30))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).parent, preexec_fn=cap,
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def alarm(seconds: int):
    "Raise TimeoutError after `seconds` (a read that hangs becomes a failure, not a stuck test)."
    def ring(*_): raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try: yield
    finally:
        signal.alarm(0); signal.signal(signal.SIGALRM, old)


# fault 1: sizes whose float32 linspace rounds the last index to n (or past it), one that does not (2^24 + 1)
@pytest.mark.parametrize("n,dtype", [(2**24 + 1, torch.uint8), (2**24 + 4, torch.uint8), (2**25 + 4, torch.int16),
                                     (2**26 + 6, torch.uint8), (2**27 + 10, torch.uint8)])
def test_fingerprint_of_a_corpus_past_2_24_tokens(n, dtype):
    "The fingerprint samples positions in integers: no IndexError, the last token is sampled, the storage dtype does not matter."
    tokens = torch.zeros(n, dtype=dtype)
    tokens[::4099] = 7
    fp = T.tokens_fingerprint(tokens)
    assert fp == T.tokens_fingerprint(tokens.clone())
    tokens[-1] = 1                                   # the last token is one of the sampled ones
    assert T.tokens_fingerprint(tokens) != fp
    if n < 2**25: assert T.tokens_fingerprint(tokens.to(torch.int32)) == T.tokens_fingerprint(tokens)


def test_fingerprint_positions_are_exact_at_any_size():
    "The sampled positions run from 0 to n − 1, strictly increasing, inside the tensor, up to 2^50 (no memory needed)."
    for n in (1, 2, 3, 65535, 65536, 65537, 2**24 + 4, 2**28 - 1, 2**40 + 7, 2**50 - 3):
        idx = T.spread_positions(n, 65536)
        assert idx.dtype == torch.int64 and len(idx) == min(n, 65536)
        assert idx[0] == 0 and idx[-1] == n - 1 and bool((idx[1:] > idx[:-1]).all()), n
    assert len(T.spread_positions(0, 65536)) == 0


# fault 3: a token cache that belongs to another split or another corpus root
@pytest.fixture()
def two_roots(tmp_path):
    "Two tiny corpus roots of 60 files each (every split has files in both)."
    roots = []
    for r in ("a", "b"):
        root = tmp_path / r
        for i in range(60):
            (root / f"m{i}.py").parent.mkdir(parents=True, exist_ok=True)
            (root / f"m{i}.py").write_text(f"# {r}{i}\nx_{i} = {i} * {len(r)}\n")
        roots.append(root)
    return roots


def test_token_cache_of_another_split_or_root_is_not_used(two_roots, tmp_path):
    from lengthx.data import ByteTokenizer, corpus_cache_key, corpus_tokens, stdlib_corpus
    import platform
    a, b = two_roots
    cache, tok = tmp_path / "cache", ByteTokenizer()
    name = lambda split, root: f"stdlib-py{platform.python_version()}-{split}-bytes-{corpus_cache_key(split, tok, root)}.safetensors"
    truth = lambda split, root: tok.encode_documents(stdlib_corpus(split, root))
    val = corpus_tokens("validation", root=a, cache_dir=cache)
    assert torch.equal(val, truth("validation", a)) and not torch.equal(val, truth("train", a))
    # the validation entry renamed to the name the train split looks for (a copied cache, a bad sync)
    (cache / name("validation", a)).rename(cache / name("train", a))
    with pytest.warns(DataWarning, match=r"token cache .* failed its check \(holds split 'validation', not 'train'\); rebuilding it"):
        got = corpus_tokens("train", root=a, cache_dir=cache)
    assert torch.equal(got, truth("train", a))
    with warnings.catch_warnings():                 # rebuilt: the entry is now the train split's, read without a word
        warnings.simplefilter("error")
        assert torch.equal(corpus_tokens("train", root=a, cache_dir=cache), truth("train", a))
    # root a's train entry copied to the name root b's train split looks for: another source, refused
    shutil.copy(cache / name("train", a), cache / name("train", b))
    with pytest.warns(DataWarning, match=r"token cache .* failed its check \(was built from another corpus .*\); rebuilding it"):
        got = corpus_tokens("train", root=b, cache_dir=cache)
    assert torch.equal(got, truth("train", b))


# fault 4: a checkpoint file that is a symlink to /dev/zero, a FIFO, or larger than its state says
def test_checkpoint_that_is_not_a_regular_file_is_refused_not_read(finished_run, tmp_path):
    from lengthx.cli import main
    src, _, _ = finished_run
    cases = {"model-00000010.safetensors": "zero", "optim-00000010.safetensors": "fifo", T.CKPT_JSON: "fifo",
             "ckpt-00000010.json": "zero"}
    for name, kind in cases.items():
        run = tmp_path / f"{kind}-{name}"
        shutil.copytree(src, run)
        (run / name).unlink()
        if kind == "zero": (run / name).symlink_to("/dev/zero")
        else: os.mkfifo(run / name)
        t0 = time.time()
        with alarm(20):
            with pytest.raises(CheckpointError, match=r"is not a regular file") as e:
                verify_checkpoint(run, None if name == T.CKPT_JSON else 10)
            assert "\n" not in str(e.value)
            if name.startswith("model"):             # `lengthx eval` names the file and exits, one line
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    code = main(["eval", "--run", str(run), "--lengths", "32", "--quiet"])
                assert code in (1, 2) and "is not a regular file" in err.getvalue(), err.getvalue()
        assert time.time() - t0 < 10, name


def test_checkpoint_file_larger_than_its_state_says_is_refused_without_reading_it(finished_run, tmp_path):
    "The state records each tensor file's size: a file grown past it is refused from its size alone."
    src, final, _ = finished_run
    run = tmp_path / "run"
    shutil.copytree(src, run)
    f = run / "model-00000010.safetensors"
    size = f.stat().st_size
    assert verify_checkpoint(run)["sizes"][f.name] == size
    with open(f, "ab") as fh: fh.truncate(size + 2**40)      # a sparse terabyte: hashing it would take hours
    with alarm(20):
        with pytest.raises(CheckpointError, match=rf"is {size + 2**40} bytes, but its checkpoint state says {size}"):
            verify_checkpoint(run)


# fault 6: a batch that cannot fit, and a run that died before its first checkpoint
def test_a_batch_that_cannot_fit_is_refused_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    r = _in_child(f"""
import time, lengthx.train as T
from _tiny import MODEL, TOKENS, fault_cfg
t0 = time.time()
try: T.train(MODEL, fault_cfg(batch_size=100_000_000), tokens=TOKENS, run_dir={str(run)!r}, progress=False)
except ValueError as e: print(f"{{time.time() - t0:.2f}}|{{e}}")
""")
    assert r.returncode == 0 and r.stdout.count("\n") == 1, (r.returncode, r.stdout, r.stderr[-2000:])
    secs, msg = r.stdout.strip().split("|", 1)
    assert float(secs) < 5, secs
    assert msg.startswith("training needs an estimated") and "available" in msg and "batch_size 100000000" in msg, msg
    assert not run.exists()


def test_training_memory_estimate_counts_what_backward_and_adamw_keep():
    "Weights, gradients and two AdamW moments are 16 bytes a parameter; activations grow linearly with the batch."
    from lengthx.evaluate import estimate_eval_memory, estimate_train_memory
    from lengthx.model import GPT
    model = GPT(MODEL)
    n = sum(p.numel() for p in model.parameters())
    one, two = (estimate_train_memory(MODEL, 32, batch=b, path="naive") for b in (1, 2))
    assert one >= 16 * n and one > estimate_eval_memory(MODEL, 32, batch=1, path="naive")
    three = estimate_train_memory(MODEL, 32, batch=3, path="naive")
    assert three - two == two - one > 0                              # linear in the batch
    assert estimate_train_memory(MODEL, 32, batch=1, path="naive") == estimate_train_memory(model, 32, batch=1, path="naive")


def test_run_that_died_before_its_first_checkpoint_does_not_block_a_rerun(tmp_path):
    "run.json (and a few metrics) of another config, no checkpoint: the new run replaces it and says so."
    run = tmp_path / "run"
    run.mkdir()
    other = T.run_identity(MODEL, cfg(batch_size=100_000_000), TOKENS)     # what an OOM-killed run leaves
    (run / T.RUN_JSON).write_text(json.dumps(other))
    (run / T.METRICS).write_text(json.dumps({"step": 1, "loss": 5.0}) + "\n")
    msgs = []
    m, h = train(MODEL, cfg(10), tokens=TOKENS, run_dir=run, progress=False, log=msgs.append)
    assert [r["step"] for r in h] == list(range(1, 11))
    assert json.loads((run / T.RUN_JSON).read_text()) == T.run_identity(MODEL, cfg(10), TOKENS)
    assert any("no checkpoint" in x and "replaced" in x for x in msgs), msgs
    # with a checkpoint, a different run is still refused
    with pytest.raises(T.RunMismatchError, match="holds a different run"):
        train(MODEL, cfg(10, batch_size=2), tokens=TOKENS, run_dir=run, progress=False)


def test_run_json_with_the_float_fingerprint_still_resumes(tmp_path):
    "A run started before the fingerprint used integer positions resumes; other tokens are still refused."
    tokens = TOKENS.repeat(30)[:100_003]                    # > 65,536 tokens: the two position rules differ here
    assert T.tokens_fingerprint(tokens) != T._float_fingerprint(tokens)
    run = tmp_path / "run"
    train(MODEL, cfg(10), tokens=tokens, run_dir=run, progress=False, stop_after=5)
    ident = json.loads((run / T.RUN_JSON).read_text())
    (run / T.RUN_JSON).write_text(json.dumps({**ident, "data": T._float_fingerprint(tokens)}))
    msgs = []
    _, h = train(MODEL, cfg(10), tokens=tokens, run_dir=run, progress=False, log=msgs.append)
    assert any(x.startswith("resuming from step 5 of 10") for x in msgs) and [r["step"] for r in h] == list(range(1, 11))
    with pytest.raises(T.RunMismatchError, match="data: the training tokens differ"):
        train(MODEL, cfg(10), tokens=tokens.flip(0), run_dir=run, progress=False)


# fault 7: specs normalized where they are parsed, seeds checked where they enter, a preset name accepted
def test_pe_spec_is_stored_canonical_so_eval_accepts_what_train_accepted(tmp_path):
    from lengthx.model import GPTConfig
    run = tmp_path / "run"
    train(GPTConfig(n_layer=1, n_head=2, d_model=32, pe=" ROPE ", max_len=32), cfg(5), tokens=TOKENS, run_dir=run,
          progress=False)
    load_model(run, expect=GPTConfig(n_layer=1, n_head=2, d_model=32, pe="rope", max_len=32))
    assert verify_checkpoint(run)["model"]["pe"] == "rope"
    assert GPTConfig(pe=" ROPE ").pe == "rope"
    from lengthx.attention import build_pe, canonical_spec
    assert canonical_spec(" BiPE : table_size = 4 : ALiBi ") == "bipe:table_size=4:alibi"
    assert build_pe(" Kerple_Log ", n_heads=2, head_dim=8).spec == "kerple_log"
    with pytest.raises(ValueError, match="unknown positional encoding"): GPTConfig(pe=" ROPEE ")


def test_seed_range_is_checked_where_it_enters(tmp_path):
    from lengthx.cli import main
    top = 2**64 - 1                                  # torch.manual_seed takes 0..2^64 − 1
    assert T.TrainConfig(seed=top).seed == top
    T.seed_everything(top)
    assert torch.initial_seed() == top
    for bad in (2**64, 2**70):
        with pytest.raises(ValueError, match=rf"^TrainConfig.seed must be in 0..2\*\*64 - 1 \(what torch.manual_seed takes\), got {bad}$"):
            T.TrainConfig(seed=bad)
        with pytest.raises(ValueError, match=rf"^seed must be an integer in 0..2\*\*64 - 1"):
            T.seed_everything(bad)
    with pytest.raises(ValueError, match="seed must be an integer in 0..2"): T.seed_everything(-1)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["train", "--seed", str(2**70), "--steps", "1", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lengthx train: error: --seed must be below 2**64"), lines


def test_train_takes_a_preset_name():
    "train(model_cfg='tiny') builds the preset at the training length; a name it does not know is a one-line error."
    m, h = train("tiny", cfg(2), tokens=TOKENS, progress=False)
    assert (m.cfg.n_layer, m.cfg.n_head, m.cfg.d_model, m.cfg.max_len) == (2, 4, 64, 32) and len(h) == 2
    with pytest.raises(ValueError, match=r"^unknown preset 'tiniest'; choose from \["):
        train("tiniest", cfg(2), tokens=TOKENS, progress=False)
    with pytest.raises(ValueError, match=r"^model_cfg must be a GPTConfig or a preset name"):
        train(3, cfg(2), tokens=TOKENS, progress=False)


def test_delta_p_windows_of_a_corpus_past_2_24_tokens():
    "ΔP's windows are spread in integer arithmetic: float32 rounded the last start past the end of a 2**24+ token corpus."
    from lengthx.model import GPT, GPTConfig
    from lengthx.pe.cdape import delta_p
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", pe="nope", max_len=16))
    for n in (2 ** 24 + 7, 2 ** 25 + 3):
        tokens = torch.zeros(n, dtype=torch.uint8)
        r = delta_p(model, tokens, [32], 16, n_windows=3)[32]
        assert set(r) == {"full", "local", "delta"}
