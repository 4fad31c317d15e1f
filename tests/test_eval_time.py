"""Evaluation estimates its time before the first forward and refuses, in one line, an evaluation estimated above
MAX_EVAL_SECONDS (a sliding protocol with a stride of 1 over a long stream) unless i_know; training, evaluation and
the pretrained cost share one throughput table."""
import itertools
import math
import time

import pytest
import torch

import lengthx.evaluate as E
import lengthx.sweep as S
import lengthx.train as T
from lengthx.evaluate import (MAX_EVAL_SECONDS, THROUGHPUT, check_eval_time, count_windows, estimate_eval_seconds,
                              flops_per_second, perplexity, position_losses, ppl_curve, protocol_windows)
from lengthx.model import GPT, GPTConfig, flops_per_token

LONG = torch.zeros(2_000_000, dtype=torch.long)   # a long stream of token 0: enough windows at stride 1 for days of work


@pytest.fixture(autouse=True)
def one_thread():
    "The estimates scale with torch's threads; the lengths below are chosen for one (the test session's setting under xdist)."
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", pe="rope", max_len=64)).eval()


@pytest.fixture
def forwards(monkeypatch):
    "Replaces the scoring loop: records each call (windows, length) and returns zero losses, so nothing long runs."
    calls = []

    def fake(model, tokens, windows, length, *a, **k):
        calls.append((len(windows), length))
        return torch.zeros(len(windows), length)
    monkeypatch.setattr(E, "window_losses", fake)
    return calls


@pytest.mark.parametrize("protocol, kw", [("last_k", dict(k=16, n_windows=5)), ("last_k", dict(k=16, anchor=300)),
                                          ("last_k", dict(k=8, n_windows=10_000)), ("nonoverlap", {}),
                                          ("nonoverlap", dict(max_tokens=200)), ("sliding", {}),
                                          ("sliding", dict(stride=1)), ("sliding", dict(stride=7, max_tokens=333))])
def test_window_count_from_arithmetic_equals_the_windows(protocol, kw):
    for n, L in itertools.product((302, 517, 1000), (1, 16, 63, 64, 300)):
        if L > n - 1 or kw.get("anchor", L) > n - 1 or kw.get("anchor", L) < L or kw.get("max_tokens", L) < L: continue
        if (protocol == "last_k" and kw["k"] > L) or kw.get("stride", 1) > L: continue
        assert count_windows(protocol, n, L, **kw) == len(protocol_windows(protocol, n, L, **kw)), (protocol, kw, n, L)


def test_the_count_checks_its_arguments_like_the_windows():
    with pytest.raises(ValueError, match="stride must be"): count_windows("sliding", 100, 10, stride=11)
    with pytest.raises(ValueError, match="protocol must be"): count_windows("first_k", 100, 10)


def test_estimate_is_the_forward_third_of_the_training_count(tiny):
    cfg = tiny.cfg
    n = 12 * cfg.n_layer * cfg.d_model ** 2 + cfg.vocab_size * cfg.d_model
    per_token = 2 * n + 4 * cfg.n_layer * 1024 * cfg.d_model
    assert per_token == pytest.approx(flops_per_token(cfg, 1024) / 3)
    want = 1000 * 1024 * per_token / (THROUGHPUT["cpu"] * torch.get_num_threads())
    assert estimate_eval_seconds(tiny, 1000, 1024) == pytest.approx(want)
    assert estimate_eval_seconds(cfg, 1000, 1024) == pytest.approx(want)       # a GPTConfig is enough


def test_stride_one_on_a_long_stream_refused_in_one_line_before_any_forward(tiny, forwards):
    t = time.perf_counter()
    with pytest.raises(ValueError) as e:
        perplexity(tiny, LONG, 1024, protocol="sliding", stride=1)
    took, msg = time.perf_counter() - t, str(e.value)
    assert forwards == [] and took < 5, took
    assert "\n" not in msg and "1,998,976 window(s) of length 1,024" in msg and "estimated at" in msg, msg
    assert "larger stride" in msg and "n_windows" in msg and "i_know=True" in msg and "--i-know" in msg, msg


def test_i_know_lets_the_evaluation_through(tiny, forwards):
    "16 windows of 131,072 tokens: hours by the estimate (refused), scored with the override (by the stub: no real forward)."
    with pytest.raises(ValueError, match="16 window.* of length 131,072 is estimated at"):
        perplexity(tiny, LONG, 131_072, k=64, n_windows=16)
    assert forwards == []
    assert perplexity(tiny, LONG, 131_072, k=64, n_windows=16, i_know=True) == 1.0
    assert forwards == [(16, 131_072)]


def test_position_losses_and_ppl_curve_are_bounded_too(tiny, forwards):
    with pytest.raises(ValueError, match="estimated at"): position_losses(tiny, LONG, 65_536, n_windows=64)
    with pytest.raises(ValueError, match="estimated at"): ppl_curve(tiny, LONG, [1024, 64], protocol="sliding", stride=1, progress=False)
    assert forwards == []
    position_losses(tiny, LONG, 65_536, n_windows=64, i_know=True)
    ppl_curve(tiny, LONG[:5000], [64, 1024], protocol="sliding", stride=1, progress=False, i_know=True)
    assert [L for _, L in forwards] == [65_536, 64, 1024]


def test_the_books_small_evaluations_are_not_refused(tiny, forwards):
    "Chapter-sized evaluations (QUICK): default protocols at 1x..16x a training length of 64."
    for L in (64, 256, 1024):
        for proto in ("last_k", "nonoverlap", "sliding"):
            perplexity(tiny, LONG[:100_000], L, protocol=proto, k=64, n_windows=16, max_tokens=16 * L)
    assert len(forwards) == 9


def test_a_model_without_a_gpt_config_is_not_estimated(forwards):
    uniform = lambda ids: torch.zeros(*ids.shape, 256)
    assert check_eval_time(uniform, 10 ** 9, 10 ** 6) is None


def test_the_limit_and_the_override():
    cfg = GPTConfig.preset("tiny", max_len=64)
    big = math.ceil(2 * MAX_EVAL_SECONDS / estimate_eval_seconds(cfg, 1, 4096))   # twice the limit
    with pytest.raises(ValueError, match="limit"): check_eval_time(cfg, big, 4096)
    assert check_eval_time(cfg, big, 4096, i_know=True) > MAX_EVAL_SECONDS
    assert check_eval_time(cfg, big // 4, 4096) < MAX_EVAL_SECONDS


def test_one_throughput_table_for_training_evaluation_and_pretrained():
    import lengthx.pretrained as P
    assert T.THROUGHPUT is THROUGHPUT and not hasattr(P, "FLOPS_PER_SECOND")
    assert flops_per_second("cpu") == THROUGHPUT["cpu"] * torch.get_num_threads()
    assert flops_per_second("cuda") == THROUGHPUT["cuda"]
    assert T.estimate_step_seconds(GPTConfig.preset("tiny", max_len=64), T.TrainConfig(batch_size=2, length=64, device="cpu"),
                                   torch.device("cpu")) == pytest.approx(flops_per_token(GPTConfig.preset("tiny", max_len=64), 64)
                                                                         * 128 / flops_per_second("cpu"))


def test_sweep_refuses_before_training(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(S, "train_run", lambda *a, **k: trained.append(a) or (None, []))
    b = S.Budget("tiny", train_len=256, steps=1, batch_size=1, lr=1e-3)
    p = E.Protocol(protocol="sliding", stride=1)
    with pytest.raises(ValueError, match="estimated at .* i_know=True"):
        S.sweep_one("rope", b, tmp_path, protocol=p, device="cpu", test_tokens=LONG, progress=False)
    assert trained == []
    with pytest.raises(Exception) as e:   # with the override it goes on to train (the stub returns no history)
        S.sweep_one("rope", b, tmp_path, protocol=p, device="cpu", test_tokens=LONG, progress=False, i_know=True)
    assert len(trained) == 1 and trained[0][1].i_know and "estimated at" not in str(e.value)
