"""The lengthx command: one consistent interface, every bad input one line before any work, results kept safe."""
import configparser
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import lengthx
from lengthx import cli, results
import lengthx.bench
from lengthx.cli import main
from lengthx.evaluate import PROTOCOL

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, "-c", "import sys; from lengthx.cli import main; sys.exit(main())"]
TINY_TRAIN = ["--pe", "nope", "--train-len", "16", "--steps", "3", "--batch-size", "2", "--quiet"]


def run_cli(args, **kw):
    "`lengthx ARGS` as a separate process, as from a shell."
    return subprocess.run(RUN + list(args), capture_output=True, text=True, **kw)


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lengthx") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    "One tiny trained run shared by the evaluation tests (read-only for them)."
    run = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", *TINY_TRAIN, "--out", str(run)]) == 0
    return run


# --- one interface -------------------------------------------------------------------------------------

def test_help_is_fast_because_torch_is_not_imported():
    r = subprocess.run([sys.executable, "-c", "import sys, lengthx.cli as c; c.build_parser().format_help(); "
                        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('lengthx.')))"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "['lengthx.cli']", r.stdout + r.stderr   # no torch, no library module
    r = run_cli(["--help"])
    assert r.returncode == 0 and all(c in r.stdout for c in ("train", "eval", "sweep", "bench", "tasks"))


def test_a_refused_eval_loads_no_torch():
    "argparse runs --corpus's default through its type: the default must not import the library (which loads torch)."
    code = ("import sys, contextlib, io; from lengthx.cli import main\n"
            "with contextlib.redirect_stderr(io.StringIO()) as err: rc = main(['eval', '--run', 'nothing'])\n"
            "print(rc, 'torch' in sys.modules, 'no checkpoint.json' in err.getvalue())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["2", "False", "True"], r.stdout + r.stderr


def test_version_matches_settings_ini():
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    r = run_cli(["--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"lengthx {lengthx.__version__}" == f"lengthx {cfg['DEFAULT']['version']}"


def test_every_option_has_help_and_shows_its_default():
    subs = cli._subparsers(cli.build_parser())
    assert set(subs) == {"train", "eval", "sweep", "bench", "tasks", "reproduce"}
    for name, p in subs.items():
        text = p.format_help()
        for act in p._actions:
            assert act.help, (name, act.dest)
            if act.nargs == 0:     # a flag: its help says what it does; "(default: True)" would read as if it were on
                assert "(default:" not in act.help and f"(default: {act.default})" not in " ".join(text.split()) or \
                    act.dest == "help", (name, act.dest)
            elif act.help is not __import__("argparse").SUPPRESS and act.default is not None and act.option_strings:
                assert f"(default: {act.default})" in " ".join(text.split()), (name, act.dest)


def test_consistent_names_across_subcommands():
    subs = cli._subparsers(cli.build_parser())
    opts = {n: {o for a in p._actions for o in a.option_strings if a.help != __import__("argparse").SUPPRESS}
            for n, p in subs.items()}
    assert all("--out" in o and "--device" in o and "--quiet" in o for o in opts.values())
    for n in ("train", "sweep", "bench"):
        preset = next(a for a in subs[n]._actions if a.dest == "preset")
        assert tuple(preset.choices) == cli.MODEL_PRESETS            # --preset is the model size everywhere
    assert "--budget" in opts["sweep"] and "--train-len" in opts["train"] and "--train-len" in opts["sweep"]
    assert not any({"--run-dir", "--length", "--json"} & o for o in opts.values())   # old names: hidden at most


def test_eval_and_sweep_share_one_set_of_protocol_defaults():
    subs = cli._subparsers(cli.build_parser())
    proto = lambda p: {a.dest: a.default for a in p._actions if a.dest in asdict(PROTOCOL)}
    assert proto(subs["eval"]) == proto(subs["sweep"]) == asdict(PROTOCOL)


def test_repeated_names_equal_the_library():
    from lengthx.attention import PATHS
    from lengthx.evaluate import PROTOCOLS, eval_lengths
    from lengthx.model import PRESETS
    assert cli.MODEL_PRESETS == tuple(PRESETS) and cli.PROTOCOLS == PROTOCOLS and cli.ATTN_PATHS == PATHS


def test_options_table_lists_every_visible_option():
    md = cli.options_markdown()
    for name, p in cli._subparsers(cli.build_parser()).items():
        for a in p._actions:
            if a.option_strings and a.help != __import__("argparse").SUPPRESS and a.dest != "help":
                assert f"| {name} | `{', '.join(a.option_strings)}`" in md, (name, a.dest)


def test_help_pe(capsys):
    assert main(["--help-pe", "yarn"]) == 0
    assert "yarn" in capsys.readouterr().out
    assert main(["--help-pe", "yarnn"]) == 2
    assert one_error_line(capsys.readouterr().err) .startswith("lengthx: error: unknown positional encoding 'yarnn'. Did you mean 'yarn'")


# --- every bad input: one line, exit 2, before any work ------------------------------------------------------

BAD = [
    (["eval", "--run", "R", "--k", "0"], "lengthx eval: error: --k must be ≥ 1 (got 0)"),
    (["eval", "--run", "R", "--k", "-5"], "lengthx eval: error: --k must be ≥ 1 (got -5)"),
    (["eval", "--run", "R", "--stride", "0"], "lengthx eval: error: --stride must be ≥ 1 (got 0)"),
    (["eval", "--run", "R", "--n-windows", "0"], "lengthx eval: error: --n-windows must be ≥ 1 (got 0)"),
    (["eval", "--run", "R", "--max-factor", "0"], "lengthx eval: error: --max-factor must be ≥ 1 (got 0)"),
    (["eval", "--run", "R", "--max-factor", "3"], "lengthx eval: error: --max-factor must be a power of 2"),
    (["eval", "--run", "R", "--lengths", "16,-3"], "lengthx eval: error: --lengths: lengths must be ≥ 1"),
    (["eval", "--run", "R", "--protocol", "sliding", "--stride", "100", "--lengths", "16"], "--stride 100 is longer than"),
    (["eval", "--run", "R", "--lengths", "10000000"], "needs more than the"),
    (["eval", "--run", "R", "--lengths", "100000000"], "the longest length 100,000,000 exceeds 16,777,216 tokens"),
    (["sweep", "--pes", ","], "lengthx sweep: error: --pes: expected 'quick', 'default', 'all' or a comma list"),
    (["sweep", "--preset", "quick"], "lengthx sweep: error: --preset: invalid choice: 'quick'"),
    (["train", "--device", "gpu0", "--out", "X"], "lengthx train: error: --device must be auto, cpu, cuda, cuda:N or mps (got 'gpu0')"),
    (["train", "--pe", "rope:pi=abc", "--out", "X"], "lengthx train: error: bad PE spec 'rope:pi=abc': rope option 'pi' must be a float"),
    (["train", "--pe", "t5:num_buckets=-3", "--out", "X"], "lengthx train: error: bad PE spec 't5:num_buckets=-3': t5 option 'num_buckets' must be an integer >= 2"),
    (["train", "--pe", "fire:width=-2", "--out", "X"], "lengthx train: error: bad PE spec 'fire:width=-2': fire option 'width' must be an integer >= 1"),
    (["train", "--pe", "t5:max_distance=0", "--out", "X"], "lengthx train: error: bad PE spec 't5:max_distance=0': t5 option 'max_distance' must be an integer >= 1"),
    (["train", "--pe", "alibi:scale=nan", "--out", "X"], "lengthx train: error: bad PE spec 'alibi:scale=nan': alibi option 'scale' must be a finite float"),
    (["train", "--pe", "alibii", "--out", "X"], "unknown positional encoding 'alibii'"),
    (["train", "--lr", "nan", "--out", "X"], "lengthx train: error: --lr must be a finite number > 0 (got nan)"),
    (["train"], "lengthx train: error: --out DIR is required"),
    (["eval"], "lengthx eval: error: --run DIR is required"),
    (["eval", "--run", "NOTHING"], "holds no trained run"),
    (["tasks", "--task", "reverse_strin"], "lengthx tasks: error: unknown task 'reverse_strin'"),
    (["bench", "attention", "--paths", "fast"], "lengthx bench: error: --paths: unknown 'fast'"),
    ([], "lengthx: error: choose a command"),
    (["--bogus"], "lengthx: error: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv,msg", BAD, ids=[" ".join(a) or "(none)" for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(argv, msg, trained, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [str(trained) if a == "R" else a for a in argv]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert msg in line, line
    assert list(tmp_path.iterdir()) == []                  # nothing written


def test_device_this_machine_cannot_run_is_refused(tmp_path, capsys):
    dev = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    assert main(["train", "--device", dev, "--out", str(tmp_path / "r")]) == 2
    assert "sees no CUDA GPU" in one_error_line(capsys.readouterr().err) or torch.cuda.is_available()
    assert not (tmp_path / "r").exists()


def test_cache_pointing_at_a_file_is_refused(tmp_path, monkeypatch, capsys):
    f = tmp_path / "cachefile"; f.write_text("x")
    monkeypatch.setenv("LENGTHX_CACHE", str(f / "sub"))
    assert main(["train", *TINY_TRAIN, "--out", str(tmp_path / "r")]) == 2
    assert "LENGTHX_CACHE" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "r").exists() and f.read_text() == "x"


def test_end_to_end_refusal_from_a_shell(tmp_path):
    r = run_cli(["eval", "--run", str(tmp_path), "--k", "0"], cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert one_error_line(r.stderr) == f"lengthx eval: error: --k must be ≥ 1 (got 0) (see lengthx eval --help)"


BENCH = ["bench", "model", "--preset", "tiny", "--lengths", "16", "--reps", "1", "--quiet"]


def test_internal_error_is_one_line_unless_debug(monkeypatch, capsys):
    def bug(*a, **k): raise TypeError("a bug")
    monkeypatch.setattr(lengthx.bench, "bench_model", bug)
    assert main(BENCH) == 1
    assert "internal error (TypeError; rerun with --debug for the traceback): a bug" in one_error_line(capsys.readouterr().err)
    with pytest.raises(TypeError): main(["--debug", *BENCH])
    monkeypatch.setenv("LENGTHX_DEBUG", "1")
    with pytest.raises(TypeError): main(BENCH)


@pytest.mark.parametrize("exc,code,text", [
    (RuntimeError("disk on fire"), 1, "lengthx bench: error: disk on fire"),
    (MemoryError(), 1, "lengthx bench: error: MemoryError"),
    (OSError(28, "No space left on device"), 1, "lengthx bench: error: [Errno 28] No space left on device"),
    (FloatingPointError("loss is nan at step 7"), 1, "lengthx bench: error: loss is nan at step 7"),
    (KeyboardInterrupt(), 130, "lengthx: interrupted")])
def test_runtime_fault_exit_1_and_interrupt_exit_130(exc, code, text, monkeypatch, capsys):
    def fail(*a, **k): raise exc
    monkeypatch.setattr(lengthx.bench, "bench_model", fail)
    assert main(BENCH) == code
    assert one_error_line(capsys.readouterr().err) == text


# --- train, resume, evaluate ---------------------------------------------------------------------------------

def test_train_resume_eval_round_trip(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY_TRAIN, "--out", str(run)]) == 0
    assert "final loss" in capsys.readouterr().out
    assert main(["train", *TINY_TRAIN, "--out", str(run)]) == 0          # finished: says so once, trains nothing
    err = capsys.readouterr().err
    assert "already holds the finished run (step 3)" in err and "resuming" not in err   # no "resuming from step 3 of 3" beside it
    out = tmp_path / "ev"
    assert main(["eval", "--run", str(run), "--lengths", "16,32", "--k", "8", "--n-windows", "2", "--out", str(out),
                 "--quiet"]) == 0
    cap = capsys.readouterr()
    lines = [ln for ln in cap.out.splitlines() if ln.startswith("ppl=")]
    assert len(lines) == 2 and lines[1].endswith("(last_k, k=8, 2 windows, anchored at 256, L=32)"), cap.out
    assert "checkpoint at step 3" in cap.err
    res = json.loads((out / "eval.json").read_text())
    assert set(res["ppl"]) == {"16", "32"} and all(1 < v < 1000 for v in res["ppl"].values())
    assert res["protocol"] == {**asdict(PROTOCOL), "k": 8, "n_windows": 2} and res["step"] == 3
    assert stat.S_IMODE((out / "eval.json").stat().st_mode) == 0o644
    assert f"ppl={res['ppl']['32']:.2f} (last_k" in lines[1]


def test_resuming_says_from_which_step(tmp_path, capsys):
    from lengthx.model import GPTConfig
    from lengthx.train import TrainConfig, train
    run = tmp_path / "run"
    train(GPTConfig.preset("tiny", pe="nope", max_len=16),      # what `lengthx train` builds, stopped at step 3
          TrainConfig(steps=6, batch_size=2, length=16, lr=3e-3, warmup=20), run_dir=run, progress=False, stop_after=3)
    capsys.readouterr()
    assert main(["train", "--pe", "nope", "--train-len", "16", "--steps", "6", "--batch-size", "2", "--quiet",
                 "--out", str(run)]) == 0
    assert f"lengthx train: resuming from step 3 of 6 in '{run}'" in capsys.readouterr().err.splitlines()
    assert json.loads((run / "checkpoint.json").read_text())["step"] == 6


def test_eval_default_k_is_the_training_length(trained, capsys):
    assert main(["eval", "--run", str(trained), "--max-factor", "2", "--n-windows", "2", "--quiet"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ppl=")]
    assert [ln.split("(")[1] for ln in lines] == ["last_k, k=16, 2 windows, anchored at 32, L=16)", "last_k, k=16, 2 windows, anchored at 32, L=32)"]


def test_old_option_names_still_work(tmp_path, capsys):
    run = tmp_path / "old"
    assert main(["train", "--pe", "nope", "--length", "16", "--steps", "2", "--batch-size", "2", "--quiet",
                 "--run-dir", str(run)]) == 0
    assert json.loads((run / "checkpoint.json").read_text())["model"]["max_len"] == 16
    assert main(["eval", "--run-dir", str(run), "--lengths", "16", "--quiet"]) == 0


@pytest.mark.parametrize("sig,code,says", [(signal.SIGINT, 130, "lengthx: interrupted"),
                                            (signal.SIGTERM, 143, "lengthx train: stopped by signal 15")])
def test_ctrl_c_or_sigterm_during_training_is_one_line_and_keeps_a_checkpoint(tmp_path, sig, code, says):
    run = tmp_path / "run"
    p = subprocess.Popen(RUN + ["train", "--pe", "nope", "--train-len", "16", "--steps", "100000", "--batch-size", "2",
                                "--quiet", "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").stat().st_size):
        time.sleep(0.2)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err
    line = one_error_line(err)
    step = json.loads((run / "checkpoint.json").read_text())["step"]
    assert line == f"{says}; checkpoint kept at step {step} in {run} (rerun the same command to resume)"
    assert step >= 1


# --- sweep: results merged under a lock, never lost ----------------------------------------------------------

SWEEP = ["sweep", "--train-len", "16", "--steps", "2", "--max-factor", "2", "--n-windows", "2", "--quiet"]


def test_sweep_rows_accumulate_and_are_readable_by_all(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main([*SWEEP, "--pes", "nope", "--out", str(out)]) == 0
    assert main([*SWEEP, "--pes", "alibi,nope", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["rows"]) == {"nope", "alibi"} and res["settings"]["k"] == 16 and res["settings"]["budget"] == "custom"
    assert res["settings"]["preset"] == "tiny" and res["command"].startswith("lengthx sweep")
    assert stat.S_IMODE((out / "results.json").stat().st_mode) == 0o644
    table = capsys.readouterr().out
    assert "| 16 (1x) [90%] | 32 (2x) [90%] | growth 2x/1x |" in table and "(last_k, k=16, 2 windows, anchored at 32, L = the column)" in table
    before = (out / "results.json").read_bytes()
    assert main([*SWEEP, "--pes", "nope", "--n-windows", "3", "--out", str(out)]) == 2    # other settings: refused
    assert "n_windows differ" in one_error_line(capsys.readouterr().err)
    assert (out / "results.json").read_bytes() == before


def test_second_sweep_on_one_out_is_refused_and_loses_nothing(tmp_path, capsys):
    from lengthx.data import exclusive_lock
    out = tmp_path / "sw"
    assert main([*SWEEP, "--pes", "nope", "--out", str(out)]) == 0
    before = (out / "results.json").read_bytes()
    with exclusive_lock(out / ".lock", "held by a test"):
        r = run_cli([*SWEEP, "--pes", "alibi", "--out", str(out)])
    assert r.returncode == 1 and "in use by another lengthx process" in one_error_line(r.stderr)
    assert r.stdout == ""                                   # refused before its plan line: it plans nothing it cannot run
    assert (out / "results.json").read_bytes() == before and not (out / "runs" / "alibi").exists()


def test_damaged_results_are_refused_not_overwritten(tmp_path, capsys):
    out = tmp_path / "sw"; out.mkdir()
    for text in ('{"settings": ', '[1, 2]', '{"settings": {}, "rows": [1]}'):
        (out / "results.json").write_text(text)
        assert main([*SWEEP, "--pes", "nope", "--out", str(out)]) == 2
        assert "is damaged" in one_error_line(capsys.readouterr().err)
        assert (out / "results.json").read_text() == text


# --- provenance ------------------------------------------------------------------------------------------------

def test_provenance_never_records_a_users_repository(tmp_path):
    own = results.provenance()
    assert len(own["source_sha256"]) == 64
    if (ROOT / ".git").exists() and Path(lengthx.__file__).resolve().parent == ROOT / "lengthx":
        assert own["git_sha"] and len(own["git_sha"]) == 40
    user = tmp_path / "myproject"; user.mkdir()
    shutil.copytree(Path(lengthx.__file__).resolve().parent, user / "lengthx", ignore=shutil.ignore_patterns("__pycache__"))
    (user / "notes.txt").write_text("my work")
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "user"]):
        subprocess.run(cmd, cwd=user, check=True, env=env, capture_output=True)
    r = subprocess.run([sys.executable, "-c", "import json, lengthx.cli as c; print(json.dumps(c.provenance()))"],
                       cwd=user, capture_output=True, text=True, env={**env, "PYTHONPATH": str(user)})
    p = json.loads(r.stdout)
    assert p["git_sha"] is None and p["git_dirty"] is None               # the user's repository is not ours
    assert p["source_sha256"] == own["source_sha256"]                    # the same source, the same hash


# --- bench and tasks -------------------------------------------------------------------------------------------

def test_bench_writes_json_to_out(tmp_path, capsys):
    assert main(["bench", "attention", "--pe", "alibi", "--lengths", "16", "--paths", "naive", "--reps", "1",
                 "--device", "cpu", "--quiet", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench-attention.json").read_text())["rows"]
    assert [(r["T"], r["path"]) for r in rows] == [(16, "naive")] and rows[0]["seconds"] > 0
    assert main(["bench", "model", "--pes", "nope,alibi", "--preset", "tiny", "--lengths", "16,32", "--reps", "1",
                 "--quiet", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench-model.json").read_text())["rows"]
    assert [(r["T"], r["pe"]) for r in rows] == [(16, "nope"), (16, "alibi"), (32, "nope"), (32, "alibi")]


def test_tasks_out_is_a_directory(tmp_path, capsys):
    argv = ["tasks", "--task", "even_pairs", "--pe", "nope", "--steps", "2", "--batch-size", "4", "--layers", "1",
            "--heads", "2", "--width", "16", "--test-lens", "41,45", "--eval-batch", "4", "--max-pos", "128", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "che")]) == 0
    res = json.loads((tmp_path / "che" / "results.json").read_text())
    assert set(res["runs"]) == {"even_pairs|nope"} and "--out " + str(tmp_path / "che") in res["command"]
    assert "| R | even_pairs |" in capsys.readouterr().out
