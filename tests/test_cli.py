"""The lengthx command: help, bad input caught before work, a tiny train -> eval round trip."""
import json
import subprocess
import sys

import pytest

from lengthx.cli import main


def test_help_lists_subcommands():
    r = subprocess.run([sys.executable, "-c", "import sys; from lengthx.cli import main; sys.exit(main())", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for cmd in ("train", "eval", "sweep", "bench", "tasks"):
        assert cmd in r.stdout


def test_bad_pe_fails_before_training(tmp_path, capsys):
    assert main(["sweep", "--pes", "nope,alibii", "--out", str(tmp_path)]) == 2
    assert "unknown positional encoding 'alibii'" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_eval_of_missing_run_is_a_clear_error(tmp_path, capsys):
    assert main(["eval", "--run-dir", str(tmp_path / "nothing")]) == 2
    assert "error" in capsys.readouterr().err


def test_train_then_eval(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--pe", "nope", "--length", "16", "--steps", "3", "--batch-size", "2", "--run-dir", str(run)]) == 0
    out = tmp_path / "ppl.json"
    assert main(["eval", "--run-dir", str(run), "--lengths", "16,32", "--k", "8", "--n-windows", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["ppl"]) == {"16", "32"} and all(1 < v < 1000 for v in res["ppl"].values())


def test_bad_lengths_rejected():
    with pytest.raises(SystemExit):
        main(["eval", "--run-dir", "x", "--lengths", "16,-3"])
