"""Fuzzing the command line: random argument vectors for every subcommand, grammar-built and garbage PE specs,
byte flips and truncations of results and checkpoint files.

The property, for every case: the command succeeds, or it exits 2 (bad input) / 1 (runtime fault) with one line
on stderr that starts with `lengthx`, never a traceback; and no file changes that the command did not mean to write
(a refused command changes nothing; a successful one writes only under its `--out`).
Sizes are tiny and example counts fixed (derandomized), so the whole module takes about a minute on 2 cores.
"""
import collections
import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lengthx.cli import main

FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                   HealthCheck.data_too_large, HealthCheck.filter_too_much])
BASE = Path(tempfile.mkdtemp(prefix="lengthx-fuzz-"))
OUTCOMES = collections.Counter()   # (subcommand, exit status) -> cases; printed at the end (pytest -s)


def snapshot(root: Path) -> dict:
    "Every file under `root` (hidden ones too): its content hash and mode."
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_case(argv: list, root: Path, writes: tuple = ()) -> int:
    "Run `lengthx argv` in-process in `root` and check the property; `writes`: the paths it may change on success."
    before = snapshot(root)
    out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
    err = err.getvalue()
    after = snapshot(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2), (argv, code, err)
    if code:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("lengthx") and ("error" in lines[-1] or "interrupted" in lines[-1]), (argv, err)
        assert sum("error" in ln for ln in lines) == 1, (argv, err)
        if code == 2:
            assert len(lines) == 1, (argv, err)
            assert not changed, (argv, changed, err)          # refused before any work: nothing written
    bad = {p for p in changed if not any(p == w or p.startswith(w.rstrip("/") + "/") for w in writes)}
    assert not bad, (argv, code, bad, err)
    OUTCOMES[argv[0], code] += 1
    return code


def fresh_root(name: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=name, dir=BASE))
    (root / "afile").write_text("not a directory\n")
    return root


def argv_of(cmd: list, opts: dict, extra: list) -> list:
    argv = list(cmd)
    for k, v in opts.items(): argv += [k] if v is None else [k, v]
    return argv + list(extra) + ["--quiet"]


def mix(valid: list, invalid: list):
    "Mostly valid values (3 in 4), so that most vectors have at most one or two bad options and many succeed."
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(invalid))


DEVICE = mix(["cpu", "auto"], ["gpu0", "cuda:x", "cuda", "CPU", ""])
EXTRA = mix([[]], [["--bogus"], ["stray"], ["--k"], ["--"], ["-x"]])
PES = mix(["nope", "alibi", "rope", "learned", "dape:kerple_log"],
          ["ropee", "", ",", "rope:pi=abc", "t5:num_buckets=-3", "alibi:scale=nan", "fire:width=0", "kerple_log:eps=-1",
           "yarn:s=8:s=4"])


@pytest.fixture(scope="module")
def trained():
    "A tiny trained run (length 16, 3 steps) to evaluate and to damage."
    run = BASE / "trained" / "run"
    assert main(["train", "--pe", "nope", "--train-len", "16", "--steps", "3", "--batch-size", "2", "--quiet",
                 "--out", str(run)]) == 0
    return run


@pytest.fixture(scope="module")
def swept():
    "A tiny finished sweep to damage."
    out = BASE / "swept" / "sw"
    assert main(SWEEP_ARGV + ["--out", str(out)]) == 0
    return out


# --- argument vectors, every subcommand ------------------------------------------------------------------------

TRAIN = {"--pe": PES, "--preset": mix(["tiny"], ["huge", ""]),
         "--train-len": mix(["8", "16"], ["0", "-3", "x", ""]), "--steps": mix(["1", "2"], ["0", "-1", "1e3"]),
         "--batch-size": mix(["1", "2"], ["0", "-2", "q"]), "--lr": mix(["0.003", "1e-3"], ["0", "-1", "nan", "inf", "abc"]),
         "--warmup": mix(["0", "1"], ["-1", "x"]), "--ckpt-every": mix(["0", "1"], ["-1", "x"]),
         "--seed": mix(["0", "7"], ["x"]), "--device": DEVICE, "--dtype": mix(["float32"], ["fp16", "int8"]),
         "--length": mix(["8"], ["0"])}


@settings(max_examples=30, **FUZZ)
@given(opts=st.fixed_dictionaries({"--out": mix(["r", "r/sub"], ["afile"])}, optional=TRAIN), extra=EXTRA)
def test_fuzz_train(opts, extra):
    opts.setdefault("--steps", "1"); opts.setdefault("--train-len", "8"); opts.setdefault("--batch-size", "2")
    run_case(argv_of(["train"], opts, extra), fresh_root("train-"), writes=(opts["--out"],))


EVAL = {"--lengths": mix(["16", "16,32", "8:32:8", "16,,32"], ["0", "-1", "x", "", "100000000"]),
        "--protocol": mix(["last_k", "nonoverlap", "sliding"], ["bogus"]),
        "--k": mix(["1", "8"], ["0", "-5", "x"]), "--n-windows": mix(["1", "2"], ["0", "x"]),
        "--stride": mix(["4", "8"], ["0", "100", "x"]), "--max-factor": mix(["1", "4"], ["0", "3", "x"]),
        "--split": mix(["test", "validation"], ["bogus"]), "--device": DEVICE,
        "--out": mix(["ev", "run"], ["afile"])}


@settings(max_examples=40, **FUZZ)
@given(run=mix(["run"], ["nothing", "afile", ""]), opts=st.fixed_dictionaries({}, optional=EVAL),
       extra=EXTRA)
def test_fuzz_eval(trained, run, opts, extra):
    root = fresh_root("eval-")
    shutil.copytree(trained, root / "run")
    opts.setdefault("--n-windows", "2")
    run_case(argv_of(["eval", "--run", run], opts, extra), root, writes=(opts.get("--out", "-"),))


SWEEP_ARGV = ["sweep", "--pes", "nope", "--train-len", "16", "--steps", "2", "--max-factor", "2", "--n-windows", "2",
              "--quiet"]
SWEEP = {"--pes": mix(["nope", "alibi,nope", "nope,nope"], [",", "ropee", "t5:max_distance=0"]),
         "--budget": mix(["quick"], ["bogus"]), "--preset": mix(["tiny"], ["bogus"]),
         "--protocol": mix(["last_k", "nonoverlap", "sliding"], ["x"]), "--k": mix(["4"], ["0"]),
         "--n-windows": mix(["1", "2"], ["0"]), "--stride": mix(["4"], ["0", "64"]),
         "--max-factor": mix(["1", "2"], ["0", "3"]), "--seed": mix(["0"], ["x"]),
         "--device": DEVICE, "--ymax": mix(["50"], ["0", "nan"])}


@settings(max_examples=12, **FUZZ)
@given(opts=st.fixed_dictionaries({"--train-len": mix(["8", "16"], ["0"]), "--steps": mix(["1", "2"], ["-1"]),
                                   "--out": mix(["sw"], ["afile"])}, optional=SWEEP), extra=EXTRA)
def test_fuzz_sweep(opts, extra):
    opts.setdefault("--max-factor", "2"); opts.setdefault("--n-windows", "2")
    run_case(argv_of(["sweep"], opts, extra), fresh_root("sweep-"), writes=(opts["--out"],))


BENCH = {"--pe": PES, "--paths": mix(["naive"], ["fast", ""]), "--pes": mix(["nope", "nope,alibi"], [",", "ropee"]),
         "--preset": mix(["tiny"], ["bogus"]), "--reps": mix(["1"], ["0"]),
         "--mode": mix(["forward", "train"], ["x"]), "--device": DEVICE, "--out": mix(["b"], ["afile"])}


@settings(max_examples=10, **FUZZ)
@given(what=mix(["model", "model", "attention"], ["bogus"]),
       lengths=mix(["16", "8,16"], ["0", "x"]), opts=st.fixed_dictionaries({}, optional=BENCH), extra=EXTRA)
def test_fuzz_bench(what, lengths, opts, extra):
    opts.setdefault("--preset", "tiny"); opts.setdefault("--reps", "1"); opts["--lengths"] = lengths
    if what == "attention": opts["--paths"] = "naive" if opts.get("--paths") != "fast" else "fast"
    run_case(argv_of(["bench", what], opts, extra), fresh_root("bench-"), writes=(opts.get("--out", "-"),))


TASKS = {"--pe": mix(["nope", "alibi"], ["ropee", ","]), "--batch-size": mix(["2"], ["0"]),
         "--heads": mix(["2"], ["0", "3"]), "--width": mix(["16"], ["0", "15"]),
         "--test-lens": mix(["41", "41:45:4"], ["0", "x", "45:41"]), "--eval-batch": mix(["2"], ["0"]),
         "--max-pos": mix(["128"], ["0"]), "--train-len": mix(["8"], ["0"]),
         "--device": DEVICE, "--out": mix(["che", "che.json"], ["afile"]), "--no-randomize": st.none()}


@settings(max_examples=10, **FUZZ)
@given(task=mix(["even_pairs", "all"], ["bogus", ","]), opts=st.fixed_dictionaries({}, optional=TASKS), extra=EXTRA)
def test_fuzz_tasks(task, opts, extra):
    opts.update({"--steps": "1", "--layers": "1"}); opts.setdefault("--test-lens", "41"); opts.setdefault("--width", "16")
    opts.setdefault("--heads", "2"); opts.setdefault("--batch-size", "2"); opts.setdefault("--eval-batch", "2")
    if task == "all": task = "even_pairs,parity_check"
    out = opts.get("--out", "-")
    run_case(argv_of(["tasks", "--task", task], opts, extra), fresh_root("tasks-"),
             writes=(out if out.endswith(".json") else out + "/", ".lock") if out != "-" else ())


# --- PE specs: grammar and garbage ----------------------------------------------------------------------------

KEYS = ["pi", "ntk", "dynamic", "s", "scale", "k", "w", "num_buckets", "max_distance", "width", "eps", "max_len", "frac",
        "base", "r1", "eval_random"]
VALUES = ["1", "2", "4", "8", "0", "-1", "-3", "0.5", "nan", "inf", "-inf", "abc", "", "1e3", "true"]
FAMILIES = ["nope", "rope", "alibi", "t5", "fire", "kerple_log", "kerple_power", "yarn", "xpos", "sandwich", "rerope",
            "learned", "sinusoidal", "window", "randomized", "bipe", "dape", "cdape", "ropee", "ROPE", ""]


@st.composite
def grammar_spec(draw, depth: int = 0) -> str:
    "family[:key=value]...[:inner spec], with real and wrong families, keys and values."
    parts = [draw(st.sampled_from(FAMILIES))]
    parts += [f"{draw(st.sampled_from(KEYS))}={draw(st.sampled_from(VALUES))}" for _ in range(draw(st.integers(0, 2)))]
    if depth == 0 and draw(st.booleans()) and parts[0] in ("dape", "cdape", "window", "randomized", "bipe"):
        parts.append(draw(grammar_spec(depth=1)))
    return ":".join(parts)


TINY = ["--steps", "1", "--train-len", "8", "--batch-size", "1", "--out", "r"]


@settings(max_examples=40, **FUZZ)
@given(spec=grammar_spec())
def test_fuzz_grammar_specs_through_train(spec):
    run_case(["train", "--pe", spec, *TINY, "--quiet"], fresh_root("spec-"), writes=("r",))


@settings(max_examples=30, **FUZZ)
@given(spec=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24))
def test_fuzz_garbage_specs_through_train(spec):
    run_case(["train", "--pe", spec, *TINY, "--quiet"], fresh_root("garbage-"), writes=("r",))


# --- damaged files --------------------------------------------------------------------------------------------

def damage(data: bytes, where: int, how: str, byte: int) -> bytes:
    i = where % max(1, len(data))
    if how == "truncate": return data[:i]
    return data[:i] + bytes([data[i] ^ byte]) + data[i + 1:] if data else data


@settings(max_examples=20, **FUZZ)
@given(where=st.integers(0, 10**6), how=st.sampled_from(["flip", "flip", "truncate"]), byte=st.integers(1, 255))
def test_fuzz_damaged_results_file(swept, where, how, byte):
    root = fresh_root("results-")
    shutil.copytree(swept, root / "sw")
    f = root / "sw" / "results.json"
    f.write_bytes(damage(f.read_bytes(), where, how, byte))
    run_case(SWEEP_ARGV + ["--out", "sw"], root, writes=("sw",))


@settings(max_examples=12, **FUZZ)
@given(name=st.sampled_from(["checkpoint.json", "checkpoint.json", "model", "run.json"]), where=st.integers(0, 10**6),
       how=st.sampled_from(["flip", "truncate"]), byte=st.integers(1, 255))
def test_fuzz_damaged_checkpoint_through_eval(trained, name, where, how, byte):
    root = fresh_root("ckpt-")
    shutil.copytree(trained, root / "run")
    f = next((root / "run").glob("model-*.safetensors")) if name == "model" else root / "run" / name
    f.write_bytes(damage(f.read_bytes(), where, how, byte))
    run_case(["eval", "--run", "run", "--lengths", "16", "--n-windows", "2", "--quiet"], root)


# --- a few end to end, as separate processes -----------------------------------------------------------------

@settings(max_examples=6, **FUZZ)
@given(argv=st.sampled_from([["eval", "--run", "x", "--k", "0"], ["sweep", "--pes", ","], ["train", "--device", "gpu0"],
                             ["bench", "bogus"], ["tasks", "--test-lens", "0"], ["--nope"], ["train", "--out", "afile"],
                             ["eval", "--run", "afile"]]))
def test_fuzz_end_to_end_subprocess(argv):
    root = fresh_root("e2e-")
    before = snapshot(root)
    r = subprocess.run([sys.executable, "-c", "import sys; from lengthx.cli import main; sys.exit(main())", *argv],
                       cwd=root, capture_output=True, text=True)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("lengthx") and r.stdout == "", (argv, r.stderr)
    assert snapshot(root) == before
    OUTCOMES["subprocess", r.returncode] += 1


def teardown_module():
    print("\nfuzz cases (subcommand, exit status): " + ", ".join(f"{k[0]} {k[1]}: {v}" for k, v in sorted(OUTCOMES.items()))
          + f"; {sum(OUTCOMES.values())} in-process cases")
    shutil.rmtree(BASE, ignore_errors=True)


# --- faults found by trials: each test failed before its fix -----------------------------------------------------

@pytest.mark.parametrize("argv", [["train", "--out", ""], ["train", "--corpus", "", "--out", "r"],
                                  ["sweep", "--out", "  "], ["eval", "--run", ""], ["reproduce", "--corpus", ""],
                                  ["tasks", "--out", ""]])
def test_an_empty_path_is_refused_not_read_as_the_current_directory(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("empty" in err or "must name" in err), err
    assert list(tmp_path.iterdir()) == []                       # nothing written anywhere


def test_eval_records_the_windows_it_scored(tmp_path, capsys):
    "A split with room for fewer windows than --n-windows: eval.json records what was used, and the run says so."
    corpus = tmp_path / "texts"
    corpus.mkdir()
    from lengthx.data import split_of
    names = [f"f{i}.txt" for i in range(400)]
    test_files = [n for n in names if split_of(n) == "test"][:2]
    train_files = [n for n in names if split_of(n) == "train"][:4]
    for n in test_files: (corpus / n).write_text("def f(x):\n    return x + 1\n" * 3)   # a few hundred bytes
    for n in train_files: (corpus / n).write_text("import os\nprint(os.getcwd())\n" * 200)
    run = tmp_path / "run"
    assert main(["train", "--pe", "nope", "--train-len", "16", "--steps", "2", "--batch-size", "2", "--quiet",
                 "--corpus", str(corpus), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--corpus", str(corpus), "--lengths", "16,32", "--k", "8",
                 "--n-windows", "100000", "--unanchored", "--out", str(tmp_path / "ev"), "--quiet"]) == 0
    cap = capsys.readouterr()
    res = json.loads((tmp_path / "ev" / "eval.json").read_text())
    used = {int(L): n for L, n in res["windows_used"].items()}
    assert set(used) == {16, 32} and all(1 <= n < 100000 for n in used.values()) and used[16] > used[32]
    assert "fewer windows than --n-windows 100000" in cap.err
    for L, n in used.items(): assert f"k=8, {n} of 100000 windows, L={L})" in cap.out, cap.out   # what was scored
    # nonoverlap: the printed count is the windows scored, as eval.json has it (it printed the asked-for 100000)
    assert main(["eval", "--run", str(run), "--corpus", str(corpus), "--lengths", "16,32", "--protocol", "nonoverlap",
                 "--n-windows", "100000", "--out", str(tmp_path / "ev2"), "--quiet"]) == 0
    out = capsys.readouterr().out
    used = json.loads((tmp_path / "ev2" / "eval.json").read_text())["windows_used"]
    for L, n in used.items(): assert f"nonoverlap, {n} of 100000 windows, L={L})" in out, out
    assert "nonoverlap, 100000 windows" not in out


def test_bench_attention_warms_up_and_reports_median_and_spread():
    "Every contender runs once before the clock starts; the median of `reps` samples is reported with its spread."
    import statistics
    from lengthx.bench import bench_attention
    rows = bench_attention("nope", [32], ["naive", "flex"], n_heads=2, head_dim=8, reps=2)
    for r in rows:
        assert "error" not in r, r
        assert r["warmup"] == 1 and len(r["samples"]) == 2
        assert r["seconds"] == pytest.approx(statistics.median(r["samples"]))   # with 2 samples: their mean, not the larger
        assert r["min_seconds"] <= r["seconds"] <= r["max_seconds"]
