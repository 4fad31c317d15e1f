"""Author chapters as percent-format text and turn them into notebooks (and back).

    python tools/nbtool.py tonb  draft.py  nbs/10_rope.ipynb [--run]
    python tools/nbtool.py topct nbs/10_rope.ipynb draft.py
    python tools/nbtool.py run   nbs/10_rope.ipynb          # execute in-process, store outputs

Cells start with `# %%` (code) or `# %% [markdown]` (markdown; each line prefixed by `# `).
Notebooks stay the source of truth; drafts are a convenience for editing them as text.
"""
import hashlib, json, os, sys
from pathlib import Path

META = {"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}}


def pct_to_cells(text: str) -> list[dict]:
    """Split percent-format text into notebook cells."""
    cells, kind, buf = [], None, []

    def flush():
        if kind is None: return
        lines = buf[:]
        while lines and not lines[-1].strip(): lines.pop()
        while lines and not lines[0].strip(): lines.pop(0)
        if kind == "markdown":
            lines = [l[2:] if l.startswith("# ") else l[1:] if l.startswith("#") else l for l in lines]
        src = "\n".join(lines)
        cell = {"cell_type": kind, "metadata": {}, "source": src.splitlines(keepends=True)}
        if kind == "code": cell.update(execution_count=None, outputs=[])
        cells.append(cell)

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, buf = ("markdown" if "[markdown]" in line else "code"), []
        else:
            buf.append(line)
    flush()
    return cells


def cells_to_pct(cells: list[dict]) -> str:
    """Inverse of `pct_to_cells`."""
    out = []
    for c in cells:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            out.append("# %% [markdown]\n" + "\n".join(("# " + l) if l else "#" for l in src.splitlines()))
        else:
            out.append("# %%\n" + src)
    return "\n\n".join(out) + "\n"


def write_nb(cells, path):
    for i, c in enumerate(cells):  # nbformat 4.5 ids, stable for unchanged cells
        c.setdefault("id", hashlib.sha1(f"{i}{''.join(c['source'])}".encode()).hexdigest()[:8])
    nb = {"cells": cells, "metadata": META, "nbformat": 4, "nbformat_minor": 5}
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


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
        write_nb(pct_to_cells(Path(args[0]).read_text()), args[1])
        if "--run" in args: run_nb(args[1])
    elif cmd == "topct":
        Path(args[1]).write_text(cells_to_pct(json.loads(Path(args[0]).read_text())["cells"]))
    elif cmd == "run":
        for p in args: run_nb(p)
    else:
        sys.exit(__doc__)
