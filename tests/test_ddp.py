"""DistributedDataParallel: two CPU processes (gloo, launched by torchrun) train like one process with the same global batch."""
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _tiny import MODEL, TOKENS, train_cfg

from lengthx.data import ByteTokenizer, batch_at
from lengthx.model import GPTConfig
from lengthx.train import TrainConfig, dist_env, rank_slice, train

def cfg(**kw):
    return train_cfg(**{**dict(steps=5, warmup=2, grad_accum=2), **kw})


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = """
import json, os, sys
import torch
import torch.distributed as dist
sys.path.insert(0, {testdir!r})
from test_ddp import MODEL, TOKENS, cfg
from lengthx.model import GPT
from lengthx.train import train
seen, forward = [], GPT.forward
def spy(self, idx, *a, **kw):                     # record the rows this rank actually trains on
    seen.append(idx.tolist())
    return forward(self, idx, *a, **kw)
GPT.forward = spy
model, hist = train(MODEL, cfg(), tokens=TOKENS, run_dir={run!r}, progress=False)
out = {{"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
       "losses": [r["loss"] for r in hist], "grad_norms": [r["grad_norm"] for r in hist],
       "group_left_open": dist.is_initialized(), "seen": seen,
       "params": {{n: p.detach().flatten().tolist() for n, p in model.named_parameters()}}}}
with open(os.path.join({outdir!r}, "rank%d.json" % out["rank"]), "w") as f: json.dump(out, f)
"""


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    "Run the 5-step training under `torchrun --nproc-per-node 2` (gloo on CPU, 127.0.0.1 only)."
    tmp = tmp_path_factory.mktemp("ddp")
    script = tmp / "worker.py"
    script.write_text(WORKER.format(testdir=str(Path(__file__).parent), run=str(tmp / "run"), outdir=str(tmp)))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if sys.platform.startswith("linux"): env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(script)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp, [json.loads((tmp / f"rank{i}.json").read_text()) for i in range(2)]


def test_two_processes_match_one_process(two_processes):
    tmp, ranks = two_processes
    model, hist = train(MODEL, cfg(), tokens=TOKENS, progress=False)          # one process, same global batch
    one = [r["loss"] for r in hist]
    assert [r["world"] for r in ranks] == [2, 2]
    for r in ranks:                                                            # every rank logs the global loss
        assert len(r["losses"]) == 5
        assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(r["losses"], one)), (r["losses"], one)
        assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(r["grad_norms"], [h["grad_norm"] for h in hist]))
    assert ranks[0]["params"] == ranks[1]["params"]                            # the copies never drift apart
    ref = dict(model.named_parameters())
    for n, v in ranks[0]["params"].items():
        assert torch.allclose(torch.tensor(v), ref[n].detach().flatten(), atol=1e-5), n
    assert one[-1] < one[0]                                                    # it trained: the comparison is not vacuous
    assert not any(r["group_left_open"] for r in ranks)                        # train destroyed the group it created


def test_each_rank_trains_on_its_own_rows(two_processes):
    "Rank r's micro-batch m is rows [2r, 2r+2) of the one-process batch m: the ranks split the data, not repeat it."
    _, ranks = two_processes
    c = cfg()
    for r in ranks:
        assert len(r["seen"]) == c.steps * c.grad_accum
        for m, rows in enumerate(r["seen"]):
            x, _ = batch_at(TOKENS, m, c.batch_size, c.length, c.seed)
            assert rows == x[2 * r["rank"]:2 * r["rank"] + 2].tolist()


def test_only_rank_zero_writes(two_processes):
    tmp, ranks = two_processes
    lines = [json.loads(l) for l in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5]                       # one writer, not two
    assert [r["loss"] for r in lines] == ranks[0]["losses"]
    assert json.loads((tmp / "run" / "checkpoint.json").read_text())["step"] == 5


def test_rank_slices_tile_the_global_batch():
    x, y = batch_at(TOKENS, 3, 8, 16, seed=0)
    for world in (1, 2, 4, 8):
        parts = [rank_slice(x, r, world) for r in range(world)]
        assert torch.equal(torch.cat(parts), x) and all(p.shape[0] == 8 // world for p in parts)
    with pytest.raises(ValueError, match="divisible"):
        rank_slice(x, 0, 3)


def test_environment_detection(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"): monkeypatch.delenv(k, raising=False)
    assert dist_env() == (1, 0, 0)
    monkeypatch.setenv("WORLD_SIZE", "4"); monkeypatch.setenv("RANK", "3"); monkeypatch.setenv("LOCAL_RANK", "1")
    assert dist_env() == (4, 3, 1)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK"):
        dist_env()
    monkeypatch.setenv("WORLD_SIZE", "3"); monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="divisible by the number of processes 3"):   # checked before any process group
        train(MODEL, cfg(), tokens=TOKENS, progress=False)
