"""nbval glue: nbdev_clean strips execution counts, which nbval reads as 'never run'.

Figures are checked as they are shown (tools/plotcheck.py, installed in each kernel through PYTHONSTARTUP).
Committed notebooks keep their outputs (the figures are part of the book), so mark every code cell
that has outputs as run; under --nbval-lax only cells tagged `# NBVAL_CHECK_OUTPUT` are compared.
"""
import json as _json
import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
# every kernel nbval starts runs tools/plotcheck_startup.py first: a line plot whose x runs backwards fails its cell
_TOOLS = Path(__file__).resolve().parents[1] / "tools"
os.environ["LENGTHX_PLOTCHECK_DIR"] = str(_TOOLS)
os.environ["PYTHONSTARTUP"] = str(_TOOLS / "plotcheck_startup.py")
if os.environ.get("PYTEST_XDIST_WORKER"):   # each notebook kernel inherits this: one thread per xdist worker
    os.environ["OMP_NUM_THREADS"] = "1"


def _mark_run(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and cell.get("outputs") and cell.get("execution_count") is None:
            cell["execution_count"] = 1


# Longest notebooks first: with `-n 2 --dist loadfile` each notebook runs whole on one worker, and a long one
# started last keeps the run waiting on one core (longest-processing-time-first scheduling). The seconds are
# measured by tools/time_chapters.py (nbs/results/chapter_times.json); a notebook without a measurement goes first.
_TIMES = Path(__file__).resolve().parent / "results" / "chapter_times.json"


def _seconds() -> dict[str, float]:
    try: rows = _json.loads(_TIMES.read_text())["chapters"]
    except (OSError, ValueError, KeyError): return {}
    return {name: (v["seconds"] if isinstance(v, dict) else v) for name, v in rows.items()}


def pytest_collection_modifyitems(session, config, items):
    _mark_run(items)
    secs = _seconds()
    order = {}
    for it in items: order.setdefault(Path(str(it.fspath)).stem, len(order))
    items.sort(key=lambda it: (-secs.get(Path(str(it.fspath)).stem, float("inf")), order[Path(str(it.fspath)).stem]))


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    "Add each cell's time to its notebook's total, for the summary below."
    _DURATIONS[report.nodeid.split("::")[0]] = _DURATIONS.get(report.nodeid.split("::")[0], 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    "Seconds per notebook, longest first: where the notebook half of the test run spends its time."
    if not _DURATIONS: return
    terminalreporter.section("seconds per notebook")
    for nb, s in sorted(_DURATIONS.items(), key=lambda kv: -kv[1]): terminalreporter.write_line(f"{s:8.1f}  {nb}")
