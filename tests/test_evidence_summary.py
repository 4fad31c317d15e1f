"""lengthx.evidence: the compact ledger (each row's scale named), the full table's scale per row, and the CHE setting note."""
import dataclasses

from lengthx import evidence as E

from test_evidence_che import che, CLAIM as CHE_CLAIM

LEVEL = next(c for c in E.CLAIMS if c.quantity == "level" and c.factor > 1 and c.paper_at_L)
GROWTH_1 = next(c for c in E.CLAIMS if c.quantity == "growth" and E._is_const(c.b) and not c.yardstick)
ROW = E.LedgerRow("P", "P Table 1", "a below b", "m", "1 vs 2", "x", [0, 1, 2], (-0.2, -0.1), "reproduced", "why")


def test_the_scale_is_the_deciding_rules_not_one_for_all_rows():
    assert E.interval_scale(LEVEL, "the interval excludes 0") == "ln(a/b) per byte"
    assert E.interval_scale(LEVEL, "read on growth: x; the interval is of ln(g_a/g_b): y") == "ln(g_a/g_b)"
    assert E.interval_scale(GROWTH_1, "") == "ln g"
    assert E.interval_scale(GROWTH_1, "read against `w`, its own; the interval is of ln(g/g_window): y") == "ln(g/g_window)"
    assert E.interval_scale(CHE_CLAIM, "") == "accuracy difference a − b"


def test_the_papers_effect_is_on_the_rows_scale():
    g, lv = LEVEL.growth_effect(), LEVEL.effect()
    assert g != lv                                                         # the two scales give different numbers here
    assert E.paper_effect(LEVEL, "ln(g_a/g_b)") == f"[{g[0]:+.3f}, {g[1]:+.3f}]"
    assert E.paper_effect(LEVEL, "ln(a/b) per byte") == f"[{lv[0]:+.3f}, {lv[1]:+.3f}]"
    assert E.paper_effect(CHE_CLAIM, "accuracy difference a − b") == f"{(CHE_CLAIM.paper_a - CHE_CLAIM.paper_b) / 100:+.3f}"


def test_the_compact_table_names_each_rows_scale_and_the_full_table_no_single_scale():
    rows = [dataclasses.replace(ROW, claim="r1", scale="ln(a/b) per byte", effect="[-0.3, -0.2]"),
            dataclasses.replace(ROW, claim="r2", scale="ln(g_a/g_b)", testable=False, verdict=E.UNTESTABLE, reading="unresolved")]
    lines = E.ledger_summary(rows).splitlines()
    assert all(line.count("|") == 6 for line in lines) and "ln(" not in lines[0]
    assert [l.split(" | ")[3] for l in lines[2:]] == ["ln(a/b) per byte", "ln(g_a/g_b)"]
    assert "(would read unresolved)" in lines[3] and "[-0.200, -0.100] (seeds 0–2)" in lines[2]
    full = E.ledger_table(rows).splitlines()
    assert "ln(a/b)" not in full[0] and "[-0.200, -0.100] ln(g_a/g_b) (seeds 0–2)" in full[3]


def test_the_ledger_sets_scale_and_effect_on_every_row():
    row = E.ledger([che(0, 0.95, 0.60), che(1, 0.90, 0.62), che(2, 0.97, 0.55)], [CHE_CLAIM])[0]
    assert row.scale == "accuracy difference a − b" and row.effect == E.paper_effect(CHE_CLAIM, row.scale)


def test_the_che_note_names_steps_seeds_and_the_encodings_that_learned():
    rec = che(0, 0.5, 0.5, ind=(0.52, 0.95))                               # b learned in distribution, a did not
    rec["settings"].update(steps=2000, pes=[CHE_CLAIM.a, CHE_CLAIM.b])
    note = E.che_setting(64, [rec, dict(rec, settings=dict(rec["settings"], seed=3))])
    assert note.startswith("book's setting: trained 2,000 steps, seeds 0, 3; the paper trains 200,000 steps")
    assert note.endswith(f"`{CHE_CLAIM.b}` 0.95") and f"`{CHE_CLAIM.a}`" not in note
    rec["result"]["runs"][f"even_pairs|{CHE_CLAIM.b}"]["ind"] = 0.55                           # under chance + margin
    assert note != E.che_setting(64, [rec]) and E.che_setting(64, [rec]).endswith(": none")
    assert E.che_setting(64, []) == ""
