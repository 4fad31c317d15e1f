"""lengthx.evidence's t quantiles, checked against computations that do not share its code."""
import math

import pytest

from lengthx import evidence as E


def density_mass(t: float, df: int, n: int = 20_000) -> float:
    "The t density integrated from 0 to t by Simpson's rule."
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = t / n
    return h / 3 * (f(0) + f(t) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n)))


@pytest.mark.parametrize("t", [-3.0, -0.7, 0.0, 0.4, 2.5, 12.0])
def test_cdf_matches_the_closed_forms_for_one_and_two_degrees(t):
    assert E.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)            # Cauchy
    assert E.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


@pytest.mark.parametrize("df", [3, 4, 5, 7, 10, 30])
def test_cdf_matches_the_integrated_density(df):
    for t in (0.5, 1.7, 3.2):
        assert E.t_cdf(t, df) - 0.5 == pytest.approx(density_mass(t, df), abs=1e-9)


def test_the_table_matches_textbook_values_and_the_quantile():
    textbook = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042}          # any printed t table, 0.975 quantile
    for df, v in textbook.items(): assert E.t_quantile(0.975, df) == pytest.approx(v, abs=6e-4) and E.T975[df] == v
    for df, v in E.T975.items(): assert E.t_quantile(0.975, df) == pytest.approx(v, abs=6e-4)
    assert E.t_quantile(0.995, 4) == pytest.approx(4.604, abs=6e-4)             # the 0.995 column of the same tables


def test_paired_interval_at_another_level_uses_the_quantile():
    d = [0.1, 0.3, 0.2, 0.5, 0.4]
    m, (lo, hi) = E.paired_interval(d)
    m99, (lo99, hi99) = E.paired_interval(d, 0.99)
    assert m == m99 and (hi99 - m) / (hi - m) == pytest.approx(E.t_quantile(0.995, 4) / E.t975(4))
