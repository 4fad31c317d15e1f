"""lengthx.evidence: seeds gathered across files, growth per seed, the paired interval and its verdict, the ledger."""
import math

import pytest

from lengthx import evidence as E

SET = {"train_len": 64, "model": "tiny", "steps": 400, "seed": 0, "seeds": [0], "specs": []}


def rec(unit: str, rows: dict, settings: dict = SET, preset: str = "cpu", gpu: bool = False, file: str = None) -> dict:
    "A result record as load_results hands it: rows {(spec, seed): {length: ppl}}."
    out = {f"{s}|seed={n}": {"spec": s, "seed": n, "ppl": {"last_k_common": dict(v)}} for (s, n), v in rows.items()}
    prov = {"cuda_device": "H100" if gpu else None, "device": "cuda" if gpu else "cpu", "device_used": "cuda" if gpu else "cpu"}
    return {"unit": unit, "preset": preset, "settings": settings, "provenance": prov, "result": {"rows": out},
            "file": file or f"/x/{unit}_{preset}.json"}


def curve(p1: float, p16: float) -> dict:
    return {64: p1, 1024: p16}


def test_gather_merges_seeds_across_files_and_keeps_the_first_unit():
    recs = [rec("seeds", {("a", 1): curve(9, 9), ("a", 0): curve(99, 99)}),
            rec("main", {("a", 0): curve(10, 10)}),
            rec("baselines", {("a", 2): curve(11, 11)}, file="/x/baselines_cpu_seed2.json")]
    s = E.gather("a", recs)
    assert s.seeds == [0, 1, 2] and s.rows[0]["ppl"]["last_k_common"][64] == 10       # seed 0 from main, not from seeds
    assert s.files == {0: "main_cpu.json", 1: "seeds_cpu.json", 2: "baselines_cpu_seed2.json"}
    assert "3 seeds (0, 1, 2)" in s.describe()


def test_gather_leaves_out_files_trained_otherwise_and_other_devices():
    other = {**SET, "steps": 99}
    recs = [rec("main", {("a", 0): curve(10, 10)}), rec("seeds", {("a", 1): curve(9, 9)}, settings=other),
            rec("seeds", {("a", 2): curve(9, 9)}, gpu=True)]
    assert E.gather("a", recs).seeds == [0]
    assert E.gather("a", recs, gpu=True).seeds == [2]


def test_growth_is_taken_within_each_seed():
    recs = [rec("main", {("a", 0): curve(10, 20), ("a", 1): curve(1, 1)})]
    g = E.growth(E.gather("a", recs), 1024)
    assert g == {0: 2.0, 1: 1.0}                    # the ratio of the means would be 21/11
    assert E.level(E.gather("a", recs)) == {0: 10, 1: 1}


def test_paired_interval_is_the_t_interval():
    mean, (lo, hi) = E.paired_interval([1.0, 2.0, 3.0])
    assert mean == 2 and math.isclose(hi - mean, 4.303 / math.sqrt(3)) and math.isclose(mean - lo, hi - mean)
    with pytest.raises(ValueError, match="at least 2"): E.paired_interval([1.0])
    assert E.t975(2) == 4.303 and E.t975(11) == E.t975(10) and E.t975(500) == 1.98


def three_seeds(shift: float, offsets=(0.0, 0.0, 0.0)) -> list:
    rows = {("b", n): curve(10 + n, 12 + n) for n in range(3)}
    rows |= {("a", n): curve(10 + n + shift + o, 12 + n + shift + o) for n, o in enumerate(offsets)}
    return [rec("main", rows)]


def test_compare_self_swap_and_known_difference():
    recs = three_seeds(0.5, (0.05, -0.05, 0.0))
    same = E.compare("a", "a", "level", recs=recs)
    assert same.interval == (0.0, 0.0) and same.verdict == "≈"
    ab, ba = E.compare("a", "b", "level", recs=recs), E.compare("b", "a", "level", recs=recs)
    assert ab.verdict == ">" and ba.verdict == "<" and ab.interval == tuple(-x for x in reversed(ba.interval))
    assert ab.interval[0] < 0.5 < ab.interval[1] and ab.seeds == [0, 1, 2]
    assert "higher than `b`" in ab.sentence() and "over 3 seeds" in ab.sentence()
    noisy = E.compare("a", "b", "level", recs=three_seeds(0.5, (3.0, -3.0, 0.0)))
    assert noisy.verdict == "≈" and noisy.interval[0] < 0 < noisy.interval[1]


def test_a_single_seed_is_shown_never_ranked():
    recs = [rec("main", {("a", 0): curve(10, 10), ("b", 0): curve(50, 50), ("b", 1): curve(50, 50)})]
    c = E.compare("a", "b", "level", recs=recs)
    assert c.n == 1 and c.verdict == "≈" and c.interval is None and "not ranked" in c.sentence()
    none = E.compare("a", "zzz", "level", recs=recs)
    assert none.n == 0 and "no seed of both" in none.why


def test_compare_against_a_constant_and_bad_input():
    recs = three_seeds(0.0)
    c = E.compare("b", 1, "growth", 1024, recs=recs)
    assert c.verdict == ">" and c.seeds == [0, 1, 2] and c.b == "1"
    with pytest.raises(ValueError, match="quantity"): E.compare("a", "b", "speed", recs=recs)
    with pytest.raises(ValueError, match="multiple"): E.compare("a", "b", "level", 100, recs=recs)


def test_yardstick_named_only_when_committed():
    recs = [rec("main", {("kerple_log", 0): curve(10, 10), ("window:w=64:kerple_log", 0): curve(10, 9.9),
                         ("alibi", 0): curve(10, 10)})]
    assert E.yardstick("kerple_log", recs)[0] == "window:w=64:kerple_log"
    name, why = E.yardstick("alibi", recs)
    assert name is None and "no window yardstick" in why


EFF = (-0.2, -0.1)            # a paper's effect range in ln(a/b) per byte


@pytest.mark.parametrize("iv, expect, want", [((-0.3, -0.15), "<", "reproduced"), ((-0.5, -0.3), "<", "reproduced"),
                                              ((-0.05, -0.01), "<", "direction only"), ((-0.05, 0.05), "<", "not reproduced"),
                                              ((-0.15, 0.05), "<", "unresolved"), ((0.1, 0.3), "<", "opposite"),
                                              (None, "<", "unresolved"), ((-0.1, 0.2), "≤", "unresolved"),
                                              ((0.01, 0.2), "≤", "opposite")])
def test_judge_one_rule_for_both_sides(iv, expect, want):
    assert E.judge(iv, expect, EFF if expect == "<" else None, "why")[0] == want


def test_judge_sizes_the_reproduced_side_too():
    # the old rule called any interval on the paper's side 'reproduced'; one far smaller than the paper's effect is not
    assert E.judge((-0.02, -0.01), "<", (-0.5, -0.3))[0] == "direction only"
    assert E.judge((-0.02, -0.01), "<", None)[0] == "reproduced"          # no number: a direction claim


def test_effect_is_the_papers_log_ratio_per_byte():
    c = E.Claim("P", "T", "a below b", "a", "b", "level", 16, "<", 5.0, 10.0, "")
    lo, hi = c.effect()
    assert math.isclose(lo, math.log(0.5) / 3.0) and math.isclose(hi, math.log(0.5) / 4.5)
    assert c.effect((2.0, 2.0)) == (math.log(0.5) / 2, math.log(0.5) / 2)
    assert E.Claim("P", "T", "c", "a", "b", "cost", 1, ">", 2.0, 1.0, "").effect() is None


def scaled(at1: float, at16: float) -> list:
    "a = b * factor at L and at 16L, three seeds of different levels."
    rows = {("b", n): curve(10 + 3 * n, 12 + 5 * n) for n in range(3)}
    rows |= {("a", n): curve(at1 * (10 + 3 * n), at16 * (12 + 5 * n)) for n in range(3)}
    return [rec("main", rows)]


def test_level_interval_is_on_per_seed_log_ratios():
    claim = E.Claim("P", "T", "a below b", "a", "b", "level", 16, "<", 0.9, 1.0, "")
    row = E.ledger(scaled(1.0, 0.9), [claim])[0]
    assert all(math.isclose(x, math.log(0.9)) for x in row.interval)      # old: paired mean difference / mean(b)
    assert row.verdict == "reproduced" and "P(L)" in row.book


def test_a_gap_already_there_at_L_is_fit_only():
    claim = E.Claim("P", "T", "a below b", "a", "b", "level", 16, "<", 0.9, 1.0, "")
    row = E.ledger(scaled(0.9, 0.9), [claim])[0]
    assert row.verdict == "reproduced in fit only" and "already there at L" in row.why


def test_growth_below_one_is_read_against_the_yardstick():
    claim = E.Claim("P", "T", "a extrapolates", "a", 1.0, "growth", 16, "<", 0.9, 1.0, "", yardstick=True)
    rows = {("a", n): curve(10 + n, 9 + n) for n in range(3)} | {("window:w=64:a", 0): curve(10, 9.5)}
    row = E.ledger([rec("main", rows)], [claim])[0]
    assert row.verdict == "unresolved" and row.why.startswith("yardstick has one seed") and "×0.950" in row.why
    rows |= {("window:w=64:a", n): curve(10 + n, 9 + n) for n in (1, 2)} | {("window:w=64:a", 0): curve(10, 9)}
    assert E.ledger([rec("main", rows)], [claim])[0].verdict == "unresolved"     # same growth as the window: 0 in the interval
    rows |= {("window:w=64:a", n): curve(10 + n, 10 + n + 0.01 * n) for n in range(3)}
    row = E.ledger([rec("main", rows)], [claim])[0]
    assert row.verdict == "reproduced" and "windowed model" in row.why


def che(ind: float) -> dict:
    run = lambda: {"acc": {"41": 0.5}, "ind": ind, "chance": 0.5, "log": [{"loss": 0.693}]}
    return {"unit": "che", "preset": "cpu", "settings": {"seed": 0}, "provenance": {"device": "cpu"},
            "result": {"runs": {"even_pairs|a": run(), "even_pairs|b": run()}}, "file": "/x/che_cpu.json"}


def test_che_models_that_did_not_learn_are_not_learned():
    claim = E.Claim("P", "T", "a above b", "a", "b", "che", 1, ">", 99.0, 57.0, "")
    assert E.ledger([che(0.52)], [claim])[0].verdict == "not learned"
    assert E.ledger([che(0.95)], [claim])[0].verdict == "unresolved"


def cost(a: tuple, b: tuple) -> dict:
    step = lambda pe, t: {"pe": pe, "seconds": t[1], "min_seconds": t[0], "max_seconds": t[2]}
    return {"unit": "cost", "preset": "cpu", "settings": {}, "provenance": {"device": "cpu"}, "file": "/x/cost_cpu.json",
            "result": {"model": {"preset": "small", "length": 512, "train": [step("a", a), step("b", b)]}}}


def test_cost_is_judged_on_order_not_on_the_papers_ratio():
    claim = E.Claim("P", "T", "a slower", "a", "b", "cost", 1, ">", 1.18, 1.0, "")
    assert E.ledger([cost((1.5, 1.6, 1.7), (1.0, 1.05, 1.1))], [claim])[0].verdict == "reproduced"   # 1.5×, not 1.18×
    assert E.ledger([cost((0.8, 0.85, 0.9), (1.0, 1.05, 1.1))], [claim])[0].verdict == "opposite"
    assert E.ledger([cost((1.0, 1.05, 1.1), (1.0, 1.05, 1.1))], [claim])[0].verdict == "unresolved"


def test_ledger_on_the_committed_results():
    rows = E.ledger()
    assert len(rows) >= 12 and len({r.paper for r in rows}) >= 4
    for r in rows:
        assert r["verdict"] in E.VERDICTS and r["paper"] and r["claim"] and r["why"] and isinstance(r["seeds"], list)
        if len(r.seeds) == 1: assert r.verdict in ("unresolved", "not learned")
        if r.verdict in ("reproduced", "opposite", "not reproduced", "direction only") and "time" not in r.metric:
            assert len(r.seeds) >= 2
    assert all(r.gpu == "—" for r in rows) == (not E.gpu_presets(E.load_results()))


def test_ledger_reads_a_gpu_column_when_a_gpu_result_is_present():
    claim = E.Claim("P", "T", "a below b", "a", "b", "level", 16, "<", 1.0, 2.0, "1 vs 2")
    cpu = three_seeds(-1.0)
    gpu = [rec("main", {("a", n): curve(6, 5 + n * 0.01) for n in range(3)} | {("b", n): curve(6, 6) for n in range(3)},
               preset="colab", gpu=True)]
    assert E.ledger(cpu, [claim])[0].gpu == "—"
    row = E.ledger(cpu + gpu, [claim])[0]
    assert row.verdict == "reproduced in fit only" and row.gpu.startswith("reproduced (colab, 3 seeds)")   # CPU: the gap is there at L


def test_reads_line_names_each_file_with_its_payload_hash(tmp_path):
    from lengthx.results import reattest, write_results
    f = tmp_path / "main_cpu.json"
    write_results(f, {"unit": "main", "result": {"x": 1.0}, "provenance": {"time": "t"}})
    line = E.reads_line(f)
    assert line == f"{E.READS_PREFIX} main_cpu.json (payload sha256 {E.payload_sha256(f)[:16]})"
    reattest(f)                                                   # metadata only: the payload hash stays
    assert E.reads_line(f) == line
    write_results(f, {"unit": "main", "result": {"x": 1.01}, "provenance": {"time": "t"}})
    assert E.reads_line(f) != line                                # a number changed: the hash changes
    with pytest.raises(ValueError, match="at least one"): E.reads()
    with pytest.raises(ValueError, match="no result file"): E.reads_line("no_such_result.json")


def test_a_length_not_measured_is_named_and_gap_reads_the_interval():
    recs = three_seeds(0.5, (0.05, -0.05, 0.0))
    c = E.compare("a", "b", "level", 128, recs=recs)            # only 64 and 1024 are measured
    assert c.n == 0 and "none measured at 128 tokens" in c.why and c.gap() == c.why
    ab = E.compare("a", "b", "level", recs=recs)
    lo, hi = ab.interval
    assert ab.gap() == f"paired difference +0.50, 95% interval [{lo:+.2f}, {hi:+.2f}] over 3 seeds"
    assert E.compare("a", "a", "growth", 1024, recs=recs).gap().startswith("paired difference 0.000, 95% interval [0.000, 0.000]")


def test_units_keep_the_longer_schedule_apart_and_schedule_table_pairs_the_same_seeds():
    longer = {**SET, "steps": 1600, "specs": ["a"]}
    short = [rec("main", {("a", n): curve(10, 10 * (1 + 0.1 * n)) for n in range(5)})]        # ln g spread over 5 seeds
    lng = [rec("schedule", {("a", n): curve(10, 10 * (1.05 + 0.01 * n)) for n in range(3)}, settings=longer)]
    recs = short + lng
    assert E.gather("a", recs).seeds == [0, 1, 2, 3, 4]                                        # the schedule is not a seed of main
    assert E.gather("a", recs, units=E.SCHEDULE_UNITS).seeds == [0, 1, 2]
    assert E.setup_steps(recs) == 400 and E.setup_steps(recs, units=E.SCHEDULE_UNITS) == 1600
    (row,) = E.schedule_table(recs)
    assert row["seeds"] == [0, 1, 2] and row["short"]["seeds"] == [0, 1, 2]                  # seeds 3, 4 left out of the short side
    want = lambda g0, k: E._sd([math.log(g0 + k * n) for n in range(3)])
    assert math.isclose(row["short"]["sd_log"], want(1, 0.1)) and math.isclose(row["long"]["sd_log"], want(1.05, 0.01))
    assert math.isclose(row["ratio"], want(1.05, 0.01) / want(1, 0.1)) and row["ratio"] < 0.11
    c = E.compare("a", 1, "growth", 1024, recs=recs, units=E.SCHEDULE_UNITS)
    assert c.seeds == [0, 1, 2] and c.verdict == ">"
    assert E.schedule_table(short) == []


def test_fit_only_runs_the_same_way_for_the_other_side():
    # the paper's own gap is there at L too: a level claim (with no numbers at L, a gap on the other side is read on growth)
    claim = E.Claim("P", "T", "a below b", "a", "b", "level", 16, "<", 0.9, 1.0, "", paper_at_L=(0.9, 1.0))
    row = E.ledger(scaled(1.1, 1.1), [claim])[0]                      # a above b already at L, by the same factor at 16x
    assert row.verdict == "opposite in fit only" and "already there at L" in row.why
    grows = E.ledger(scaled(1.0, 1.3), [claim])[0]                    # a above b only at 16x: it grew there
    assert grows.verdict == "opposite"
