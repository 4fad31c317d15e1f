"""lengthx.evidence: a row read on growth is testable by the setting's positive control, not by its own result."""
import dataclasses

from lengthx import evidence as E

L, N = 64, 8
WIN = E.WINDOW_YARDSTICK.format(L=L)


def rec(growths: dict[str, list[float]]) -> dict:
    "One synthetic CPU result file: each spec's growth to N·L per seed (perplexity 2.0 at L)."
    rows = {f"{spec}|seed={n}": {"spec": spec, "seed": n, "ppl": {E.SAME_TARGETS: {L: 2.0, N * L: 2.0 * g}}}
            for spec, gs in growths.items() for n, g in enumerate(gs)}
    return {"unit": "main", "preset": "cpu", "file": "main_cpu.json", "provenance": {"device": "cpu"},
            "settings": {"train_len": L}, "result": {"rows": rows}}


FLAT = [1.00, 1.01, 0.99, 1.00, 1.01]
WINDOW = [1.00, 1.00, 1.00, 1.00, 1.00]
BELOW = [0.95, 0.96, 0.94, 0.95, 0.96]                       # a third encoding that uses context beyond L
CLAIM = E.Claim("X", "a table", "alibi below kerple_log at 8×", "alibi", "kerple_log", "growth", N, "<", 0.9, 1.0, "made up")


def test_a_third_encoding_below_the_window_makes_a_flat_row_testable():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": BELOW})]
    assert set(E.context_use_control(N, L, recs)) == {"transformer_xl"}
    for m in ("alibi", "kerple_log"): assert E.side(E.growth_vs_window(m, L, N, recs)) == "≈"   # both of the row's models flat
    assert E.window_setting(CLAIM, L, recs) == ""


def test_no_encoding_below_the_window_gives_the_note_with_the_claims_intervals():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": FLAT})]
    assert E.context_use_control(N, L, recs) == {}
    note = E.window_setting(CLAIM, L, recs)
    assert f"at {N}×, no committed encoding's growth is told apart below" in note and "(3 encodings read, each at 98.33%" in note
    for m in ("alibi", "kerple_log"): assert f"`{m}` {E._iv(E.growth_vs_window(m, L, N, recs))}" in note


def test_the_note_depends_on_the_control_not_on_the_row():
    "The same two flat models: only the third encoding's growth changes, and with it the note."
    with_c = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": BELOW})]
    without = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": FLAT})]
    assert (E.window_setting(CLAIM, L, with_c), bool(E.window_setting(CLAIM, L, without))) == ("", True)


def test_a_claim_against_the_yardstick_never_gets_the_window_note():
    recs = [rec({"kerple_log": FLAT, WIN: WINDOW, "alibi": FLAT})]
    c = dataclasses.replace(CLAIM, claim="KERPLE-log below its windowed model", a="kerple_log", b=E.WINDOW_YARDSTICK)
    assert E.context_use_control(N, L, recs) == {} and E.window_setting(c, L, recs) == ""


def test_committed_ledger_follows_the_control():
    rows = {r.claim: r for r in E.ledger()}
    assert "ln(g/g_window)" not in rows["KERPLE-log below its windowed model at 8×"].setting
    assert "ln(g/g_window)" in rows["KERPLE-log below ALiBi at 16×"].setting                      # 16×: none passes
    # 8×: transformer_xl's 95% interval lies below the window, but not at the Bonferroni coverage over the encodings read
    assert "ln(g/g_window)" in rows["DAPE-Kerple below Kerple at 8×"].setting and not rows["DAPE-Kerple below Kerple at 8×"].testable


def test_the_bare_bias_text_names_every_source_and_their_disagreement():
    assert E.PAPER_BIAS_GROWTH["KERPLE Table 3 on ArXiv, 512 → 8192"] == (6.07, 5.01)
    t = E.paper_bias_text()
    assert "×0.83 in KERPLE Table 3" in t and "×2.00 in DAPE Table 7" in t and "the sources disagree" in t
    assert "last 256 tokens" in t and "non-overlapping chunks" in t


ABOVE = [1.30, 1.35, 1.28, 1.32, 1.31]                       # a third encoding that degrades past L


def test_a_degradation_claim_is_tested_by_a_degrading_control_not_by_context_use():
    "'a grows more than b' needs a setting where some model degrades, not one where some model uses far context."
    more = dataclasses.replace(CLAIM, claim="alibi grows more than kerple_log", expect=">")
    degrading = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": ABOVE})]
    assert E.context_use_control(N, L, degrading) == {} and set(E.context_use_control(N, L, degrading, direction=">")) == {"rope"}
    assert E.window_setting(more, L, degrading) == ""                    # degradation is visible here: testable
    assert E.window_setting(CLAIM, L, degrading) != ""                   # far-context use is not: the '<' claim gets the note
    flat = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": FLAT})]
    assert "no committed encoding" in E.window_setting(more, L, flat)


def test_committed_cope_row_is_testable():
    assert {r.claim: r for r in E.ledger()}["CoPE degrades: grows more than DAPE-Kerple to 16×"].testable


MU = -0.015
MARGINAL = [1.0 * __import__("math").exp(MU + e) for e in (-0.010, 0.005, 0.0, 0.010, -0.005)]   # below the window, but not by much


def test_the_control_is_adjusted_for_the_number_of_encodings_it_reads():
    "Below the window at 95% on its own: it passes among 3 encodings read (each at 1 − 0.05/3), not among 13 (each at 1 − 0.05/13)."
    few = {"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "marginal": MARGINAL}
    many = {**few, **{f"flat{i}": FLAT for i in range(10)}}
    assert E.side(E.growth_vs_window("marginal", L, N, [rec(many)])) == "<"        # the unadjusted rule would pass in both
    assert len(E.control_family(N, L, [rec(few)])) == 3 and len(E.control_family(N, L, [rec(many)])) == 13
    assert set(E.context_use_control(N, L, [rec(few)])) == {"marginal"} and E.window_setting(CLAIM, L, [rec(few)]) == ""
    assert E.context_use_control(N, L, [rec(many)]) == {} and "13 encodings read" in E.window_setting(CLAIM, L, [rec(many)])


def test_the_control_intervals_use_the_bonferroni_quantile():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "marginal": MARGINAL})]
    iv = E.control_intervals(N, L, recs)["marginal"]
    d = [__import__("math").log(g) for g in MARGINAL]
    mean = sum(d) / 5
    sd = (sum((x - mean) ** 2 for x in d) / 4) ** 0.5
    t = E.t_quantile(1 - 0.05 / (2 * 3), 4)
    assert abs(t - 3.9608) < 1e-3                                              # t(0.99167, 4), independent of the 95% table
    assert iv[0] == __import__("pytest").approx(mean - t * sd / 5 ** 0.5) and iv[1] == __import__("pytest").approx(mean + t * sd / 5 ** 0.5)


def test_the_mirror_control_is_adjusted_too():
    above = [g ** -1 for g in MARGINAL]                                        # above the window by as little
    few = {"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "up": above}
    many = {**few, **{f"flat{i}": FLAT for i in range(10)}}
    assert set(E.context_use_control(N, L, [rec(few)], direction=">")) == {"up"}
    assert E.context_use_control(N, L, [rec(many)], direction=">") == {}
