"""Measure how long each chapter notebook takes to run top to bottom in QUICK mode on this machine.

    python tools/time_chapters.py                      # every chapter in nbs/ (NN_*.ipynb), one at a time
    python tools/time_chapters.py 10_rope 21_kerple    # only these; merged into the existing JSON

Each notebook runs in a fresh Python process (execnb, as `tools/nbtool.py run` does) and is NOT saved,
so the stored outputs stay as they are. Results go to nbs/results/chapter_times.json together with the
machine, thread count, date and git sha; the course page (nbs/81_course.ipynb) renders its table from it.
Run it on a quiet machine: other jobs on the same cores make every number larger.
"""
from __future__ import annotations

import argparse, json, os, platform, signal, subprocess, sys, time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "nbs" / "results" / "chapter_times.json"
RUN_ONE = """
import os, sys
from pathlib import Path
from execnb.nbio import read_nb
from execnb.shell import CaptureShell
p = Path(sys.argv[1]).resolve(); os.chdir(p.parent)
CaptureShell(p).run_all(read_nb(p), exc_stop=True)
"""


def chapters(names: list[str]) -> list[Path]:
    "Notebook paths for the given stems (or every numbered chapter when none is given)."
    nbs = ROOT / "nbs"
    if not names: return sorted(p for p in nbs.glob("[0-9][0-9]_*.ipynb"))
    out = []
    for n in names:
        p = nbs / (Path(n).stem + ".ipynb")
        if not p.exists(): sys.exit(f"no notebook {p}")
        out.append(p)
    return out


def git_sha() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "nbs", "lengthx"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def machine() -> dict:
    "What the numbers depend on: CPU model, cores, torch threads, load when the run began."
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"): cpu = line.split(":", 1)[1].strip(); break
    except OSError:
        pass
    import torch
    return dict(cpu=cpu, cores=os.cpu_count(), torch_threads=torch.get_num_threads(), torch=torch.__version__,
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS"),
                python=platform.python_version(), load_avg_1m=round(os.getloadavg()[0], 2))


def time_one(path: Path, timeout: int) -> dict:
    "Run one notebook in a fresh process; wall seconds, whether it finished cleanly, and the 1-minute load average after it."
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    env.pop("LENGTHX_FULL", None)                     # QUICK mode, as CI runs the chapters
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", RUN_ONE, str(path)], env=env, capture_output=True, text=True, timeout=timeout)
        ok, err = r.returncode == 0, r.stderr.strip().splitlines()[-1:] if r.returncode else []
    except subprocess.TimeoutExpired:
        ok, err = False, [f"timed out after {timeout} s"]
    row = dict(seconds=round(time.perf_counter() - t0, 1), ok=ok, load_end=round(os.getloadavg()[0], 2))
    if err: row["error"] = err[0][:300]
    return row


def _stop(signum, frame):
    raise KeyboardInterrupt   # subprocess.run then kills the running notebook instead of leaving it orphaned


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="notebook stems, e.g. 10_rope (default: all numbered chapters)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds before one notebook is abandoned")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    old = json.loads(a.out.read_text()) if a.out.exists() and a.names else {}
    res = dict(machine=machine(), date=datetime.now(timezone.utc).isoformat(timespec="seconds"), git=git_sha(),
               mode="QUICK", chapters=dict(old.get("chapters", {})))
    paths = chapters(a.names)
    for i, p in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {p.name} ...", end=" ", flush=True)
        row = time_one(p, a.timeout)
        res["chapters"][p.stem] = row
        print(f"{row['seconds']} s" + ("" if row["ok"] else f"  FAILED: {row.get('error', '')}"), flush=True)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")   # after each notebook: nothing lost if interrupted
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("\ninterrupted: the chapters finished before it are saved")
