"""lengthx.evidence ledger: protocol notes on the claims whose paper tables used another evaluation protocol."""
import dataclasses

from lengthx import evidence as E

from test_evidence_che import che, CLAIM


def by_where(text: str) -> list:
    return [c for c in E.CLAIMS if text in c.where]


def test_kerple_table3_and_bipe_rows_carry_the_non_overlapping_note_and_dape_v1_the_last_256():
    assert by_where("KERPLE Table 3") and all(c.protocol_note == E.NON_OVERLAPPING for c in by_where("KERPLE Table 3"))
    assert by_where("BiPE") and all(c.protocol_note == E.NON_OVERLAPPING for c in by_where("BiPE"))
    assert all(c.protocol_note == E.LAST_256 for c in by_where("DAPE Table 7") + by_where("DAPE Table 6"))
    assert "non-overlapping" in E.NON_OVERLAPPING and "same targets" in E.NON_OVERLAPPING


def test_the_note_is_shown_in_why_and_changes_no_verdict():
    recs = [che(0, 0.95, 0.60), che(1, 0.90, 0.62), che(2, 0.97, 0.55)]
    noted = dataclasses.replace(CLAIM, protocol_note="paper: X; here: Y")
    a, b = E.ledger(recs, [noted])[0], E.ledger(recs, [CLAIM])[0]
    assert "(paper: X; here: Y)" in a.why and "paper: X" not in b.why
    assert (a.verdict, a.interval, a.seeds) == (b.verdict, b.interval, b.seeds)
    assert "paper: X; here: Y" in E.ledger_table([a])


def test_the_ledger_table_has_five_columns_a_seed_range_and_the_gpu_reading_only_when_there_is_one():
    recs = [che(0, 0.95, 0.60), che(1, 0.90, 0.62), che(2, 0.97, 0.55)]
    row = E.ledger(recs, [CLAIM])[0]
    lines = E.ledger_table([row, dataclasses.replace(row, gpu="reproduced (gpu, 3 seeds)")]).splitlines()
    assert all(line.count("|") == 6 for line in lines)               # five columns: it fits a page's width
    assert "seeds 0–2" in lines[2] and "GPU" not in lines[2] and "GPU: reproduced (gpu, 3 seeds)" in lines[3]
    assert E.seed_list([4, 0, 2]) == "seeds 0, 2, 4" and E.seed_list([1]) == "seed 1" and E.seed_list([]) == "no seeds"
