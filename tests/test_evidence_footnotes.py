"""lengthx.evidence.ledger_table: the book's-setting notes as numbered footnotes under the table, not inside the verdict cell."""
import dataclasses

from lengthx import evidence as E

ROW = E.LedgerRow("P", "P Table 1", "a below b", "level; interval", "1 vs 2", "1.0 vs 2.0", [0, 1, 2], (-0.2, -0.1),
                  "reproduced", "on the paper's side")
NOTE_A = "book's setting: a long note about segments, " + "words " * 30
NOTE_B = "book's setting: another note"


def table(*settings: str) -> str:
    "Rows with a note cannot be tested (verdict 'cannot test here'); rows without one are testable."
    return E.ledger_table([dataclasses.replace(ROW, claim=f"claim {i}", setting=s, testable=not s,
                                               verdict=E.UNTESTABLE if s else ROW.verdict, reading=ROW.verdict)
                           for i, s in enumerate(settings)])


def test_setting_notes_become_numbered_marks_with_the_notes_under_the_table():
    t = table(NOTE_A, "", NOTE_B, NOTE_A)
    rows, foot = t.split("\n\n", 1)
    lines = rows.splitlines()
    assert all(line.count("|") == 6 for line in lines)                   # still five columns
    assert "**cannot test here**¹ (reading if testable: reproduced) |" in lines[2] and "**reproduced**:" in lines[3]
    assert "**cannot test here**² (reading if testable: reproduced) |" in lines[4]
    assert "**cannot test here**¹ (reading" in lines[5]                        # a shared note keeps its number
    assert "book's setting" not in rows and "on the paper's side" not in lines[2]   # the note and the deciding phrase left the cell
    assert foot.split("\n\n") == [f"¹ {NOTE_A}. The reading: on the paper's side",
                                   f"² {NOTE_B}. The reading: on the paper's side"]   # each note once, with its reading


def test_no_notes_no_footnotes_and_marks_past_nine():
    assert "\n\n" not in table("", "") and table("", "").count("\n") == 3
    assert E.superscript(1) == "¹" and E.superscript(10) == "¹⁰" and E.superscript(23) == "²³"
    assert E.setting_notes([dataclasses.replace(ROW, setting=s) for s in ("x", "", "y", "x")]) == {"x": 1, "y": 2}


def test_a_testable_row_with_a_note_keeps_its_verdict_and_the_mark():
    t = E.ledger_table([dataclasses.replace(ROW, setting=NOTE_B)])
    assert "**reproduced** (setting differs¹): on the paper's side" in t and t.endswith(f"¹ {NOTE_B}")


CONTROL = ("no encoding of the control's fixed family is told apart below the windowed model in growth (17 encodings), "
           "so this setting shows no use of context beyond L and cannot show a gap that opens beyond it")


def test_the_shared_control_protocol_and_reasoning_are_footnotes_each_once_and_the_cell_keeps_the_deciding_phrase():
    why = ("read on growth: a long reasoning " + "words " * 20 + "; the interval is of ln(g_a/g_b): the interval contains 0 "
           "(paper: chunks; here: same targets)")
    rows = [dataclasses.replace(ROW, claim=f"claim {f}", setting=f"book's setting: own {f}; at {f}×, {CONTROL}; listed {f}",
                                testable=False, verdict=E.UNTESTABLE, why=why, reading="not reproduced") for f in (8, 16)]
    t = E.ledger_table(rows)
    body, foot = t.split("\n\n", 1)
    assert t.count(CONTROL) == 1 and t.count("paper: chunks; here: same targets") == 1      # shared sentences once
    assert "words" not in body and "read on growth" not in body                             # reasoning left the cell
    assert "**cannot test here**¹˒²˒³ (reading if testable: not reproduced) |" in body
    assert "The reading: read on growth: a long reasoning " + "words " * 20 + "; on ln(g_a/g_b): the interval contains 0" in foot
    assert "**cannot test here**⁴˒²˒³ (reading" in body and "at 16× the setting control fails; listed 16" in foot
    assert f"² at the claim's factor, {CONTROL}" in foot and "The reading: read on growth: a long reasoning" in foot
