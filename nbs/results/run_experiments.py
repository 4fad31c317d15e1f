"""Make the results that chapter 70 (nbs/70_experiments.ipynb) plots.

    OMP_NUM_THREADS=1 python nbs/results/run_experiments.py --budget-min 55

Trains every positional encoding with the same loop (`lengthx.train.train`) at a short length and
evaluates it with the book's protocols (`lengthx.evaluate`), writing `experiments_cpu.json` next to
this file after every finished unit (so an interrupted run keeps what it finished, and running the
command again continues: finished units are skipped, training resumes from `runs/experiments`).

Parts, in priority order (the budget stops the script between units):
  main     every family (`pe_examples("default")` at run time, plus the issue's extra specs), seed 0:
           ppl at 1x..16x under last_k and nonoverlap, and under last_k with the SAME 16 target windows at
           every length (ends fixed, start = end - L: the library's last_k moves its windows with L),
           ΔP at 2x..16x (cheap families first)
  window   KERPLE Figure 5 in shape: position-wise loss at 16x of kerple_log, kerple_log windowed at
           the training length, alibi, t5
  seeds    seeds 1 and 2 for the core subset (seed 0 comes from `main`); DAPE's seeds run after cdape
  cdape    CDAPE kernel sizes 1/3/5/7 around kerple_log (DAPE v2 Table 1 in shape), with ΔP
  long     32x and 64x for the core subset, seed 0 (last_k over 8 windows, the common targets over 16)
Every unit stores its own provenance (command, git sha and dirty state, device, threads, versions,
corpus, seed, wall time).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import lengthx
from lengthx.attention import pe_examples
from lengthx.cli import provenance
from lengthx.data import corpus_info, corpus_tokens
from lengthx.evaluate import last_k_windows, perplexity, position_losses, window_losses
from lengthx.model import GPT, GPTConfig
from lengthx.pe.cdape import delta_p
from lengthx.pe.window import with_window
from lengthx.train import TrainConfig, load_model, train

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# The CPU scale. A GPU run changes these (see the chapter's list of owed runs).
SETTINGS = dict(model="tiny", train_len=64, steps=400, batch_size=16, lr=3e-3, warmup=40,
                factors=[1, 2, 4, 8, 16], long_factors=[32, 64],
                last_k=dict(k=64, n_windows=16), nonoverlap=dict(max_tokens=8192),
                long_last_k=dict(k=64, n_windows=8),
                position=dict(factor=16, n_windows=32), split="test",
                last_k_common=dict(k=64, n_windows=16, ends="fixed, evenly spaced in [64*64, n-1]"),
                delta_p="lengthx.pe.cdape.delta_p on the last_k windows (k = train_len)")
EXTRA = ["randomized:rope", "bipe:rope", "dape:alibi", "dape:fire"]   # issue 8's list beyond the default specs
CORE = ["nope", "rope", "alibi", "kerple_log", "dape:kerple_log"]
CDAPE_K = [1, 3, 5, 7]
SEEDS = [1, 2]


def _safe(s: str) -> str: return s.replace(":", "_").replace("=", "-")


def git_state() -> dict:
    "HEAD and whether the working tree differs from it (results from uncommitted code say so)."
    def run(*a):
        try: return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception: return ""
    dirty = run("status", "--porcelain", "--", "lengthx", "nbs/results/run_experiments.py")
    return {"git_sha": run("rev-parse", "HEAD"), "git_dirty": bool(dirty)}


def unit_provenance(t0: float) -> dict:
    p = provenance()
    p.update(git_state())
    p.update(lengthx=lengthx.__version__, threads=torch.get_num_threads(),
             omp_num_threads=os.environ.get("OMP_NUM_THREADS"), wall_seconds=round(time.time() - t0, 1),
             command="python nbs/results/" + Path(sys.argv[0]).name + " " + " ".join(sys.argv[1:]))
    return p


class Results:
    "The JSON file, rewritten atomically after every unit."
    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {}
        st = self.data.get("settings")
        if st is not None and st != SETTINGS:
            raise SystemExit(f"{path} was made with other settings {st}; move it away to start over")
        self.data.setdefault("settings", SETTINGS)
        self.data.setdefault("corpus", corpus_info())
        self.data.setdefault("units", {})

    def has(self, key): return key in self.data["units"]

    def put(self, key, value):
        self.data["units"][key] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)
        print(f"[{time.strftime('%H:%M:%S')}] {key}: {value.get('summary', '')}", flush=True)


def lengths(factors): return [SETTINGS["train_len"] * f for f in factors]


def train_spec(spec: str, seed: int, train_tokens) -> tuple[GPT, list, float]:
    S = SETTINGS
    mcfg = GPTConfig.preset(S["model"], pe=spec, max_len=S["train_len"])
    tcfg = TrainConfig(steps=S["steps"], batch_size=S["batch_size"], length=S["train_len"], lr=S["lr"],
                       warmup=S["warmup"], seed=seed, device="cpu", log_every=50)
    run_dir = ROOT / "runs" / "experiments" / f"{_safe(spec)}-seed{seed}"
    t0 = time.time()
    model, hist = train(mcfg, tcfg, tokens=train_tokens, run_dir=run_dir, progress=False)
    return model, hist, time.time() - t0


def ppl_table(model, test, Ls, protocols=("last_k", "nonoverlap"), last_k=None) -> dict:
    "Perplexity per protocol and length (the library's `perplexity`)."
    out = {}
    lk = dict(last_k or SETTINGS["last_k"])
    for prot in protocols:
        kw = lk if prot == "last_k" else SETTINGS["nonoverlap"]
        row = {}
        for L in Ls:
            try: row[str(L)] = perplexity(model, test, L, protocol=prot, **kw)
            except ValueError as e: row[str(L)] = f"error: {e}"
        out[prot] = row
    return out


def delta_ps(model, test, Ls) -> dict:
    """ΔP (DAPE v2 eq. 6) by the library's `lengthx.pe.cdape.delta_p`, on the last_k windows (k = train_len).

    P(M(x), T) feeds the whole window and scores its last T targets; P(M(x[-T:]), T) feeds only those T
    tokens. ΔP = P(M(x[-T:]), T) − P(M(x), T) > 0 means the context beyond the training length helped."""
    out = {}
    for L in Ls:
        try:
            r = delta_p(model, test, [L], SETTINGS["train_len"], n_windows=SETTINGS["last_k"]["n_windows"])[L]
            out[str(L)] = {"full": r["full"], "local": r["local"], "delta_p": r["delta"]}
        except ValueError as e: out[str(L)] = f"error: {e}"
    return out


def common_windows(n_tokens: int, length: int, k: int, n_windows: int, anchor: int) -> list[tuple[int, int]]:
    "last_k windows whose scored targets are the same for every length <= `anchor`: fixed ends, start = end - length."
    span = n_tokens - 1 - anchor
    if span < 0: raise ValueError(f"need more than {anchor + 1} tokens, have {n_tokens}")
    ends = [anchor + round(i * span / (n_windows - 1)) for i in range(n_windows)]
    return [(e - length, length - min(k, length)) for e in ends]


def common_table(model, test, Ls) -> dict:
    "last_k perplexity on the same targets at every length (16 windows ending at fixed positions)."
    lk, anchor = SETTINGS["last_k"], SETTINGS["train_len"] * max(SETTINGS["long_factors"])
    row = {}
    for L in Ls:
        wins = common_windows(len(test), L, lk["k"], lk["n_windows"], anchor)
        try:
            nll = window_losses(model, test, wins, L)
            row[str(L)] = math.exp(nll[:, L - min(lk["k"], L):].double().mean().item())
        except ValueError as e: row[str(L)] = f"error: {e}"   # a learned table has no rows beyond its length
    return row


def curve(hist, every=10): return [[r["step"], round(r["loss"], 4)] for r in hist if r["step"] % every == 0]


def eval_unit(spec, seed, model, hist, t_train, test, t0, group, with_dp=True) -> dict:
    S = SETTINGS
    t1 = time.time()
    table = ppl_table(model, test, lengths(S["factors"]))
    table["last_k_common"] = common_table(model, test, lengths(S["factors"]))
    dp = delta_ps(model, test, lengths(S["factors"][1:])) if with_dp else {}
    t_eval = time.time() - t1
    lk = table["last_k"]
    fmt = lambda v: "n/a" if isinstance(v, str) else f"{v:.2f}"
    return {"spec": spec, "seed": seed, "group": group, "ppl": table, "delta_p": dp,
            "final_train_loss": hist[-1]["loss"], "loss_curve": curve(hist), "n_params": model.n_params(),
            "train_seconds": round(hist[-1]["time"], 1),   # the loop's own clock (survives a resume)
            "eval_seconds": round(t_eval, 1),
            "provenance": unit_provenance(t0),
            "summary": f"last_k {' '.join(fmt(v) for v in lk.values())} | common "
                       f"{' '.join(fmt(v) for v in table['last_k_common'].values())} | train {hist[-1]['time']:.0f}s eval {t_eval:.0f}s"}


def _expensive(spec: str) -> bool: return spec.split(":")[0] in ("dape", "cdape")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "experiments_cpu.json"))
    ap.add_argument("--parts", default="main,window,cdape,seeds,long")
    ap.add_argument("--budget-min", type=float, default=55.0, help="stop starting new units after this many minutes")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    res = Results(Path(a.out))
    start = time.time()
    over = lambda: (time.time() - start) / 60 > a.budget_min
    train_tokens, test = corpus_tokens("train"), corpus_tokens(SETTINGS["split"])
    parts = a.parts.split(",")
    skipped = []

    def run(spec, seed, group, with_dp=True):
        key = f"{spec}|seed={seed}"
        if res.has(key): return
        if over(): skipped.append(key); return
        t0 = time.time()
        model, hist, t_train = train_spec(spec, seed, train_tokens)
        res.put(key, eval_unit(spec, seed, model, hist, t_train, test, t0, group, with_dp))

    if "main" in parts:   # the cheap families first, DAPE/CDAPE (a network over every score) last
        specs = list(dict.fromkeys(pe_examples("default") + EXTRA))
        for spec in sorted(specs, key=_expensive): run(spec, 0, "main")
    if "window" in parts and not res.has("position_loss"):
        if over(): skipped.append("position_loss")
        else:
            t0 = time.time()
            L = SETTINGS["train_len"] * SETTINGS["position"]["factor"]
            curves = {}
            for spec in ["kerple_log", "alibi", "t5"]:
                run_dir = ROOT / "runs" / "experiments" / f"{_safe(spec)}-seed0"
                if not (run_dir / "checkpoint.json").exists(): run(spec, 0, "main")
                m = load_model(run_dir)
                curves[spec] = position_losses(m, test, L, n_windows=SETTINGS["position"]["n_windows"]).tolist()
                if spec == "kerple_log":
                    m.pe = with_window(m.pe, SETTINGS["train_len"])
                    curves[f"kerple_log windowed@{SETTINGS['train_len']}"] = position_losses(
                        m, test, L, n_windows=SETTINGS["position"]["n_windows"]).tolist()
            res.put("position_loss", {"length": L, "n_windows": SETTINGS["position"]["n_windows"], "nll": curves,
                                      "provenance": unit_provenance(t0),
                                      "summary": {k: round(sum(v) / len(v), 3) for k, v in curves.items()}})
    if "seeds" in parts:
        for seed in SEEDS:
            for spec in CORE:
                if not _expensive(spec): run(spec, seed, "seeds")
    if "cdape" in parts:
        for k in CDAPE_K: run(f"cdape:k={k}:kerple_log", 0, "cdape")
    if "seeds" in parts:
        for seed in SEEDS:
            for spec in CORE:
                if _expensive(spec): run(spec, seed, "seeds")
    if "long" in parts:
        for spec in CORE:
            key = f"long|{spec}|seed=0"
            if res.has(key): continue
            if over(): skipped.append(key); continue
            t0 = time.time()
            run_dir = ROOT / "runs" / "experiments" / f"{_safe(spec)}-seed0"
            if not (run_dir / "checkpoint.json").exists(): run(spec, 0, "main")
            m = load_model(run_dir)
            t1 = time.time()
            table = ppl_table(m, test, lengths(SETTINGS["long_factors"]), last_k=SETTINGS["long_last_k"])
            table["last_k_common"] = common_table(m, test, lengths(SETTINGS["long_factors"]))
            res.put(key, {"spec": spec, "seed": 0, "ppl": table, "eval_seconds": round(time.time() - t1, 1),
                          "provenance": unit_provenance(t0),
                          "summary": json.dumps({p: {L: round(v, 2) if not isinstance(v, str) else v for L, v in r.items()}
                                                 for p, r in table.items()})})
    res.data["skipped_for_budget"] = skipped
    res.put("_last_invocation", {"provenance": unit_provenance(start), "skipped": skipped,
                                 "summary": f"done in {(time.time() - start) / 60:.1f} min; skipped {len(skipped)}"})


if __name__ == "__main__":
    main()
