"""The `kerple_params` unit of `lengthx reproduce`: KERPLE's kernels per seed, trained exactly as the main unit trains them."""
import json
from dataclasses import replace

import torch

from lengthx import experiments as X
from lengthx.cli import main
from lengthx.data import corpus_split
from lengthx.model import GPTConfig
from lengthx.pe.kerple import kerple_log, kerple_power
from lengthx.train import TrainConfig, train

FORMULA = {"kerple_log": kerple_log, "kerple_power": kerple_power}


def test_settings_are_the_main_units_lm_block():
    "Same model, training and evaluation as `main` (only the specs and seeds differ), so its models are main's models."
    for budget in ("smoke", "cpu"):
        kp, m = X.unit_settings("kerple_params", budget), X.unit_settings("main", budget)
        assert {k: v for k, v in kp.items() if k not in ("specs", "seeds")} == {k: v for k, v in m.items() if k not in ("specs", "seeds")}
        assert kp["specs"] == ["kerple_log", "kerple_power"]
    assert X.unit_settings("kerple_params", "cpu")["seeds"] == [0, 1, 2]
    # seeds 1 and 2 are the seeds the seeds / more_seeds units train kerple_log / kerple_power on
    assert X.unit_settings("seeds", "cpu")["seeds"] == X.unit_settings("more_seeds", "cpu")["seeds"] == [1, 2]
    assert X.unit_settings("kerple_params", "cpu", seed=2)["seeds"] == [2, 3, 4]


def test_kernel_distances_reach_16L_on_a_log_grid():
    d = X.kernel_distances(1024)
    assert d[:17] == list(range(17)) and d[-1] == 1024 and d == sorted(set(d)) and len(d) < 100
    assert X.kernel_distances(16) == list(range(17))


def test_smoke_unit_stores_each_seeds_kernels_and_matches_main(tmp_path):
    "Run the unit at smoke size; its params are the trained model's, its init is train's start, its ppl is main's."
    assert main(["reproduce", "--budget", "smoke", "--out", str(tmp_path / "kp"), "--quiet", "--device", "cpu",
                 "--only", "kerple_params", "--allow-dirty"]) == 0
    rec = json.loads((tmp_path / "kp" / "kerple_params_smoke.json").read_text())
    S, res = rec["settings"], rec["result"]
    assert set(res["rows"]) == {f"{s}|seed={k}" for s in ("kerple_log", "kerple_power") for k in (0, 1)}
    dist = torch.tensor(res["distances"], dtype=torch.float32)
    assert res["distances"][-1] == S["train_len"] * max(S["factors"])
    tokens = corpus_split(S["corpus"], "train")
    for key, row in res["rows"].items():
        spec, seed = row["spec"], row["seed"]
        # the same training, done here directly with main's settings: bit-identical kernels
        mcfg = GPTConfig.preset(S["model"], pe=spec, max_len=S["train_len"])
        tcfg = TrainConfig(steps=S["steps"], batch_size=S["batch_size"], length=S["train_len"], lr=S["lr"],
                           warmup=S["warmup"], seed=seed, dtype=S["dtype"], compile=S["compile"])
        model, _ = train(mcfg, tcfg, tokens=tokens, progress=False)
        assert row["trained"]["r1"] == model.pe.params["r1"].detach().flatten().tolist(), key
        assert row["trained"]["r2"] == model.pe.params["r2"].detach().flatten().tolist(), key
        start, _ = train(mcfg, replace(tcfg, steps=1, lr=1e-12, min_lr=1e-13), tokens=tokens, progress=False)
        for n in ("r1", "r2"):   # `init` is where training started (one step at lr 1e-12 moves nothing visible)
            assert torch.allclose(torch.tensor(row["init"][n]), start.pe.params[n].detach().flatten(), atol=1e-9), (key, n)
        assert row["init"]["r1"] != row["trained"]["r1"]                   # training moved the kernel
        for state in ("init", "trained"):   # the stored curves are the kernel formula at the stored parameters
            r1, r2 = (torch.tensor(row[state][n])[:, None] for n in ("r1", "r2"))
            assert torch.allclose(torch.tensor(row[state]["bias"]), FORMULA[spec](dist[None, :], r1, r2), rtol=1e-6, atol=1e-6)
    # the main unit's rows (lm_row, in a folder of their own) for the same spec and seed: the same perplexity everywhere
    row = X.lm_row(X.Context(out=tmp_path / "main", budget="smoke", progress=False), X.unit_settings("main", "smoke"),
                   "kerple_log", 1, "main")
    assert res["rows"]["kerple_log|seed=1"]["ppl"] == row["ppl"]
    assert res["rows"]["kerple_log|seed=0"]["ppl"] != row["ppl"]            # the seeds are different models
