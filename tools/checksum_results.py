"""Give every committed result file its content checksum (`lengthx.results.CHECKSUM`) and list it in the manifest, or check both.

    python tools/checksum_results.py            # add the checksum to each result in nbs/results that has none; write the manifest
    python tools/checksum_results.py --check    # exit 1 if a result there has none, one that does not match, or the manifest is stale

The manifest (`nbs/results/MANIFEST.sha256`, `lengthx.results.MANIFEST`) lists the SHA-256 and name of every result file,
as sha256sum writes them; a notebook without a checkout (Colab) fetches it first, then every file it lists
(`lengthx.results.committed_results`). `--check` fails when a result was added, changed or removed without it.

A file whose checksum does not match its content (edited by hand) is never rewritten here: re-attest it on purpose
with `lengthx.results.reattest(path, note)`, which records the note in its provenance. Only files in the one result
schema are touched (chapter_times.json and other JSON files are left alone); the content is written back unchanged,
with the checksum beside it.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lengthx.results import (CHECKSUM, MANIFEST, is_result, manifest_text, parse_manifest, read_json_file,  # noqa: E402
                             verified, write_results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if a result lacks its checksum or fails it")
    ap.add_argument("dir", nargs="?", default=str(ROOT / "nbs" / "results"), help="folder of result files")
    a = ap.parse_args(argv)
    bad = 0
    for path in sorted(Path(a.dir).glob("*.json")):
        obj = read_json_file(path)
        if not is_result(obj): continue
        if CHECKSUM in obj:
            try: verified(obj, path)
            except ValueError as e: print(e); bad += 1
        elif a.check:
            print(f"{path.name}: no {CHECKSUM}"); bad += 1
        else:
            write_results(path, obj)
            print(f"{path.name}: checksum added")
    bad += manifest(Path(a.dir), a.check, bad)
    return 1 if bad else 0


def manifest(d: Path, check: bool, bad: int) -> int:
    "Check (1 when stale) or write the manifest of folder `d`; it is not written while a result there fails its checksum."
    want, path = manifest_text(d), d / MANIFEST
    have = path.read_text(encoding="utf-8") if path.is_file() else ""
    if have == want: return 0
    if check or bad:
        old, new = parse_manifest(have) if have else {}, parse_manifest(want)
        diff = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
        print(f"{path.name} does not list the result files as they are ({', '.join(diff[:5])}{', ...' if len(diff) > 5 else ''}); "
              "run python tools/checksum_results.py")
        return 1
    path.write_text(want, encoding="utf-8")
    print(f"{path.name}: written ({len(want.splitlines())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
