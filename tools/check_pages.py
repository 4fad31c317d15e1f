"""The page check: the mechanical faults a reader meets on a chapter page, counted per chapter.

    python tools/check_pages.py            # print the counts; exit 1 if any chapter has more than its allowance
    python tools/check_pages.py --ratchet  # lower the allowances to today's counts (never raises one)

What a reader sees is what the site shows: nbdev's directives applied as tools/build_site.py applies them
(exported and `code-fold` cells are folded, `hide`/`echo: false` cells are not shown). Four classes:

- `long_cells`: a code cell shown unfolded with more than 40 lines (a page shows the idea; plumbing is folded);
- `hashes`: a commit or content hash in visible prose or output, outside the provenance pages (55, 72);
- `raw_reprs`: a cell whose result is a raw dict repr (`{'key': …}`) instead of a table or a sentence;
- `grader_failures`: a stored grader report with failed checks (a stub's grader runs when the reader calls it); the
  grader's own page (GRADER_PAGES) shows one on purpose.

`tools/page_allowance.json` holds each chapter's allowance: the counts when the check came in. A chapter may
go down, never up; a new chapter is allowed none. The allowances only fall (`--ratchet`), so the book converges.
"""
import argparse, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from build_site import apply_directives  # noqa: E402  (the site's own reading of the directives)

ALLOWANCE = ROOT / "tools" / "page_allowance.json"
MAX_LINES = 40
PROVENANCE_PAGES = {"55_results", "72_reproduce"}
GRADER_PAGES = {"80_exercises"}      # the page that teaches the grader shows a wrong answer's failing report on purpose
HASH = re.compile(r"(?<![\w/#.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}(?![\w/-])")
DETAILS = re.compile(r"<details>.*?</details>", re.S)    # a collapsed detail: where hashes belong on a page
DICT_REPR = re.compile(r"^\{['\"]")
CLASSES = ("long_cells", "hashes", "raw_reprs", "grader_failures")


def visible_text(cell: dict) -> str:
    "What a reader reads of a cell: markdown source, or the shown source and the printed/returned text."
    if cell["cell_type"] == "markdown": return cell["source"]
    tags = set(cell.get("metadata", {}).get("tags", []))
    parts = [] if tags & {"hide-input", "remove-input"} else [cell["source"]]
    if "remove-output" not in tags:
        for o in cell.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            data = o.get("data", {})
            for kind in ("text/markdown", "text/plain"):
                if kind in data and not (kind == "text/plain" and {"text/html", "text/markdown"} & data.keys()): parts.append("".join(data[kind]))
    return DETAILS.sub("", "\n".join(parts))


def page_counts(path: Path) -> dict[str, int]:
    "The four counts for one chapter notebook, as its page shows it."
    cells = [dict(c, source="".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    shown = apply_directives(cells, badge="")
    n = dict.fromkeys(CLASSES, 0)
    for c in shown:
        tags = set(c.get("metadata", {}).get("tags", []))
        if c["cell_type"] == "code" and not tags & {"hide-input", "remove-input"}:
            n["long_cells"] += len(c["source"].rstrip("\n").splitlines()) > MAX_LINES
        if path.stem not in PROVENANCE_PAGES: n["hashes"] += len(HASH.findall(visible_text(c)))
        if c["cell_type"] != "code": continue
        results = ["".join(o["data"]["text/plain"]) for o in c.get("outputs", [])
                   if o.get("output_type") == "execute_result" and "text/plain" in o.get("data", {}) and len(o["data"]) == 1]
        n["raw_reprs"] += any(DICT_REPR.match(r) for r in results)
        printed = "".join("".join(o.get("text", "")) for o in c.get("outputs", []))
        n["grader_failures"] += path.stem not in GRADER_PAGES and "checks passed" in printed and "✗" in printed
    return n


def all_counts() -> dict[str, dict[str, int]]:
    "Counts for every page of the book (the chapters and the home page)."
    return {p.stem: page_counts(p) for p in sorted((ROOT / "nbs").glob("*.ipynb"))}


def over(counts: dict, allowance: dict) -> list[str]:
    "One line per chapter and class above its allowance."
    return [f"{ch}: {k} = {v}, allowed {allowance.get(ch, {}).get(k, 0)}"
            for ch, row in counts.items() for k, v in row.items() if v > allowance.get(ch, {}).get(k, 0)]


def ratchet(counts: dict, allowance: "dict | None") -> dict:
    "Allowances lowered to today's counts; never raised (a chapter the allowances do not name stays at 0)."
    new = {ch: {k: v if allowance is None else min(v, allowance.get(ch, {}).get(k, 0)) for k, v in row.items()}
           for ch, row in counts.items()}
    return {ch: r for ch, r in new.items() if any(r.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratchet", action="store_true", help="lower each allowance to today's count")
    a = ap.parse_args(argv)
    counts = all_counts()
    allowance = json.loads(ALLOWANCE.read_text()) if ALLOWANCE.exists() else None   # None: the check's first run
    totals = {k: sum(r[k] for r in counts.values()) for k in CLASSES}
    allowed = {k: sum(r.get(k, 0) for r in (allowance or {}).values()) for k in CLASSES}
    print("page check: " + ", ".join(f"{k} {totals[k]} (allowed {allowed[k]})" for k in CLASSES))
    if a.ratchet:
        ALLOWANCE.write_text(json.dumps(ratchet(counts, allowance), indent=1, sort_keys=True) + "\n")
        print(f"allowances written to {ALLOWANCE.relative_to(ROOT)}")
        return 0
    bad = over(counts, allowance or {})
    for line in bad: print("FAIL " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
