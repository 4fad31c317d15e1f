"""tools/check_outputs.py: passes on the checkout, fails on a changed or missing result file naming chapter and file."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from lengthx.evidence import READS_PREFIX, reads_line
from lengthx.results import read_results, reattest, write_results

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "check_outputs.py"
_spec = importlib.util.spec_from_file_location("check_outputs", TOOL)
CO = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CO)


def run(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(root)], capture_output=True, text=True, timeout=120)


def copy_checkout(tmp: Path) -> Path:
    "nbs/*.ipynb and nbs/results/*.json of this checkout in a temporary folder."
    (tmp / "nbs" / "results").mkdir(parents=True)
    for nb in (ROOT / "nbs").glob("*.ipynb"): shutil.copy(nb, tmp / "nbs" / nb.name)
    for f in (ROOT / "nbs" / "results").glob("*.json"): shutil.copy(f, tmp / "nbs" / "results" / f.name)
    return tmp


def test_the_tool_reads_the_line_evidence_writes():
    from lengthx.evidence import METADATA, payload_sha256
    assert CO.PREFIX == READS_PREFIX and CO.METADATA == METADATA
    f = ROOT / "nbs" / "results" / "main_cpu.json"
    assert CO.payload_sha256(f) == payload_sha256(f)
    line = reads_line(ROOT / "nbs" / "results" / "main_cpu.json")
    items = dict(CO.ITEM.findall(line))
    assert len(items["main_cpu.json"]) == 16
    assert "seeds_cpu.json" in items and "cost_cpu.json" not in items     # a language-model file comes with its experiment


def test_the_tools_copies_of_the_package_lists_are_equal():
    "A unit missing from the tool's LM_UNITS would let a chapter go stale unnoticed when a seed file of that unit is added."
    from lengthx.evidence import LM_UNITS, SEED_FREE
    assert CO.LM_UNITS == LM_UNITS and CO.SEED_FREE == SEED_FREE
    for unit in LM_UNITS:                                                   # every unit's file names are recognised
        assert CO.LM_FILE.match(f"{unit}_cpu.json") and CO.LM_FILE.match(f"{unit}_cpu_seed3.json")


def test_passes_on_the_checkout():
    out = run(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "chapters record the result files they read; all current" in out.stdout
    assert int(out.stdout.split("check_outputs: ")[1].split(" of ")[0]) >= 3     # 57, 70 and 40 at least


def test_fails_on_a_changed_result_naming_chapter_and_file(tmp_path):
    root = copy_checkout(tmp_path)
    assert run(root).returncode == 0
    f = root / "nbs" / "results" / "main_cpu.json"
    reattest(f)                                                             # metadata only: still current
    assert run(root).returncode == 0
    obj = read_results(f); obj["result"]["rows"]["alibi|seed=0"]["ppl"]["last_k_common"]["1024"] += 0.01
    write_results(f, obj)                                                   # a fresh checksum does not hide the change
    out = run(root)
    assert out.returncode == 1
    stale = [l for l in out.stdout.splitlines() if l.startswith("STALE")]
    assert any("nbs/57_evidence.ipynb" in l and "main_cpu.json" in l for l in stale)
    assert any("nbs/70_experiments.ipynb" in l and "main_cpu.json" in l for l in stale)
    assert not any("seeds_cpu.json" in l for l in stale)                    # only the changed file is named


def test_fails_on_a_removed_result_and_ignores_chapters_without_a_record(tmp_path):
    root = copy_checkout(tmp_path)
    (root / "nbs" / "results" / "seeds_cpu.json").unlink()
    out = run(root)
    assert out.returncode == 1 and "seeds_cpu.json, which is not committed" in out.stdout
    empty = root / "nbs" / "99_plain.ipynb"
    empty.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "print(1)", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": "1\n"}]}]}))
    assert CO.recorded_reads(empty) == {}


def test_fails_when_a_seed_file_of_a_gathered_experiment_is_committed_since(tmp_path):
    root = copy_checkout(tmp_path)
    assert run(root).returncode == 0
    res = root / "nbs" / "results"
    other = read_results(res / "seeds_cpu.json")
    other["settings"] = {**other["settings"], "steps": other["settings"]["steps"] * 4}   # another experiment: not its seeds
    write_results(res / "seeds_cpu_seed8.json", other)
    assert run(root).returncode == 0
    same = read_results(res / "seeds_cpu.json")
    same["settings"] = {**same["settings"], "seeds": [9, 10]}                           # the same experiment, more seeds
    write_results(res / "seeds_cpu_seed9.json", same)
    out = run(root)
    assert out.returncode == 1
    stale = [l for l in out.stdout.splitlines() if l.startswith("STALE")]
    assert any("nbs/57_evidence.ipynb" in l and "seeds_cpu_seed9.json" in l for l in stale)
    assert not any("seeds_cpu_seed8.json" in l for l in stale)
