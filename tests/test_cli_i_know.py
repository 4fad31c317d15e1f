"""`--i-know` on the command line: train, eval and sweep refuse work estimated above their time bounds in one line that
names the flag, and with the flag pass the check (the work itself is stubbed: nothing long runs)."""
import time

import pytest
import torch

import lengthx.evaluate as E
import lengthx.train as T
from lengthx.cli import build_parser, main

ISSUE = ["train", "--train-len", "1000000", "--batch-size", "1", "--steps", "1", "--device", "cpu"]   # the issue's command


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lengthx") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_training(monkeypatch):
    "The training loop returns at once, recording the TrainConfig it got; the memory check is another test's business."
    reached = []
    monkeypatch.setattr(T, "_train", lambda *a, **k: reached.append(a[1]) or (None, []))
    monkeypatch.setattr(T, "_check_memory", lambda *a, **k: None)
    return reached


def test_every_command_with_a_time_bound_takes_the_flag():
    subs = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict)).choices
    for cmd in ("train", "eval", "sweep"):
        assert any("--i-know" in a.option_strings for a in subs[cmd]._actions), cmd


def test_the_issues_train_is_refused_in_one_line_naming_the_flag(tmp_path, no_training, capsys):
    t = time.perf_counter()
    assert main(ISSUE + ["--out", str(tmp_path / "run")]) == 2
    took, line = time.perf_counter() - t, one_line(capsys.readouterr().err)
    assert "estimated at" in line and "--i-know" in line and took < 60, (took, line)
    assert "i_know" not in line and "TrainConfig" not in line and "--batch-size" in line, line
    assert no_training == [] and not (tmp_path / "run").exists()


def test_the_flag_passes_the_check(tmp_path, no_training, capsys):
    assert main(ISSUE + ["--out", str(tmp_path / "run"), "--i-know", "--quiet"]) == 0, capsys.readouterr().err
    assert len(no_training) == 1 and no_training[0].i_know and no_training[0].length == 1_000_000


@pytest.fixture(scope="module")
def run256(tmp_path_factory):
    "A real run directory: the tiny model trained 2 steps at length 256 (its default eval lengths reach 4096)."
    out = tmp_path_factory.mktemp("cli_i_know") / "run"
    assert main(["train", "--train-len", "256", "--steps", "2", "--batch-size", "2", "--warmup", "0", "--device", "cpu",
                 "--quiet", "--out", str(out)]) == 0
    return out


def test_sliding_stride_one_eval_refused_before_any_forward(run256, monkeypatch, capsys):
    "At an assumed 1e7 FLOP/s (so the test does not depend on the machine's threads) stride 1 at 256 and 512 is hours."
    called = []
    monkeypatch.setattr(E, "window_losses", lambda *a, **k: called.append(a[3]) or torch.zeros(len(a[2]), a[3]))
    monkeypatch.setattr(E, "flops_per_second", lambda device=None: 1e7)
    cmd = ["eval", "--run", str(run256), "--lengths", "256,512", "--protocol", "sliding", "--stride", "1", "--device", "cpu", "--quiet"]
    assert main(cmd) == 2
    line = one_line(capsys.readouterr().err)
    assert "3,841 window(s) of length 256" in line and "estimated at" in line and "--stride" in line and "--i-know" in line, line
    assert "i_know" not in line and "n_windows" not in line and "--n-windows" in line, line   # the shell's words, not Python's
    assert called == []
    assert main(cmd + ["--i-know"]) == 0        # every length scored (by the stub: zero losses, perplexity 1)
    assert called == [256, 512] and capsys.readouterr().out.count("ppl=1.00") == 2


def test_sweep_refused_before_training_and_flag_passed_through(tmp_path, monkeypatch, capsys):
    import lengthx.sweep as S
    got = []
    monkeypatch.setattr(S, "run_sweep", lambda *a, **k: got.append(k["i_know"]) or {"rows": {}})
    monkeypatch.setattr(S, "sweep_table", lambda res: "")
    monkeypatch.setattr(S, "resolution_note", lambda res: "")   # the stubbed result has no intervals to read
    assert main(["sweep", "--pes", "rope", "--train-len", "256", "--steps", "1", "--protocol", "sliding", "--stride", "1",
                 "--out", str(tmp_path / "s"), "--quiet", "--i-know"]) == 0
    assert got == [True]


def test_sweep_without_the_flag_refuses_before_training(tmp_path, no_training, capsys):
    assert main(["sweep", "--pes", "rope", "--train-len", "256", "--steps", "1", "--protocol", "sliding", "--stride", "1",
                 "--device", "cpu", "--out", str(tmp_path / "s"), "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "estimated at" in line and "--i-know" in line and "i_know" not in line, line
    assert no_training == [] and not (tmp_path / "s" / "runs").exists()
