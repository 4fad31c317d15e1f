"""The `bipe_table` unit: BiPE with its intra-segment table sized to the training length (the paper's 1024 rows at
1024 tokens), trained exactly as the main unit, and gathered beside the main unit's plain `bipe:*` runs without mixing."""
import json

import pytest

import lengthx.experiments as X
from lengthx.cli import UNITS as CLI_UNITS, main
from lengthx.evidence import LM_UNITS, compare, gather, lm_records, setup_key
from lengthx.model import GPT, GPTConfig
from lengthx.results import load_results

UNITS = LM_UNITS + ("bipe_table",)   # what chapter 30 gathers the table-size runs from


def test_the_unit_is_the_main_setup_with_a_table_of_train_len_rows():
    S, M = X.unit_settings("bipe_table", "cpu"), X.unit_settings("main", "cpu")
    assert S["specs"] == ["bipe:table_size=64:alibi", "bipe:table_size=64:rope"] and S["seeds"] == [0, 1, 2]
    assert {k: v for k, v in S.items() if k not in ("specs", "seeds")} == {k: v for k, v in M.items() if k not in ("specs", "seeds")}
    assert setup_key(S) == setup_key(M)                 # the evidence layer pairs its seeds with the main unit's
    assert X.unit_settings("bipe_table", "cpu", seed=3)["seeds"] == [3, 4, 5]
    assert "bipe_table" in X.UNITS and CLI_UNITS == X.UNITS and X.RUNNERS["bipe_table"] is X.lm_rows


@pytest.mark.parametrize("budget", ["smoke", "cpu"])
def test_every_spec_builds_a_table_of_exactly_the_training_length(budget):
    S = X.unit_settings("bipe_table", budget)
    for spec in S["specs"]:
        m = GPT(GPTConfig.preset(S["model"], pe=spec, max_len=S["train_len"]))
        assert m.pe.table.num_embeddings == S["train_len"], spec
        plain = GPT(GPTConfig.preset(S["model"], pe=spec.replace(f"table_size={S['train_len']}:", ""), max_len=S["train_len"]))
        assert plain.pe.table.num_embeddings == 1024    # the main unit's bipe:* keeps the default table


def test_smoke_run_is_gathered_apart_from_plain_bipe_and_paired_over_seeds(tmp_path):
    assert main(["reproduce", "--budget", "smoke", "--only", "bipe_table", "--out", str(tmp_path), "--quiet",
                 "--device", "cpu", "--allow-dirty"]) == 0
    rec = json.loads((tmp_path / "bipe_table_smoke.json").read_text())
    S = X.unit_settings("bipe_table", "smoke")
    assert rec["unit"] == "bipe_table" and rec["settings"] == json.loads(json.dumps(S))
    assert set(rec["result"]["rows"]) == {f"{s}|seed={n}" for s in S["specs"] for n in S["seeds"]}
    row = rec["result"]["rows"]["bipe:table_size=16:rope|seed=1"]
    assert set(row["ppl"]["last_k_common"]) == {str(16 * f) for f in S["factors"]}   # same targets, every factor
    recs = load_results([tmp_path])
    assert [r["unit"] for r in lm_records(recs, "smoke", units=UNITS)] == ["bipe_table"]
    s = gather("bipe:table_size=16:rope", recs, "smoke", units=UNITS)
    assert s.seeds == [0, 1] and s.train_len == 16 and set(s.files.values()) == {"bipe_table_smoke.json"}
    assert not gather("bipe:rope", recs, "smoke", units=UNITS).rows   # no row of the unit is read as plain bipe:rope
    c = compare("bipe:table_size=16:rope", "bipe:table_size=16:alibi", "growth", 64, recs=recs, preset="smoke", units=UNITS)
    assert c.n == 2 and c.interval is not None        # two seeds: a paired interval, as the chapter reads it
    runs = sorted(p.name for p in (tmp_path / "runs" / "smoke" / "lm").iterdir())
    assert runs == sorted(f"{X._safe(sp)}-seed{n}" for sp in S["specs"] for n in S["seeds"])
    assert X.lm_run_dir(X.Context(tmp_path, "cpu"), "bipe:rope", 0) != X.lm_run_dir(X.Context(tmp_path, "cpu"), S["specs"][1], 0)
