"""lengthx.evidence ledger: claims the book's setting cannot test as the paper did carry a setting note beside the verdict."""
import dataclasses

from lengthx import evidence as E
from lengthx.results import load_results

RECS = load_results()


def claim(text: str) -> E.Claim:
    return next(c for c in E.CLAIMS if c.claim.startswith(text))


def test_t5_buckets_untrained_at_64_and_all_trained_at_the_papers_512():
    assert E.t5_unseen_buckets(64, 16) == [27, 28, 29, 30, 31]
    assert E.t5_unseen_buckets(512, 16) == [] and E.t5_setting(512) == ""
    assert "distances ≥ 67" in E.t5_setting(64) and "buckets 27–31" in E.t5_setting(64)


def test_the_t5_row_carries_the_setting_note_beside_its_verdict_and_the_note_changes_no_verdict():
    t5 = claim("T5 flat")
    row, bare = E.ledger(RECS, [t5])[0], E.ledger(RECS, [dataclasses.replace(t5, setting_note=None)])[0]
    assert "never got a gradient" in row.setting and "t5:num_buckets=16:max_distance=32" in row.setting and bare.setting == ""
    assert row.verdict == E.UNTESTABLE and bare.verdict == bare.reading == row.reading
    assert f"**cannot test here**¹˒² (reading if testable: {row.reading})" in E.ledger_table([row])   # note and reading, scoring
    note = row.setting.removeprefix("book's setting: ")
    assert f"\n¹ {note[0].upper()}{note[1:]}. The reading: " in E.ledger_table([row])                                    # a footnote
    assert f"\n² Scoring — {E.NON_OVERLAPPING}." in E.ledger_table([row])                                  # and the protocol's
    assert (row.reading, row.interval, row.seeds) == (bare.reading, bare.interval, bare.seeds)


def test_the_t5_note_reads_t5_with_every_bucket_trained_where_its_seeds_are_committed():
    "With the variants unit's seeds the note reports their interval against the window; without them it falls back."
    iv = E.growth_vs_window("t5:num_buckets=16:max_distance=32", 64, 16, RECS)
    note = E.t5_setting(64, RECS)
    assert iv is not None and f"[{iv[0]:+.3f}, {iv[1]:+.3f}]" in note
    assert ("not all of this row's failure" in note) == (iv[0] > 0) and ("is the untrained buckets" in note) == (iv[0] <= 0)
    without = [r for r in RECS if r["unit"] != "variants"]
    assert E.t5_setting(64, without).endswith("so this row reads untrained parameters, not T5's claim")


def test_bipe_rows_carry_the_segment_note():
    for text in ("BiPE-ALiBi", "BiPE-RoPE"):
        row = E.ledger(RECS, [claim(text)])[0]
        assert "segments" in row.setting and "1024-token windows of the Pile" in row.setting and "PG19" in row.setting


def test_kerple_power_is_read_at_4x_with_the_papers_significant_2048_numbers():
    c = claim("KERPLE-log below KERPLE-power")
    assert (c.factor, c.paper_a, c.paper_b) == (4, 2.86, 2.90) and "2048" in c.numbers and "not marked significant" in c.numbers
    assert "GitHub" in c.where and all("GitHub" in k.where for k in E.CLAIMS if k.where.startswith("KERPLE Table 3"))


def test_transformer_xl_row_reads_as_a_sentence():
    row = E.ledger(RECS, [claim("Transformer-XL")])[0]
    assert "another encoding's (no windowed" not in row.why and ") windowed model" not in row.why
    assert "no number against a windowed model" in row.why and "no number to size" not in row.why   # it gives 31.57 → 27.90


FLAT_ROWS = ("f(QKᵀ,B) below f(B)", "f(B) below the bare bias")          # 16×: no encoding passes the context-use control


def test_remedy_rows_carry_the_measured_flat_bias_note_and_keep_their_verdicts():
    for text in FLAT_ROWS:
        c = claim(text)
        row, bare = E.ledger(RECS, [c])[0], E.ledger(RECS, [dataclasses.replace(c, setting_note=None)])[0]
        g = E.growth(E.gather("kerple_log", RECS), c.factor * 64)
        b = E.gather(c.b, RECS)
        gb = E.growth(b, c.factor * 64)
        assert "is not shown to degrade here" in row.setting and "window:w=64:kerple_log" in row.setting
        assert f"×{min(gb.values()):.3f}–×{max(gb.values()):.3f} over seeds 0–4" in row.setting   # the claim's own baseline
        note = row.note                                               # the parts the sentence is written from
        assert note.factor == 16 and note.control.startswith("no encoding of the control's") and note.control in row.setting
        assert "no encoding of the control's" not in note.own + note.hand and note.own in row.setting
        table = E.ledger_table([row])
        assert "**cannot test here**¹˒²˒³˒⁴" in table and "\n² At 16× the setting control fails; 95% ln(g/g_window) against " in table
        assert "\n³ The setting control, failing at the row's factor: no encoding of the control's" in table
        assert (row.reading, row.interval, row.seeds) == (bare.reading, bare.interval, bare.seeds)
    assert E.ledger(RECS, [claim("KERPLE-log below its windowed model")])[0].setting == ""   # the control's own question
    assert "no encoding of the control's fixed family is told apart below" in E.ledger(RECS, [claim("DAPE-Kerple below Kerple")])[0].setting  # 8×: the adjusted control fails
    assert E.ledger(RECS, [claim("DAPE-Kerple below Kerple")])[0].reading == "not reproduced"
    assert E.ledger(RECS, [claim("DAPE-Kerple below Kerple")])[0].verdict == E.UNTESTABLE


def test_flat_bias_note_is_built_from_the_results_and_empty_when_the_bias_degrades():
    note = E.flat_bias_setting(64, RECS, "cpu", 16, ("dape:kerple_log",))
    g = E.growth(E.gather("kerple_log", RECS), 16 * 64)
    assert f"×{min(g.values()):.3f}" in note and "not told apart for `dape:kerple_log`" in note
    assert "×2.00 in DAPE Table 7" in note and "×1.10 in DAPE v2 Table 1" in note


def test_flat_bias_note_is_empty_where_the_bare_bias_degrades(monkeypatch):
    monkeypatch.setattr(E, "growth", lambda s, length, *a: {0: 1.9, 1: 2.0, 2: 2.1})   # grows ×2 past L, as in the papers
    assert E.flat_bias_setting(64, RECS, "cpu", 16, ("dape:kerple_log",)) == ""
    assert E.flat_bias_setting(64, [], "cpu", 16, ()) == ""
