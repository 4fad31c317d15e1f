"""The package's floors (DESIGN.md, third wave): no import cycle, no import from a lower floor to a higher one,
nothing imports the command line, no package import placed inside a function except the command line's own
(which defers them for start-up time: `lengthx --help` loads no torch), and the command line stays a thin shell."""
import importlib.util
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
IG = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(IG)
GRAPH = IG.imports(ROOT)


def test_every_module_has_a_floor():
    for m in GRAPH: IG.floor_of(m)


def test_no_cycle():
    assert IG.cycles(GRAPH) == []


def test_no_upward_import():
    assert IG.upward(GRAPH) == []


def test_nothing_imports_the_command_line():
    assert [m for m, deps in GRAPH.items() if "cli" in deps] == []


def test_package_imports_sit_at_module_level_outside_the_command_line():
    inside = [(m, d) for m, deps in GRAPH.items() if m != "cli" for d, how in deps.items() if how == "function"]
    assert inside == []


def test_the_command_line_is_a_thin_shell():
    "Its code lines (not blank lines, comments or the notebook's folding directives) stay few."
    code = [ln for ln in (ROOT / "lengthx" / "cli.py").read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code) < 575, len(code)


def test_the_checker_sees_a_cycle_and_an_upward_import(tmp_path):
    "The checks above can fail: a package with a cycle and an upward import is caught."
    pkg = tmp_path / "lengthx"
    (pkg / "pe").mkdir(parents=True)
    (pkg / "attention.py").write_text("from lengthx import model\n")          # floor 0 -> floor 1: upward
    (pkg / "model.py").write_text("def f():\n    from .attention import x\n")  # and back: a cycle
    (pkg / "cli.py").write_text("")
    g = IG.imports(tmp_path)
    assert g["model"] == {"attention": "function"} and IG.cycles(g) == [["attention", "model"]]
    assert IG.upward(g) == [("attention", "model", "top")]


@pytest.mark.parametrize("name, home", [("PROTOCOL", "lengthx.evaluate"), ("run_sweep", "lengthx.sweep"),
                                        ("provenance", "lengthx.results"), ("check_spec", "lengthx.attention"),
                                        ("bench_attention", "lengthx.bench"), ("train_run", "lengthx.train")])
def test_moved_names_still_answer_from_cli_with_a_warning(name, home):
    import lengthx.cli as cli
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        obj = getattr(cli, name)
    assert obj is getattr(importlib.import_module(home), name)
    assert any(issubclass(x.category, DeprecationWarning) and home in str(x.message) for x in w)
    with pytest.raises(AttributeError): getattr(cli, "no_such_name")
