"""lengthx.bench: the FLOP floors chapter 43 draws its measurements against."""

import pytest


def test_causal_flop_floor_counts_the_kept_pairs():
    "The causal floor is the dense one at T=1 (nothing masked), below it at every longer length, and above 1."
    from lengthx.bench import dape_fast_limits
    assert dape_fast_limits(1, 4, causal=True) == dape_fast_limits(1, 4)
    for T, B in ((512, 8), (2048, 1)):
        dense, causal = dape_fast_limits(T, B), dape_fast_limits(T, B, causal=True)
        assert all(1 < causal[n] < dense[n] for n in dense), (dense, causal)
        assert causal["dape"] < causal["cdape"]          # CDAPE's 1×3 taps do three times DAPE's work per pair


def test_timing_wrappers_pass_arguments_and_results_through():
    "The eager and dense-FIRE wrappers call fn with its arguments (the peak-memory warm-up calls fn(64)) and return its value."
    import os
    from lengthx.bench import _with_dense_fire, _with_eager
    from lengthx.pe import fused
    from lengthx.pe.fire import FirePE
    seen = {}
    def env(n, scale=1):
        seen["env"] = os.environ.get(fused.KERNEL_ENV)
        return n * scale
    def fire(n):
        seen["toeplitz"] = FirePE.toeplitz(None, None)
        return n
    assert _with_eager(env)(64, scale=2) == 128 and seen["env"] == "off"
    assert os.environ.get(fused.KERNEL_ENV) != "off"                    # switched back on afterwards
    assert _with_dense_fire(fire)(3) == 3 and seen["toeplitz"] is False


def test_bf16_timing_is_refused_off_the_gpu():
    from lengthx.bench import dape_fast_measure
    import torch
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="GPU"):
        dape_fast_measure(device="cpu", dtype="bf16", threads=threads + 1)
    assert torch.get_num_threads() == threads          # refused before it touched the process's thread count


def test_bench_model_keeps_every_round_paired_across_pes():
    "Each PE's rounds are kept (one per rep, the median is theirs), so a per-round ratio between PEs can be paired."
    import statistics
    from lengthx.bench import bench_model
    rows = bench_model(["nope", "alibi"], "tiny", 16, reps=3)
    for r in rows:
        assert len(r["rounds_s"]) == 3 and all(t > 0 for t in r["rounds_s"])
        assert r["seconds"] == statistics.median(r["rounds_s"])
        assert (r["min_seconds"], r["max_seconds"]) == (min(r["rounds_s"]), max(r["rounds_s"]))
