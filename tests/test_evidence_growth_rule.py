"""lengthx.evidence: a level claim whose paper effect is growth (or whose book gap at L runs the other way) is read on growth."""
import math

import pytest

from lengthx import evidence as E

SET = {"train_len": 64, "model": "tiny", "steps": 400, "seed": 0, "seeds": [0], "specs": []}
NOISE = (1.0, 1.01, 0.99)                          # per-seed wobble at n×, so the intervals are not points


def recs(at_L: float, at_n: float, factor: int = 16) -> list:
    "Three seeds: a = at_L·b at L and at_n·b (times a small wobble) at factor·L, b at several levels."
    n_len = factor * 64
    rows = {("b", n): {64: 10 + 3 * n, n_len: 12 + 5 * n} for n in range(3)}
    rows |= {("a", n): {64: at_L * (10 + 3 * n), n_len: at_n * w * (12 + 5 * n)} for n, w in enumerate(NOISE)}
    out = {f"{s}|seed={n}": {"spec": s, "seed": n, "ppl": {"last_k_common": v}} for (s, n), v in rows.items()}
    return [{"unit": "main", "preset": "cpu", "settings": SET, "provenance": {"device": "cpu", "cuda_device": None},
             "result": {"rows": out}, "file": "/x/main_cpu.json"}]


def dape_like(**kw) -> E.Claim:
    "DAPE v2 Table 1's shape: 5.20 vs 6.91 at 8L, 8.21 vs 8.30 at L (the paper's gap opens beyond L)."
    return E.Claim("P", "T", "a below b at 16×", "a", "b", "level", 16, "<", 5.20, 6.91, "", **kw)


def test_a_paper_effect_that_is_growth_is_not_reproduced_by_a_gap_already_there_at_L():
    data = recs(0.9, 0.9)                                        # the book's gap is there at L and does not grow
    old = E.ledger(data, [dape_like()])[0]                       # no paper numbers at L: the level reading (fit only)
    assert old.reading == "reproduced in fit only"
    row = E.ledger(data, [dape_like(paper_at_L=(8.21, 8.30))])[0]
    assert row.reading == "not reproduced" and "the paper's effect is growth" in row.why and "(fit, not growth)" in row.why
    g = E.compare("a", "b", "growth", 16 * 64, recs=data)
    assert row.interval == pytest.approx(E.log_interval(g))      # the interval shown is the growth one, which decides
    assert "growth ×" in row.book and "P(L) " in row.book and "ln ratio [" in row.book


def test_the_growth_effect_is_the_papers_log_growth_ratio_per_byte():
    c = dape_like(paper_at_L=(8.21, 8.30))
    e = math.log((5.20 / 8.21) / (6.91 / 8.30))
    assert c.growth_effect() == pytest.approx((e / 3.0, e / 4.5))
    assert c.share_at_L() == pytest.approx(abs(math.log(8.21 / 8.30)) / abs(math.log(5.20 / 6.91)))
    assert dape_like().growth_effect() is None and dape_like().share_at_L() is None


def test_a_book_gap_at_L_on_the_other_side_is_read_on_growth_against_the_level_effect():
    claim = E.Claim("P", "T", "a far below b at 4×", "a", "b", "level", 4, "<", 19.67, 158.0, "")   # BiPE-RoPE's numbers
    row = E.ledger(recs(1.3, 0.8, factor=4), [claim])[0]         # a starts 30% above b at L and ends 20% below at 4×
    lvl = E.log_interval(E.compare("a", "b", "level", 256, recs=recs(1.3, 0.8, factor=4)))
    assert E.judge(lvl, "<", claim.effect())[0] == "direction only"      # what the level at 4× alone said
    assert row.reading == "reproduced" and "no numbers at L" in row.why and "assuming the paper's gap at L is about 0" in row.why
    assert row.interval[1] < math.log(0.8)                       # the growth interval, beyond the level's ln 0.8


def test_a_substantial_paper_gap_at_L_keeps_the_fit_only_verdict():
    claim = E.Claim("P", "T", "a below b at 4×", "a", "b", "level", 4, "<", 5.22, 5.26, "", paper_at_L=(6.07, 6.10))
    assert claim.share_at_L() > E.AT_L_SHARE                     # KERPLE log vs power: 0.65 of the gap is there at L
    row = E.ledger(recs(0.9, 0.9, factor=4), [claim])[0]
    assert row.reading == "reproduced in fit only" and "already there at L" in row.why and "read on growth" not in row.why
    other = E.ledger(recs(1.1, 1.1, factor=4), [claim])[0]       # the other side, same rule
    assert other.reading == "opposite in fit only"


def test_the_threshold_edge():
    assert E.AT_L_SHARE == pytest.approx(1 / 3)
    e = math.log(5.20 / 6.91)
    b_L = 8.30
    at = lambda share: (b_L * math.exp(share * e), b_L)         # a paper gap at L of exactly `share` of the gap at n×
    below, above = dape_like(paper_at_L=at(E.AT_L_SHARE - 0.01)), dape_like(paper_at_L=at(E.AT_L_SHARE + 0.01))
    data = recs(0.9, 0.9)
    assert E.ledger(data, [below])[0].reading == "not reproduced"
    assert E.ledger(data, [above])[0].reading == "reproduced in fit only"
    assert E.growth_reason(above, None, share=0.5) and not E.growth_reason(below, None, share=0.2)   # the constant decides


def test_the_committed_claims_carry_the_papers_numbers_at_L():
    by = {c.claim: c for c in E.CLAIMS}
    assert by["DAPE-Kerple below Kerple at 8×"].paper_at_L == (8.21, 8.30)
    assert by["CDAPE below DAPE at 8×"].paper_at_L == (8.15, 8.21)
    assert by["f(QKᵀ,B) below f(B) at 16×"].paper_at_L == (19.22, 19.64)
    assert by["f(B) below the bare bias at 16×"].paper_at_L == (19.64, 19.68)
    assert by["KERPLE-log below ALiBi at 16×"].paper_at_L == (3.40, 3.42)             # KERPLE Table 3, GitHub column
    assert by["KERPLE-log below KERPLE-power at 4×"].paper_at_L == (3.40, 3.42)
    assert all(c.paper_at_L is None for c in E.CLAIMS if c.paper == "BiPE")      # Figure 4: no numbers at L
    shares = [c.share_at_L() for c in E.CLAIMS if c.paper_at_L]
    assert all(abs(s - E.AT_L_SHARE) > 0.05 for s in shares)    # no claim sits on the line within the papers' rounding
