"train() estimates a step's time before it starts and refuses hours-long steps in one line, unless TrainConfig.i_know."
import time

import pytest
import torch

import lengthx.train as T
from lengthx.model import GPTConfig, flops_per_token
from lengthx.train import RUN_FIELDS, TrainConfig, estimate_step_seconds, train

LEN = 1_000_000   # the issue's `lengthx train --train-len 1000000 --batch-size 1 --steps 1`


@pytest.fixture
def no_loop(monkeypatch):
    "The training loop returns at once (recording that it was reached); the memory check is the other check's business."
    reached = []
    monkeypatch.setattr(T, "_train", lambda *a, **k: reached.append(a[1]) or (None, []))
    monkeypatch.setattr(T, "_check_memory", lambda *a, **k: None)
    return reached


def issue_cfgs(**kw):
    return GPTConfig.preset("tiny", max_len=LEN), TrainConfig(steps=1, batch_size=1, length=LEN, device="cpu", **kw)


def test_million_token_step_refused_fast(no_loop):
    mcfg, tcfg = issue_cfgs()
    t = time.perf_counter()
    with pytest.raises(ValueError) as e:
        train(mcfg, tcfg, tokens=torch.zeros(LEN + 2, dtype=torch.long), progress=False)
    took = time.perf_counter() - t
    msg = str(e.value)
    assert "\n" not in msg and "estimated at" in msg and "i_know=True" in msg, msg
    assert took < 0.5, took
    assert no_loop == []


def test_override_lets_it_through(no_loop):
    mcfg, tcfg = issue_cfgs(i_know=True)
    train(mcfg, tcfg, tokens=torch.zeros(LEN + 2, dtype=torch.long), progress=False)
    assert len(no_loop) == 1 and no_loop[0].i_know


def test_small_run_not_refused(no_loop):
    mcfg = GPTConfig.preset("tiny", max_len=64)
    train(mcfg, TrainConfig(steps=1, batch_size=16, length=64, device="cpu"), tokens=torch.zeros(1000, dtype=torch.long),
          progress=False)
    assert len(no_loop) == 1


def test_estimate_counts_attention_term():
    "The estimate grows faster than linearly in length: flops_per_token's 12·L·T·d term is in it."
    mcfg = GPTConfig.preset("tiny", max_len=LEN)
    dev = torch.device("cpu")
    s1 = estimate_step_seconds(mcfg, TrainConfig(batch_size=1, length=1000, device="cpu"), dev)
    s2 = estimate_step_seconds(mcfg, TrainConfig(batch_size=1, length=LEN, device="cpu"), dev)
    assert s2 / s1 > 1000 * 2, (s1, s2)
    assert s2 == pytest.approx(flops_per_token(mcfg, LEN) * LEN / (T.THROUGHPUT["cpu"] * torch.get_num_threads()))
    assert s2 > T.MAX_STEP_SECONDS


def test_override_is_not_part_of_a_runs_identity():
    assert "i_know" not in RUN_FIELDS
    with pytest.raises(ValueError, match="i_know must be True or False"): TrainConfig(i_know="yes")
