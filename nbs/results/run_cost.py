"""Make the measurements that chapter 71 (nbs/71_cost.ipynb) plots.

    OMP_NUM_THREADS=1 python nbs/results/run_cost.py

Two parts, each written to `cost_cpu.json` next to this file as soon as it finishes:
  attention  `lengthx.cli.bench_attention`: median time and peak extra memory of one attention forward
             (B=1, H=8, Dh=64), every path, T = 512, 2048, 8192, for NoPE, ALiBi and DAPE-Kerple
             (DAPE's naive path only up to 2048: at 8192 its [1, 32, T, T] hidden map alone is 8.6 GB)
  model      `lengthx.cli.bench_model`: tokens/s of the `small` preset (6 layers, width 512) at T=512,
             batch 1, for every registered family (`pe_examples("default")` at run time), forward
             (no grad) and train (forward + backward); PEs interleaved within each repetition so that
             a change in the machine's load hits all of them alike
Provenance (command, git sha, device, threads, versions, load average before and after) is stored.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import lengthx
from lengthx.attention import PATHS, pe_examples
from lengthx.cli import bench_attention, bench_model, provenance

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ATTENTION = [("nope", PATHS, (512, 2048, 8192)), ("alibi", PATHS, (512, 2048, 8192)),
             ("dape:kerple_log", ("naive", "chunked"), (512, 2048)), ("dape:kerple_log", ("chunked",), (8192,))]


def _prov(t0: float, load0) -> dict:
    p = provenance()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "lengthx"], cwd=ROOT, capture_output=True, text=True).stdout
    p.update(git_dirty=bool(dirty.strip()), lengthx=lengthx.__version__, threads=torch.get_num_threads(),
             omp_num_threads=os.environ.get("OMP_NUM_THREADS"), cpu_count=os.cpu_count(),
             loadavg_start=[round(x, 2) for x in load0], loadavg_end=[round(x, 2) for x in os.getloadavg()],
             wall_seconds=round(time.time() - t0, 1),
             command="python nbs/results/" + Path(sys.argv[0]).name + " " + " ".join(sys.argv[1:]))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "cost_cpu.json"))
    ap.add_argument("--parts", default="attention,model")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(a.out)
    res = json.loads(out.read_text()) if out.exists() else {}

    def save():
        tmp = out.with_suffix(".tmp"); tmp.write_text(json.dumps(res, indent=1) + "\n"); os.replace(tmp, out)

    if "attention" in a.parts and "attention" not in res:
        t0, load0 = time.time(), os.getloadavg()
        rows = []
        for spec, paths, lens in ATTENTION:
            for r in bench_attention(spec, lens, paths, n_heads=8, head_dim=64, reps=a.reps):
                rows.append({"pe": spec, **r}); print(rows[-1], flush=True)
        res["attention"] = {"rows": rows, "shape": {"B": 1, "H": 8, "Dh": 64}, "reps": a.reps, "provenance": _prov(t0, load0)}
        save()
    if "model" in a.parts and "model" not in res:
        t0, load0 = time.time(), os.getloadavg()
        pes = pe_examples("default")
        res["model"] = {"preset": "small", "length": 512, "batch_size": 1, "reps": a.reps, "pes": pes}
        for mode in ("forward", "train"):
            rows = bench_model(pes, "small", 512, batch_size=1, reps=a.reps, mode=mode)
            for r in rows: print(mode, r, flush=True)
            res["model"][mode] = rows
        res["model"]["provenance"] = _prov(t0, load0)
        save()


if __name__ == "__main__":
    main()
