"""What a resumable long-document or RULER unit has finished so far, written as a result marked partial.

    cd <the clean clone the unit runs in> && PYTHONPATH=$PWD python /path/to/tools/snapshot_partial.py long_docs_more cpu OUT DEST

A long-document unit (`long_docs`, `long_docs_more`) keeps each finished (method, document) and (method, length) item in
OUT/runs/<budget>/<unit>.partial.json and writes its result only when every method is done, which takes several sessions
on a CPU. This script assembles the methods whose every item is finished with the unit's own runner (the items are read,
never computed again), so the result is what the finished run will hold for those methods; `result["partial"]` names the
methods finished and left. For `ruler`, a (method, length) column is finished when every task is scored at it;
the result is the unit's grid, mean and effective length over the finished columns, and `result["partial"]` lists
the columns finished and left as "method@length". Run it with the package of the clone that made the items (PYTHONPATH), so the provenance names
the commit that computed them. The finished run later replaces the file.
"""
import argparse
import json
import sys
from pathlib import Path


class NotFinished(KeyError):
    "An item the partial file does not hold yet."


def finished_methods(S: dict, items: dict) -> list[str]:
    "Methods whose every document and every passkey length is finished (a capped method needs only its lengths)."
    caps, out = S.get("caps", {}), []
    for spec in S["methods"]:
        docs = sum(k.startswith(f"ppl|{spec}|") for k in items)
        keys = {k.rsplit("|", 1)[1] for k in items if k.startswith(f"passkey|{spec}|")}
        want = {str(T) for T in S["passkey"]["lengths"] if T <= caps.get(spec, T)}
        if docs == S["n_windows"] and keys == want: out.append(spec)
    return out


def finished_columns(S: dict, items: dict) -> dict[str, list[int]]:
    "RULER: per method, the lengths at which every task is scored (in the settings' order)."
    return {m: [T for T in Ts if all(f"{m}|{t}|{T}" in items for t in S["tasks"])] for m, Ts in S["methods"].items()}


def ruler_snapshot(S: dict, items: dict) -> tuple[dict, float]:
    "The `ruler` unit's result over its finished columns (the unit's own summary: grid, mean by length, effective length)."
    from lengthx.ruler import effective_length, mean_by_length
    done = {m: Ts for m, Ts in finished_columns(S, items).items() if Ts}
    if not done: sys.exit(f"no (method, length) column of ruler is finished yet ({len(items)} cells)")
    grid = {m: {t: {str(T): items[f"{m}|{t}|{T}"] for T in Ts} for t in S["tasks"]} for m, Ts in done.items()}
    means = {m: mean_by_length(g) for m, g in grid.items()}
    result = {"grid": grid, "mean_by_length": {m: {str(T): v for T, v in ms.items()} for m, ms in means.items()},
              "effective_length": {m: effective_length(ms) for m, ms in means.items()},
              "partial": {"finished": [f"{m}@{T}" for m, Ts in done.items() for T in Ts],
                          "left": [f"{m}@{T}" for m, Ts in S["methods"].items() for T in Ts if T not in done.get(m, [])]}}
    seconds = sum(items[f"{m}|{t}|{T}"]["seconds"] for m, Ts in done.items() for t in S["tasks"] for T in Ts)
    return result, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("unit", choices=["long_docs", "long_docs_more", "ruler"])
    ap.add_argument("budget")
    ap.add_argument("out", type=Path, help="the --out folder the unit runs in")
    ap.add_argument("dest", type=Path, help="where to write the result (e.g. nbs/results/long_docs_more_cpu.json)")
    a = ap.parse_args(argv)
    from lengthx import experiments as X
    from lengthx.results import result_provenance, write_results
    S = X._plain(X.unit_settings(a.unit, a.budget))
    part_file = a.out / "runs" / a.budget / f"{a.unit}.partial.json"
    stored = json.loads(part_file.read_text())
    if stored["settings"] != S:
        sys.exit(f"{part_file} was made with other settings than this checkout's {a.unit} at {a.budget}")
    items = stored["items"]
    if a.unit == "ruler":
        result, seconds = ruler_snapshot(S, items)
        command = f"lengthx reproduce --budget {a.budget} --only ruler (its finished columns, by tools/snapshot_partial.py)"
        write_results(a.dest, {"unit": a.unit, "preset": a.budget, "settings": S, "result": X._plain(result),
                               "provenance": result_provenance(seed=0, command=command, seconds=seconds, device="cpu")})
        print(f"{a.dest}: {len(result['partial']['finished'])} columns finished, {len(result['partial']['left'])} left; "
              f"{seconds / 60:.0f} min of cells")
        return 0
    done = finished_methods(S, items)
    if not done: sys.exit(f"no method of {a.unit} is finished yet ({len(items)} items)")

    def recall(key, fn):
        if key not in items: raise NotFinished(key)
        return items[key]

    result = X.long_docs_grid({**S, "methods": done}, progress=False, step=recall)
    seconds = sum(v.get("seconds", 0) for k, v in items.items() if k.split("|")[1] in done)
    result["partial"] = {"finished": done, "left": [m for m in S["methods"] if m not in done]}
    command = f"lengthx reproduce --budget {a.budget} --only {a.unit} (its finished methods, by tools/snapshot_partial.py)"
    write_results(a.dest, {"unit": a.unit, "preset": a.budget, "settings": S, "result": X._plain(result),
                           "provenance": result_provenance(seed=0, command=command, seconds=seconds, device="cpu")})
    print(f"{a.dest}: {len(done)} of {len(S['methods'])} methods ({', '.join(done)}); {seconds / 60:.0f} min of items")
    return 0


if __name__ == "__main__":
    sys.exit(main())
