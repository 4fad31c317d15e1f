"""lengthx.evidence ledger rules: one row per test, setting notes by a rule, a two-sided 'not above' rule, rounding ranges."""
import dataclasses
import math

import pytest

from lengthx import evidence as E
from lengthx.results import load_results

RECS = load_results()
LEDGER = E.ledger(RECS)
ROWS = {r.claim: r for r in LEDGER}


def claim(text: str) -> E.Claim:
    return next(c for c in E.CLAIMS if c.claim.startswith(text))


def test_no_two_rows_read_the_same_test():
    "A level claim read on growth is the same test as a growth claim of the same a, b and factor: only one may stay."
    keys = [(c.a, c.b, "growth" if c.quantity == "growth" or "read on growth" in r.why else c.quantity, c.factor)
            for c, r in zip(E.CLAIMS, LEDGER)]
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]


@pytest.mark.parametrize("text", ["f(B) below the bare bias", "KERPLE-log below ALiBi", "f(QKᵀ,B) below f(B)"])
def test_growth_rows_at_a_factor_whose_control_fails_carry_the_generated_note(text):
    c = claim(text)
    row = ROWS[c.claim]
    assert E.context_use_control(c.factor, 64, RECS) == {}                  # no encoding below the window at 16×
    for m in (c.a, c.b):
        iv = E.growth_vs_window(m, 64, c.factor, RECS)
        assert f"`{m}` [{iv[0]:+.3f}, {iv[1]:+.3f}]" in row.setting          # the claim's own intervals, measured
    assert not row.testable


@pytest.mark.parametrize("text", ["CDAPE below DAPE", "DAPE-Kerple below Kerple"])
def test_at_8x_one_encoding_below_the_window_at_95_percent_is_not_enough(text):
    "At 8× transformer_xl alone lies below the window at 95% unadjusted; over all the encodings read it does not."
    c = claim(text)
    unadjusted = [m for m in E.committed_specs(RECS) if (iv := E.growth_vs_window(m, 64, c.factor, RECS)) and iv[1] < 0]
    assert unadjusted == ["transformer_xl"] and E.context_use_control(c.factor, 64, RECS) == {}
    assert "ln(g/g_window)" in E.window_setting(c, 64, RECS) and not ROWS[c.claim].testable


def test_counts_split_testable_and_the_verdict_cell_says_cannot_test():
    counts = E.verdict_counts(LEDGER)
    assert sum(t + u for t, u in counts.values()) == len(LEDGER)
    assert counts[E.UNTESTABLE] == (0, sum(not r.testable for r in LEDGER))          # the verdict of every untestable row
    assert all(u == 0 for v, (_, u) in counts.items() if v != E.UNTESTABLE)
    assert "cannot test here" in E.count_line(LEDGER)
    table = E.ledger_table(LEDGER)
    untestable = [l for l in table.splitlines() if l.startswith("| **") and "| **cannot test here**" in l]
    assert len(untestable) == sum(not r.testable for r in LEDGER)


def test_the_papers_bare_bias_is_quoted_at_the_same_length_ratio():
    g16, g8 = E.paper_bias_growth(16), E.paper_bias_growth(8)
    assert g16["DAPE v2 Table 1 on arXiv, 128 → 2048"] == (8.30, 9.17)               # 16× of 128, not 8192 (64×)
    assert g8["DAPE v2 Table 1 on arXiv, 128 → 1024"] == (8.30, 6.91) and g16 == E.PAPER_BIAS_GROWTH
    assert all(int(k.split(" → ")[1]) == 16 * int(k.split(", ")[-1].split(" → ")[0]) for k in g16)
    assert "×1.10 in DAPE v2 Table 1" in E.paper_bias_text(16) and "×1.52" not in E.paper_bias_text(16)
    assert "to 8×" in ROWS["DAPE-Kerple below Kerple at 8×"].setting and "×0.83 in DAPE v2 Table 1" in ROWS["DAPE-Kerple below Kerple at 8×"].setting


def test_the_flat_tolerance_is_a_parameter_of_judge():
    assert E.judge((-0.1, 0.01), "≤", None, flat_tol=0.02)[0] == "reproduced"
    assert E.judge((-0.1, 0.01), "≤", None, flat_tol=0.005)[0] == "unresolved"


def test_the_rule_not_the_hand_decides_the_note():
    "Siblings read the same way get the same kind of note, with or without a hand-attached setting_note."
    for text in ("f(B) below the bare bias", "f(QKᵀ,B) below f(B)"):
        c = dataclasses.replace(claim(text), setting_note=None)
        assert "is not shown to degrade here" in E.ledger(RECS, [c])[0].setting


def test_not_above_is_two_sided_with_a_stated_tolerance():
    assert E.FLAT_TOL == pytest.approx(math.log(1.05) / 3.0)
    assert E.judge((-0.1, 0.2), "≤", None)[0] == "unresolved"               # reaches 0, but far too wide to call flat
    assert E.judge((-0.1, E.FLAT_TOL), "≤", None)[0] == "reproduced"
    assert E.judge((-0.1, E.FLAT_TOL + 1e-3), "≤", None)[0] == "unresolved"
    assert E.judge((0.001, 0.2), "≤", None)[0] == "opposite"


def test_share_ranges_from_two_decimal_rounding():
    assert tuple(round(x, 3) for x in E.share_range(claim("CDAPE below DAPE"))) == (0.196, 0.313)
    assert tuple(round(x, 3) for x in E.share_range(claim("KERPLE-log below KERPLE-power"))) == (0.169, 0.845)   # GitHub column
    assert E.share_range(claim("ALiBi flat")) is None


def test_the_threshold_is_threaded_and_one_row_depends_on_rounding_at_a_quarter():
    c = claim("CDAPE below DAPE")
    assert E.ledger(RECS, [c], share=1 / 4)[0].verdict != E.ledger(RECS, [c], share=1 / 3)[0].verdict


def test_the_inferred_bias_is_said_to_be_inferred():
    assert any("inferred" in k for k in E.PAPER_BIAS_GROWTH if k.startswith("DAPE Table 7"))
    assert "inferred" in ROWS["f(B) below the bare bias at 16×"].setting


def test_one_verdict_legend_consistent_with_judge():
    assert set(E.VERDICT_MEANINGS) == set(E.VERDICTS)
    assert "exceeds" in E.VERDICT_MEANINGS["reproduced"] and "FLAT_TOL" in E.VERDICT_MEANINGS["reproduced"]
    assert "gives no number" in E.VERDICT_MEANINGS["unresolved"] and "too wide" in E.VERDICT_MEANINGS["unresolved"]


def test_fit_only_step_decides_only_a_gap_that_is_there_at_L_and_does_not_grow():
    c = claim("KERPLE-log below KERPLE-power")                               # expect '<'
    at_L, flat, grows = (-0.2, -0.1), (-0.01, 0.02), (-0.05, -0.02)
    assert E._fit_only(c, "reproduced", "w", (-0.3, -0.1), at_L, flat)[0] == "reproduced in fit only"
    assert E._fit_only(c, "reproduced", "w", (-0.3, -0.1), at_L, grows) == ("reproduced", "w")      # it grew: a real gap
    assert E._fit_only(c, "opposite", "w", (0.1, 0.3), (0.1, 0.2), flat)[0] == "opposite in fit only"
    assert E._fit_only(c, "not reproduced", "w", (-0.1, 0.1), at_L, flat) == ("not reproduced", "w")
