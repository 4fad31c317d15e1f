"""What the README and the home page promise a reader: every chapter listed, and the Python usage they show works."""
import json, re, subprocess, sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def sidebar_chapters() -> list[str]:
    "Every notebook _quarto.yml's sidebar lists, except the home page."
    out = []
    def walk(items):
        for it in items:
            if isinstance(it, str): out.append(it)
            elif "contents" in it: walk(it["contents"])
            elif "href" in it: out.append(it["href"])
    walk(yaml.safe_load((ROOT / "_quarto.yml").read_text())["website"]["sidebar"]["contents"])
    return [p for p in out if p != "index.ipynb"]


def test_home_page_table_lists_every_chapter():
    "The chapter table of index.ipynb (and so of README.md) links every chapter of the sidebar."
    cells = json.loads((ROOT / "nbs" / "index.ipynb").read_text(encoding="utf-8"))["cells"]
    table = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## The book"))
    linked = set(re.findall(r"\]\(([\w.-]+\.ipynb)\)", table))
    missing = [p for p in sidebar_chapters() if p not in linked]
    assert not missing, f"the home page's chapter table leaves out {missing}"


def test_readme_python_usage_runs():
    "After a plain `import lengthx`, the registry the README names is reachable as written: lengthx.attention.known_pes()."
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`lengthx.attention.known_pes()`" in readme
    code = "import lengthx; pes = lengthx.attention.known_pes(); assert 'rope' in pes and 'alibi' in pes, pes; print(len(pes))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", "import lengthx; lengthx.nonexistent"], cwd=ROOT, capture_output=True, text=True)
    assert "AttributeError" in out.stderr                       # unknown names still fail, as for any module
