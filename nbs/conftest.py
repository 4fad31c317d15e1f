"""nbval glue: nbdev_clean strips execution counts, which nbval reads as 'never run'.

Figures are checked as they are shown (tools/plotcheck.py, installed in each kernel through PYTHONSTARTUP).
Committed notebooks keep their outputs (the figures are part of the book), so mark every code cell
that has outputs as run; under --nbval-lax only cells tagged `# NBVAL_CHECK_OUTPUT` are compared.
"""
import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
# every kernel nbval starts runs tools/plotcheck_startup.py first: a line plot whose x runs backwards fails its cell
_TOOLS = Path(__file__).resolve().parents[1] / "tools"
os.environ["LENGTHX_PLOTCHECK_DIR"] = str(_TOOLS)
os.environ["PYTHONSTARTUP"] = str(_TOOLS / "plotcheck_startup.py")
if os.environ.get("PYTEST_XDIST_WORKER"):   # each notebook kernel inherits this: one thread per xdist worker
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and cell.get("outputs") and cell.get("execution_count") is None:
            cell["execution_count"] = 1
