"""tools/snapshot_partial.py: a resumable long-document unit's finished methods, and only those, make a partial result."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from snapshot_partial import finished_methods  # noqa: E402

S = dict(methods=["a", "b", "c"], n_windows=2, passkey=dict(lengths=[10, 20]), caps={"c": 10})


def items(*keys): return {k: {"seconds": 1.0} for k in keys}


def test_a_method_is_finished_only_with_every_document_and_length():
    full_a = ["ppl|a|d1", "ppl|a|d2", "passkey|a|10", "passkey|a|20"]
    assert finished_methods(S, items(*full_a)) == ["a"]
    assert finished_methods(S, items(*full_a[:-1])) == []                       # a passkey length missing
    assert finished_methods(S, items(*full_a[1:])) == []                        # a document missing
    assert finished_methods(S, items(*full_a, "ppl|b|d1", "ppl|b|d2", "passkey|b|10")) == ["a"]


def test_a_capped_method_needs_only_its_lengths():
    assert finished_methods(S, items("ppl|c|d1", "ppl|c|d2", "passkey|c|10")) == ["c"]


def test_a_method_whose_name_prefixes_another_is_not_counted_twice():
    S2 = dict(S, methods=["rope", "rope:pi=2"], caps={})
    got = items("ppl|rope:pi=2|d1", "ppl|rope:pi=2|d2", "passkey|rope:pi=2|10", "passkey|rope:pi=2|20")
    assert finished_methods(S2, got) == ["rope:pi=2"]


def test_a_ruler_column_is_finished_only_with_every_task():
    "RULER: a (method, length) column enters the snapshot when every task is scored at that length, and not before."
    from snapshot_partial import finished_columns, ruler_snapshot
    R = dict(methods={"rope": [2048, 4096], "yarn": [16384]}, tasks=["a", "b"])
    cell = lambda s: {"score": s, "seconds": 2.0}
    got = {"rope|a|2048": cell(100.0), "rope|b|2048": cell(50.0), "rope|a|4096": cell(0.0)}
    assert finished_columns(R, got) == {"rope": [2048], "yarn": []}
    result, seconds = ruler_snapshot(R, got)
    assert result["mean_by_length"] == {"rope": {"2048": 75.0}} and seconds == 4.0
    assert result["partial"] == {"finished": ["rope@2048"], "left": ["rope@4096", "yarn@16384"]}
    assert set(result["grid"]["rope"]["a"]) == {"2048"}                 # the unfinished 4096 cell stays out
