"""Author chapters as percent-format text, turn them into notebooks and back, and execute them.

    python tools/nbtool.py tonb  draft.py  nbs/10_rope.ipynb [--run]   # a new notebook, or update an existing one
    python tools/nbtool.py topct nbs/10_rope.ipynb draft.py
    python tools/nbtool.py run   nbs/10_rope.ipynb                      # execute in-process, store outputs

The conversion is jupytext's percent format (`# %%` code cells, `# %% [markdown]` markdown cells):
`tonb` onto an existing notebook updates it in place, keeping the outputs and ids of the cells whose
source did not change (jupytext's `--update`). Notebooks stay the source of truth; drafts are a
convenience for editing them as text. `run` executes with execnb (as nbdev does) with the
backwards-x plot check installed (tools/plotcheck.py).
"""
import os, sys
from pathlib import Path

import jupytext

PERCENT = "py:percent"


def to_notebook(draft: str | Path, path: str | Path) -> None:
    "Write the percent-format `draft` as the notebook `path`; an existing notebook keeps unchanged cells' outputs."
    nb = jupytext.read(draft, fmt=PERCENT)
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"display_name": "python3", "language": "python", "name": "python3"}
    path = Path(path)
    if path.exists():
        old = jupytext.read(path)
        from jupytext.combine import combine_inputs_with_outputs
        nb = combine_inputs_with_outputs(nb, old, fmt=PERCENT)
    jupytext.write(nb, path, fmt="ipynb")


def to_percent(path: str | Path, draft: str | Path) -> None:
    "Write the notebook `path` as percent-format text (no jupytext header) to `draft`."
    nb = jupytext.read(path)
    nb.metadata.setdefault("jupytext", {})["notebook_metadata_filter"] = "-all"
    jupytext.write(nb, draft, fmt=PERCENT)


def run_nb(path):
    """Execute a notebook top to bottom in-process (execnb) and save its outputs."""
    from execnb.nbio import read_nb, write_nb as xwrite
    from execnb.shell import CaptureShell
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import plotcheck; plotcheck.install()      # a line plot whose x runs backwards fails the run
    path = Path(path).resolve()
    cwd = os.getcwd(); os.chdir(path.parent)
    try:
        nb = read_nb(path)
        for c in nb.cells:       # execnb keeps a cell's old outputs when the new run prints nothing: start from none
            if c.cell_type == "code": c.outputs = []
        CaptureShell(path).run_all(nb, exc_stop=True)
        xwrite(nb, path)
    finally:
        os.chdir(cwd)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "tonb":
        to_notebook(args[0], args[1])
        if "--run" in args: run_nb(args[1])
    elif cmd == "topct":
        to_percent(args[0], args[1])
    elif cmd == "run":
        for p in args: run_nb(p)
    else:
        sys.exit(__doc__)
