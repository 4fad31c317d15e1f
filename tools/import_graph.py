"""The package's import graph, read from its source with `ast` (nothing is imported or run).

    python tools/import_graph.py [ROOT]      # a report: modules and lines, imports, cycles, upward imports

Every `import lengthx...` / `from . import ...` counts, at module level or inside a function; `FLOORS`
is the layering of DESIGN.md ("Additions for the third wave"): a module may import only from its own
floor or below, and never in a cycle.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

FLOORS = [   # bottom up
    ["attention", "data"],
    ["pe.*", "model", "evaluate"],
    ["train", "bench", "results"],
    ["tasks", "recall", "sweep", "pretrained", "evidence", "ruler"],
    ["experiments", "exercises"],
    ["cli"],
]


def floor_of(mod: str) -> int:
    "The floor of a module name relative to the package (`pe.rotary`, `cli`)."
    for i, names in enumerate(FLOORS):
        if mod in names or (mod.startswith("pe.") and "pe.*" in names): return i
    raise KeyError(f"module {mod!r} has no floor in FLOORS; add it")


def modules(root: Path) -> dict[str, Path]:
    "Module name (relative to the package) -> file, for every .py of lengthx/ but __init__ and _modidx."
    pkg = root / "lengthx"
    out = {}
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg).with_suffix("")
        if rel.name in ("__init__", "_modidx"): continue
        out[".".join(rel.parts)] = f
    return out


def _target(node, mod: str, known: set[str]) -> list[str]:
    "The package modules an import node names."
    base = mod.split(".")[:-1]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:   # relative: from . import x / from ..attention import y
            parts = base[: len(base) - node.level + 1]
            prefix = ".".join(parts + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
            if prefix == "lengthx": prefix = ""
            elif prefix.startswith("lengthx."): prefix = prefix[len("lengthx."):]
            else: return []
        names = [f"{prefix}.{a.name}".strip(".") for a in node.names] + [prefix]
        if node.level == 0 and not (node.module or "").startswith("lengthx"): return []
    if isinstance(node, ast.Import):
        names = [n[len("lengthx."):] for n in names if n.startswith("lengthx.")]
    hits = []
    for n in names:
        while n and n not in known: n = n.rpartition(".")[0]
        if n and n != mod: hits.append(n)
    return sorted(set(hits))


def imports(root: Path) -> dict[str, dict[str, str]]:
    "module -> {imported module: 'top' or 'function'} (a module imported both ways counts as 'top')."
    mods = modules(root)
    known = set(mods)
    graph = {}
    for mod, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        edges: dict[str, str] = {}
        def visit(node, inside: bool):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in _target(child, mod, known):
                        if edges.get(t) != "top": edges[t] = "function" if inside else "top"
                visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        visit(tree, False)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, dict]) -> list[list[str]]:
    "The strongly connected components with more than one module (Tarjan)."
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def strong(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in graph.get(v, {}):
            if w not in index: strong(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index: strong(v)
    return out


def upward(graph: dict[str, dict]) -> list[tuple[str, str, str]]:
    "(importer, imported, how) for every import that runs from a lower floor to a higher one."
    return [(a, b, how) for a, es in graph.items() for b, how in es.items() if floor_of(b) > floor_of(a)]


def report(root: Path) -> str:
    g, mods = imports(root), modules(root)
    lines = ["module | floor | lines | imports (f: inside a function)", "---|---|---|---"]
    for m in sorted(mods, key=lambda m: (-len(mods[m].read_text().splitlines()), m)):
        try: fl = str(floor_of(m))
        except KeyError: fl = "?"
        deps = ", ".join(f"{d}{' (f)' if h == 'function' else ''}" for d, h in sorted(g[m].items()))
        lines.append(f"{m} | {fl} | {len(mods[m].read_text().splitlines())} | {deps}")
    cyc = cycles(g)
    lines.append(f"\ncycles: {len(cyc)}" + "".join(f"\n  {' <-> '.join(c)}" for c in cyc))
    try: up = upward(g)
    except KeyError as e: up = [("?", str(e), "")]
    lines.append(f"upward imports: {len(up)}" + "".join(f"\n  {a} -> {b} ({h})" for a, b, h in up))
    into_cli = sorted(m for m, es in g.items() if "cli" in es)
    lines.append(f"modules importing cli: {into_cli or 'none'}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
