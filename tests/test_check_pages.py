"""The page check counts what a reader would meet (and only that), and fails a chapter above its allowance."""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_pages as cp  # noqa: E402


def code(src: str, outputs=()) -> dict:
    return {"cell_type": "code", "source": src, "metadata": {}, "outputs": list(outputs), "execution_count": None}


def md(src: str) -> dict: return {"cell_type": "markdown", "source": src, "metadata": {}}


def page(tmp_path: Path, cells: list, name: str = "99_page") -> Path:
    p = tmp_path / f"{name}.ipynb"
    p.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return p


LONG = "\n".join(f"x{i} = {i}" for i in range(41))


def test_each_class_is_counted(tmp_path):
    cells = [code(LONG), md("made at 75eb83b4a4 on a CPU"),
             code("d", [{"output_type": "execute_result", "data": {"text/plain": "{'a': 1}"}, "metadata": {}}]),
             code("check('1.1', f)", [{"output_type": "stream", "name": "stdout", "text": "1/4 checks passed.\n  ✗ a"}])]
    assert cp.page_counts(page(tmp_path, cells)) == {"long_cells": 1, "hashes": 1, "raw_reprs": 1, "grader_failures": 1}


def test_what_the_reader_does_not_see_is_not_counted(tmp_path):
    cells = [code("#| export\n" + LONG), code("#| code-fold: true\n" + LONG), code("#| hide\n" + LONG),
             code("#| echo: false\n" + "\n".join(["x = 1"] * 40)), md("a colour #1f77b4 and a count 1234567"),
             code("check('1.1', f)", [{"output_type": "stream", "name": "stdout", "text": "not attempted yet"}]),
             code("\n".join(["y = 2"] * 40))]                                     # exactly 40 lines is allowed
    assert cp.page_counts(page(tmp_path, cells)) == dict.fromkeys(cp.CLASSES, 0)


def test_provenance_pages_may_show_hashes(tmp_path):
    assert cp.page_counts(page(tmp_path, [md("git 75eb83b4a4")], "55_results"))["hashes"] == 0


def test_only_the_grader_page_may_show_a_failing_report(tmp_path):
    report = [code("ok = check('10.1', f)\nassert not ok", [{"output_type": "stream", "name": "stdout", "text": "3/4 checks passed.\n  ✗ a"}])]
    assert cp.page_counts(page(tmp_path, report, "80_exercises"))["grader_failures"] == 0
    assert cp.page_counts(page(tmp_path, report, "10_rope"))["grader_failures"] == 1


def test_a_chapter_above_its_allowance_fails_and_a_new_one_is_allowed_nothing():
    counts = {"10_rope": {"long_cells": 2, "hashes": 0}, "99_new": {"long_cells": 1, "hashes": 0}}
    bad = cp.over(counts, {"10_rope": {"long_cells": 1}})
    assert bad == ["10_rope: long_cells = 2, allowed 1", "99_new: long_cells = 1, allowed 0"]
    assert cp.over(counts, {"10_rope": {"long_cells": 2}, "99_new": {"long_cells": 1}}) == []


def test_the_ratchet_only_lowers_and_never_raises_a_chapter_it_does_not_name():
    "Once every chapter is at 0 the allowances are empty; a later --ratchet must not write a regression in as allowed."
    counts = {"10_rope": {"long_cells": 1, "hashes": 3}, "20_t5": {"long_cells": 2, "hashes": 0}}
    assert cp.ratchet(counts, {}) == {}
    assert cp.ratchet(counts, {"10_rope": {"long_cells": 5, "hashes": 2}}) == {"10_rope": {"long_cells": 1, "hashes": 2}}
    assert cp.ratchet(counts, None) == counts                              # the check's first run records today's counts


def test_the_book_is_within_its_allowances():
    assert cp.over(cp.all_counts(), json.loads(cp.ALLOWANCE.read_text())) == []


def test_the_site_folds_exactly_the_provenance_lines_the_package_prints():
    "build_site folds the lines that start with the prefixes lengthx prints its hashes under, and only those."
    from build_site import FOLDED_PREFIXES, fold_provenance
    from lengthx.evidence import READS_PREFIX
    from lengthx.results import DETAIL_PREFIX
    assert set(FOLDED_PREFIXES) == {READS_PREFIX, DETAIL_PREFIX}
    text = f"ppl 9.1\n{DETAIL_PREFIX} main (cpu) by commit 75eb83b4a4 (clean)\nthe end\n"
    out = fold_provenance([{"output_type": "stream", "name": "stdout", "text": text}])
    assert out[0]["text"] == "ppl 9.1\nthe end\n"
    assert "<details>" in out[1]["data"]["text/markdown"] and "75eb83b4a4" in out[1]["data"]["text/markdown"]
    assert cp.HASH.findall(cp.visible_text({"cell_type": "code", "source": "", "metadata": {}, "outputs": out})) == []
