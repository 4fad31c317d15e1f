"""The `zero_shot` unit: chapter 12's parameter-free rules read over the main unit's RoPE seeds, one row per rule and seed,
scored on main's same targets, its plain row the committed model's."""
import json
import shutil
from pathlib import Path

import pytest

from lengthx import experiments as X
from lengthx.evidence import compare, gather, growth
from lengthx.results import load_results

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "nbs" / "results" / "zero_shot_cpu.json"
SAME_MODEL = 100   # a retrained model is the committed one when it differs 100x less than any two seeds do (chapter 12 states the same)


def seed_gap(rows: dict) -> float:
    "The smallest difference between two seeds' models: min over pairs of the largest relative perplexity difference over lengths."
    ppl = {s: r["ppl"]["last_k_common"] for s, r in rows.items()}
    return min(max(abs(ppl[a][L] / ppl[b][L] - 1) for L in ppl[a]) for a in ppl for b in ppl if a < b)


def test_rule_specs_scale_with_the_factor():
    T = 64
    assert X.zero_shot_spec("pi", 4 * T, T) == "rope:pi=4" and X.zero_shot_spec("ntk_2x", 4 * T, T) == "rope:ntk=8"
    assert X.zero_shot_spec("yarn", 16 * T, T) == "yarn:s=16" and X.zero_shot_spec("llama3", 2 * T, T) == "llama3:s=2"
    assert X.zero_shot_spec("rerope_logn", 8 * T, T) == "rerope:w=32:logn=true:original_max_len=64"
    # Self-Extend: the smallest group with (T - w)·G + w >= L, so every grouped distance stays below T
    for f in (1, 2, 4, 8, 16):
        g = int(X.zero_shot_spec("self_extend", f * T, T).split("g=")[1])
        assert (T - 32) * g + 32 >= f * T and (g == 1 or (T - 32) * (g - 1) + 32 < f * T)
    assert X.zero_shot_spec("rope", 16 * T, T) == "rope"
    assert X.zero_shot_spec("window", 16 * T, T) == X.zero_shot_spec("window", 2 * T, T) == "window:w=64:rope"   # the window is L at every length
    with pytest.raises(ValueError, match="unknown zero-shot rule"): X.zero_shot_spec("longrope", 2 * T, T)
    with pytest.raises(ValueError, match="not a multiple"): X.zero_shot_spec("pi", 100, T)


def test_settings_are_the_main_units_lm_settings():
    for budget in ("smoke", "cpu"):
        z, m = X.unit_settings("zero_shot", budget), X.unit_settings("main", budget)
        assert X._lm_setup(z) == X._lm_setup(m) and z["specs"] == ["rope"]
    assert X.unit_settings("zero_shot", "cpu")["seeds"] == [0, 1, 2, 3, 4]
    assert X.unit_settings("zero_shot", "cpu", seed=5)["seeds"] == [5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    "main at the smoke budget, its trained runs deleted, then zero_shot: RoPE trained again from scratch per seed."
    out = tmp_path_factory.mktemp("zs")
    X.reproduce(["main"], "smoke", out, allow_dirty=True, progress=False)
    shutil.rmtree(out / "runs" / "smoke" / "lm")
    X.reproduce(["zero_shot"], "smoke", out, allow_dirty=True, progress=False)
    return out, json.loads((out / "zero_shot_smoke.json").read_text())


def test_one_row_per_rule_and_seed(smoke):
    out, rec = smoke
    S = rec["settings"]
    rows = rec["result"]["rows"]
    assert set(rows) == {f"{X.ZERO_SHOT_PREFIX}{r}|seed={s}" for r in ("rope", *X.ZERO_SHOT_RULES) for s in S["seeds"]}
    lens = [str(S["train_len"] * f) for f in S["factors"]]
    for row in rows.values():
        assert list(row["ppl"]["last_k_common"]) == lens and list(row["rule_specs"]) == lens
        assert all(1 < v < 1000 for v in row["ppl"]["last_k_common"].values())
    # the evidence layer reads them seed by seed, and a rule's spec never names a trained model's
    recs = load_results([out])
    for r in X.ZERO_SHOT_RULES:
        s = gather(X.ZERO_SHOT_PREFIX + r, recs, preset="smoke", units=("zero_shot",))
        assert s.seeds == S["seeds"] and s.train_len == S["train_len"]
        assert not gather(X.ZERO_SHOT_PREFIX + r, recs, preset="smoke").rows
    c = compare(X.ZERO_SHOT_PREFIX + "pi", X.ZERO_SHOT_PREFIX + "rope", "growth", 4 * S["train_len"], recs=recs,
                preset="smoke", units=("zero_shot",))
    assert c.n == 2 and c.interval is not None


def test_a_rule_at_scale_one_is_plain_rope(smoke):
    _, rec = smoke
    rows, T = rec["result"]["rows"], str(rec["settings"]["train_len"])
    for seed in rec["settings"]["seeds"]:
        rope = rows[f"{X.ZERO_SHOT_PREFIX}rope|seed={seed}"]["ppl"]["last_k_common"]
        for r in ("pi", "ntk", "yarn", "llama3", "dynamic_ntk", "window"):   # s = L/T = 1 at the training length; a window of T holds every key
            row = rows[f"{X.ZERO_SHOT_PREFIX}{r}|seed={seed}"]
            assert row["ppl"]["last_k_common"][T] == rope[T], (r, seed)
        # beyond T the rules read other positions, so they differ from plain RoPE there
        far = str(4 * int(T))
        assert rows[f"{X.ZERO_SHOT_PREFIX}pi|seed={seed}"]["ppl"]["last_k_common"][far] != rope[far]


def test_plain_row_is_the_main_units_model(smoke):
    "Trained again from scratch, RoPE at seed 0 gives main's committed perplexities bit for bit."
    out, rec = smoke
    main = json.loads((out / "main_smoke.json").read_text())["result"]["rows"]["rope|seed=0"]["ppl"]["last_k_common"]
    row = rec["result"]["rows"][f"{X.ZERO_SHOT_PREFIX}rope|seed=0"]
    assert row["ppl"]["last_k_common"] == main
    assert row["committed"] == {"file": "main_smoke.json", "lengths": list(main), "identical": True, "max_rel_diff": 0.0}
    assert "committed" not in rec["result"]["rows"][f"{X.ZERO_SHOT_PREFIX}rope|seed=1"]   # main holds seed 0 only


def test_committed_plain_rows_equal_the_committed_rope_rows():
    "Each committed seed's plain row is the committed `rope` row of that seed (main or seeds unit) at every length within a hundredth of the smallest difference between two seeds (trained again by later code: not always bit for bit)."
    rec = json.loads(COMMITTED.read_text())
    recs = load_results([COMMITTED.parent])
    rope = gather("rope", recs)
    plain = {seed: rec["result"]["rows"][f"{X.ZERO_SHOT_PREFIX}rope|seed={seed}"] for seed in rec["settings"]["seeds"]}
    tol = seed_gap(plain) / SAME_MODEL
    assert tol < 1e-3   # seeds differ by a few percent: the bar stays tight
    for seed in rec["settings"]["seeds"]:
        row = rec["result"]["rows"][f"{X.ZERO_SHOT_PREFIX}rope|seed={seed}"]
        mine = {int(L): v for L, v in row["ppl"]["last_k_common"].items()}
        theirs = rope.rows[seed]["ppl"]["last_k_common"]
        rel = max(abs(v / theirs[L] - 1) for L, v in mine.items())
        assert rel < tol and rel == pytest.approx(row["committed"]["max_rel_diff"]), (seed, row["committed"], tol)
    zs = growth(gather(X.ZERO_SHOT_PREFIX + "rope", recs, units=("zero_shot",)), 16 * 64)
    assert zs.keys() == set(rec["settings"]["seeds"]) and all(abs(v / growth(rope, 16 * 64)[n] - 1) < 2 * tol for n, v in zs.items())


def test_window_row_is_the_yardstick(smoke):
    "The window row is the plain model in a sliding window of L keys (chapter 25's yardstick), read on the same targets."
    out, rec = smoke
    S, T = rec["settings"], rec["settings"]["train_len"]
    ctx = X.Context(out=out, budget="smoke", progress=False)
    model, _ = X.train_lm(ctx, S, "rope", S["seeds"][0])   # finished: loaded, not trained again
    model.pe = X.windowed(model.pe, T)
    far = 4 * T
    got = X.perplexity(model, ctx.tokens(S["corpus"], S["split"]), far, protocol="last_k", **S["last_k"], anchor=S["anchor"])
    rows = rec["result"]["rows"]
    assert rows[f"{X.ZERO_SHOT_PREFIX}window|seed={S['seeds'][0]}"]["ppl"]["last_k_common"][str(far)] == pytest.approx(got, rel=1e-6)
    assert got != rows[f"{X.ZERO_SHOT_PREFIX}rope|seed={S['seeds'][0]}"]["ppl"]["last_k_common"][str(far)]
