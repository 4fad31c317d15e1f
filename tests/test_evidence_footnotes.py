"""lengthx.evidence.ledger_table: the book's-setting notes as numbered footnotes under the table, not inside the verdict cell."""
import dataclasses
import math

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
    assert "**cannot test here**¹˒² (reading if testable: reproduced) |" in lines[2] and "**reproduced**:" in lines[3]
    assert "**cannot test here**³ (reading if testable: reproduced) |" in lines[4]
    assert "**cannot test here**¹˒² (reading" in lines[5]                      # a shared note keeps its number
    assert "setting" not in rows and "on the paper's side" not in lines[2]       # the note and the deciding phrase left the cell
    a, b = (n.removeprefix("book's setting: ") for n in (NOTE_A, NOTE_B))
    assert foot.split("\n\n") == [f"¹ {a[0].upper()}{a[1:]}", "² The reading: on the paper's side",   # a shared note once,
                                   f"³ {b[0].upper()}{b[1:]}. The reading: on the paper's side"]        # a row's own with its reading


def test_no_notes_no_footnotes_and_marks_past_nine():
    assert "\n\n" not in table("", "") and table("", "").count("\n") == 3
    assert E.superscript(1) == "¹" and E.superscript(10) == "¹⁰" and E.superscript(23) == "²³"
    assert E.setting_notes([dataclasses.replace(ROW, setting=s) for s in ("x", "", "y", "x")]) == {"x": 1, "y": 2}


def test_a_testable_row_with_a_note_keeps_its_verdict_and_the_mark():
    t = E.ledger_table([dataclasses.replace(ROW, setting=NOTE_B)])
    assert "**reproduced** (setting differs¹): on the paper's side" in t and t.endswith("¹ Another note")


CONTROL = ("no encoding of the control's fixed family is told apart below the windowed model in growth (17 encodings), "
           "so this setting shows no use of context beyond L and cannot show a gap that opens beyond it")
LISTED = "; the claim's own 95% ln(g/g_window) against `window:w=64:k`: "


def control_note(n: int, own: str, listed: tuple = (), hand: str = "", win: str = "window:w=64:k") -> E.Note:
    "A control note failing at n×, as the parts the ledger builds it from."
    return E.Note(hand=hand, own=own, factor=n, control=CONTROL, window=win, listed=listed)


def test_the_shared_control_protocol_and_reasoning_are_footnotes_each_once_and_the_cell_keeps_the_deciding_phrase():
    why = ("read on growth: a long reasoning " + "words " * 20 + "; the interval is of ln(g_a/g_b): the interval contains 0 "
           "(paper: chunks; here: same targets)")
    rows = [dataclasses.replace(ROW, claim=f"claim {f}", note=control_note(f, f"own {f}", (("a", f"[-0.0{f // 8}0, +0.010]"),)),
                                testable=False, verdict=E.UNTESTABLE, why=why, reading="not reproduced") for f in (8, 16)]
    t = E.ledger_table(rows)
    body, foot = t.split("\n\n", 1)
    assert t.count(CONTROL) == 1 and t.count("paper: chunks; here: same targets") == 1      # shared sentences once
    assert "words" not in body and "read on growth" not in body                             # reasoning left the cell
    assert "**cannot test here**¹˒²˒³˒⁴ (reading if testable: not reproduced) |" in body
    assert "The reading: read on growth: a long reasoning " + "words " * 20 + "; on ln(g_a/g_b): the interval contains 0" in foot
    assert "**cannot test here**⁵˒⁶˒³˒⁴ (reading" in body and "⁵ Own 16. The reading" in foot
    assert "⁶ At 16× the setting control fails; 95% ln(g/g_window) against `window:w=64:k`: `a` [-0.020, +0.010]" in foot
    assert f"³ The setting control, failing at the row's factor: {CONTROL}" in foot


def test_each_factors_interval_list_and_a_shared_hand_note_are_one_footnote_each():
    hand = "book's setting: segments are few"
    rows = [dataclasses.replace(ROW, claim=c, note=control_note(n, f"grows ×{g}", lst, h),
                                testable=False, verdict=E.UNTESTABLE, reading="unresolved")
            for c, h, g, n, lst in (("c1", hand, "0.97", 16, (("a", "[-0.010, +0.020]"), ("b", "[-0.030, +0.040]"))),
                                    ("c2", hand, "0.98", 16, (("b", "[-0.030, +0.040]"), ("c", "[-0.050, +0.060]"))),
                                    ("c3", "", "0.99", 8, (("a", "[-0.070, +0.080]"), ("c", "—"))))]
    assert rows[0].setting == (f"{hand}. Also, grows ×0.97; at 16×, {CONTROL}{LISTED}`a` [-0.010, +0.020], "
                               "`b` [-0.030, +0.040]")                                    # the sentence the parts write
    t = E.ledger_table(rows)
    body, foot = t.split("\n\n", 1)
    assert t.count("Segments are few") == 1 and t.count("`b` [-0.030, +0.040]") == 1     # shared: once, however many rows
    assert ("At 16× the setting control fails; 95% ln(g/g_window) against `window:w=64:k`: `a` [-0.010, +0.020], "
            "`b` [-0.030, +0.040], `c` [-0.050, +0.060]") in foot                         # each spec once, first-seen order
    assert "At 8× the setting control fails; 95% ln(g/g_window) against `window:w=64:k`: `a` [-0.070, +0.080], `c` —" in foot
    assert "Grows ×0.97" in foot and "Grows ×0.98" in foot and "Grows ×0.99" in foot     # each row's own part stays its own
    c1, c2, c3 = body.splitlines()[2:]
    assert "here**¹˒²˒³˒⁴ (" in c1 and "here**¹˒⁵˒³˒⁴ (" in c2 and "here**⁶˒⁷˒⁴ (" in c3    # hand, own, factor list, control


def test_the_committed_ledgers_footnotes_keep_every_number_of_the_notes_and_reasons():
    import re
    from lengthx.results import load_results
    rows = E.ledger(load_results())
    t = E.ledger_table(rows)
    for r in rows:
        for x in re.findall(r"\d+(?:\.\d+)?", r.setting + " " + r.why):
            assert x in t, (r.claim, x)
    assert len(t.split("\n\n", 1)[1]) < sum(len(r.setting) + len(r.why) for r in rows)        # and they are shorter


def test_a_fit_gap_at_L_far_from_the_papers_is_flagged_only_when_it_clears_the_papers_converted_gap():
    c = E.Claim("P", "T", "a below b at 8×", "a", "b", "level", 8, "<", 5.0, 6.0, "", paper_at_L=(6.00, 6.06))
    lo, hi = E.per_byte(math.log(6.00 / 6.06))                      # about -0.0033 to -0.0022 per byte
    flag = E.fit_departure(c, (-0.10, -0.05))
    assert flag.startswith("departs from the paper's setting at L") and "[-0.100, -0.050]" in flag
    assert f"[{lo:+.4f}, {hi:+.4f}]" in flag
    assert E.fit_departure(c, (0.05, 0.10)) != ""                   # the other side of the paper's gap: also a departure
    assert E.fit_departure(c, (-0.10, 0.01)) == ""                  # not told from 0: no flag
    assert E.fit_departure(c, (-0.10, -0.003)) == ""                # reaches the paper's own gap at L: no flag
    assert E.fit_departure(dataclasses.replace(c, paper_at_L=None), (-0.10, -0.05)) == ""   # no paper numbers at L
    row = dataclasses.replace(ROW, departure=flag)
    assert E.ledger_table([row]).splitlines()[2].endswith(f"**reproduced**: on the paper's side; *{flag}* |")


def test_judged_effect_at_one_bytes_per_token_value_is_the_point_conversion():
    c = E.Claim("P", "T", "a below b at 8×", "a", "b", "level", 8, "<", 5.0, 6.0, "")
    e = math.log(5.0 / 6.0)
    assert E.judged_effect(c, ROW, (3.0, 3.0)) == (e / 3.0, e / 3.0) and E.judged_effect(c, ROW, (4.5, 4.5)) == (e / 4.5,) * 2
    assert E.judged_effect(c, ROW) == E.per_byte(e) == tuple(sorted((e / E.BYTES_PER_TOKEN[0], e / E.BYTES_PER_TOKEN[1])))
