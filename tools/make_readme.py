"""Write README.md from nbs/index.ipynb (nbdev_readme needs quarto, which this project does not require).

    python tools/make_readme.py          # write README.md
    python tools/make_readme.py --check  # exit 1 if README.md is out of date
"""
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]


def render(nb_path: Path) -> str:
    "Markdown cells verbatim (image paths made relative to the repo root); code cells as python blocks."
    cells = json.loads(nb_path.read_text())["cells"]
    out = []
    for c in cells:
        src = "".join(c["source"])
        if src.lstrip().startswith("#|"): continue            # directives / hidden cells
        if c["cell_type"] == "markdown": out.append(re.sub(r"\]\((images/|\d\d_\w+\.ipynb)", r"](nbs/\1", src))
        else: out.append("```python\n" + src + "\n```")
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    text = render(root / "nbs" / "index.ipynb")
    readme = root / "README.md"
    if "--check" in sys.argv:
        if readme.read_text() != text: sys.exit("README.md is out of date: run python tools/make_readme.py")
        print("README.md matches nbs/index.ipynb")
    else:
        readme.write_text(text)
