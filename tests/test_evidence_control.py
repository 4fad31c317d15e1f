"""lengthx.evidence: a row read on growth is testable by the setting's positive control, not by its own result."""
import dataclasses
import re

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
FAM3 = ("alibi", "kerple_log", "transformer_xl")             # a small fixed family for the synthetic files


def test_a_third_encoding_below_the_window_makes_a_flat_row_testable():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": BELOW})]
    assert set(E.context_use_control(N, L, recs, family=FAM3)) == {"transformer_xl"}
    for m in ("alibi", "kerple_log"): assert E.side(E.growth_vs_window(m, L, N, recs)) == "≈"   # both of the row's models flat
    assert E.window_setting(CLAIM, L, recs, family=FAM3) == ""


def test_no_encoding_below_the_window_gives_the_note_with_the_claims_intervals():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": FLAT})]
    assert E.context_use_control(N, L, recs, family=FAM3) == {}
    note = E.window_setting(CLAIM, L, recs, family=FAM3)
    assert f"at {N}×, no encoding of the control's fixed family is told apart below" in note and "(3 encodings, each at 98.33%" in note
    for m in ("alibi", "kerple_log"): assert f"`{m}` {E._iv(E.growth_vs_window(m, L, N, recs))}" in note


def test_the_note_depends_on_the_control_not_on_the_row():
    "The same two flat models: only the third encoding's growth changes, and with it the note."
    with_c = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": BELOW})]
    without = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": FLAT})]
    fam = ("alibi", "kerple_log", "rope")
    assert (E.window_setting(CLAIM, L, with_c, family=fam), bool(E.window_setting(CLAIM, L, without, family=fam))) == ("", True)


def test_a_claim_against_the_yardstick_never_gets_the_window_note():
    recs = [rec({"kerple_log": FLAT, WIN: WINDOW, "alibi": FLAT})]
    c = dataclasses.replace(CLAIM, claim="KERPLE-log below its windowed model", a="kerple_log", b=E.WINDOW_YARDSTICK)
    assert E.context_use_control(N, L, recs, family=FAM3) == {} and E.window_setting(c, L, recs, family=FAM3) == ""


def test_committed_ledger_follows_the_control():
    rows = {r.claim: r for r in E.ledger()}
    assert "ln(g/g_window)" not in rows["KERPLE-log below its windowed model at 8×"].setting
    assert "ln(g/g_window)" in rows["KERPLE-log below ALiBi at 16×"].setting                      # 16×: none passes
    # 8×: transformer_xl's 95% interval lies below the window, but not at the Bonferroni coverage over the fixed family
    assert "ln(g/g_window)" in rows["DAPE-Kerple below Kerple at 8×"].setting and not rows["DAPE-Kerple below Kerple at 8×"].testable
    assert rows["DAPE-Kerple below Kerple at 8×"].verdict == E.UNTESTABLE


def test_the_bare_bias_text_names_every_source_and_their_disagreement():
    assert E.PAPER_BIAS_GROWTH["KERPLE Table 3 on GitHub, 512 → 8192"] == (3.40, 2.71)     # the code column, nearest the book's
    t = E.paper_bias_text()
    assert "×0.80 in KERPLE Table 3 on GitHub" in t and "×2.00 in DAPE Table 7" in t and "the sources disagree" in t
    assert "last 256 tokens" in t and "non-overlapping chunks" in t


ABOVE = [1.30, 1.35, 1.28, 1.32, 1.31]                       # a third encoding that degrades past L


def test_a_degradation_claim_is_tested_by_a_degrading_control_not_by_context_use():
    "'a grows more than b' needs a setting where some model degrades, not one where some model uses far context."
    more = dataclasses.replace(CLAIM, claim="alibi grows more than kerple_log", expect=">")
    degrading = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": ABOVE})]
    fam = ("alibi", "kerple_log", "rope")
    assert E.context_use_control(N, L, degrading, family=fam) == {}
    assert set(E.context_use_control(N, L, degrading, direction=">", family=fam)) == {"rope"}
    assert E.window_setting(more, L, degrading, family=fam) == ""        # degradation is visible here: testable
    assert E.window_setting(CLAIM, L, degrading, family=fam) != ""       # far-context use is not, nor does b degrade: the note
    flat = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "rope": FLAT})]
    assert "no encoding of the control's fixed family" in E.window_setting(more, L, flat, family=fam)


def test_committed_cope_row_is_testable():
    assert {r.claim: r for r in E.ledger()}["CoPE degrades: grows more than DAPE-Kerple to 16×"].testable


MU = -0.015
MARGINAL = [1.0 * __import__("math").exp(MU + e) for e in (-0.010, 0.005, 0.0, 0.010, -0.005)]   # below the window, but not by much


def test_the_control_is_adjusted_for_the_number_of_encodings_it_reads():
    "Below the window at 95% on its own: it passes among 3 encodings read (each at 1 − 0.05/3), not among 13 (each at 1 − 0.05/13)."
    few = {"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "marginal": MARGINAL}
    many = {**few, **{f"flat{i}": FLAT for i in range(10)}}
    f3, f13 = tuple(k for k in few if k != WIN), tuple(k for k in many if k != WIN)
    assert E.side(E.growth_vs_window("marginal", L, N, [rec(many)])) == "<"        # the unadjusted rule would pass in both
    assert len(E.control_family(N, L, [rec(few)], family=f3)) == 3 and len(E.control_family(N, L, [rec(many)], family=f13)) == 13
    assert set(E.context_use_control(N, L, [rec(few)], family=f3)) == {"marginal"} and E.window_setting(CLAIM, L, [rec(few)], family=f3) == ""
    assert E.context_use_control(N, L, [rec(many)], family=f13) == {}
    assert "(13 encodings, each" in E.window_setting(CLAIM, L, [rec(many)], family=f13)


def test_the_control_intervals_use_the_bonferroni_quantile():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "marginal": MARGINAL})]
    iv = E.control_intervals(N, L, recs, family=("alibi", "kerple_log", "marginal"))["marginal"]
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
    f3, f13 = tuple(k for k in few if k != WIN), tuple(k for k in many if k != WIN)
    assert set(E.context_use_control(N, L, [rec(few)], direction=">", family=f3)) == {"up"}
    assert E.context_use_control(N, L, [rec(many)], direction=">", family=f13) == {}


def test_the_family_is_fixed_in_advance_and_members_without_seeds_still_count():
    "m is the fixed family's size, not how many of it happen to be committed: a missing member cannot shrink the adjustment."
    few = {"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "marginal": MARGINAL}
    fam = ("alibi", "kerple_log", "marginal") + tuple(f"absent{i}" for i in range(10))     # 10 members never committed
    assert len(E.control_family(N, L, [rec(few)], family=fam)) == 3
    assert E.context_use_control(N, L, [rec(few)], family=fam) == {}                       # read at 1 − 0.05/13, not 1 − 0.05/3
    assert len(E.CONTROL_SPECS) == len(set(E.CONTROL_SPECS)) and not any(m.startswith("window:") for m in E.CONTROL_SPECS)


def test_the_family_is_the_ledgers_own_experiments():
    from lengthx import experiments as X
    assert set(E.CONTROL_SPECS) == {m for m in X.CORE + X.LEDGER + X.BASELINES if not m.startswith("window:")}


def test_a_later_unit_changes_no_note_and_no_verdict():
    "Rows of a new spec, committed by another experiment, even one far below the window, leave the ledger as it was."
    recs = E.load_results()
    L0 = E.gather("kerple_log", recs).train_len
    new = {"unit": "path", "preset": "cpu", "file": "path_cpu.json", "provenance": {"device": "cpu"},
           "settings": dict(E.lm_records(recs)[0]["settings"]), "result": {"rows": {}}}
    for n, row in E.gather(E.WINDOW_YARDSTICK.format(L=L0), recs).rows.items():   # the window's perplexities, 30% lower far out
        ppl = {k: (v * 0.7 if int(k) > L0 else v) for k, v in row["ppl"][E.SAME_TARGETS].items()}
        new["result"]["rows"][f"fake_unit|seed={n}"] = {**row, "spec": "fake_unit", "ppl": {E.SAME_TARGETS: ppl}}
    more = list(recs) + [new]
    assert "fake_unit" in E.committed_specs(more) and E.side(E.growth_vs_window("fake_unit", L0, 16, more)) == "<"
    for n in (4, 8, 16): assert E.control_family(n, L0, more).keys() == E.control_family(n, L0, recs).keys()
    key = lambda rows: [(r.verdict, r.reading, r.setting, r.testable) for r in rows]
    assert key(E.ledger(more)) == key(E.ledger(recs))


BASE_UP = [1.10, 1.12, 1.09, 1.11, 1.10]                        # the claim's baseline degrades past L


def test_a_below_claim_is_testable_when_its_baseline_degrades_even_if_the_family_fails():
    recs = [rec({"alibi": FLAT, "kerple_log": BASE_UP, WIN: WINDOW, "transformer_xl": FLAT})]
    assert E.context_use_control(N, L, recs, family=FAM3) == {}                           # no member below the window
    assert E.baseline_degrades(CLAIM, L, recs) and E.window_setting(CLAIM, L, recs, family=FAM3) == ""
    flat_b = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": FLAT})]
    assert not E.baseline_degrades(CLAIM, L, flat_b) and E.window_setting(CLAIM, L, flat_b, family=FAM3) != ""
    more = dataclasses.replace(CLAIM, expect=">")                 # the branch is for '<' claims only
    assert not E.baseline_degrades(more, L, recs)


def test_the_baseline_text_names_any_baseline():
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW})]
    t = E.bare_bias_text(L, recs, "cpu", N, "alibi")
    assert t.startswith("the baseline `alibi` is not shown to degrade here (`alibi` grows ×1.002") and "DAPE Table 7" not in t
    assert "the papers' bare Kerple" in E.bare_bias_text(L, recs, "cpu", N)
    assert E.bare_bias_text(L, [rec({"alibi": BASE_UP, WIN: WINDOW})], "cpu", N, "alibi") == ""


def test_committed_bipe_rope_row_is_testable_by_ropes_own_degradation():
    row = {r.claim: r for r in E.ledger()}["BiPE-RoPE far below RoPE at 4×"]
    assert row.testable and "ln(g/g_window)" not in row.setting and "segments" in row.setting   # the BiPE note is read beside it
    assert row.verdict == row.reading == "reproduced"


def test_an_untestable_row_has_one_verdict_and_keeps_its_interval():
    rows = E.ledger()
    untested = [r for r in rows if not r.testable]
    assert untested and all(r.verdict == E.UNTESTABLE and r.interval and r.reading in E.VERDICTS for r in untested
                            if r.reading != "unresolved")
    assert all(r.verdict == r.reading for r in rows if r.testable) and E.UNTESTABLE in E.VERDICT_MEANINGS
    line = E.count_line(rows)
    assert line.startswith(f"{len(rows) - len(untested)} testable here: ") and line.endswith(f"; {len(untested)} cannot test here")
    cells = [l.rsplit(" | ", 1)[1] for l in E.ledger_table(untested).split("\n\n")[0].splitlines()[2:]]
    assert all(re.fullmatch(rf"\*\*cannot test here\*\*[¹²³⁴⁵⁶⁷⁸⁹⁰˒]+ \(reading if testable: {re.escape(r.reading)}\)(; \*departs from the paper's setting at L: [^*]+\*)? \|", x)
               for x, r in zip(cells, untested))                         # a negative word only as the reading, in brackets


def test_the_control_coverage_choice_flips_rows_on_the_committed_data_and_none_for_a_family_of_one():
    recs = E.load_results()
    flips = E.control_flips(recs)
    assert flips and all(a == E.UNTESTABLE and u != E.UNTESTABLE for _, a, u in flips)   # only untestable rows can flip
    unadj = {r.claim: r for r in E.ledger(recs, adjusted=False)}
    assert all(unadj[c].testable and unadj[c].verdict == u for c, _, u in flips)
    assert E.control_flips(recs, family=E.CONTROL_SPECS[:1]) == []      # 1 − 0.05/1 = 95%: both readings the same
    assert E.control_level(17, adjusted=False) == 0.95 and E.control_level(17) > 0.95


def test_the_unadjusted_control_passes_a_member_the_adjusted_one_does_not():
    almost = [0.99, 0.975, 0.995, 0.98, 0.99]                   # below the window at 95%, not at 1 − 0.05/3
    recs = [rec({"alibi": FLAT, "kerple_log": FLAT, WIN: WINDOW, "transformer_xl": almost})]
    assert E.context_use_control(N, L, recs, family=FAM3) == {}
    assert set(E.context_use_control(N, L, recs, family=FAM3, adjusted=False)) == {"transformer_xl"}
    assert E.window_setting(CLAIM, L, recs, family=FAM3) and E.window_setting(CLAIM, L, recs, family=FAM3, adjusted=False) == ""


def test_a_growth_row_read_against_1_reports_its_reading_against_the_window_beside_it():
    rows = {r.claim: r for r in E.ledger(E.load_results())}
    rope, alibi = rows["RoPE breaks past L (growth above 1 at 16×)"], rows["ALiBi flat (growth not above 1 at 16×)"]
    assert "reading against 1 is conservative here" in rope.book and "ln(g/g_window) [" in rope.book
    assert "reading against 1 is lenient here" in alibi.book                 # the window grows below 1: 'not above 1' is easier
    assert "g_window" not in rows["KERPLE-log below ALiBi at 16×"].book       # only rows read against a constant
