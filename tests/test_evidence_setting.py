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
    assert "never got a gradient" in row.setting and "not T5's claim" in row.setting and bare.setting == ""
    assert f"**{row.verdict}** ({row.setting})" in E.ledger_table([row])
    assert (row.verdict, row.interval, row.seeds) == (bare.verdict, bare.interval, bare.seeds)


def test_bipe_rows_carry_the_segment_note():
    for text in ("BiPE-ALiBi", "BiPE-RoPE"):
        row = E.ledger(RECS, [claim(text)])[0]
        assert "segments" in row.setting and "1024 tokens" in row.setting


def test_kerple_power_is_read_at_4x_with_the_papers_significant_2048_numbers():
    c = claim("KERPLE-log below KERPLE-power")
    assert (c.factor, c.paper_a, c.paper_b) == (4, 5.22, 5.26) and "2048" in c.numbers and "not marked significant" in c.numbers


def test_transformer_xl_row_reads_as_a_sentence():
    row = E.ledger(RECS, [claim("Transformer-XL")])[0]
    assert "another encoding's (no windowed" not in row.why and ") windowed model" not in row.why
