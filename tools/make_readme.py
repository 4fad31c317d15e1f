"""Write README.md from nbs/index.ipynb (nbdev_readme needs quarto, which this project does not require).

    python tools/make_readme.py          # write README.md
    python tools/make_readme.py --check  # exit 1 if README.md is out of date

Markdown cells are copied; a code cell whose first line is `#| echo: false` contributes its stored
output (markdown or printed text, e.g. a caption built from committed results); other cells with a
`#|` directive are left out; remaining code cells become python blocks. Links to chapters and images
become absolute URLs into the repository named by settings.ini (`git_url`, `branch`), so the README
renders the same on GitHub and on PyPI.
"""
import json, re, sys
from configparser import ConfigParser
from pathlib import Path

root = Path(__file__).resolve().parents[1]


def repo_urls() -> tuple[str, str]:
    "(base URL for links to files, base URL for raw files such as images), both ending in '/'."
    cfg = ConfigParser(delimiters=["="]); cfg.read(root / "settings.ini", encoding="utf-8")
    c = cfg["DEFAULT"]
    git_url, branch = c["git_url"].rstrip("/").removesuffix(".git"), c.get("branch", "main")
    slug = re.fullmatch(r"https://github\.com/(.+)", git_url)
    if not slug: sys.exit(f"settings.ini git_url must be a https://github.com/ URL, got {git_url!r}")
    return f"{git_url}/blob/{branch}/", f"https://raw.githubusercontent.com/{slug.group(1)}/{branch}/"


def absolute_links(md: str, blob: str, raw: str) -> str:
    "Relative image paths -> raw URLs; relative links to notebooks/files -> repository URLs (paths are relative to nbs/)."
    md = re.sub(r"(!\[[^\]]*\]\()(?!https?://|#)([^)\s]+)", lambda m: m.group(1) + raw + "nbs/" + m.group(2), md)
    return re.sub(r"((?<!!)\[[^\]]*\]\()(?!https?://|#|mailto:)([^)\s]+)", lambda m: m.group(1) + blob + "nbs/" + m.group(2), md)


def output_text(cell: dict) -> str:
    "A code cell's stored markdown or printed output."
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "text/markdown" in data: out.append("".join(data["text/markdown"]))
        elif o.get("output_type") == "stream" and o.get("name") == "stdout": out.append("".join(o["text"]))
        elif "text/plain" in data: out.append("".join(data["text/plain"]))
    return "".join(out).strip()


def render(nb_path: Path) -> str:
    "The README text for the notebook at `nb_path`."
    blob, raw = repo_urls()
    out = []
    for c in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]:
        src = "".join(c["source"])
        first = src.lstrip().splitlines()[0] if src.strip() else ""
        if c["cell_type"] == "markdown": out.append(absolute_links(src, blob, raw))
        elif re.fullmatch(r"#\|\s*echo:\s*false\s*", first):
            text = output_text(c)
            if not text: sys.exit(f"{nb_path.name}: an `#| echo: false` cell has no stored output: run the notebook first")
            out.append(absolute_links(text, blob, raw))
        elif first.startswith("#|"): continue              # hidden / exported cells
        else: out.append("```python\n" + src + "\n```")
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    text = render(root / "nbs" / "index.ipynb")
    readme = root / "README.md"
    if "--check" in sys.argv:
        if readme.read_text(encoding="utf-8") != text: sys.exit("README.md is out of date: run python tools/make_readme.py")
        print("README.md matches nbs/index.ipynb")
    else:
        readme.write_text(text, encoding="utf-8")
