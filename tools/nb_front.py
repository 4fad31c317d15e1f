"""Normalize every notebook in nbs/ so nbdev's doc processing runs clean and Colab installs the right package.

    python tools/nb_front.py            # rewrite the notebooks in place (idempotent)
    python tools/nb_front.py --check    # exit 1 if any notebook would change

Two mechanical rules, safe to re-run after any notebook edit (run `nbdev_clean` afterwards):

1. Imports live in import-only cells. `nbdev_proc_nbs` executes every cell that contains an import
   (plus the exported cells) in a fresh kernel, so a cell that imports *and* uses a name from an
   earlier, unexecuted cell stops it with a NameError. The top-level imports of such a cell (and a
   top-level `try:` block that guards an optional import) move into a new cell just before it, with
   `#| hide` when the cell it came from is not shown (`hide`, `echo: false`, `include: false`).
   Exported cells are left alone:
   nbdev executes them anyway and `nbdev_export` must keep producing the same modules.
2. The Colab header. The first markdown cell ends with an "Open in Colab" badge that opens this very
   notebook in the repository named by settings.ini's `git_url` (branch `branch`), and the chapter's
   install cells are `import subprocess, sys` followed by a pip install of `git+<git_url>@<branch>`
   that runs only when `google.colab` is loaded, i.e. only on Colab.

`nbs/index.ipynb` (the home page, not a chapter) gets neither badge nor install cell.
"""
from __future__ import annotations

import ast, hashlib, json, re, sys
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
EXPORT_DIRS = {"export", "exporti", "exports"}
BADGE_IMG = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_RE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
INSTALL_IMPORTS = "#| hide\nimport subprocess, sys"


def settings() -> dict[str, str]:
    "The [DEFAULT] section of settings.ini."
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    return dict(cfg["DEFAULT"])


def repo_slug(git_url: str) -> str:
    "'https://github.com/owner/name(.git)' -> 'owner/name'; a clear error for anything else."
    m = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?/?", git_url.strip())
    if not m: raise SystemExit(f"settings.ini git_url must be https://github.com/OWNER/NAME, got {git_url!r}")
    return m.group(1)


def badge(nb_name: str, cfg: dict[str, str]) -> str:
    "Markdown for the Colab badge that opens `nbs/<nb_name>` of the repository in settings.ini."
    target = f"https://colab.research.google.com/github/{repo_slug(cfg['git_url'])}/blob/{cfg.get('branch', 'main')}/nbs/{nb_name}"
    return f"[![Open In Colab]({BADGE_IMG})]({target})"


def install_source(cfg: dict[str, str]) -> str:
    "The install cell: pip install the package from its git repository, on Colab only."
    url = f"git+{cfg['git_url'].rstrip('/')}@{cfg.get('branch', 'main')}"
    return ("#| hide\n# On Colab, install the package this chapter belongs to, from its repository.\n"
            "if \"google.colab\" in sys.modules:\n"
            f"    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", \"{url}\"], check=True)")


def src(cell: dict) -> str: return "".join(cell["source"])


def directives(source: str) -> list[str]:
    "The leading `#| ...` lines of a cell."
    out = []
    for line in source.splitlines():
        if line.startswith("#|"): out.append(line)
        elif line.strip(): break
    return out


def dir_names(source: str) -> set[str]:
    return {re.split(r"[\s:]", d[2:].strip(), maxsplit=1)[0] for d in directives(source)}


def new_cell(kind: str, source: str, seed: str) -> dict:
    "A cell with a deterministic id (so re-running the script changes nothing)."
    cell = {"cell_type": kind, "id": hashlib.sha1(f"{seed}\n{source}".encode()).hexdigest()[:8],
            "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code": cell.update(execution_count=None, outputs=[])
    return cell


def _is_import_stmt(node: ast.stmt) -> bool:
    "An import, or a top-level `try:` that guards imports (the optional-dependency idiom)."
    if isinstance(node, (ast.Import, ast.ImportFrom)): return True
    return isinstance(node, ast.Try) and any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _nested_imports(tree: ast.Module, lines: list[str]) -> list[ast.stmt]:
    "Imports inside an `if`/`for`/`with`/`def` (not inside a `try`, which may guard a missing module), alone on their lines."
    par = _parents(tree)
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, (ast.Import, ast.ImportFrom)) or par.get(n) is tree: continue
        chain, p = [], par.get(n)
        while p is not None and p is not tree: chain.append(p); p = par.get(p)
        if any(isinstance(a, ast.Try) for a in chain): continue
        siblings = [s for s in ast.walk(par[n]) if isinstance(s, ast.stmt) and s is not n and s is not par[n]]
        if any(s.lineno <= n.end_lineno and s.end_lineno >= n.lineno for s in siblings): continue   # `a; import b`
        if lines[n.lineno - 1][:n.col_offset].strip(): continue
        out.append(n)
    return out


def import_directives(source: str) -> list[str]:
    "Directives for the import-only cell: hidden when the code it came from is not shown (nothing to see), and `eval: false` kept."
    d = {re.sub(r"\s+", "", x[2:]).lower() for x in directives(source)}
    out = ["#| hide"] if d & {"hide", "echo:false", "include:false"} else []
    return out + (["#| eval: false"] if "eval:false" in d else [])


def split_imports(cell: dict, seed: str) -> list[dict]:
    "[cell] unchanged, or [import-only cell, rest of cell] when the cell mixes imports with other code."
    if cell["cell_type"] != "code": return [cell]
    source = src(cell)
    if dir_names(source) & EXPORT_DIRS: return [cell]
    try: tree = ast.parse(source)
    except SyntaxError: return [cell]                       # magics, shell escapes: nbdev does not run these
    body = tree.body
    imps = [n for n in body if _is_import_stmt(n)]
    lines = source.splitlines()
    nested = _nested_imports(tree, lines) if len(imps) < len(body) else []
    if not (imps or nested) or len(imps) == len(body): return [cell]
    taken: dict[int, str] = {}
    for n in imps:
        for i in range(n.lineno - 1, n.end_lineno): taken[i] = lines[i]
    for n in nested:                                        # dedent a nested import to module level
        for i in range(n.lineno - 1, n.end_lineno): taken[i] = lines[i][n.col_offset:]
    keep_dirs = import_directives(source)
    imp_src = "\n".join(keep_dirs + [taken[i] for i in sorted(taken)])
    rest = list(lines)
    par = _parents(tree)
    for n in nested:                                        # a block left empty gets `pass`
        block = next(b for f in ("body", "orelse", "finalbody") for b in [getattr(par[n], f, None)] if b and n in b)
        if all(s in nested for s in block) and n is block[0]: rest[n.lineno - 1] = lines[n.lineno - 1][:n.col_offset] + "pass"
    rest = [l for i, l in enumerate(rest) if i not in taken or rest[i] != lines[i]]
    while rest and not rest[-1].strip(): rest.pop()
    n_dir = len(directives(source))                         # drop blank lines left at the top of the code
    head, tail = rest[:n_dir], rest[n_dir:]
    while tail and not tail[0].strip(): tail.pop(0)
    rest_cell = dict(cell, source="\n".join(head + tail).splitlines(keepends=True))
    return [new_cell("code", imp_src, seed + (cell.get("id") or "")), rest_cell]


def is_install(cell: dict) -> bool:
    s = src(cell)
    return cell["cell_type"] == "code" and "google.colab" in s and "pip" in s


def fix_header(cells: list[dict], nb_name: str, cfg: dict[str, str]) -> list[dict]:
    "Badge at the end of the first markdown cell; canonical install cells where the old ones were."
    md = next((c for c in cells if c["cell_type"] == "markdown"), None)
    if md is None: raise SystemExit(f"{nb_name}: a chapter needs a markdown title cell")
    text, b = src(md).rstrip("\n"), badge(nb_name, cfg)
    text = BADGE_RE.sub(b, text) if BADGE_RE.search(text) else text + "\n\n" + b
    md["source"] = text.splitlines(keepends=True)
    head = cells[:8]
    where = next((i for i, c in enumerate(head) if is_install(c)), None)
    if where is None:                                     # after the title and a `default_exp` cell
        where = cells.index(md) + 1
        while where < len(cells) and cells[where]["cell_type"] == "code" and "default_exp" in dir_names(src(cells[where])):
            where += 1
        out = cells[:where]
    else:
        out = [c for c in cells[:where] if not (c["cell_type"] == "code" and src(c).strip() == INSTALL_IMPORTS)]
        where += 1                                        # drop the old install cell itself
    install = install_source(cfg)
    old = cells[where - 1] if is_install(cells[where - 1]) else None
    out += [new_cell("code", INSTALL_IMPORTS, nb_name + "imports"),
            dict(old, source=install.splitlines(keepends=True), outputs=[], execution_count=None) if old
            else new_cell("code", install, nb_name + "install")]
    return out + cells[where:]


def process(path: Path, cfg: dict[str, str]) -> str:
    "The notebook's new JSON text."
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    if path.name != "index.ipynb": cells = fix_header(cells, path.name, cfg)
    out = []
    for c in cells: out += split_imports(c, path.name)
    nb["cells"] = out
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"   # nbdev_clean's format


def main(argv: list[str]) -> int:
    cfg, changed = settings(), []
    for path in sorted(NBS.glob("*.ipynb")):
        new = process(path, cfg)
        if json.loads(new) != json.loads(path.read_text(encoding="utf-8")):
            changed.append(path.name)
            if "--check" not in argv: path.write_text(new, encoding="utf-8")
    verb = "would change" if "--check" in argv else "changed"
    print(f"nb_front: {verb} {len(changed)} notebook(s){': ' + ', '.join(changed) if changed else ''}")
    return 1 if changed and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
