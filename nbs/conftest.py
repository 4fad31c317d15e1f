"""nbval glue: nbdev_clean strips execution counts, which nbval reads as 'never run'.

Committed notebooks keep their outputs (the figures are part of the book), so mark every code cell
that has outputs as run; under --nbval-lax only cells tagged `# NBVAL_CHECK_OUTPUT` are compared.
"""
import os

os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):   # each notebook kernel inherits this: one thread per xdist worker
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and cell.get("outputs") and cell.get("execution_count") is None:
            cell["execution_count"] = 1
