"""Bounded before it starts, one line for bad input: length ranges checked by their arithmetic, long CHE test lengths
refused before training, token ids checked, nested randomized PEs refused, the eval plan on the no-grad path."""
import resource
import subprocess
import sys
import time

import pytest
import torch

from lengthx.attention import build_pe
from lengthx.cli import MAX_LENGTH, MAX_LENGTHS, _lengths, main
from lengthx.evaluate import perplexity, plan_eval
from lengthx.model import GPT, GPTConfig


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2 ** 30, 3 * 2 ** 30))   # the old code's list of 10^10 ints dies here


@pytest.mark.parametrize("argv, asked", [(["eval", "--run", "nowhere", "--lengths", "1:10000000000"], "10,000,000,000"),
                                         (["tasks", "--test-lens", "41:100000000", "--steps", "1"], "99,999,960")])
def test_huge_ranges_refused_by_arithmetic(argv, asked):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "import sys; from lengthx.cli import main; sys.exit(main(sys.argv[1:]))", *argv],
                       capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"asks for {asked} lengths" in err and f"{MAX_LENGTHS:,}" in err and "give a step" in err, err
    assert time.perf_counter() - t0 < 60


def test_length_forms():
    import argparse
    assert _lengths("41:500:20") == list(range(41, 501, 20)) and _lengths("64,128") == [64, 128]
    assert len(_lengths(f"1:{MAX_LENGTHS}")) == MAX_LENGTHS and _lengths(str(MAX_LENGTH)) == [MAX_LENGTH]
    suggested = None
    with pytest.raises(argparse.ArgumentTypeError, match="give a step") as e: _lengths(f"1:{MAX_LENGTHS + 1}")
    suggested = str(e.value).rsplit("e.g. ", 1)[1]
    assert len(_lengths(suggested)) <= MAX_LENGTHS                      # the suggested step is accepted
    for bad in (f"{MAX_LENGTH + 1}", f"1:{MAX_LENGTH + 1}:{MAX_LENGTH}", "0:5", "9:3"):
        with pytest.raises(argparse.ArgumentTypeError): _lengths(bad)


def test_tasks_refuses_long_test_lengths_before_training(monkeypatch, capsys):
    import lengthx.tasks as tasks
    monkeypatch.setattr(tasks, "run_che_grid", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    assert main(["tasks", "--test-lens", "10000000", "--steps", "1", "--quiet"]) == 2
    assert "randomized positions" in capsys.readouterr().err
    for extra, said in ((["--test-lens", "10000000", "--no-randomize"], "at test length 10000000 needs an estimated"),
                        (["--eval-batch", "1000000000"], "testing 1000000000 of 1000 tokens"),
                        (["--batch-size", "100000000"], "training on 100000000 strings of 80 tokens")):
        assert main(["tasks", "--steps", "1", "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and "needs an estimated" in err and len(err.strip().splitlines()) == 1, err


@pytest.fixture(scope="module")
def rope_model():
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", pe="rope", max_len=64)).eval()


def test_perplexity_refuses_non_integer_and_out_of_vocabulary_ids(rope_model):
    toks = torch.randint(0, 256, (4000,))
    assert perplexity(rope_model, toks, 64, k=32, n_windows=2) > 1
    for bad, what in ((toks.float() + 0.7, "dtype torch.float32"), (toks > 100, "dtype torch.bool"),
                      (torch.cat([toks, torch.tensor([300])]), "0..255"), (torch.cat([toks, torch.tensor([-1])]), "-1..255"),
                      (toks[None], "1-D"), (toks.tolist(), "tensor")):
        with pytest.raises(ValueError, match="token") as e: perplexity(rope_model, bad, 64, k=32, n_windows=2)
        assert what in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("spec", ["randomized:randomized:rope", "randomized:max_len=64:randomized:alibi",
                                  "randomized:pose:randomized:rope"])
def test_nested_randomized_is_refused(spec):
    with pytest.raises(ValueError, match=r"randomized cannot wrap .*already draws random positions"):
        build_pe(spec, n_heads=4, head_dim=8, max_len=32)
    with pytest.raises(ValueError, match="does not change when the token positions do"):   # BiPE reads segment indices,
        build_pe("randomized:bipe:rope", n_heads=4, head_dim=8, max_len=32)               # not pos.token: a no-op, refused


def test_eval_plan_takes_the_no_grad_path():
    "An evaluation runs without gradients, so DAPE beyond 512 tokens goes chunked even when the caller has them on."
    m = GPT(GPTConfig.preset("tiny", pe="dape:kerple_log", max_len=64)).eval()
    assert torch.is_grad_enabled() and plan_eval(m, 1024, budget=2 ** 34).default_path == "chunked"
