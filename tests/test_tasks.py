"""Chomsky-hierarchy tasks, associative recall and chain-of-thought arithmetic: generators vs solvers, known answers, the runner."""
import json
import random

import pytest
import torch

from lengthx.recall import (COT_MOD, Recall, cot_batch, cot_chain, random_expression, reduce_step,
                            COT_ID)
from lengthx.tasks import (CHEConfig, che_spec, che_table, che_tasks, encoder_batch, evaluate_mod,
                           eval_che, run_che, run_che_many, train_che)
from lengthx.cli import main as cli_main


def tasks_main(argv):
    return cli_main(["tasks", *argv])

TASKS = che_tasks()


def test_fifteen_tasks_with_levels_and_chance():
    assert len(TASKS) == 15
    levels = {t.level for t in TASKS.values()}
    assert levels == {"R", "DCF", "CS"}
    assert sum(t.level == "R" for t in TASKS.values()) == 4 and sum(t.level == "DCF" for t in TASKS.values()) == 4
    five_class = {"modular_arithmetic", "cycle_navigation", "modular_arithmetic_brackets", "solve_equation", "bucket_sort"}
    for name, t in TASKS.items():
        assert t.chance == (0.2 if name in five_class else 0.5)
        assert t.vocab_size >= len(t.symbols) + 1 and t.vocab_size >= len(t.classes)


@pytest.mark.parametrize("name", list(TASKS))
def test_generator_matches_solver(name):
    t = TASKS[name]
    g = torch.Generator().manual_seed(123)
    rng = random.Random(name)
    for _ in range(12):
        L = rng.randint(t.min_length, 60)
        x, y = t.sample(25, L, g)
        assert x.dtype == torch.long and y.dtype == torch.long
        assert y.shape == (25, t.output_length(L))
        assert x.shape[1] == (L if name != "modular_arithmetic" else L - (L % 2 == 0))
        for xi, yi in zip(x.tolist(), y.tolist()):
            assert t.solve(xi) == yi


@pytest.mark.parametrize("name", list(TASKS))
def test_seeded_sampling_is_deterministic(name):
    t = TASKS[name]
    a = t.sample(6, 17, torch.Generator().manual_seed(4))
    b = t.sample(6, 17, torch.Generator().manual_seed(4))
    c = t.sample(6, 17, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize("name,text,out", [
    ("even_pairs", "abba", "even"), ("even_pairs", "abbb", "odd"),
    ("parity_check", "bbab", "odd"),
    ("modular_arithmetic", "3*4-2", "0"), ("modular_arithmetic", "2-3", "4"),
    ("cycle_navigation", ["-1", "-1", "+1"], "4"),
    ("stack_manipulation", "b PUSH_a PUSH_a POP", "a b END a a"),
    ("reverse_string", "abb", "bba"),
    ("modular_arithmetic_brackets", "(4*(3+(-1)))", "3"),
    ("solve_equation", "((1+x)-2)=0", "1"),
    ("duplicate_string", "ba", "baba"),
    ("missing_duplicate_string", "011_", "1"),
    ("odds_first", "abab", "aabb"),
    ("binary_addition", "1+111", "0 0 0 1 END 0"),        # 1 + 7 = 8
    ("binary_multiplication", "11*101", "1 1 1 1 END 0"),  # 3 * 5 = 15
    ("compute_sqrt", "110001", "111"),                     # 49 -> 7
    ("bucket_sort", "30241", "01234"),
])
def test_known_answers(name, text, out):
    t = TASKS[name]
    assert t.decode(t.solve(t.encode(text)), output=True) == out


def test_arithmetic_evaluator():
    assert evaluate_mod(list("2+3*4")) == 4                 # 14 mod 5
    assert evaluate_mod(list("-(2-4)*3")) == 1             # 6 mod 5
    assert evaluate_mod(list("1/3"), 7) == 5               # 3 * 5 = 15 = 1 mod 7
    assert evaluate_mod(list("6/3-2"), 7) == 0
    with pytest.raises(ZeroDivisionError):
        evaluate_mod(list("1/(2-2)"), 7)
    with pytest.raises(ValueError):
        evaluate_mod(list("1+x"))


def test_too_short_lengths_are_rejected():
    with pytest.raises(ValueError, match="needs length >= 3"):
        TASKS["binary_addition"].sample(2, 2)


def test_accuracy_mask_stops_at_end():
    t = TASKS["binary_addition"]
    targets = torch.tensor([[1, 0, 2, 0, 0], [2, 0, 0, 0, 0]])
    assert t.accuracy_mask(targets).tolist() == [[True, True, True, False, False], [True, False, False, False, False]]
    assert TASKS["reverse_string"].accuracy_mask(targets).all()


def test_encoder_batch_appends_empty_tokens():
    t = TASKS["duplicate_string"]
    x, y = t.sample(3, 5, torch.Generator().manual_seed(0))
    xe, ye = encoder_batch(t, x, y)
    assert xe.shape == ye.shape == (3, 15)
    assert (xe[:, 5:] == t.empty_id).all() and torch.equal(xe[:, :5], x)
    assert (ye[:, :5] == -100).all() and torch.equal(ye[:, 5:], y)


def test_che_spec():
    assert che_spec("rope") == "randomized:max_len=2048:eval_random=true:rope"
    assert che_spec("dape:kerple_log", max_pos=512) == "randomized:max_len=512:eval_random=true:dape:kerple_log"
    assert che_spec("nope") == "nope" and che_spec("cdape:nope") == "cdape:nope"
    assert che_spec("rope", randomized=False) == "rope"


def test_che_spec_leaves_what_the_randomized_wrapper_refuses_plain():
    "Encodings whose output ignores token positions (CoPE, stick-breaking) and PaTH run plain: their spec must build."
    from lengthx.model import GPTConfig, check_model_spec
    for pe in ("cope", "stickbreak", "path"):
        assert che_spec(pe) == pe
        check_model_spec(GPTConfig.preset("tiny", pe=che_spec(pe), max_len=64))
    assert che_spec("fire") == "randomized:max_len=2048:eval_random=true:fire"   # one that reads positions is still wrapped


def test_test_lens_parse_and_print_back():
    "`--test-lens` accepts ranges and lists, refuses bad ones, and the recorded command prints them back the same."
    import argparse
    from lengthx.cli import _fmt_lens, _lengths
    assert _lengths("41:45") == [41, 42, 43, 44, 45]
    assert _lengths("41:500:100") == [41, 141, 241, 341, 441]
    assert _lengths("7,9") == [7, 9]
    for lens in ([41, 42, 43, 44, 45], [41, 141, 241, 341, 441], [7, 9], [5]):
        assert _lengths(_fmt_lens(lens)) == lens
    for bad in ("0:3", "a:b", "1:2:3:4", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _lengths(bad)


def test_randomized_positions_only_in_randomized_runs():
    cfg = CHEConfig(task="bucket_sort", pe="alibi", n_layer=1, n_head=2, d_model=16, steps=2, batch_size=4,
                    test_lens=(41,), max_pos=256)
    assert cfg.model_config().pe.startswith("randomized:max_len=256") and not cfg.model_config().causal
    plain = CHEConfig(task="bucket_sort", pe="learned", randomized=False, test_lens=(41, 100))
    assert plain.model_config().max_len == 200               # a learned row for every test position


def test_bad_task_and_pe_fail_before_training(tmp_path, capsys):
    assert tasks_main(["--task", "reverse_strin", "--out", str(tmp_path / "r.json")]) == 2
    assert "unknown task 'reverse_strin'" in capsys.readouterr().err
    assert tasks_main(["--task", "even_pairs", "--pe", "alibii", "--out", str(tmp_path / "r.json")]) == 2
    assert "alibii" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_tiny_run_writes_json(tmp_path):
    out = tmp_path / "che.json"
    argv = ["--task", "even_pairs,bucket_sort", "--pe", "nope,alibi", "--steps", "3", "--batch-size", "4",
            "--layers", "1", "--heads", "2", "--width", "16", "--test-lens", "41,45", "--eval-batch", "4",
            "--max-pos", "128", "--out", str(out), "--quiet"]
    assert tasks_main(argv) == 0
    res = json.loads(out.read_text())
    assert res["command"].startswith("lengthx tasks --task even_pairs,bucket_sort --pe nope,alibi --steps 3")
    assert "git_sha" in res["provenance"] and res["wall_seconds"] >= 0 and res["settings"]["seed"] == 0
    assert set(res["runs"]) == {"even_pairs|nope", "even_pairs|alibi", "bucket_sort|nope", "bucket_sort|alibi"}
    r = res["runs"]["bucket_sort|alibi"]
    assert set(r["acc"]) == {"41", "45"} and 0 <= r["score"] <= 1 and r["spec"].startswith("randomized:")
    assert set(r["ind_acc"]) == {str(L) for L in CHEConfig(task="bucket_sort", pe="alibi").in_dist_lens} and 0 <= r["ind"] <= 1
    assert "| CS | bucket_sort | 20 |" in che_table(res)
    assert tasks_main(argv) == 0                               # rerun: everything is already there
    assert json.loads(out.read_text())["runs"] == res["runs"]


def test_eval_is_the_same_set_for_every_model():
    cfg = CHEConfig(task="bucket_sort", pe="nope", n_layer=1, n_head=2, d_model=16, steps=1, batch_size=2,
                    test_lens=(41,), eval_batch=8)
    m, _ = train_che(cfg)
    assert eval_che(m, cfg) == eval_che(m, cfg)


def test_recall_generator_matches_solver():
    task = Recall(n_keys=32, n_values=8)
    g = torch.Generator().manual_seed(0)
    for P, Q in [(1, 1), (8, 4), (32, 16)]:
        x, y = task.sample(50, P, Q, g)
        assert x.shape == (50, 2 * P + 2 * Q - 1)
        for xi, yi in zip(x.tolist(), y.tolist()):
            assert task.solve(xi) == yi
    with pytest.raises(ValueError):
        task.sample(2, 40, 4)                                   # more pairs than keys


def test_cot_chain_invariants():
    rng = random.Random(1)
    for n in (1, 3, 6):
        for _ in range(100):
            e = random_expression(rng, n)
            chain = cot_chain(e)
            v = evaluate_mod(e, COT_MOD)
            assert len(chain) == n + 1 and all(evaluate_mod(s, COT_MOD) == v for s in chain)
    assert reduce_step("2 * ( 3 - 1 )".split()) == "2 * 2".split()
    assert reduce_step("1 + 2 * 3".split()) == "1 + 6".split()
    assert reduce_step("1 - 2 + 3".split()) == "6 + 3".split()                # 1 - 2 = -1 = 6 mod 7
    with pytest.raises(ValueError):
        reduce_step(["4"])


def test_cot_batch_scores_only_the_chain():
    x, y = cot_batch(3, 2, torch.Generator().manual_seed(0))
    for xi, yi in zip(x.tolist(), y.tolist()):
        first_eq = xi.index(COT_ID["="])
        assert all(t == -100 for t in yi[:first_eq])          # the prompt e0 is not predicted
        assert yi[first_eq] != -100                           # the first step is
        assert COT_ID["$"] in [t for t in yi if t != -100]     # the end of the chain is


def test_table_shows_scores_only_for_tasks_learned_in_distribution():
    "A run below LEARNED at the training lengths shows '–' in the score table and its accuracy in the 'ind' table."
    from lengthx.tasks import LEARNED, learned
    run = lambda pe, ind: {"task": "bucket_sort", "pe": pe, "score": 0.5, "ind": ind}
    res = {"runs": {"a": run("rope", LEARNED), "b": run("alibi", LEARNED - 0.01), "c": {**run("nope", 0.2), "ind": None}}}
    del res["runs"]["c"]["ind"]                                  # a run stored before the check existed
    row = che_table(res).splitlines()[-1]
    assert row == "| CS | bucket_sort | 20 | 50.0 | – | 50.0 |", row
    assert che_table(res, what="ind").splitlines()[-1] == f"| CS | bucket_sort | 20 | {100 * LEARNED:.1f} | {100 * (LEARNED - 0.01):.1f} |  |"
    assert learned(res["runs"]["a"]) and learned(res["runs"]["b"]) is False and learned(res["runs"]["c"]) is None
    with pytest.raises(ValueError, match="what"): che_table(res, what="acc")


def test_in_distribution_lengths_lie_in_the_training_range():
    cfg = CHEConfig(task="reverse_string", pe="rope", train_max_len=40)
    assert cfg.in_dist_lens == (10, 20, 30, 40)
    assert CHEConfig(task="reverse_string", pe="rope", ind_lens=(7, 9)).in_dist_lens == (7, 9)


def test_table_shows_a_score_only_where_the_task_was_learned_in_distribution():
    "A run below LEARNED at its training lengths reads '–' (its test accuracy says nothing about extrapolation); a learned run shows its score."
    from lengthx.tasks import LEARNED
    run = lambda pe, ind: {"task": "bucket_sort", "pe": pe, "score": 0.5, "chance": 0.2, "acc": {"41": 0.9}, "ind": ind}
    res = {"runs": {"a": run("rope", LEARNED), "b": run("alibi", LEARNED - 0.01)}}
    assert che_table(res).splitlines()[-1] == "| CS | bucket_sort | 20 | 50.0 | – |"
    assert che_table(res, what="ind").splitlines()[-1] == f"| CS | bucket_sort | 20 | {100 * LEARNED:.1f} | {100 * (LEARNED - 0.01):.1f} |"


TINY_CHE = dict(task="bucket_sort", pe="rope", n_layer=1, n_head=2, d_model=16, batch_size=4, train_max_len=10,
                test_lens=(11,), eval_batch=4, max_pos=64)


def test_learning_curve_has_a_point_every_check_and_at_the_end():
    r = run_che(CHEConfig(**TINY_CHE, steps=7, warmup=1, check_every=3))
    assert [p["step"] for p in r["curve"]] == [3, 6, 7] and r["steps_done"] == 7
    assert all(0 <= p["ind"] <= 1 for p in r["curve"])
    assert r["curve"][-1]["ind"] == pytest.approx(r["ind"], abs=5e-5)   # the last point is the run's own check (rounded to 4 places)
    assert "curve" not in run_che(CHEConfig(**TINY_CHE, steps=2, warmup=1))


def test_time_limit_stops_training_and_says_so():
    r = run_che(CHEConfig(**TINY_CHE, steps=10_000, warmup=1, check_every=5, max_seconds=1e-9))
    assert r["steps_done"] == 1 and r["log"][-1]["stopped"] and [p["step"] for p in r["curve"]] == [1]


def test_worker_processes_give_the_sequential_runs():
    cfgs = {t: CHEConfig(**{**TINY_CHE, "task": t}, steps=3, warmup=1) for t in ("bucket_sort", "even_pairs")}
    seen = []
    par = run_che_many(cfgs, workers=2, done=lambda k, r: seen.append(k))
    seq = run_che_many(cfgs, workers=1)
    assert list(par) == list(cfgs) and sorted(seen) == sorted(cfgs)       # the configs' order, every run reported once
    for k in cfgs:
        assert par[k]["acc"] == seq[k]["acc"] and par[k]["ind"] == seq[k]["ind"]
        assert [e["loss"] for e in par[k]["log"]] == pytest.approx([e["loss"] for e in seq[k]["log"]], rel=1e-5)



# --- the grid's results file is checked like any result; test lengths are checked before training ---

import os
import subprocess
import sys
import time

import lengthx.tasks as tasks_mod
from lengthx.tasks import check_test_lens, run_che_grid

TINY = dict(task="even_pairs", pe="nope", steps=2, batch_size=2, n_layer=1, n_head=2, d_model=16, test_lens=(41,),
            eval_batch=2, max_pos=128)


def _no_training(monkeypatch):
    "Make any training an error: a check that must come first is proven to come first."
    def boom(*a, **k): raise AssertionError("training started")
    monkeypatch.setattr(tasks_mod, "run_che_many", boom)


def test_fifo_results_file_is_refused_not_read(tmp_path):
    fifo = tmp_path / "che.json"
    os.mkfifo(fifo)
    code = ("from lengthx.tasks import CHEConfig, run_che_grid\n"
            f"cfg = CHEConfig(**{TINY!r})\n"
            "try: run_che_grid(['even_pairs'], ['nope'], cfg, " + repr(str(fifo)) + ", progress=False)\n"
            "except ValueError as e: print('REFUSED', e)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try: r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, env=env)
    except subprocess.TimeoutExpired: pytest.fail("run_che_grid hangs on a FIFO results file")
    assert "REFUSED" in r.stdout and "FIFO" in r.stdout and str(fifo) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("content, says", [("[]", "JSON list"), ('{"runs": {\n', "not JSON")])
def test_damaged_results_file_is_a_one_line_error_naming_it(tmp_path, monkeypatch, content, says):
    _no_training(monkeypatch)
    path = tmp_path / "che.json"
    path.write_text(content)
    with pytest.raises(ValueError) as e:
        run_che_grid(["even_pairs"], ["nope"], CHEConfig(**TINY), path, progress=False)
    msg = str(e.value)
    assert str(path) in msg and says in msg and "\n" not in msg
    assert path.read_text() == content                      # refused, never overwritten


def test_results_file_is_checksummed_and_an_edit_is_refused(tmp_path):
    path = tmp_path / "che.json"
    res = run_che_grid(["even_pairs"], ["nope"], CHEConfig(**TINY), path, progress=False)
    obj = json.loads(path.read_text())
    assert "content_sha256" in obj and obj["runs"] == json.loads(json.dumps(res["runs"]))
    obj["runs"]["even_pairs|nope"]["score"] = 1.0            # a hand edit
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="edited by hand"):
        run_che_grid(["even_pairs"], ["nope"], CHEConfig(**TINY), path, progress=False)


def test_test_length_past_the_randomized_positions_is_refused_before_training(tmp_path, monkeypatch, capsys):
    _no_training(monkeypatch)
    cfg = CHEConfig(**{**TINY, "pe": "rope", "test_lens": (41, 10_000_000)})
    with pytest.raises(ValueError, match="test length 10000000 .* does not fit in 128 randomized positions"):
        check_test_lens(cfg)
    with pytest.raises(ValueError, match="randomized positions"):
        run_che_grid(["even_pairs"], ["rope"], cfg, tmp_path / "che.json", progress=False)
    t0 = time.time()
    assert tasks_main(["--task", "parity_check", "--pe", "rope", "--test-lens", "10000000", "--quiet",
                       "--out", str(tmp_path / "r.json")]) == 2
    assert time.time() - t0 < 10
    assert "test length 10000000" in capsys.readouterr().err and not (tmp_path / "r.json").exists()


def test_test_length_over_the_memory_budget_is_refused_before_training(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    monkeypatch.setenv("LENGTHX_MEM_BUDGET", "4MiB")
    cfg = CHEConfig(**{**TINY, "randomized": False, "test_lens": (41, 100_000)})
    with pytest.raises(ValueError, match="test length 100000 needs an estimated .* more than the memory budget of 4.0 MiB"):
        run_che_grid(["even_pairs"], ["nope"], cfg, tmp_path / "che.json", progress=False)
    check_test_lens(CHEConfig(**{**TINY, "randomized": False, "test_lens": (41,)}))   # a short one fits
