"""Build the book as a static website in `_docs/` (settings.ini's doc_path), offline, from the notebooks' stored outputs.

    python tools/build_site.py                  # strict: warnings are errors, every sidebar page must exist
    python tools/build_site.py --allow-missing  # skip (with a warning) sidebar pages whose notebook is missing
    python -m http.server --directory _docs     # then open http://127.0.0.1:8000

Sphinx + myst-nb + sphinx-book-theme, with MathJax served from the site itself (sphinx-mathjax-offline):
all of it installs from PyPI (`pip install -e ".[docs]"`) and builds without a network. Quarto's
`_quarto.yml` stays the one source of the navigation: its sidebar's sections become the captions of
the table of contents, in the same order. Each notebook is copied to a temporary folder with nbdev's
directives applied, and nothing is executed: the site shows the outputs stored in the notebooks.

Directives, as nbdev applies them: `hide`, `include: false`, `default_exp`, `exporti` drop the cell;
`export` drops the code from the page and documents each public function and class it defines
(signature and docstring, like nbdev's `show_doc`), with the source one click away; `echo: false`
shows only the output, `output: false` only the code, `eval: false` the code without output,
`code-fold` folds the code, `output: asis` renders printed text as markdown.
"""
from __future__ import annotations

import argparse, ast, hashlib, json, re, shutil, sys, tempfile, textwrap, time
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "tools" / "site_static"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
DROP = {"hide", "default_exp", "exporti"}
TEST_RUNNER = re.compile(r"^[ \t]*#[ \t]*NBVAL_\w+[ \t]*\n?", re.M)   # nbval's cell markers: for the test runner, not the reader
# printed lines that carry hashes for maintainers: on the page they fold under a "Provenance" detail
# (lengthx.evidence.READS_PREFIX and lengthx.results.DETAIL_PREFIX; tests/test_check_pages.py holds them equal)
FOLDED_PREFIXES = ("Committed results read:", "Made from:")
REMOTE_IMG = re.compile(r"!\[[^\]]*\]\((https?:)?//[^)]*\)|<img[^>]+src=[\"'](https?:)?//", re.I)


def settings() -> dict[str, str]:
    "settings.ini's [DEFAULT] section."
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    return dict(cfg["DEFAULT"])


# ---------------------------------------------------------------- navigation from _quarto.yml
def sidebar(quarto: Path = ROOT / "_quarto.yml") -> list[tuple[str | None, list[str]]]:
    "The sidebar as [(caption or None, [notebook, ...]), ...] in the order Quarto shows it."
    import yaml
    contents = yaml.safe_load(quarto.read_text(encoding="utf-8"))["website"]["sidebar"]["contents"]
    nav: list[tuple[str | None, list[str]]] = []
    for item in contents:
        if isinstance(item, str): item = {"href": item}
        if "section" in item:
            pages = [p if isinstance(p, str) else p["href"] for p in item.get("contents", [])]
            nav.append((str(item["section"]), pages))
        elif "href" in item:
            if nav and nav[-1][0] is None: nav[-1][1].append(item["href"])
            else: nav.append((None, [item["href"]]))
        else: raise SystemExit(f"_quarto.yml: sidebar entry not understood: {item!r}")
    return nav


# ---------------------------------------------------------------- nbdev directives
def split_directives(source: str) -> tuple[dict[str, str], str]:
    "({name: value} of the leading `#|` lines, the code without them)."
    dirs, lines = {}, source.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("#|") or not lines[i].strip()):
        if lines[i].startswith("#|"):
            body = lines[i][2:].strip()
            name, _, value = body.partition(":") if ":" in body.split(" ")[0] else body.partition(" ")
            dirs[name.strip()] = value.strip().lower()
        i += 1
    return dirs, "\n".join(lines[i:])


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    ret = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{node.name}({ast.unparse(node.args)}){ret}"


def show_doc(code: str) -> list[str]:
    "Markdown for each public top-level function and class of an exported cell: what nbdev's `show_doc` shows."
    docs = []
    for node in ast.parse(code).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): continue
        if node.name.startswith("_") and not node.name.startswith("__"): continue
        if isinstance(node, ast.ClassDef):
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            sig = f"class {node.name}" + (f"({bases})" if bases else "")
            if init: sig += f"\n    {_signature(init).replace('__init__(self, ', '__init__(').replace('__init__(self)', '__init__()')}"
        else:
            sig = f"{'async ' if isinstance(node, ast.AsyncFunctionDef) else ''}def {_signature(node)}"
        doc = ast.get_docstring(node) or ""
        docs.append(f"```{{code-block}} python\n:class: show-doc\n{sig}\n```\n\n{doc}".rstrip())
    return docs


def md_cell(text: str) -> dict:
    "A markdown cell (with an nbformat 4.5 id, derived from its text)."
    return {"cell_type": "markdown", "id": "d" + hashlib.sha1(text.encode()).hexdigest()[:7], "metadata": {}, "source": text}


def stream_text(cell: dict) -> str:
    "The printed text and markdown outputs of a cell, joined."
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream" and o.get("name") == "stdout": out.append("".join(o["text"]))
        elif "text/markdown" in o.get("data", {}): out.append("".join(o["data"]["text/markdown"]))
    return "\n".join(out)


def unlink(source: str, missing: list[str]) -> str:
    "Markdown links to pages left out of the build become plain text (only with --allow-missing)."
    for m in missing: source = re.sub(r"(?<!!)\[([^\]]*)\]\(" + re.escape(m) + r"(#[^)]*)?\)", r"\1", source)
    return source


def fold_provenance(outputs: list[dict]) -> list[dict]:
    "Printed provenance lines (hashes) moved out of the text into one collapsed detail after it."
    out, folded = [], []
    for o in outputs:
        if o.get("output_type") == "stream":
            lines = "".join(o["text"]).splitlines(keepends=True)
            keep = [l for l in lines if not l.startswith(FOLDED_PREFIXES)]
            folded += [l.strip() for l in lines if l.startswith(FOLDED_PREFIXES)]
            if keep: out.append(dict(o, text="".join(keep)))
        else: out.append(o)
    if folded:
        body = "\n\n".join(folded)
        out.append({"output_type": "display_data", "metadata": {},
                    "data": {"text/markdown": f"<details><summary>Provenance</summary>\n\n{body}\n\n</details>\n",
                             "text/plain": body}})
    return out


def apply_directives(cells: list[dict], badge: str, missing: list[str] = ()) -> list[dict]:
    "The cells a reader sees, with nbdev's directives applied and the Colab badge served locally."
    out = []
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            source = unlink(source.replace(COLAB_BADGE, badge), missing)
            if REMOTE_IMG.search(source):
                raise SystemExit(f"a markdown cell loads an image from another host (vendor it under nbs/images/):\n{source[:300]}")
            out.append(dict(cell, source=source)); continue
        if cell["cell_type"] != "code": continue
        dirs, code = split_directives(source)
        code = TEST_RUNNER.sub("", code)
        if DROP & dirs.keys() or dirs.get("include") == "false": continue
        tags = []
        if "export" in dirs or "exports" in dirs:
            docs = show_doc(code)
            if "export" in dirs:
                tags.append("hide-input")                 # the source, folded under the documentation
            out += [md_cell(d) for d in docs]
        if dirs.get("output") == "asis":
            out.append(md_cell(stream_text(cell))); continue
        if dirs.get("echo") == "false": tags.append("remove-input")
        if dirs.get("output") == "false": tags.append("remove-output")
        if dirs.get("eval") == "false": cell = dict(cell, outputs=[])
        if dirs.get("code-fold") in ("true", "show"): tags.append("hide-input")
        if not code.strip(): continue
        meta = dict(cell.get("metadata", {}), tags=sorted(set(tags)))
        out.append(dict(cell, source=code, metadata=meta, outputs=fold_provenance(cell.get("outputs", []))))
    return out


# ---------------------------------------------------------------- the Sphinx project
CONF = '''\
project = {title!r}
author = {author!r}
copyright = {copyright!r}
extensions = ["myst_nb", "sphinx-mathjax-offline", "sphinx.ext.githubpages"]
root_doc = "index"
exclude_patterns = ["_build"]
nb_execution_mode = "off"                  # the site shows the outputs stored in the notebooks
nb_output_stderr = "remove"                # progress bars and warnings are not content
nb_merge_streams = True
nb_render_markdown_format = "myst"         # prose a cell builds (IPython Markdown) keeps its $math$
nb_code_prompt_show = "Show the source"
nb_code_prompt_hide = "Hide the source"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "html_image"]
myst_heading_anchors = 3
smartquotes = False                        # `--budget` and "quotes" stay as written (no en dashes, no curly quotes)
# a ```python block that shows a notebook shell escape (`!pip install ...`) does not lex as Python;
# Sphinx then highlights it in relaxed mode, which is what a reader should see
suppress_warnings = ["misc.highlighting_failure"]
mathjax3_config = {{"tex": {{"tags": "none"}}}}
html_theme = "sphinx_book_theme"
html_title = {title!r}
html_context = {{"default_mode": "light"}}      # an empty mode is a console error in pydata-sphinx-theme
html_static_path = ["_site_static"]
html_css_files = ["lengthx.css"]
html_js_files = ["lengthx-search.js"]       # search excerpts without TeX or code; no fetches from file://
html_favicon = "_site_static/favicon.ico"
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {{
    "repository_url": {git_url!r},
    "repository_branch": {branch!r},
    "path_to_docs": "nbs",
    "use_repository_button": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
}}
html_sidebars = {{"**": ["navbar-logo.html", "search-field.html", "sbt-sidebar-nav.html"]}}
'''


def toctrees(nav: list[tuple[str | None, list[str]]]) -> str:
    "Hidden toctree directives that give Sphinx the sidebar (the home page itself is the root)."
    blocks = []
    for caption, pages in nav:
        docs = [Path(p).stem for p in pages if Path(p).stem != "index"]
        if not docs: continue
        opts = ":hidden:\n" + (f":caption: {caption}\n" if caption else "")
        blocks.append("```{toctree}\n" + opts + "\n" + "\n".join(docs) + "\n```")
    return "\n\n".join(blocks)


def prepare(src: Path, nav, allow_missing: bool, cfg: dict[str, str]) -> list[str]:
    "Write the processed notebooks, conf.py and static files into `src`; the pages left out."
    nbs = ROOT / cfg.get("nbs_path", "nbs")
    missing = [p for _, pages in nav for p in pages if not (nbs / p).exists()]
    if missing and not allow_missing:
        raise SystemExit(f"_quarto.yml's sidebar names notebooks that do not exist: {', '.join(missing)} "
                         "(build with --allow-missing to skip them while developing)")
    for m in missing: print(f"WARNING: skipping missing sidebar page {m}", file=sys.stderr)
    nav = [(c, [p for p in pages if p not in missing]) for c, pages in nav]
    names = [p for _, pages in nav for p in pages]
    if "index.ipynb" not in names: raise SystemExit("_quarto.yml's sidebar must name index.ipynb (the home page)")
    static = src / "_site_static"
    shutil.copytree(STATIC, static)
    for d in ("images",):
        if (nbs / d).is_dir(): shutil.copytree(nbs / d, src / d)
    (src / "images").mkdir(exist_ok=True)
    shutil.copy(STATIC / "colab-badge.svg", src / "images" / "_colab-badge.svg")
    for name in names:
        nb = json.loads((nbs / name).read_text(encoding="utf-8"))
        nb["cells"] = apply_directives(nb["cells"], "images/_colab-badge.svg", missing)
        if name == "index.ipynb": nb["cells"].append(md_cell(toctrees(nav)))
        nb.setdefault("metadata", {})["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
        (src / name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    (src / "conf.py").write_text(CONF.format(title=cfg.get("title", "book"), author=cfg.get("author", ""),
                                             copyright=cfg.get("copyright", ""), git_url=cfg.get("git_url", ""),
                                             branch=cfg.get("branch", "main")))
    return missing


def build(out: Path, allow_missing: bool = False, strict: bool = True) -> int:
    "Build the site into `out`; Sphinx's exit status."
    from sphinx.cmd.build import build_main
    cfg, nav = settings(), sidebar()
    with tempfile.TemporaryDirectory(prefix="lengthx-site-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        prepare(src, nav, allow_missing, cfg)
        html = Path(tmp) / "html"                         # myst-nb writes beside the output folder: keep it all in tmp
        args = ["-b", "html", "-q", "-d", str(Path(tmp) / "doctrees"), str(src), str(html)]
        if strict: args[:0] = ["-W", "--keep-going"]
        rc = build_main(args)
        if rc == 0:
            if out.exists(): shutil.rmtree(out)
            shutil.copytree(html, out, ignore=shutil.ignore_patterns("_sources", ".buildinfo", ".doctrees"))
        return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allow-missing", action="store_true", help="skip sidebar pages whose notebook does not exist")
    ap.add_argument("--no-strict", action="store_true", help="do not turn warnings into errors")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: settings.ini's doc_path)")
    a = ap.parse_args(argv)
    out = a.out or ROOT / settings().get("doc_path", "_docs")
    t0 = time.time()
    rc = build(out.resolve(), allow_missing=a.allow_missing, strict=not a.no_strict)
    if rc == 0: print(f"site built in {time.time() - t0:.0f} s: {out / 'index.html'}")
    else: print("site build FAILED (warnings are errors)", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
