"""Give every committed result file its content checksum (`lengthx.results.CHECKSUM`), or check that it has one.

    python tools/checksum_results.py            # add the checksum to each result in nbs/results that has none
    python tools/checksum_results.py --check    # exit 1 if a result there has none, or one that does not match

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

from lengthx.results import CHECKSUM, is_result, read_json_file, verified, write_results  # noqa: E402


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
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
