"""lengthx.evidence.compare_windows: ratio of perplexities on the same windows, its paired bootstrap, the verdict and errors."""
import math

import pytest
import torch

from lengthx import evidence as E

K = 16


def windows(n: int = 100, seed: int = 0, noise: float = 0.2):
    "Two methods' summed NLLs on n windows: a large shared difficulty per window plus small separate noise."
    g = torch.Generator().manual_seed(seed)
    hard = 3.0 * K * torch.rand(n, generator=g, dtype=torch.float64)
    return (hard + noise * torch.randn(n, generator=g, dtype=torch.float64),
            hard + noise * torch.randn(n, generator=g, dtype=torch.float64))


def test_identical_sides_give_ratio_one_and_no_verdict():
    a, _ = windows()
    c = E.compare_windows(a, a, K)
    assert c.mean == 1.0 and c.interval == (1.0, 1.0) and c.verdict == "≈" and c.unit == "window" and c.n == 100


def test_a_constant_shift_per_token_gives_exactly_its_exponential_and_a_verdict():
    a, _ = windows()
    up = E.compare_windows(a + 0.03 * K, a, K)
    assert up.mean == pytest.approx(math.exp(0.03), abs=1e-12) and up.verdict == ">"
    assert up.interval == pytest.approx((math.exp(0.03), math.exp(0.03)), abs=1e-12)
    assert E.compare_windows(a, a + 0.03 * K, K).verdict == "<"


def test_ratio_is_total_nll_over_total_tokens_with_per_window_counts():
    a, b = torch.tensor([10.0, 40.0]), torch.tensor([12.0, 30.0])
    c = E.compare_windows(a, b, [5, 20])
    assert c.mean == pytest.approx(math.exp((50 - 42) / 25))                  # not the mean of per-window ratios
    assert E.window_ppl(a, [5, 20]) / E.window_ppl(b, [5, 20]) == pytest.approx(c.mean)


def test_growth_against_growth_cancels_the_fit_at_T():
    a, b = windows()
    c = E.compare_windows(a + 5 + 0.2 * K, b + 0.1 * K, K, a_base=a + 5, b_base=b)   # a fits worse at T by 5 nats
    assert c.quantity == "growth ratio" and c.mean == pytest.approx(math.exp(0.1), abs=1e-12) and c.verdict == ">"


def test_paired_interval_is_narrower_than_an_unpaired_one_and_noise_is_undecided():
    a, b = windows(noise=0.2)
    c = E.compare_windows(a, b, K)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    i, j = (torch.randint(100, (2000, 100), generator=g) for g in (g1, g2))
    unpaired = torch.quantile(torch.exp((a[i].sum(1) - b[j].sum(1)) / (100 * K)), torch.tensor([0.025, 0.975], dtype=torch.float64))
    assert c.interval[1] - c.interval[0] < (unpaired[1] - unpaired[0]).item() / 10
    assert c.interval[0] < c.mean < c.interval[1] and c.verdict == "≈"


def test_a_real_difference_under_noise_is_decided_and_the_interval_covers_it():
    a, b = windows(n=400, noise=0.2)
    c = E.compare_windows(a + 0.02 * K, b, K)
    assert c.verdict == ">" and c.interval[0] < math.exp(0.02) < c.interval[1]


def test_bootstrap_is_reproducible_and_level_widens_it():
    a, b = windows()
    assert E.compare_windows(a, b, K).interval == E.compare_windows(a, b, K).interval
    n90, n99 = E.compare_windows(a, b, K, level=0.9).interval, E.compare_windows(a, b, K, level=0.99).interval
    assert n99[0] < n90[0] and n99[1] > n90[1]


def test_one_window_is_shown_not_ranked():
    c = E.compare_windows([10.0], [50.0], K, "x", "y")
    assert c.interval is None and c.verdict == "≈" and "not ranked" in c.sentence()


def test_sentence_says_windows_and_seed_sentences_are_unchanged():
    a, _ = windows()
    s = E.compare_windows(a + 0.03 * K, a, K, "p", "q").sentence()
    assert "over 100 windows" in s and "higher than" in s and "seeds" not in s
    seed = E.Comparison("x", "y", "level", 64, 64, {0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5}, [0, 1], [-0.5, -0.5], -0.5,
                        (-0.5, -0.5), "<", "", "")
    assert seed.unit == "seed" and "over 2 seeds" in seed.sentence()


@pytest.mark.parametrize("args,kw", [(([1.0, 2.0], [1.0]), {}), (([1.0, 2.0], [1.0, 2.0]), {"a_base": [0.0, 0.0]}),
                                     (([1.0, 2.0], [1.0, 2.0]), {"a_base": [0.0], "b_base": [0.0]}),
                                     (([[1.0, 2.0]], [[1.0, 2.0]]), {})])
def test_mismatched_windows_raise_one_clear_error(args, kw):
    with pytest.raises(ValueError):
        E.compare_windows(*args, K, **kw)


def test_bad_token_counts_raise():
    with pytest.raises(ValueError, match="tokens"):
        E.compare_windows([1.0, 2.0], [1.0, 2.0], [K, K, K])
    with pytest.raises(ValueError, match="tokens"):
        E.compare_windows([1.0, 2.0], [1.0, 2.0], 0)


def test_sentence_reads_the_level_from_a_field_not_from_the_method_text():
    a, b = windows()
    c = E.compare_windows(a + 0.03 * K, b, K, "p", "q", level=0.9)
    assert c.confidence == 0.9 and "90% paired interval" in c.sentence()
    c.method = "a method described in words"           # the level no longer hides in this string
    assert "90% paired interval" in c.sentence()


def test_window_bootstrap_and_ppl_interval_share_one_resampler():
    from lengthx.evaluate import ratio_bootstrap, window_ppl_interval
    g = torch.Generator().manual_seed(1)
    nll, keep = 2 + torch.rand(30, K, generator=g), (torch.rand(30, K, generator=g) > 0.3).double()
    assert window_ppl_interval(nll, keep, 0.9, 500, 3) == ratio_bootstrap((nll.double() * keep).sum(1), keep.sum(1), 0.9, 500, 3)
    lo, hi = ratio_bootstrap((nll.double() * keep).sum(1), keep.sum(1), 0.9, 500, 3)
    point = math.exp((nll.double() * keep).sum().item() / keep.sum().item())
    assert lo < point < hi


@pytest.mark.parametrize("level", [0.0, 1.0, 95])
def test_bad_level_raises_before_any_work(level):
    with pytest.raises(ValueError, match="level"):
        E.compare_windows([1.0], [2.0], K, level=level)
