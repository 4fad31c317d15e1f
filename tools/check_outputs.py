"""Stored outputs that read committed results must have been made from the committed files as they are now.

    python tools/check_outputs.py [ROOT]     # ROOT defaults to this checkout

A chapter that reads committed results calls `lengthx.evidence.reads(...)`, which prints one line into the
chapter's stored outputs: `Committed results read: main_cpu.json (payload sha256 02eaadcf66d0a4f0), …`. This tool
reads that line from every `nbs/*.ipynb` (nothing is executed) and compares each hash with the payload hash of
`nbs/results/<name>` now: the SHA-256 of its JSON without provenance and checksum (`lengthx.evidence.payload_sha256`),
so a changed number is caught and a metadata-only change (a checksum added, a re-attested file) is not. It fails, naming the chapter and the file, when a file changed (or is gone) since the
chapter's outputs were made: re-execute the chapter (`python tools/nbtool.py run nbs/X.ipynb`, then `nbdev_clean`).
It also fails when a chapter gathered the seeds of a language-model experiment (a file of a unit in
`lengthx.evidence.LM_UNITS`, copied here and held equal by tests/test_check_outputs.py) and a file of the same experiment (same budget, same settings but the seeds) has been
committed since: the chapter's intervals were taken over fewer seeds than the book now holds.
Chapters without the line are not checked; the tool says how many chapters are covered.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

PREFIX = "Committed results read:"                       # lengthx.evidence.READS_PREFIX (kept here: the tool imports nothing)
ITEM = re.compile(r"([\w.+-]+\.json) \(payload sha256 ([0-9a-f]{16,64})\)")
METADATA = ("content_sha256", "provenance", "reattested")   # lengthx.evidence.METADATA
LM_UNITS = ("main", "seeds", "more_seeds", "baselines", "cdape", "successors", "current", "path", "variants")   # == lengthx.evidence.LM_UNITS (a test holds them equal)
SEED_FREE = ("seed", "seeds", "specs", "windowed")                # lengthx.evidence.SEED_FREE
LM_FILE = re.compile(r"^(?:" + "|".join(LM_UNITS) + r")_(?P<preset>[a-z]+)(?:_seed\d+)?\.json$")


def payload_sha256(path: Path) -> str:
    "SHA-256 of a result file's JSON without `METADATA`, canonical (sorted keys, no spaces); as lengthx.evidence.payload_sha256."
    obj = json.loads(path.read_text(encoding="utf-8"))
    body = {k: v for k, v in obj.items() if k not in METADATA} if isinstance(obj, dict) else obj
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def experiment_of(path: Path) -> str | None:
    "The experiment a language-model result file belongs to (budget and settings but the seeds), or None for other files."
    m = LM_FILE.match(path.name)
    if m is None or not path.exists(): return None
    settings = json.loads(path.read_text(encoding="utf-8")).get("settings", {})
    return m["preset"] + " " + json.dumps({k: v for k, v in settings.items() if k not in SEED_FREE}, sort_keys=True)


def unread_seeds(reads: dict[str, str], results: Path) -> list[str]:
    "Committed language-model files of an experiment the chapter gathered that its record does not name (seeds added since)."
    read = {experiment_of(results / n) for n in reads} - {None}
    return sorted(p.name for p in results.glob("*.json") if p.name not in reads and experiment_of(p) in read)


def output_texts(nb: dict) -> list[str]:
    "Every text a notebook's code cells stored as output: streams and the text/plain and text/markdown of results."
    out = []
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if o.get("output_type") == "stream": out.append("".join(o.get("text", "")))
            for mime in ("text/plain", "text/markdown"):
                v = o.get("data", {}).get(mime)
                if v is not None: out.append("".join(v) if isinstance(v, list) else v)
    return out


def recorded_reads(nb_path: Path) -> dict[str, str]:
    "The result files (name -> hash prefix) a notebook's stored outputs say they were made from; {} when it has no record."
    got = {}
    for text in output_texts(json.loads(nb_path.read_text(encoding="utf-8"))):
        for line in text.splitlines():
            if line.startswith(PREFIX): got.update(dict(ITEM.findall(line[len(PREFIX):])))
    return got


def problems(root: Path) -> tuple[list[str], int, int]:
    "(one line per stale file, chapters with a record, chapters in all) for the checkout at `root`."
    nbs, results = root / "nbs", root / "nbs" / "results"
    bad, covered, chapters = [], 0, sorted(nbs.glob("*.ipynb"))
    for nb in chapters:
        reads = recorded_reads(nb)
        if not reads: continue
        covered += 1
        for name, want in sorted(reads.items()):
            path = results / name
            if not path.exists():
                bad.append(f"{nb.relative_to(root)}: its outputs read {name}, which is not committed in nbs/results")
                continue
            have = payload_sha256(path)
            if not have.startswith(want):
                bad.append(f"{nb.relative_to(root)}: its outputs were made from {name} with payload sha256 {want}, the committed file "
                           f"has {have[:len(want)]}; re-execute the chapter")
        for name in unread_seeds(reads, results):
            bad.append(f"{nb.relative_to(root)}: its outputs gathered the seeds of an experiment without {name}, committed "
                       "since; re-execute the chapter")
    return bad, covered, len(chapters)


def main(argv: list[str]) -> int:
    "Check every chapter; print what was checked; 1 when any chapter's outputs are stale."
    root = Path(argv[0]).resolve() if argv else Path(__file__).resolve().parents[1]
    if not (root / "nbs").is_dir(): print(f"check_outputs: {root} has no nbs/ folder"); return 2
    bad, covered, total = problems(root)
    for line in bad: print("STALE", line)
    print(f"check_outputs: {covered} of {total} chapters record the result files they read; "
          + ("all current" if not bad else f"{len(bad)} stale"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
