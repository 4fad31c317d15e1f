"""lengthx.evidence ledger CHE rows: seeds paired by accuracy difference, the t interval, the verdict, one seed unranked."""
import pytest

from lengthx import evidence as E

CLAIM = next(c for c in E.CLAIMS if c.quantity == "che")


def che(seed: int, acc_a: float, acc_b: float, ind=(0.9, 0.9), file: str = None) -> dict:
    "A CHE record shaped like che_cpu.json: even_pairs runs of the claim's two encodings, accuracy per test length."
    def run(acc, i):
        return {"acc": {"41": acc - 0.01, "81": acc + 0.01}, "chance": 0.5, "ind": i, "log": [{"loss": 0.1, "step": 0}]}
    return {"unit": "che", "preset": "cpu", "settings": {"seed": seed}, "provenance": {"device": "cpu", "cuda_device": None},
            "result": {"runs": {f"even_pairs|{CLAIM.a}": run(acc_a, ind[0]), f"even_pairs|{CLAIM.b}": run(acc_b, ind[1])}},
            "file": file or f"/x/che_cpu_seed{seed}.json"}


def test_paired_seeds_give_the_t_interval_of_the_accuracy_differences():
    recs = [che(0, 0.95, 0.60), che(1, 0.90, 0.62), che(2, 0.97, 0.55)]
    row = E.ledger(recs, [CLAIM])[0]
    mean, iv = E.paired_interval([0.35, 0.28, 0.42])
    assert row.seeds == [0, 1, 2] and row.interval == pytest.approx(iv) and row.verdict == "reproduced"
    assert "paired over 3 seeds" in row.why


def test_the_opposite_and_an_undecided_reading():
    opp = E.ledger([che(0, 0.60, 0.95), che(1, 0.62, 0.96), che(2, 0.61, 0.95)], [CLAIM])[0]
    assert opp.verdict == "opposite" and opp.interval[1] < 0
    mixed = E.ledger([che(0, 0.90, 0.60), che(1, 0.60, 0.90)], [CLAIM])[0]
    assert mixed.interval[0] < 0 < mixed.interval[1] and mixed.verdict == "unresolved"


def test_one_seed_is_shown_never_ranked():
    row = E.ledger([che(0, 0.99, 0.50)], [CLAIM])[0]
    assert row.interval is None and row.verdict == "unresolved" and "never ranked" in row.why


def test_a_seed_in_two_files_is_paired_once():
    recs = [che(0, 0.95, 0.60, file="/x/che_cpu.json"), che(0, 0.10, 0.90, file="/x/che_cpu_z.json"), che(1, 0.90, 0.62)]
    row = E.ledger(recs, [CLAIM])[0]
    assert row.seeds == [0, 1] and row.interval == pytest.approx(E.paired_interval([0.35, 0.28])[1])


def test_not_learned_stays_when_neither_model_learned_in_distribution():
    recs = [che(0, 0.5, 0.5, ind=(0.52, 0.51)), che(1, 0.5, 0.5, ind=(0.5, 0.5))]
    row = E.ledger(recs, [CLAIM])[0]
    assert row.verdict == "not learned" and row.interval is None
