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
