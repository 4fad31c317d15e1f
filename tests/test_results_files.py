"""Result files are read like checkpoints: only regular files (a FIFO or /dev/zero never read), a size cap, every
JSON error naming its file, and a content checksum written with each result and verified on read — an edit by hand
is refused unless re-attested. The committed results all carry it. The execution path is part of the provenance."""
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lengthx import results as R
from lengthx.pe import fused

ROOT = Path(__file__).resolve().parent.parent
RESULT = {"unit": "main", "preset": "cpu", "settings": {"steps": 4}, "result": {"rows": {"rope": {"ppl": {64: 9.5, 128: 11.0}}}},
          "provenance": {"time": "2026-01-01 00:00:00", "git_sha": "a" * 40, "git_dirty": False}}


def _read_in_child(*paths: Path) -> list[str]:
    "read_results(path) for each path in one child process limited to 2 GB of memory and 60 s: a hang or an endless read shows as such."
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "from lengthx.results import read_results\n"
            "for p in sys.argv[1:]:\n"
            "    try: read_results(p); print('read', flush=True)\n"
            "    except BaseException as e: print(type(e).__name__, e, flush=True)")
    try:
        r = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired as e:
        return (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "").splitlines() + ["hung"]
    return r.stdout.splitlines() or [r.stderr.strip()[-300:]]


def test_a_fifo_or_a_device_is_refused_never_read(tmp_path):
    os.mkfifo(tmp_path / "results.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    out = _read_in_child(tmp_path / "results.json", tmp_path / "zero.json")
    assert len(out) == 2, out
    for line, name, kind in zip(out, ("results.json", "zero.json"), ("a FIFO", "a character device")):
        assert line.startswith("ValueError") and kind in line and name in line, line


def test_a_file_over_the_cap_is_refused(tmp_path, monkeypatch):
    R.write_results(tmp_path / "big.json", {**RESULT, "pad": "x" * 400})
    monkeypatch.setattr(R, "MAX_RESULTS_BYTES", 300)
    with pytest.raises(ValueError, match=r"big\.json.*larger than 300 bytes"):
        R.read_results(tmp_path / "big.json")


@pytest.mark.parametrize("text, why", [("{\n", "not JSON"), ("[]", "JSON list"), ('"x"', "JSON str"), (b"\xff\xfe", "not JSON")])
def test_every_json_error_names_its_file(tmp_path, text, why):
    p = tmp_path / "results.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as e:
        R.read_results(p)
    assert str(p) in str(e.value) and why in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="results.json"):
        R.load_results([tmp_path])


def test_write_read_round_trip_with_int_keys_and_the_checksum(tmp_path):
    p = tmp_path / "r.json"
    R.write_results(p, RESULT)
    on_disk = json.loads(p.read_text())
    assert len(on_disk[R.CHECKSUM]) == 64 and set(on_disk) == set(R.SCHEMA) | {R.CHECKSUM}
    got = R.read_results(p)
    assert R.CHECKSUM not in got and got["result"]["rows"]["rope"]["ppl"] == {"64": 9.5, "128": 11.0}
    R.write_results(p, {**got, R.CHECKSUM: "stale"})          # rewriting a read result: the checksum is made anew
    assert R.read_results(p) == got


def test_an_edit_by_hand_is_refused_naming_the_file_until_reattested(tmp_path):
    p = tmp_path / "main_cpu.json"
    R.write_results(p, RESULT)
    obj = json.loads(p.read_text())
    obj["result"]["rows"]["rope"]["ppl"]["64"] = 1.0           # a better number, typed in
    p.write_text(json.dumps(obj, indent=1))
    with pytest.raises(ValueError, match=r"main_cpu\.json.*edited by hand.*reattest"):
        R.read_results(p)
    with pytest.raises(ValueError, match="edited by hand"):
        R.load_results([tmp_path])
    R.reattest(p, note="a typo fixed by hand")
    got = R.read_results(p)
    assert got["result"]["rows"]["rope"]["ppl"]["64"] == 1.0
    assert got["provenance"]["reattested"]["note"] == "a typo fixed by hand"
    assert got["provenance"]["reattested"]["previous_sha256"] == obj[R.CHECKSUM]
    assert R.pick(R.load_results([tmp_path]), "main")["result"]["rows"]["rope"]["ppl"][64] == 1.0


def test_a_result_without_a_checksum_is_refused(tmp_path):
    p = tmp_path / "main_cpu.json"
    p.write_text(json.dumps(RESULT))
    with pytest.raises(ValueError, match=f"carries no {R.CHECKSUM}"):
        R.read_results(p)
    with pytest.raises(ValueError, match=f"carries no {R.CHECKSUM}"):
        R.load_results([tmp_path])
    (tmp_path / "times.json").write_text('{"chapters": {}}')    # JSON that is not a result is no concern of load_results
    R.reattest(p)
    assert len(R.load_results([tmp_path])) == 1


def test_every_committed_result_carries_a_checksum_that_verifies():
    files = sorted((ROOT / "nbs" / "results").glob("*.json"))
    results = [p for p in files if R.is_result(json.loads(p.read_text()))]
    assert len(results) >= 15
    for p in results: assert R.CHECKSUM in json.loads(p.read_text()), p.name
    assert sorted(Path(r["file"]).name for r in R.load_results([ROOT / "nbs" / "results"])) == [p.name for p in results]
    tool = runpy.run_path(str(ROOT / "tools" / "checksum_results.py"))   # what CI or a maintainer runs
    assert tool["main"](["--check"]) == 0


def test_the_manifest_check_fails_when_a_result_is_added_or_changed_without_it(tmp_path, capsys):
    tool = runpy.run_path(str(ROOT / "tools" / "checksum_results.py"))
    R.write_results(tmp_path / "main_cpu.json", RESULT)
    (tmp_path / "chapter_times.json").write_text('{"chapters": {}}')        # not a result: not listed
    assert tool["main"](["--check", str(tmp_path)]) == 1                    # no manifest yet
    assert tool["main"]([str(tmp_path)]) == 0 and tool["main"](["--check", str(tmp_path)]) == 0
    assert R.parse_manifest((tmp_path / R.MANIFEST).read_text()) == {"main_cpu.json": R.file_sha256(tmp_path / "main_cpu.json")}
    R.write_results(tmp_path / "main_cpu_seed1.json", {**RESULT, "settings": {"seed": 1}})   # a result added
    assert tool["main"](["--check", str(tmp_path)]) == 1 and "main_cpu_seed1.json" in capsys.readouterr().out
    assert tool["main"]([str(tmp_path)]) == 0
    R.write_results(tmp_path / "main_cpu.json", {**RESULT, "settings": {"steps": 5}})       # a result changed
    assert tool["main"](["--check", str(tmp_path)]) == 1
    with pytest.raises(ValueError, match="not '<sha256>"):
        R.parse_manifest("abc  ../x.json\n")


def test_check_clean_refuses_uncommitted_code_unless_asked():
    dirty = {**R.provenance(), "git_sha": "b" * 40, "git_dirty": True}
    with pytest.raises(ValueError, match="uncommitted changes.*--allow-dirty"):
        R.check_clean(False, dirty)
    assert R.check_clean(True, dirty) is dirty


def test_a_result_with_an_unknown_unit_is_skipped_with_a_warning(tmp_path):
    R.write_results(tmp_path / "x_cpu.json", {**RESULT, "unit": "not_a_unit"})
    R.write_results(tmp_path / "main_cpu.json", RESULT)
    with pytest.warns(UserWarning, match="x_cpu.json.*not in UNITS"):
        assert [r["unit"] for r in R.load_results([tmp_path])] == ["main"]


def test_the_overview_shows_the_state_of_the_code_oldest_first(tmp_path):
    for name, t, prov in (("main_cpu.json", "2026-01-03 00:00:00", {"git_dirty": True}),
                          ("cot_cpu.json", "2026-01-01 00:00:00", {"git_dirty": False, "attested": "by hash"}),
                          ("cost_cpu.json", "2026-01-02 00:00:00", {"git_dirty": False})):
        unit = name.rsplit("_", 1)[0]
        R.write_results(tmp_path / name, {**RESULT, "unit": unit, "provenance": {**RESULT["provenance"], **prov, "time": t}})
    rows = R.results_overview(R.load_results([tmp_path])).splitlines()[2:]
    assert [r.split(" | ")[2] for r in rows] == ["cot", "cost", "main"]
    assert [r.split(" | ")[3] for r in rows] == ["attested", "clean", "dirty"] and "a" * 10 not in "".join(rows)


def test_the_provenance_names_the_execution_path():
    with fused.kernel_mode("off"):
        ex = R.provenance()["execution"]
        assert ex["fused_enabled"] is False and ex["fused_kernel"] == "off"
        assert "DAPE kernel off" in R.provenance_line({**RESULT, "provenance": {**RESULT["provenance"], "execution": ex}})
    ex = R.execution_path()
    assert ex["fused_enabled"] is True and ex["torch_threads"] == torch.get_num_threads()
    assert ex["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    from lengthx.model import GPT, GPTConfig
    m = GPT(GPTConfig(vocab_size=256, n_layer=1, n_head=2, d_model=32, pe="dape:kerple_log", max_len=32)).eval()
    with torch.no_grad(): m(torch.randint(0, 256, (1, 16)))
    cpu = R.execution_path()["fused_cpu_kernel"]
    assert cpu == "loaded" or cpu.startswith("unavailable"), cpu        # DAPE ran: the kernel was loaded, or why not
    assert R.provenance_line({**RESULT, "provenance": {**RESULT["provenance"]}}).count("DAPE kernel") == 0   # not recorded: not claimed


def test_a_partial_result_says_so_in_its_provenance_line():
    "A resumable unit's finished methods so far (tools/snapshot_partial.py) read as such, never as the whole unit."
    part = {**RESULT, "result": {**RESULT["result"], "partial": {"finished": ["a", "b"], "left": ["c"]}}}
    assert "finished methods so far (2 of 3)" in R.provenance_line(part)
    assert "finished methods" not in R.provenance_line(RESULT)
    cols = {**RESULT, "result": {**RESULT["result"], "partial": {"finished": ["rope@2048"], "left": ["rope@4096", "yarn@16384"]}}}
    assert "finished method-and-length columns so far (1 of 3)" in R.provenance_line(cols)   # RULER's partial grid


def test_the_provenance_line_names_the_base_seed_a_result_was_made_with():
    "The command a reader copies must remake that file: `--seed N` for a base seed other than 0, nothing for 0."
    seeded = {**RESULT, "provenance": {**RESULT["provenance"], "seed": 3}}
    assert "`lengthx reproduce --budget cpu --only main --seed 3`" in R.provenance_line(seeded)
    plain = {**RESULT, "provenance": {**RESULT["provenance"], "seed": 0}}
    assert "`lengthx reproduce --budget cpu --only main`" in R.provenance_line(plain)
    assert "--seed" not in R.provenance_line(RESULT)   # a record without a seed is the default run


def test_the_command_line_offers_exactly_the_units_the_results_know():
    "cli keeps its own copy of UNITS, so that its parser is built without importing torch: the copy must equal the original."
    from lengthx import cli
    assert tuple(cli.UNITS) == tuple(R.UNITS)


def test_a_link_where_a_result_is_written_is_replaced_never_written_through(tmp_path):
    (tmp_path / "other.json").write_text("{}")
    (tmp_path / "main_cpu.json").symlink_to(tmp_path / "other.json")
    R.write_results(tmp_path / "main_cpu.json", RESULT)
    assert not (tmp_path / "main_cpu.json").is_symlink() and (tmp_path / "other.json").read_text() == "{}"
    assert R.read_results(tmp_path / "main_cpu.json")["settings"] == RESULT["settings"]


def _serve(folder: Path, **steps: int) -> str:
    "Serve one result per name (settings steps=n) and their manifest from `folder`; its file:// URL."
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.json"): old.unlink()
    for name, n in steps.items(): R.write_results(folder / name, {**RESULT, "settings": {"steps": n}})
    (folder / R.MANIFEST).write_text(R.manifest_text(folder))
    return folder.as_uri()


def test_committed_results_from_a_file_url_are_refreshed_removed_and_never_stale(tmp_path):
    served, cache = tmp_path / "served", tmp_path / "cache"
    url = _serve(served, **{"main_cpu.json": 1, "cot_cpu.json": 2})
    assert R.committed_results(cache, url) == cache and R.read_results(cache / "main_cpu.json")["settings"] == {"steps": 1}
    _serve(served, **{"main_cpu.json": 3})                        # remade, and cot no longer committed
    R.committed_results(cache, url)
    assert R.read_results(cache / "main_cpu.json")["settings"] == {"steps": 3}
    assert sorted(p.name for p in cache.glob("*.json")) == ["main_cpu.json"]
    _serve(served, **{"main_cpu.json": 4}); (served / "main_cpu.json").unlink()   # remade, but unfetchable: said, the old copy dropped
    with pytest.warns(UserWarning, match=r"1 of the 1 committed result files could not be fetched .* main_cpu\.json"):
        R.committed_results(cache, url)
    assert list(cache.glob("*.json")) == []


def test_with_no_manifest_the_warning_says_what_can_be_read(tmp_path):
    url = _serve(tmp_path / "served", **{"main_cpu.json": 1})
    R.committed_results(tmp_path / "cache", url)
    with pytest.warns(UserWarning, match="reading the 1 result files fetched before"):
        R.committed_results(tmp_path / "cache", (tmp_path / "nowhere").as_uri())
    with pytest.warns(UserWarning, match="no result file was ever fetched, so none can be read"):
        R.committed_results(tmp_path / "empty", (tmp_path / "nowhere").as_uri())


def test_an_untracked_module_in_the_package_is_uncommitted_code(tmp_path, monkeypatch):
    "source_sha256 hashes every lengthx/**.py, so a module git does not track makes the record dirty, never 'a clean commit'."
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout
    git("init", "-q"); (tmp_path / "lengthx").mkdir(); (tmp_path / "lengthx" / "a.py").write_text("x = 1\n")
    git("add", "."); git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "one")
    clean = {"lengthx": "0", "source_sha256": "s" * 64, "git_sha": "c" * 40, "git_dirty": False, "git_diff_sha256": None}
    monkeypatch.setattr(R, "package_provenance", lambda: dict(clean))
    monkeypatch.setattr(R, "lengthx_checkout", lambda: tmp_path)
    assert R.provenance()["git_dirty"] is False and R.code_state(R.provenance()) == "clean"
    (tmp_path / "lengthx" / "new.py").write_text("y = 2\n")     # imported by the package, never added
    p = R.provenance()
    assert p["git_dirty"] is True and p["git_untracked"] == ["lengthx/new.py"] and R.code_state(p) == "dirty"
    assert len(p["git_diff_sha256"]) == 64   # the hint "--allow-dirty records the diff's hash" holds for untracked code too
    (tmp_path / "lengthx" / "new.py").write_text("y = 3\n")
    assert R.provenance()["git_diff_sha256"] != p["git_diff_sha256"]   # the hash names the untracked content
    with pytest.raises(ValueError, match="untracked lengthx/new.py"):
        R.check_clean(allow_dirty=False, p=p)


def test_times_are_utc_with_their_offset_and_ordered_by_the_moment():
    t = R.provenance()["time"]
    assert t.endswith("+00:00") and R.recorded_at({"time": t}).utcoffset().total_seconds() == 0
    east = {**RESULT, "provenance": {**RESULT["provenance"], "time": "2026-01-02T05:00:00+02:00"}}   # 03:00 UTC
    plain = {**RESULT, "provenance": {**RESULT["provenance"], "time": "2026-01-02 04:00:00"}}        # no zone: read as UTC
    assert R.pick([plain, east], "main") is plain and R.pick([east, plain], "main") is plain
    table = R.results_overview([{**east, "file": "a.json"}, {**plain, "file": "b.json"}], "x").splitlines()
    assert [r.rsplit(" | ", 1)[1] for r in table[2:]] == ["a.json |", "b.json |"]
    assert " made (UTC) " in table[0] and [r.split(" | ")[5] for r in table[2:]] == ["2026-01-02 03:00", "2026-01-02 04:00"]
    assert "2026-01-02, from" in R.provenance_line(east)


def test_the_overview_marks_results_made_by_other_code_than_the_present():
    now = R.present_source_sha256()
    recs = [{**RESULT, "unit": u, "file": f"{u}_cpu.json", "provenance": {**RESULT["provenance"], "source_sha256": h}}
            for u, h in (("main", now), ("cot", "0" * 64))]
    rows = {r.split(" | ")[2]: r.split(" | ")[4] for r in R.results_overview(recs).splitlines()[2:]}
    assert rows == {"main": "none", "cot": "?"}   # commit "aaa…" is in no repository: what changed since is unknown


def test_the_overview_names_the_package_files_changed_since_a_results_commit(tmp_path):
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout.strip()
    commit = lambda m: git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", m)
    git("init", "-q"); (tmp_path / "lengthx").mkdir(); (tmp_path / "notes.md").write_text("a")
    for n in ("a.py", "b.py", "_modidx.py"): (tmp_path / "lengthx" / n).write_text("x = 1\n")
    git("add", "."); commit("one"); first = git("rev-parse", "HEAD")
    (tmp_path / "lengthx" / "b.py").write_text("x = 2\n"); (tmp_path / "lengthx" / "_modidx.py").write_text("x = 2\n")
    (tmp_path / "notes.md").write_text("b"); commit("two")
    assert R.changed_since(first, tmp_path) == ["b.py"] and R.changed_since(git("rev-parse", "HEAD"), tmp_path) == []
    assert R.changed_since("f" * 40, tmp_path) is None and R.changed_since(None, tmp_path) is None
    recs = [{**RESULT, "unit": u, "file": f"{u}_cpu.json", "provenance": {**RESULT["provenance"], "git_sha": first, "source_sha256": h}}
            for u, h in (("main", "now"), ("cot", "old"))]
    rows = {r.split(" | ")[2]: r.split(" | ")[4] for r in R.results_overview(recs, "now", tmp_path).splitlines()[2:]}
    assert rows == {"main": "none", "cot": "b.py"}


def test_a_cpu_run_on_a_gpu_machine_is_a_cpu_result(monkeypatch):
    "device=cpu on a machine with a GPU: no GPU name recorded, device_of says cpu, the line says CPU threads, pick(gpu=False) finds it."
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    cpu = {**RESULT, "provenance": R.result_provenance(seed=0, command="x", seconds=12.0, device="cpu")}
    gpu = {**RESULT, "provenance": R.result_provenance(seed=0, command="x", seconds=12.0, device="cuda")}
    assert cpu["provenance"]["device"] == "cuda:NVIDIA H200" and cpu["provenance"]["cuda_device"] is None
    assert R.device_of(cpu) == "cpu" and "CPU thread" in R.provenance_line(cpu) and "H200" not in R.provenance_line(cpu)
    assert R.pick([cpu, gpu], "main", gpu=False) is cpu and R.pick([cpu, gpu], "main", gpu=True) is gpu
    assert R.device_of(gpu) == "NVIDIA H200" and "0.2 min on NVIDIA H200" in R.provenance_line(gpu)
    older = {"device": "cuda:NVIDIA H200", "device_used": "cpu", "cuda_device": "NVIDIA H200"}   # as an older lengthx wrote it
    assert R.device_of({"provenance": older}) == "cpu"
    assert R.device_of({"provenance": {"device": "cpu", "device_used": "mps"}}) == "mps"   # a Mac's GPU is not a CPU


def test_every_committed_result_is_on_the_device_its_run_used():
    for r in R.load_results([ROOT / "nbs" / "results"]):
        p = r["provenance"]
        assert R.device_of(r) == (p["cuda_device"] if p["device_used"].startswith("cuda") else "cpu"), r["file"]


def test_a_reattested_result_says_so_in_its_line_and_the_overview(tmp_path):
    path = tmp_path / "main_cpu.json"
    R.write_results(path, RESULT)
    assert R.provenance_line(R.read_results(path)).endswith("from a clean commit")
    obj = json.loads(path.read_text()); obj["result"]["rows"]["rope"]["ppl"]["64"] = 1.0; path.write_text(json.dumps(obj))
    R.reattest(path, note="ppl at 64 set by hand")
    rec = R.load_results([tmp_path])[0]
    assert R.code_state(rec["provenance"]) == "reattested"
    assert R.provenance_line(rec).endswith("from numbers re-attested by hand: ppl at 64 set by hand")
    assert R.results_overview([rec], "x").splitlines()[2].split(" | ")[3] == "reattested"
    assert "(numbers re-attested by hand" in R.provenance_detail(rec)


def test_load_results_without_a_results_folder_says_what_happened(tmp_path, monkeypatch):
    "A pip install outside Colab and outside a checkout: nothing is fetched, and the warning says so and how to fetch."
    monkeypatch.chdir(tmp_path); monkeypatch.delenv("LENGTHX_RESULTS", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    with pytest.warns(UserWarning, match="no results folder.*committed_results"):
        assert R.load_results() == []


def test_the_code_state_words_and_lines_come_from_one_place():
    "No commit recorded (an install outside a checkout) reads as such, never as 'a commit whose state was not recorded'."
    none = {**RESULT, "provenance": {"git_sha": None, "git_dirty": None}}
    assert R.code_state(none["provenance"]) == "no git" and R.provenance_line(none).endswith("from code outside a git checkout")
    assert "(no checkout" in R.provenance_detail(none)
    unrec = {**RESULT, "provenance": {"git_sha": "a" * 40}}
    assert R.provenance_line(unrec).endswith("from a commit whose state was not recorded")
    for p in ({"git_dirty": True}, {"git_dirty": False, "attested": "x"}, {"git_dirty": False}, {"git_sha": "a"}, {}):
        assert R.provenance_line({**RESULT, "provenance": p}).endswith(R.STATE_TEXT[R.code_state(p)])


def test_the_provenance_line_and_pick_read_the_same_seed():
    "A record whose settings name seed 2 is picked as seed 2, and its line remakes it with --seed 2."
    rec = {**RESULT, "settings": {"seed": 2}}
    assert R.pick([rec], "main", seed=2) is rec and "--seed 2`" in R.provenance_line(rec)
    cost = {**RESULT, "unit": "cost", "settings": {}, "provenance": {**RESULT["provenance"], "seed": 3}}   # no seed in settings
    assert R.result_seed(cost) == 3 and R.pick([cost], "cost", seed=3) is cost and "--seed 3`" in R.provenance_line(cost)
