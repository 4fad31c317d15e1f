"""Time DAPE, CDAPE and FIRE beside Kerple-log and NoPE on the CPU, the fused refine kernel against the eager form
(LENGTHX_FUSED=off) and FIRE's Toeplitz mask against its dense one, interleaved in one process; write one JSON file.

    python tools/dape_fast_bench.py nbs/results/dape_fast_cpu.json [--reps 4] [--threads 2]
    python tools/dape_fast_bench.py nbs/results/dape_fast_peak_cpu.json --peak-only    # memory at 8,192 tokens

Chapter 43 (`nbs/43_dape_fast.ipynb`) reads the file; it re-runs this script when LENGTHX_FULL=1.
"""
import argparse, json, os, platform, resource, statistics, subprocess, sys, time

import torch

from lengthx.bench import forward_step, interleaved_times, lengthx_model, train_step
from lengthx.pe import fused
from lengthx.pe.cdape import cdape_flops
from lengthx.pe.dape import dape_flops, flop_limit
from lengthx.pe.fire import FirePE

SPECS = {"nope": "nope", "kerple": "kerple_log", "fire": "fire", "dape": "dape:kerple_log", "cdape": "cdape:k=3:kerple_log"}


def load() -> list[float]:
    "The 1-, 5- and 15-minute load averages (the machine is shared: a ratio is only as good as the load it was taken at)."
    return list(os.getloadavg())


def with_eager(fn):
    "fn with the kernel switched off (the eager form of f, as before the kernel)."
    def run():
        with fused.eager_refine(): fn()
    return run


def with_dense_fire(fn):
    "fn with FIRE's bias as a dense [H, T, T] mask (as before its Toeplitz form)."
    def run():
        orig = FirePE.toeplitz
        FirePE.toeplitz = lambda self, pos: False
        try: fn()
        finally: FirePE.toeplitz = orig
    return run


def timings(mode: str, T: int, B: int, reps: int) -> dict:
    "Median seconds per call of every contender of `mode`, interleaved, after a warm-up round."
    torch.manual_seed(0)
    idx = torch.randint(0, 256, (B, T))
    step = forward_step if mode == "forward" else train_step
    names = ["nope", "kerple", "fire", "dape", "cdape"] if mode == "forward" else ["kerple", "dape", "cdape"]
    models = {n: lengthx_model(SPECS[n], "small", T) for n in names}
    calls = {}
    if mode == "forward":   # Kerple-log on the path DAPE takes: materialized blocks of queries instead of one fused sdpa
        models["kerple (chunked path)"] = lengthx_model(SPECS["kerple"], "small", T)
        models["kerple (chunked path)"].cfg.attn_path = "chunked"
    for n, m in models.items():
        fn = lambda m=m: step(m, idx)
        calls[n] = fn
        if n in ("dape", "cdape"): calls[n + " (eager)"] = with_eager(fn)
        if n == "fire": calls["fire (dense mask)"] = with_dense_fire(fn)
    times = interleaved_times(calls, reps)
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "n": len(v)} for k, v in times.items()}


def limits(T: int, B: int, mode: str) -> dict:
    "The FLOP floor of DAPE and CDAPE (small preset): model FLOPs plus f's, over model FLOPs."
    d, L, H = 512, 6, 8
    k = {"dape": dape_flops(B, H, T, T), "cdape": cdape_flops(B, H, T, T, k=3)}
    return {n: flop_limit(v, d, L, T, B) for n, v in k.items()}


PEAK = """
import resource, sys, torch
from lengthx.bench import forward_step, lengthx_model
torch.set_num_threads(int(sys.argv[2]))
m = lengthx_model("dape:kerple_log", "small", int(sys.argv[1]))
idx = torch.randint(0, 256, (1, int(sys.argv[1])))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
forward_step(m, idx)
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_mib(T: int, eager: bool, threads: int) -> float:
    "Peak resident memory added by one DAPE-Kerple forward at T tokens (MiB, over the model's own), in a fresh process."
    env = {**os.environ, "LENGTHX_FUSED": "off" if eager else "auto"}
    out = subprocess.run([sys.executable, "-c", PEAK, str(T), str(threads)], env=env, capture_output=True, text=True, check=True)
    base, after = (int(v) for v in out.stdout.split()[-2:])   # KiB (Linux ru_maxrss)
    return (after - base) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-len", type=int, default=8192)
    ap.add_argument("--peak-only", action="store_true", help="measure only the peak memory, into an existing result file")
    ap.add_argument("--forward-only", action="store_true", help="measure only the forward, into an existing result file")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.forward_only:
        res = json.load(open(a.out))
        res["load"]["forward_start"] = load()
        res["forward"] = {"T": 2048, "B": 1, "times": timings("forward", 2048, 1, a.reps), "limits": limits(2048, 1, "forward")}
        res["load"]["forward_end"] = load()
        json.dump(res, open(a.out, "w"), indent=1)
        print({k: round(v["median_s"], 3) for k, v in res["forward"]["times"].items()})
        return
    if a.peak_only:   # a file of its own: the peak memory of one DAPE forward at --peak-len, eager f and kernel
        res = {"threads": a.threads, "load": {"start": load()}, "torch": torch.__version__}
        res["peak_mib"] = {"T": a.peak_len, "eager": peak_mib(a.peak_len, True, a.threads), "fused": peak_mib(a.peak_len, False, a.threads)}
        res["load"]["end"] = load()
        json.dump(res, open(a.out, "w"), indent=1)
        print("peak MiB", res["peak_mib"])
        return
    t0 = time.time()
    fused.cpu_kernel()
    res = {"threads": a.threads, "reps": a.reps, "preset": "small", "machine": platform.processor() or platform.machine(),
           "python": platform.python_version(), "torch": torch.__version__, "build": fused.build_info(), "load": {"start": load()}}
    res["forward"] = {"T": 2048, "B": 1, "times": timings("forward", 2048, 1, a.reps), "limits": limits(2048, 1, "forward")}
    res["load"]["after_forward"] = load()
    res["train"] = {"T": 512, "B": 8, "times": timings("train", 512, 8, a.reps), "limits": limits(512, 8, "train")}
    res["load"]["after_train"] = load()
    res["load"]["end"] = load()
    res["seconds"] = time.time() - t0
    json.dump(res, open(a.out, "w"), indent=1)
    print(json.dumps({m: {k: round(v["median_s"], 3) for k, v in res[m]["times"].items()} for m in ("forward", "train")}, indent=1))
    print("load", res["load"])


if __name__ == "__main__":
    main()
