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
