"""The pairs chapter 43's eager floors charge: with no gradients the chunked path's eager f computes each query block
against every key up to the block's end (sum over blocks of rows × end, 56% of T² at T = 2048 in blocks of 256), not T²
and not the causal half; under autograd at a training length the auto path is naive and f computes every pair."""
import pytest
import torch

from lengthx.attention import attention, build_pe, pick_path
from lengthx.pe.fused import eager_refine


def block_pairs(T: int, block: int) -> int:
    "Pairs of the chunked path's query blocks: each block's rows against every key up to the block's end."
    return sum((min(s + block, T) - s) * min(s + block, T) for s in range(0, T, block))


def pairs_seen(spec: str, T: int, path: str, block: int, grad: bool) -> int:
    "Query-key pairs (per sequence and head) on which the eager f ran during one causal attention call."
    torch.manual_seed(0)
    pe = build_pe(spec, n_heads=2, head_dim=8, max_len=2 * T)
    seen = []
    pe.f[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape[-2] * inp[0].shape[-1]))
    q, k, v = (torch.randn(1, 2, T, 8) for _ in range(3))
    pos = pe.make_positions(torch.zeros(1, T, dtype=torch.long))
    with eager_refine(), torch.set_grad_enabled(grad):
        attention(q, k, v, pe, pos, causal=True, path=path, block=block)
    return sum(seen)


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log"])
@pytest.mark.parametrize("T,block", [(100, 16), (64, 64), (37, 5)])
def test_chunked_eager_f_computes_the_blocks_pairs(spec, T, block):
    got = pairs_seen(spec, T, "chunked", block, grad=False)
    assert got == block_pairs(T, block), (got, block_pairs(T, block), T * T)
    if block < T: assert T * (T + 1) // 2 < got < T * T      # more than the causal half, fewer than every pair


def test_share_at_the_measured_forward():
    "At the committed forward's length and the chunked path's default block, the blocks hold 56.2% of the T² pairs."
    assert round(block_pairs(2048, 256) / 2048 ** 2, 3) == 0.562


@pytest.mark.parametrize("spec", ["dape:kerple_log", "cdape:k=3:kerple_log"])
def test_training_step_runs_every_pair(spec):
    "Under autograd at 512 tokens (the committed training step) DAPE takes the naive path, where f runs on all T² pairs."
    pe = build_pe(spec, n_heads=2, head_dim=8, max_len=1024)
    with torch.enable_grad(): assert pick_path(pe, 512, torch.device("cpu")) == "naive"
    with torch.no_grad(): assert pick_path(pe, 2048, torch.device("cpu")) == "chunked"
    assert pairs_seen(spec, 48, "naive", 16, grad=True) == 48 * 48
