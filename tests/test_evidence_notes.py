"""lengthx.evidence.Note: a ledger row's setting note is kept as the parts it is written from; the sentence and the
footnotes are both made from those parts, so the two cannot diverge."""
import dataclasses

import pytest

from lengthx import evidence as E
from lengthx.results import load_results

RECS = load_results()
ROWS = E.ledger(RECS)
ROW = E.LedgerRow("P", "P Table 1", "a below b", "level; interval", "1 vs 2", "1.0 vs 2.0", [0, 1, 2], (-0.2, -0.1),
                  "reproduced", "on the paper's side")


def test_every_committed_rows_sentence_is_the_one_its_parts_write():
    with_control = [r for r in ROWS if r.note.factor]
    assert with_control and any(r.note.hand for r in ROWS)                  # both kinds of note are committed
    for r in ROWS:
        assert r.setting == r.note.text, r.claim
    for r in with_control:                                                    # each part sits in the sentence, in order
        n = r.note
        listed = ", ".join(f"`{x}` {iv}" for x, iv in n.listed)
        assert r.setting.endswith(f"at {n.factor}×, {n.control}; the claim's own 95% ln(g/g_window) against `{n.window}`: {listed}")
        assert n.control.startswith("no encoding of the control's fixed family") and n.window == E.WINDOW_YARDSTICK.format(L=64)
        claim = next(c for c in E.CLAIMS if c.claim == r.claim)
        assert [x for x, _ in n.listed] == [claim.a, claim.b] and n.factor == claim.factor
        assert not r.testable and r.verdict == E.UNTESTABLE                  # a failing control leaves the row untestable


def test_the_committed_tables_footnotes_carry_every_part():
    t = E.ledger_table(ROWS)
    foot = t.split("\n\n", 1)[1]
    for r in ROWS:
        n = r.note
        if not n.factor: continue
        assert f"The setting control, failing at the row's factor: {n.control}" in foot
        assert f"At {n.factor}× the setting control fails; 95% ln(g/g_window) against `{n.window}`: " in foot
        assert all(f"`{x}` {iv}" in foot for x, iv in n.listed), r.claim


def test_a_row_refuses_a_sentence_its_parts_do_not_write():
    note = E.Note(own="grows ×0.97", factor=16, control="no encoding moves", window="w", listed=(("a", "[-0.010, +0.020]"),))
    row = dataclasses.replace(ROW, note=note)
    assert row.setting == "book's setting: grows ×0.97; at 16×, no encoding moves; the claim's own 95% ln(g/g_window) against `w`: `a` [-0.010, +0.020]"
    with pytest.raises(ValueError):
        dataclasses.replace(row, setting=row.setting.replace("×0.97", "×0.98"))     # the prose edited, the parts not
    assert dataclasses.replace(ROW, setting="book's setting: x").note == E.Note(hand="book's setting: x")   # a bare sentence: its own note


def test_footnotes_come_from_the_parts_not_from_cutting_the_sentence():
    # a control sentence in words no pattern over the prose would recognise: only the parts can place it in its footnote
    note = E.Note(own="grows ×0.97", factor=8, control="the family shows nothing here", window="w", listed=(("a", "—"),))
    t = E.ledger_table([dataclasses.replace(ROW, note=note, testable=False, verdict=E.UNTESTABLE, reading="unresolved")])
    foot = t.split("\n\n", 1)[1].split("\n\n")
    assert foot[0].startswith("¹ Grows ×0.97") and "the family shows nothing" not in foot[0]
    assert foot[1] == "² At 8× the setting control fails; 95% ln(g/g_window) against `w`: `a` —"
    assert foot[2] == "³ The setting control, failing at the row's factor: the family shows nothing here"
