"""`lengthx reproduce`: every unit end to end at the smoke budget, one schema, provenance, skip, resume, refusals;
the anchored last_k protocol; the reader of older result files."""
import json
import math
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
import torch

from lengthx import cli, results
from lengthx.evaluate import PROTOCOL, Protocol
from lengthx import experiments as X
from lengthx.results import result_seed
from lengthx.cli import main
from lengthx.evaluate import check_protocol_args, last_k_windows, perplexity, window_losses

ROOT = Path(__file__).resolve().parent.parent
PROV_KEYS = {"git_sha", "git_dirty", "git_diff_sha256", "source_sha256", "lengthx", "python", "torch", "device",
             "device_used", "threads", "seed", "command", "wall_seconds", "time"}


def reproduce(out, *args):
    return main(["reproduce", "--budget", "smoke", "--out", str(out), "--quiet", "--device", "cpu", *args])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, worker_id):
    "The whole smoke budget, once per session even under pytest-xdist: the first worker runs it, the others wait and read it."
    root = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out = root / "smoke-shared"
    with FileLock(str(root / "smoke-shared.lock")):
        if not (out / ".complete").exists():
            out.mkdir(exist_ok=True)
            assert reproduce(out, "--allow-dirty") == 0
            (out / ".complete").touch()
    return out


def test_every_unit_writes_one_result_in_the_schema(smoke):
    for unit in X.UNITS:
        path = smoke / f"{unit}_smoke.json"
        rec = json.loads(path.read_text())
        assert set(rec) == set(X.SCHEMA) | {results.CHECKSUM} and rec["unit"] == unit and rec["preset"] == "smoke"
        assert rec["settings"] == json.loads(json.dumps(X.unit_settings(unit, "smoke")))
        assert PROV_KEYS <= set(rec["provenance"]), unit
        p = rec["provenance"]
        assert p["command"].startswith("lengthx reproduce --budget smoke") and p["seed"] == 0 and p["wall_seconds"] >= 0
        assert len(p["source_sha256"]) == 64 and (p["git_dirty"] is not True or len(p["git_diff_sha256"]) == 64)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert not (smoke / "runs" / "smoke" / f"{unit}.partial.json").exists()   # finished: no partial state left
    main_rows = json.loads((smoke / "main_smoke.json").read_text())["result"]["rows"]
    assert set(main_rows) == {f"{s}|seed=0" for s in X.unit_settings("main", "smoke")["specs"]}
    for row in main_rows.values():
        lens = [str(16 * f) for f in (1, 2, 4)]
        assert set(row["ppl"]) == {"last_k", "nonoverlap", "last_k_common"}
        assert all(list(row["ppl"][p]) == lens for p in row["ppl"])
        assert all(isinstance(v, float) and 1 < v < 1000 for p in row["ppl"].values() for v in p.values())
    cot = json.loads((smoke / "cot_smoke.json").read_text())["result"]
    assert set(cot["seeds"]) == {"0", "1"} and all(len(s["acc"]) == 2 for s in cot["summary"].values())
    pos = json.loads((smoke / "position_smoke.json").read_text())["result"]
    assert "kerple_log windowed@16" in pos["nll"] and all(len(v) == 64 for v in pos["nll"].values())


def test_a_rerun_skips_finished_units(smoke, capsys):
    before = {p.name: p.read_bytes() for p in smoke.glob("*.json")}
    assert reproduce(smoke, "--allow-dirty") == 0
    assert {p.name: p.read_bytes() for p in smoke.glob("*.json")} == before
    assert capsys.readouterr().err.count("(same settings), skipped") == 0   # --quiet: nothing said on stderr


def test_only_runs_the_named_units(tmp_path):
    assert reproduce(tmp_path, "--only", "recall,cost", "--allow-dirty") == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["cost_smoke.json", "recall_smoke.json"]
    assert reproduce(tmp_path, "--only", "recall,nonsense") == 2


def test_other_settings_in_the_output_are_refused(tmp_path, capsys):
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 0
    path = tmp_path / "recall_smoke.json"
    rec = results.read_results(path)
    rec["settings"]["steps"] = 99
    results.write_results(path, rec)                                       # a result made with other settings
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "recall (recall_smoke.json: steps: 99 (now 4))" in err and "another --out" in err
    assert json.loads(path.read_text())["settings"]["steps"] == 99          # never overwritten


def test_a_unit_with_other_settings_is_reported_and_the_others_still_run(tmp_path, capsys):
    "The bare command goes on past a file made with other settings, says what differs, and fails at the end naming it."
    path = tmp_path / "main_smoke.json"
    S = X._plain(X.unit_settings("main", "smoke"))
    old = {**S, "specs": S["specs"][:2]}                                     # made before two specs joined main
    results.write_results(path, {"unit": "main", "preset": "smoke", "settings": old, "result": {"rows": {}},
                                 "provenance": {"seed": 0}})
    before = path.read_bytes()
    assert main(["reproduce", "--budget", "smoke", "--out", str(tmp_path), "--device", "cpu", "--allow-dirty",
                 "--only", "main,recall,cot"]) == 2
    err = capsys.readouterr().err
    assert f"main: refused, made with other settings (main_smoke.json: specs: 2 of {len(S['specs'])} present)" in err
    assert "refused 1 unit(s)" in err.splitlines()[-1] and "main (main_smoke.json" in err.splitlines()[-1]
    assert (tmp_path / "recall_smoke.json").exists() and (tmp_path / "cot_smoke.json").exists()   # the others ran
    assert path.read_bytes() == before                                      # the refused file is kept as it was


def test_a_partial_result_is_resumed_and_replaced_not_skipped(tmp_path):
    "A result marked `partial` (tools/snapshot_partial.py) is unfinished: the unit resumes from its partial file and the whole result replaces it."
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 0
    path = tmp_path / "recall_smoke.json"
    whole = results.read_results(path)
    kept = {**whole["result"]["runs"]["nope"], "tag": "kept"}               # the finished item, marked to see it is not remade
    results.write_results(path, {**whole, "result": {"runs": {"nope": kept}, "partial": {"finished": ["nope"], "left": ["rope"]}}})
    results.write_results(tmp_path / "runs" / "smoke" / "recall.partial.json", {"settings": whole["settings"], "items": {"nope": kept}})
    assert X.reproduce(["recall"], "smoke", tmp_path, allow_dirty=True, progress=False) == {"recall": path}
    res = results.read_results(path)["result"]
    assert "partial" not in res and set(res["runs"]) == {"nope", "rope"}    # the whole result replaced the partial one
    assert res["runs"]["nope"]["tag"] == "kept" and res["runs"]["rope"]["acc"] == whole["result"]["runs"]["rope"]["acc"]
    assert not (tmp_path / "runs" / "smoke" / "recall.partial.json").exists()


def test_a_partial_result_without_its_item_file_is_remade_from_the_start_and_says_so(tmp_path, capsys):
    "A partial result whose run folder lost its item file (a fresh checkout): the finished item is recomputed, and the command says so; with the item file it says it resumes from it."
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 0
    path, items = tmp_path / "recall_smoke.json", tmp_path / "runs" / "smoke" / "recall.partial.json"
    whole = results.read_results(path)
    kept = {**whole["result"]["runs"]["nope"], "tag": "kept"}
    for item_file in (True, False):
        results.write_results(path, {**whole, "result": {"runs": {"nope": kept}, "partial": {"finished": ["nope"], "left": ["rope"]}}})
        if item_file: results.write_results(items, {"settings": whole["settings"], "items": {"nope": kept}})
        capsys.readouterr()
        X.reproduce(["recall"], "smoke", tmp_path, allow_dirty=True, progress=True)
        err = capsys.readouterr().err
        res = results.read_results(path)["result"]
        assert "partial" not in res and ("tag" in res["runs"]["nope"]) == item_file
        assert (f"resuming from {items}" in err) == item_file and ("remade from the start" in err) == (not item_file)


def test_a_cpu_budget_estimate_has_no_gpu_times_and_seed_commands_add_their_runs():
    assert "T4" not in X.estimate_table("cpu") and "A100" not in X.estimate_table("cpu")
    base, more = X.estimate_table("colab"), X.estimate_table("colab", seeds={1: ["baselines"], 2: ["seeds", "cot"]})
    n = lambda text: int(next(r for r in text.splitlines() if r.startswith("| **total**")).split("|")[2])
    n_b, n_s = len(X.lm_runs("colab", "baselines", 1)), len(X.lm_runs("colab", "seeds", 2))
    assert f"| baselines --seed 1 | {n_b} of {n_b} |" in more and f"| seeds --seed 2 | {n_s} of {n_s} |" in more
    assert n(more) == n(base) + n_b + n_s and "cot --seed" not in more   # another command's runs are new; cot trains no LM


def test_a_dirty_checkout_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    real = results.provenance
    monkeypatch.setattr(results, "provenance", lambda: {**real(), "git_sha": "0" * 40, "git_dirty": True,
                                                     "git_diff_sha256": "f" * 64})
    assert reproduce(tmp_path, "--only", "recall") == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "--allow-dirty" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.json"))
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 0
    p = json.loads((tmp_path / "recall_smoke.json").read_text())["provenance"]
    assert p["git_dirty"] is True and p["git_diff_sha256"] == "f" * 64


def test_a_clean_checkout_needs_no_flag(tmp_path, monkeypatch):
    real = results.provenance
    monkeypatch.setattr(results, "provenance", lambda: {**real(), "git_sha": "1" * 40, "git_dirty": False, "git_diff_sha256": None})
    assert reproduce(tmp_path, "--only", "recall") == 0
    assert json.loads((tmp_path / "recall_smoke.json").read_text())["provenance"]["git_dirty"] is False


def test_an_interrupted_unit_resumes(tmp_path, monkeypatch, capsys):
    "Killed while training its second model: the rerun keeps the first model's row and resumes the second's training."
    from lengthx import train as T
    real_train_run = X.train_run

    def killed(mcfg, tcfg, run_dir, **kw):
        if mcfg.pe == "rope":          # the second spec: two steps, then Ctrl-C
            T.train(mcfg, tcfg, tokens=kw["tokens"], run_dir=run_dir, progress=False, stop_after=2)
            raise KeyboardInterrupt
        return real_train_run(mcfg, tcfg, run_dir, **kw)

    monkeypatch.setattr(X, "train_run", killed)
    assert reproduce(tmp_path, "--only", "main", "--allow-dirty") == 130
    partial = json.loads((tmp_path / "runs" / "smoke" / "main.partial.json").read_text())
    assert list(partial["items"]) == ["nope|seed=0"] and not (tmp_path / "main_smoke.json").exists()
    monkeypatch.setattr(X, "train_run", real_train_run)
    rows_made = []
    real_row = X.lm_row
    monkeypatch.setattr(X, "lm_row", lambda ctx, S, spec, seed, g: rows_made.append(spec) or real_row(ctx, S, spec, seed, g))
    capsys.readouterr()
    assert reproduce(tmp_path, "--only", "main", "--allow-dirty") == 0
    assert "nope" not in rows_made and rows_made[0] == "rope"                 # the finished row was kept
    assert "resuming from step 2" in capsys.readouterr().err                   # training resumed from its checkpoint
    rows = json.loads((tmp_path / "main_smoke.json").read_text())["result"]["rows"]
    assert rows["nope|seed=0"] == partial["items"]["nope|seed=0"] and len(rows) == 4
    assert not (tmp_path / "runs" / "smoke" / "main.partial.json").exists()


def test_bad_corpus_and_budget_are_one_line_errors(tmp_path, capsys):
    assert reproduce(tmp_path, "--only", "main", "--corpus", "pg-19", "--allow-dirty") == 2
    assert "unknown corpus 'pg-19'" in capsys.readouterr().err
    assert main(["reproduce", "--preset", "laptop", "--out", str(tmp_path)]) == 2   # --preset: the hidden alias
    assert not list(tmp_path.glob("*.json"))


def test_a_directory_corpus(tmp_path):
    d = tmp_path / "texts"
    d.mkdir()
    for i in range(60): (d / f"f{i}.txt").write_text(f"document {i} " * 40)
    toks = X.corpus_split(X.check_corpus(str(d)), "train")
    assert toks.ndim == 1 and len(toks) > 1000


def test_colab_estimate_is_labelled_and_follows_the_flop_model():
    from lengthx.model import GPTConfig, flops_per_token
    text = X.estimate_table("colab")
    assert text.startswith("ESTIMATE") and "assumed" in text
    S = X.unit_settings("main", "colab")
    f = len(S["specs"]) * S["steps"] * S["batch_size"] * 128 * flops_per_token(GPTConfig.preset("small", pe="nope", max_len=128), 128)
    assert math.isclose(X.lm_train_flops("colab"), f)


def test_the_estimate_counts_a_run_two_units_share_once_and_totals():
    text = X.estimate_table("colab")
    union = set().union(*(X.lm_runs("colab", u) for u in X.TRAINING_UNITS))
    assert X.lm_runs("colab", "kerple_params") <= set().union(*(X.lm_runs("colab", u) for u in ("main", "seeds", "more_seeds")))
    assert f"| **total** | {len(union)} |" in text and "| kerple_params | 0 of " in text
    per_run = X.lm_train_flops("colab", "main") / len(X.lm_runs("colab", "main"))
    sched = X.lm_train_flops("colab", "schedule")                                    # 4x the steps: its own folder
    total = per_run * len(union - X.lm_runs("colab", "schedule")) + sched
    assert f"| **total** | {len(union)} | {X.flop_text(total)} |" in text


def test_a_cpu_budget_estimate_prints_readable_units_and_the_measured_times(monkeypatch):
    monkeypatch.chdir(ROOT)
    text = X.estimate_table("cpu")
    rows = [r for r in text.splitlines() if r.startswith("| main |")]
    assert len(rows) == 1 and "0 min" not in rows[0] and "0.0 " not in rows[0] and "TFLOP" in rows[0]
    wall = X.pick(X.load_results(), "main", "cpu")["provenance"]["wall_seconds"]
    assert f"main {X.duration_text(wall)}" in text and "CPU budget" in text


# --- the anchored last_k protocol ------------------------------------------------------------------------------

def _targets(wins, L): return sorted(s + t + 1 for s, f in wins for t in range(f, L))


def test_anchored_last_k_scores_the_same_targets_at_every_length():
    n, k, anchor = 5000, 32, 1024
    ref = _targets(last_k_windows(n, 32, k, 8, anchor=anchor), 32)
    for L in (32, 64, 128, 256, 512, 1024):
        wins = last_k_windows(n, L, k, 8, anchor=anchor)
        assert _targets(wins, L) == ref and all(s >= 0 and s + L + 1 <= n for s, _ in wins)
    assert len(set(ref)) == 8 * k and max(ref) == n - 1
    assert _targets(last_k_windows(n, 32, k, 8), 32) != _targets(last_k_windows(n, 1024, k, 8), 1024)   # unanchored moves
    with pytest.raises(ValueError, match="anchor"): check_protocol_args("last_k", n, 2048, k=k, anchor=1024)
    with pytest.raises(ValueError, match="anchor"): check_protocol_args("nonoverlap", n, 64, anchor=1024)


def test_anchored_perplexity_is_the_mean_over_those_targets():
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (3000,))
    model = torch.nn.Sequential(torch.nn.Embedding(50, 50))        # a bigram model: logits from the current token
    for L in (16, 64):
        wins = last_k_windows(len(tokens), L, 16, 4, anchor=256)
        nll = window_losses(model, tokens, wins, L)[:, L - 16:]
        assert math.isclose(perplexity(model, tokens, L, k=16, n_windows=4, anchor=256), math.exp(nll.double().mean()),
                            rel_tol=1e-9)


def test_cli_protocol_anchors_last_k_at_the_longest_default_length():
    p = PROTOCOL
    assert p.anchored and p.kwargs(64, 64)["anchor"] == 64 * p.max_factor and "anchored at 1024" in p.label(64, 64)
    assert Protocol(anchored=False).kwargs(64, 64)["anchor"] is None
    assert Protocol(protocol="nonoverlap").kwargs(64, 64)["anchor"] is None


# --- reading results ----------------------------------------------------------------------------------------------

def test_every_committed_result_names_a_clean_commit_that_holds_its_code():
    files = sorted(p for p in (ROOT / "nbs" / "results").glob("*.json") if p.name != "chapter_times.json")
    assert {p.name.split("_")[0] for p in files} >= {"main", "seeds", "protocols", "position", "cdape", "che", "recall", "cot", "sweep"}
    for p in files:
        rec = json.loads(p.read_text())
        assert X.is_result(rec) and p.name == f"{rec['unit']}_{X.run_tag(rec['preset'], result_seed(rec))}.json", p.name
        prov = rec["provenance"]
        assert prov["git_dirty"] is False and len(prov["git_sha"]) == 40 and prov["source_sha256"], p.name
        if (ROOT / ".git").exists():   # a clone: the commit is in the history and holds the code that made the file
            r = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{prov['git_sha']}:lengthx/experiments.py"],
                               capture_output=True)
            assert r.returncode == 0, f"{p.name}: commit {prov['git_sha'][:10]} does not hold lengthx/experiments.py"
            assert prov["source_sha256"] == source_hash_at(prov["git_sha"]), f"{p.name}: not made by lengthx/ at {prov['git_sha'][:10]}"


def source_hash_at(sha: str) -> str:
    "package_provenance's SHA-256 of lengthx/*.py, computed from the files of commit `sha` (not from the working tree)."
    from lengthx.train import source_sha256_at
    return source_sha256_at(sha, ROOT)


def test_attest_names_the_commit_whose_source_the_result_was_made_from(tmp_path):
    from lengthx.results import attest, provenance_line
    from lengthx.train import source_sha256
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout
    git("init", "-q"); (tmp_path / "lengthx" / "pe").mkdir(parents=True)
    files = {"a.py": b"x = 1\n", "pe/b.py": b"y = 2\n"}
    for name, data in files.items(): (tmp_path / "lengthx" / name).write_bytes(data)
    (tmp_path / "lengthx" / "notes.txt").write_text("not source")
    git("add", "."); git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = git("rev-parse", "HEAD").strip()
    stale = {"git_sha": "0" * 40, "git_dirty": True, "git_diff_sha256": "ab" * 32}
    rec = {"unit": "che_budget", "preset": "colab", "provenance": {"source_sha256": source_sha256(files), **stale}}
    attest(rec, sha[:7], tmp_path)
    p = rec["provenance"]
    assert p["git_sha"] == sha and p["git_dirty"] is False and p["git_diff_sha256"] is None and p["device_git"] == stale
    assert "attested" in provenance_line(rec) and "clean commit" not in provenance_line(rec)
    other = {"unit": "che_budget", "preset": "colab", "provenance": {"source_sha256": source_sha256({"a.py": b"x = 2\n"})}}
    with pytest.raises(ValueError, match="is not lengthx/"):
        attest(other, sha, tmp_path)


def test_committed_results_are_downloaded_for_a_run_without_a_checkout(tmp_path, monkeypatch):
    "Every file the committed manifest lists is fetched (all seeds and budgets, not only <unit>_cpu.json), and read as in a checkout."
    import io, types, urllib.error, urllib.request
    committed = ROOT / "nbs" / "results"
    served = {p.name: p.read_bytes() for p in committed.iterdir() if p.is_file()}
    def urlopen(url, timeout=None):
        name = url.rsplit("/", 1)[1]
        if name not in served: raise urllib.error.HTTPError(url, 404, "not found", None, None)
        return io.BytesIO(served[name])
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    d = results.committed_results(tmp_path / "cache")
    listed = results.parse_manifest(served[results.MANIFEST].decode())
    assert {"baselines_cpu_seed1.json", "seeds_cpu_seed2.json", "che_budget_colab.json"} <= set(listed)
    assert sorted(p.name for p in d.glob("*.json")) == sorted(listed)
    assert sorted((r["unit"], r["preset"], result_seed(r), r["provenance"]["time"]) for r in X.load_results([d])) == \
        sorted((r["unit"], r["preset"], result_seed(r), r["provenance"]["time"]) for r in X.load_results([committed]))
    assert X.pick(X.load_results([d]), "che_budget", "colab", gpu=True) is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LENGTHX_RESULTS", raising=False)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert results.result_dirs() == [tmp_path / ".cache" / "lengthx" / "results"]
    assert X.pick(X.load_results(), "cot", "cpu")["result"] == results.int_lengths(json.loads(served["cot_cpu.json"])["result"])


def test_a_cached_result_is_refreshed_when_the_manifest_changes(tmp_path, monkeypatch):
    "A cached file that still passes its own checksum is replaced when the committed one differs; one no longer committed is removed; offline, the cache stays."
    import io, urllib.error, urllib.request
    def result(steps):
        results.write_results(tmp_path / "r.json", {"unit": "main", "preset": "cpu", "settings": {"steps": steps}, "result": {},
                                                    "provenance": {"time": f"2026-01-0{steps} 00:00:00"}})
        return (tmp_path / "r.json").read_bytes()
    served = {}
    def serve(**files):
        served.clear(); served.update(files)
        served[results.MANIFEST] = "".join(f"{__import__('hashlib').sha256(b).hexdigest()}  {n}\n" for n, b in files.items()).encode()
    def urlopen(url, timeout=None):
        name = url.rsplit("/", 1)[1]
        if name not in served: raise urllib.error.URLError("offline")
        return io.BytesIO(served[name])
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    cache = tmp_path / "cache"
    serve(**{"main_cpu.json": result(1), "cot_cpu.json": result(2)})
    results.committed_results(cache)
    assert results.read_results(cache / "main_cpu.json")["settings"] == {"steps": 1}
    serve(**{"main_cpu.json": result(3)})                        # a new result committed, cot_cpu.json removed
    results.committed_results(cache)
    assert results.read_results(cache / "main_cpu.json")["settings"] == {"steps": 3}
    assert sorted(p.name for p in cache.glob("*.json")) == ["main_cpu.json"]
    served.clear()                                               # offline: what was fetched stays readable
    results.committed_results(cache)
    assert results.read_results(cache / "main_cpu.json")["settings"] == {"steps": 3}
    serve(**{"main_cpu.json": result(4)}); served["main_cpu.json"] = result(5)   # a file that is not what the manifest says
    results.committed_results(cache)
    assert not (cache / "main_cpu.json").exists()                # never an old or a wrong copy in its place
    served[results.MANIFEST] = b"0" * 64 + b"  ../../escape.json\n"
    results.committed_results(cache)                             # a manifest naming a path outside the cache is refused
    assert not (tmp_path / "escape.json").exists()


def _digit_keyed(obj):
    "Every dict inside `obj` whose keys are all numbers (as str or int)."
    if isinstance(obj, list): return [d for v in obj for d in _digit_keyed(v)]
    if not isinstance(obj, dict): return []
    here = [obj] if obj and all(isinstance(k, int) or (isinstance(k, str) and k.isdigit()) for k in obj) else []
    return here + [d for v in obj.values() for d in _digit_keyed(v)]


def test_the_reader_hands_every_length_as_a_sorted_int():
    on_disk = json.loads((ROOT / "nbs" / "results" / "main_cpu.json").read_text())["result"]
    row = next(iter(on_disk["rows"].values()))
    assert list(row["ppl"]["last_k_common"]) != sorted(row["ppl"]["last_k_common"], key=int)   # the file's order zigzags
    recs = X.load_results([ROOT / "nbs" / "results"])
    tables = [d for r in recs for d in _digit_keyed(r["result"])]
    assert len(tables) > 100
    assert all(all(isinstance(k, int) for k in d) and list(d) == sorted(d) for d in tables)
    main_row = next(iter(X.pick(recs, "main", "cpu")["result"]["rows"].values()))
    assert list(main_row["ppl"]["last_k_common"]) == [64, 128, 256, 512, 1024]
    assert list(main_row["delta_p"]) == [128, 256, 512, 1024]
    assert results.int_lengths({"1024": {"b": {"9": 1, "10": 2}}, "64": [{"2": 0, "1": 0}], "x": 1}) == \
        {"1024": {"b": {9: 1, 10: 2}}, "64": [{1: 0, 2: 0}], "x": 1}        # not all keys numbers: only the inner ones


def test_results_from_another_directory_are_grouped_by_device(smoke, tmp_path, monkeypatch):
    gpu = results.read_results(smoke / "main_smoke.json")
    gpu["provenance"].update(cuda_device="NVIDIA L4", device="cuda:NVIDIA L4", device_used="cuda")
    results.write_results(tmp_path / "main_smoke.json", gpu)
    monkeypatch.setenv("LENGTHX_RESULTS", str(tmp_path))
    monkeypatch.chdir(ROOT)
    recs = X.load_results()
    assert X.pick(recs, "main", "smoke", gpu=True)["provenance"]["cuda_device"] == "NVIDIA L4"
    assert X.pick(recs, "main", "cpu", gpu=False)["provenance"]["git_dirty"] is False
    assert "| smoke | NVIDIA L4 | main |" in X.results_overview(recs)


def test_corpus_option_on_train_eval_and_sweep(tmp_path, capsys):
    d = tmp_path / "texts"
    d.mkdir()
    for i in range(80): (d / f"f{i}.txt").write_text(f"line {i} of a small corpus\n" * 30)
    tiny = ["--pe", "nope", "--train-len", "16", "--steps", "2", "--batch-size", "2", "--quiet"]
    assert main(["train", *tiny, "--corpus", str(d), "--out", str(tmp_path / "run")]) == 0
    assert main(["eval", "--run", str(tmp_path / "run"), "--corpus", str(d), "--max-factor", "2", "--n-windows", "2", "--quiet"]) == 0
    assert main(["train", *tiny, "--out", str(tmp_path / "run")]) == 2          # the stdlib is another run's data: refused
    assert main(["sweep", "--pes", "nope", "--budget", "quick", "--steps", "2", "--train-len", "16", "--max-factor", "2",
                 "--n-windows", "2", "--corpus", str(d), "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    assert json.loads((tmp_path / "sw" / "results.json").read_text())["settings"]["corpus"] == str(d.resolve())
    capsys.readouterr()
    for cmd in (["train", "--out", "x"], ["eval", "--run", "x"], ["sweep"], ["reproduce"]):
        assert main([*cmd, "--corpus", "pg-19"]) == 2
        assert "unknown corpus 'pg-19'" in capsys.readouterr().err


def test_another_seed_writes_its_own_files(tmp_path):
    assert reproduce(tmp_path, "--only", "recall", "--allow-dirty") == 0
    assert reproduce(tmp_path, "--only", "recall", "--seed", "3", "--allow-dirty") == 0
    recs = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(recs) == {"recall_smoke.json", "recall_smoke_seed3.json"}
    assert recs["recall_smoke_seed3.json"]["settings"]["seed"] == 3 and recs["recall_smoke.json"]["settings"]["seed"] == 0


def test_the_sweep_figure_and_table_from_the_committed_sweep(tmp_path):
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sys.path.insert(0, str(ROOT / "tools"))
    import plotcheck
    from lengthx.sweep import growth, plot_sweep, sweep_table
    res = X.pick(X.load_results([ROOT / "nbs" / "results"]), "sweep", "cpu")["result"]
    fig = plot_sweep(res, tmp_path / "sweep.png")
    assert plotcheck.backwards_lines(fig) == []                            # every curve runs forwards in length
    top, bottom = fig.axes[0], fig.axes[-1]                                 # growth first, the levels last
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    assert all(any(l.startswith(s + "  ") for l in labels) for s in res["rows"])   # every PE named in the legend
    assert len({(str(ln.get_color()), ln.get_linestyle(), ln.get_marker()) for ln in top.get_lines()
                if ln.get_label() in labels}) == len(labels)                  # no two curves drawn alike
    ticks = [float(t.get_text()) for t in top.get_yticklabels() if t.get_text()]
    T = res["settings"]["train_len"]
    g = [growth(r, T) for r in res["rows"].values() if growth(r, T) is not None]
    lo, hi = top.get_ylim()
    assert len(ticks) >= 3 and lo <= min(g) and max(g) <= hi and all(lo <= t <= hi for t in ticks)
    assert [t.get_text() for t in bottom.get_yticklabels()] == list(res["rows"])   # the rows' order, not a ranking
    plt.close(fig)
    table = sweep_table(res).splitlines()
    rope = next(l for l in table if l.startswith("| rope |"))
    lo64, hi64 = res["rows"]["rope"]["ppl_interval"][64]
    assert f"[{lo64:.1f}–{hi64:.1f}]" in rope and f"×{growth(res['rows']['rope'], T):.3f}" in rope
    assert max(len(l) for l in table) < 110                                 # fits a terminal


def test_the_sweep_figure_shows_every_point_when_perplexity_falls_with_length(tmp_path):
    "Growth below 1 at the longest length: the panel must still reach ×1 at L and every point between."
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from lengthx.sweep import plot_sweep
    rows = {"nope": {"spec": "nope", "ppl": {"32": 32.17, "64": 31.84, "128": 32.14, "256": 31.79}},
            "alibi": {"spec": "alibi", "ppl": {"32": 28.77, "64": 28.24, "128": 28.26, "256": 28.24}}}
    res = {"settings": {"train_len": 32, "preset": "tiny", "steps": 30, "protocol": "last_k", "k": 32, "n_windows": 4},
           "rows": rows}
    fig = plot_sweep(res, tmp_path / "sweep.png")
    top = fig.axes[0]
    lo, hi = top.get_ylim()
    ys = [y for ln in top.get_lines() if ln.get_label() != "×1: no change" for y in ln.get_ydata()]
    assert len(ys) == 8 and all(lo <= y <= hi for y in ys), (lo, hi, ys)
    plt.close(fig)


def test_pick_chooses_the_base_seed_not_the_newest_file():
    "A result made with --seed 1 is newer than seed 0's but never stands in for it (and is found by seed=1)."
    rec = lambda seed, time: {"unit": "baselines", "preset": "cpu", "settings": {"seed": seed},
                              "provenance": {"time": time, "device": "cpu"}}
    recs = [rec(0, "2026-01-01"), rec(1, "2026-02-01")]
    assert results.pick(recs, "baselines", "cpu")["settings"]["seed"] == 0
    assert results.pick(recs, "baselines", "cpu", seed=1)["settings"]["seed"] == 1
    assert results.pick(recs, "baselines", "cpu", seed=2) is None
    assert results.pick(recs, "baselines", "cpu", seed=None)["settings"]["seed"] == 1   # any seed: the newest
    assert results.result_seed({"settings": {"seeds": [3, 4, 5]}}) == 3 and results.result_seed({"settings": {}}) == 0


def test_a_result_edited_by_hand_is_refused_not_skipped_as_finished(smoke, tmp_path):
    path = tmp_path / "recall_smoke.json"
    shutil.copy(smoke / "recall_smoke.json", path)
    assert X.reproduce(["recall"], "smoke", tmp_path, allow_dirty=True, progress=False) == {"recall": path}   # skipped
    rec = json.loads(path.read_text())
    rec["result"]["runs"]["rope"]["acc"] = {k: 1.0 for k in rec["result"]["runs"]["rope"]["acc"]}
    path.write_text(json.dumps(rec, indent=1))
    with pytest.raises(ValueError, match=r"recall_smoke\.json.*edited by hand"):
        X.reproduce(["recall"], "smoke", tmp_path, allow_dirty=True, progress=False)
    results.reattest(path, note="accuracies set by hand")
    assert X.reproduce(["recall"], "smoke", tmp_path, allow_dirty=True, progress=False) == {"recall": path}


@pytest.mark.parametrize("content", [{"rows": {}}, []])
def test_a_file_that_is_not_a_result_is_refused_before_any_work_never_overwritten(tmp_path, content):
    path = tmp_path / "cost_smoke.json"
    if isinstance(content, dict): results.write_results(path, content)
    else: path.write_text(json.dumps(content))
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"cost_smoke\.json"):
        X.reproduce(["recall", "cost"], "smoke", tmp_path, allow_dirty=True, progress=False)
    assert path.read_bytes() == before and not (tmp_path / "recall_smoke.json").exists()   # refused before recall ran


@pytest.mark.parametrize("damage", ["missing", "gap"])
def test_a_run_whose_metrics_are_missing_or_gappy_is_a_clear_error_not_a_wrong_loss(smoke, tmp_path, damage):
    shutil.copytree(smoke / "runs" / "smoke" / "lm", tmp_path / "runs" / "smoke" / "lm")
    metrics = tmp_path / "runs" / "smoke" / "lm" / "rope-seed0" / "metrics.jsonl"
    if damage == "missing": metrics.unlink()
    else: metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))   # the last step's line lost
    with pytest.raises(ValueError, match=r"rope-seed0/metrics\.jsonl.*final loss is unknown"):
        X.reproduce(["main"], "smoke", tmp_path, allow_dirty=True, progress=False)
    assert not (tmp_path / "main_smoke.json").exists()


def test_a_sweep_whose_metrics_lost_a_line_is_a_clear_error(tmp_path, monkeypatch):
    from lengthx import sweep as SW
    from _tiny import TOKENS
    monkeypatch.setattr(SW, "corpus_split", lambda corpus, split: TOKENS)
    b = SW.Budget("tiny", train_len=16, steps=3, batch_size=2, lr=3e-3, warmup=1)
    run = lambda: SW.run_sweep(["nope"], b, tmp_path, protocol=Protocol(n_windows=2, max_factor=2), progress=False)
    first = run()["rows"]["nope"]["final_train_loss"]
    metrics = tmp_path / "runs" / "nope" / "metrics.jsonl"
    assert json.loads(metrics.read_text().splitlines()[-1])["loss"] == first
    (tmp_path / "results.json").unlink()
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(ValueError, match="lacks 1 record"):
        run()


def test_two_runs_on_different_paths_say_so_in_their_provenance(tmp_path):
    from lengthx.pe import fused
    with fused.kernel_mode("off"):
        X.reproduce(["recall"], "smoke", tmp_path / "eager", allow_dirty=True, progress=False)
    X.reproduce(["recall"], "smoke", tmp_path / "auto", allow_dirty=True, progress=False)
    a, b = (results.read_results(tmp_path / d / "recall_smoke.json")["provenance"]["execution"] for d in ("eager", "auto"))
    assert a["fused_enabled"] is False and b["fused_enabled"] is True and a["torch_threads"] == torch.get_num_threads()
