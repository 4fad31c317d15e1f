"""Perplexity protocols: exact values on models with known answers, window bookkeeping, argument checks, memory plans."""
import math
import time

import pytest
import torch

from lengthx.evaluate import (PROTOCOLS, check_protocol_args, estimate_eval_memory, eval_lengths, last_k_windows,
                              memory_budget, nonoverlap_windows, parse_bytes, perplexity, plan_eval, position_losses,
                              protocol_windows, sliding_windows)
from lengthx.model import GPT, GPTConfig

V = 256


def uniform(ids):
    return torch.zeros(*ids.shape, V)


def scored_targets(wins, length):
    return [s + t + 1 for s, f in wins for t in range(f, length)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("length", [16, 100, 512])
def test_uniform_model_has_vocab_perplexity(protocol, length):
    toks = torch.randint(0, V, (3000,))
    ppl = perplexity(uniform, toks, length, protocol=protocol, k=min(32, length), stride=max(1, length // 4))
    assert abs(ppl - V) < 1e-6 * V


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_peaked_model_has_inverse_probability_perplexity(protocol):
    "A model giving probability p to the true next token (here: next token = current + 1 mod V) has ppl 1/p."
    toks = torch.arange(5000) % V
    p = 0.25
    def model(ids):
        logp = torch.full((*ids.shape, V), math.log((1 - p) / (V - 1)))
        logp.scatter_(-1, ((ids + 1) % V)[..., None], math.log(p))
        return logp
    assert abs(perplexity(model, toks, 64, protocol=protocol, k=16) - 1 / p) < 1e-4  # float32 log-probs


def test_last_k_scores_same_token_count_at_every_length():
    for L in (64, 256, 1024):
        w = last_k_windows(10_000, L, k=64, n_windows=8)
        assert len(w) == 8 and sum(L - f for _, f in w) == 8 * 64
        assert w[0][0] == 0 and w[-1][0] + L + 1 == 10_000


def test_nonoverlap_windows_tile_the_stream():
    w = nonoverlap_windows(1001, 100)
    assert [s for s, _ in w] == list(range(0, 1000, 100)) and all(f == 0 for _, f in w)


@pytest.mark.parametrize("n_tokens", [1001, 1234, 5000, 9999])
@pytest.mark.parametrize("length", [7, 64, 100, 333])
def test_nonoverlap_disjoint_and_covering(n_tokens, length):
    "Every target at most once; all but fewer than L of the stream's targets scored; first to last token."
    w = nonoverlap_windows(n_tokens, length)
    t = scored_targets(w, length)
    assert len(t) == len(set(t)) and n_tokens - 1 - len(t) < length
    assert min(t) >= 1 and max(t) <= n_tokens - 1
    assert w[0][0] == 0 and (len(w) == 1 or w[-1][0] + length + 1 == n_tokens)


@pytest.mark.parametrize("n_tokens", [5000, 77_777])
def test_nonoverlap_budget_is_spread_over_the_whole_split(n_tokens):
    "With max_tokens the chunks come from the whole stream (not its first tokens), same count at every L dividing it."
    for L in (64, 128, 256, 512):
        w = nonoverlap_windows(n_tokens, L, max_tokens=2048)
        t = scored_targets(w, L)
        assert len(t) == len(set(t)) == 2048
        assert w[-1][0] + L + 1 == n_tokens and max(t) == n_tokens - 1   # reaches the end of the split
    # with as many chunks as last_k has windows, nonoverlap scores exactly last_k's windows, every position
    assert nonoverlap_windows(n_tokens, 256, max_tokens=16 * 256) == [(s, 0) for s, _ in last_k_windows(n_tokens, 256, 64, 16)]


def test_sliding_scores_each_target_once():
    w = sliding_windows(2000, 128, stride=32)
    scored = [t for s, f in w for t in range(s + f, s + 128)]
    assert scored == list(range(len(scored)))


def test_position_losses_shape_and_value():
    assert torch.allclose(position_losses(uniform, torch.randint(0, V, (2000,)), 50), torch.full((50,), math.log(V)))


@pytest.mark.parametrize("kw,match", [
    (dict(k=0), r"^k must be an integer in 1\.\.100 "), (dict(k=-5), r"^k must be an integer in 1\.\.100"),
    (dict(k=101), r"^k must be an integer in 1\.\.100"), (dict(k=2.5), r"^k must be"),
    (dict(n_windows=0), r"^n_windows must be an integer >= 1"),
    (dict(protocol="sliding", stride=0), r"^stride must be an integer in 1\.\.100"),
    (dict(protocol="sliding", stride=101), r"^stride must be an integer in 1\.\.100"),
    (dict(length=0), r"^length must be an integer in 1\.\.999 "), (dict(length=-1), r"^length must be"),
    (dict(length=1000), r"^length must be an integer in 1\.\.999 .*1000 tokens"),
    (dict(protocol="overlap"), r"^protocol must be one of last_k, nonoverlap, sliding, got 'overlap'"),
    (dict(protocol="nonoverlap", max_tokens=50), r"^max_tokens must be an integer >= 100"),
    (dict(protocol="nonoverlap", k=0), r"^k must be an integer >= 1"),
])
def test_bad_arguments_are_one_line_errors(kw, match):
    args = dict(protocol="last_k", length=100, k=50) | kw
    toks = torch.randint(0, V, (1000,))
    with pytest.raises(ValueError, match=match) as e:
        perplexity(uniform, toks, args.pop("length"), **args)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=match):   # the same check is callable before any work
        a = dict(protocol="last_k", length=100, k=50) | kw
        check_protocol_args(a.pop("protocol"), 1000, a.pop("length"), **a)


def test_k_is_only_bounded_by_length_for_last_k():
    toks = torch.randint(0, V, (1000,))
    for proto in ("nonoverlap", "sliding"):
        assert abs(perplexity(uniform, toks, 50, protocol=proto, k=256) - V) < 1e-6 * V
    assert protocol_windows("nonoverlap", 1000, 50, k=256) == nonoverlap_windows(1000, 50)


def test_eval_lengths():
    assert eval_lengths(64, 16) == [64, 128, 256, 512, 1024] and eval_lengths(64, 1) == [64] and eval_lengths(10, 3) == [10, 20]
    for bad in (dict(max_factor=0), dict(max_factor=-2), dict(train_len=0)):
        with pytest.raises(ValueError, match="max_factor|train_len"): eval_lengths(**({"train_len": 64} | bad))


# --- memory plans ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alibi_model():
    "A bias the sdpa path must materialize as [H, T, T] (FIRE reads the query position, so it is not Toeplitz)."
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe="fire", max_len=64)).eval()


def test_parse_bytes_and_env_budget(monkeypatch):
    assert parse_bytes("1024") == 1024 and parse_bytes("4G") == 4 * 2 ** 30 and parse_bytes("512MiB") == 512 * 2 ** 20
    assert parse_bytes("1.5k") == 1536
    for bad in ("", "abc", "-1G", "0", "4X"):
        with pytest.raises(ValueError, match="memory budget"): parse_bytes(bad)
    monkeypatch.setenv("LENGTHX_MEM_BUDGET", "3M")
    assert memory_budget() == 3 * 2 ** 20
    monkeypatch.delenv("LENGTHX_MEM_BUDGET")
    assert memory_budget() > 2 ** 20


def test_estimate_scales_like_the_paths(alibi_model):
    e = lambda T, p: estimate_eval_memory(alibi_model, T, path=p)
    assert e(8192, "naive") > e(8192, "sdpa") > e(8192, "chunked")
    assert 3.5 < e(16384, "naive") / e(8192, "naive") < 4.0          # T² scores
    assert 1.9 < e(16384, "chunked") / e(8192, "chunked") < 2.1      # linear
    assert estimate_eval_memory(alibi_model.cfg, 4096, path="naive") == e(4096, "naive")   # a config works too
    nope = GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe="nope", max_len=64))
    assert 1.9 < estimate_eval_memory(nope, 16384) / estimate_eval_memory(nope, 8192) < 2.1   # flash sdpa: no T²
    alibi = GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe="alibi", max_len=64))   # a Toeplitz view: no T² either
    assert 1.9 < estimate_eval_memory(alibi, 16384, path="sdpa") / estimate_eval_memory(alibi, 8192, path="sdpa") < 2.1


def test_small_budget_forces_chunked_with_equal_results(alibi_model, capsys):
    toks = torch.randint(0, V, (12_000,), generator=torch.Generator().manual_seed(1))
    ref, plan = perplexity(alibi_model, toks, 1024, k=64, n_windows=3, return_plan=True)
    assert plan.path == "sdpa" and not plan.switched
    budget = estimate_eval_memory(alibi_model, 1024, path="chunked")
    got, plan = perplexity(alibi_model, toks, 1024, k=64, n_windows=3, mem_budget=budget, return_plan=True)
    assert plan.path == "chunked" and plan.batch == 1 and plan.switched and plan.estimate <= budget
    assert abs(got - ref) < 1e-4 * ref
    assert "path 'chunked'" in capsys.readouterr().err
    # a budget between: same path, fewer windows per forward (a model whose peak grows with the windows: flash sdpa)
    nope = GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, pe="nope", max_len=64)).eval()
    mid = estimate_eval_memory(nope, 1024, path="sdpa", batch=2)
    plan = plan_eval(nope, 1024, batch=8, budget=mid)
    assert plan.path == "sdpa" and plan.batch == 2


def test_absurd_length_is_refused_before_allocating(alibi_model, monkeypatch):
    monkeypatch.setenv("LENGTHX_MEM_BUDGET", "1G")
    toks = torch.zeros(10_000_001, dtype=torch.uint8)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"^evaluation at length=10000000 needs an estimated .* GiB .* budget of 1\.0 GiB") as e:
        perplexity(alibi_model, toks, 10_000_000, k=64, n_windows=1)
    assert time.perf_counter() - t0 < 2 and "\n" not in str(e.value)


def test_plain_functions_skip_the_plan():
    plan = plan_eval(uniform, 100, batch=4)
    assert plan.path is None and plan.batch == 4 and not plan.switched


def test_bootstrap_interval_brackets_and_narrows():
    "The interval over windows contains the perplexity, is empty-width for identical windows, and narrows with more windows."
    import torch
    from lengthx.evaluate import window_ppl_interval
    g = torch.Generator().manual_seed(0)
    keep = torch.ones(8, 16, dtype=torch.bool)
    same = torch.full((8, 16), 2.0)
    lo, hi = window_ppl_interval(same, keep)
    assert abs(lo - math.exp(2.0)) < 1e-9 and abs(hi - math.exp(2.0)) < 1e-9
    few, many = torch.rand(8, 16, generator=g) * 4, torch.rand(512, 16, generator=g) * 4
    (l8, h8), (l512, h512) = window_ppl_interval(few, keep), window_ppl_interval(many, torch.ones(512, 16, dtype=torch.bool))
    assert l8 <= math.exp(few.double().mean()) <= h8 and (h512 - l512) < (h8 - l8)
    with pytest.raises(ValueError, match="interval"): window_ppl_interval(few, keep, level=1.5)
