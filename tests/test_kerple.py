"""KERPLE (chapter 21): closed forms, the CPD check and shift search, parameters as the authors keep them."""
import math

import pytest
import torch

from lengthx.attention import Positions, attention, build_pe
from lengthx.model import GPT, GPTConfig
from lengthx.pe.bias import alibi_slopes
from lengthx.pe.kerple import (cpd_margin, gram, kerple_3log, kerple_log, kerple_power, kerple_weight, pd_shift,
                               sum_zero_projector)

D = torch.tensor([0.0, 1.0, math.e - 1, 4.0], dtype=torch.float64)


def test_closed_forms_at_known_values():
    assert torch.allclose(kerple_log(D, 2.0, 1.0), torch.tensor([0.0, -2 * math.log(2), -2.0, -2 * math.log(5)], dtype=torch.float64))
    assert torch.allclose(kerple_power(D, 0.5, 2.0), -0.5 * D ** 2)
    assert kerple_power(torch.tensor([4.0], dtype=torch.float64), 1.0, 0.5).item() == -2.0
    assert torch.allclose(kerple_3log(D, 1.5, 0.3, 1.0), kerple_log(D, 1.5, 0.3))
    assert torch.allclose(kerple_3log(torch.tensor([2.0], dtype=torch.float64), 1.0, 1.0, 2.0), torch.tensor([-math.log(5)], dtype=torch.float64))
    assert kerple_weight(torch.tensor([2.0], dtype=torch.float64), 0.5, 2.0).item() == math.exp(-2.0)
    assert (kerple_weight(D, 0.7, 1.3) <= 1).all() and kerple_weight(D, 0.7, 1.3)[0] == 1


def test_kernels_broadcast_per_head():
    r1 = torch.tensor([1.0, 2.0])[:, None, None]
    out = kerple_log(torch.ones(3, 3), r1, 1.0)
    assert out.shape == (2, 3, 3) and torch.allclose(out[1], 2 * out[0])


def test_projector():
    P = sum_zero_projector(5)
    assert torch.allclose(P @ P, P) and torch.allclose(P.sum(0), torch.zeros(5, dtype=torch.float64))


@pytest.mark.parametrize("kernel", [lambda d: kerple_power(d, 0.7, 0.5), lambda d: kerple_power(d, 2.0, 1.0),
                                    lambda d: kerple_power(d, 0.1, 1.9), lambda d: kerple_log(d, 2.0, 0.5),
                                    lambda d: kerple_log(d, 0.3, 4.0), lambda d: kerple_3log(d, 1.0, 1.0, 1.5)])
def test_corollary_kernels_are_cpd(kernel):
    for x in (torch.arange(60).double(), torch.rand(40, dtype=torch.float64) * 50, torch.randperm(5000)[:50].double()):
        K = gram(kernel, x)
        assert cpd_margin(K) >= -1e-9 * K.abs().max().item() * K.shape[0]
        c = pd_shift(K)
        assert c is not None and torch.linalg.eigvalsh(K + c).min() >= -1e-8 * (c + K.abs().max())


@pytest.mark.parametrize("kernel", [lambda d: -d ** 3, lambda d: d, lambda d: -torch.cos(d)])
def test_non_cpd_functions_fail_and_no_shift_helps(kernel):
    K = gram(kernel, torch.arange(20).double())
    assert cpd_margin(K) < -1e-3
    assert pd_shift(K, max_doublings=40) is None


def test_cpd_counterexample_by_hand():
    K = gram(lambda d: -d ** 3, torch.tensor([0.0, 1.0, 2.0]))
    c = torch.tensor([1.0, -2.0, 1.0], dtype=torch.float64)
    assert c @ K @ c == -8.0


def test_cpd_margin_rejects_non_gram():
    with pytest.raises(ValueError):
        cpd_margin(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="symmetric"):
        cpd_margin(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))


def test_alibi_is_the_power_kernel_with_exponent_one():
    pe = build_pe("alibi", n_heads=8, head_dim=8)
    p = Positions.arange(1, 40)
    d = (torch.arange(40)[:, None] - torch.arange(40)[None, :]).abs().float()
    assert torch.allclose(pe.bias(p, p), kerple_power(d, alibi_slopes(8)[:, None, None], 1.0))


def test_init_ranges_and_parameter_counts():
    torch.manual_seed(0)
    H = 64
    log = build_pe("kerple_log", n_heads=H, head_dim=8)
    pw = build_pe("kerple_power", n_heads=H, head_dim=8)
    assert log.params["r1"].shape == (H, 1, 1) and 1.0 < log.params["r1"].max() < 2.0 and log.params["r2"].max() < 1.0
    assert pw.params["r1"].max() < 1.0 and 1.0 < pw.params["r2"].max() <= 2.0
    counts = {s: sum(p.numel() for p in build_pe(s, n_heads=12, head_dim=8).parameters())
              for s in ("kerple_log", "kerple_power", "kerple_3log", "kerple_biaswt")}
    assert counts == {"kerple_log": 24, "kerple_power": 24, "kerple_3log": 36, "kerple_biaswt": 48}


def test_clamping_in_place_on_forward():
    pe = build_pe("kerple_3log", n_heads=3, head_dim=8)
    with torch.no_grad():
        pe.params["r1"][0] = -1.0
        pe.params["r3"][1] = 7.0
        pe.params["r3"][2] = -2.0
    p = Positions.arange(1, 10)
    b = pe.bias(p, p)
    eps = torch.tensor(0.01).item()
    assert pe.params["r1"][0].item() == eps and pe.params["r3"][1].item() == 2.0 and pe.params["r3"][2].item() == eps
    assert (b <= 0).all() and torch.isfinite(b).all()


def test_bias_matches_pure_kernel():
    pe = build_pe("kerple_log", n_heads=4, head_dim=8)
    p = Positions.arange(2, 25)
    d = (torch.arange(25)[:, None] - torch.arange(25)[None, :]).abs().float()
    assert torch.allclose(pe.bias(p, p), kerple_log(d, pe.params["r1"], pe.params["r2"]))


def test_per_layer_option():
    shared = build_pe("kerple_log", n_heads=4, head_dim=8, n_layers=3)
    per = build_pe("kerple_log:per_layer=true", n_heads=4, head_dim=8, n_layers=3)
    assert not shared.bias_per_layer and per.bias_per_layer and per.params["r1"].shape == (3, 4, 1, 1)
    p = Positions.arange(1, 12)
    assert torch.equal(shared.bias(p, p, 0), shared.bias(p, p, 2))
    assert not torch.allclose(per.bias(p, p, 0), per.bias(p, p, 2))
    wt = build_pe("kerple_biaswt:per_layer=true", n_heads=4, head_dim=8, n_layers=3)
    q, k = torch.randn(1, 4, 12, 8), torch.randn(1, 4, 12, 8)
    assert not torch.allclose(wt.logits(q, k, p, p, 0.5, 0), wt.logits(q, k, p, p, 0.5, 2))
    assert torch.equal(wt.logits(q, k, p, p, 0.5, 1), wt.logits(q, k, p, p, 0.5, 1))


@pytest.mark.parametrize("spec, calls", [("kerple_log", 1), ("kerple_log:per_layer=true", 3)])
def test_model_computes_shared_bias_once_per_forward(spec, calls):
    m = GPT(GPTConfig(n_layer=3, n_head=2, d_model=16, pe=spec, max_len=16)).eval()
    n = {"calls": 0}
    orig = m.pe.bias
    def counting(*a, **kw):
        n["calls"] += 1
        return orig(*a, **kw)
    m.pe.bias = counting
    with torch.no_grad():
        m(torch.zeros(1, 16, dtype=torch.long), path="sdpa")
    assert n["calls"] == calls


def test_biaswt_logits_and_paths():
    torch.manual_seed(0)
    pe = build_pe("kerple_biaswt", n_heads=2, head_dim=4)
    assert pe.uses_logits and pe.uses_bias
    q, k, v = (torch.randn(1, 2, 12, 4) for _ in range(3))
    p = Positions.arange(1, 12)
    d = (torch.arange(12)[:, None] - torch.arange(12)[None, :]).abs().float()
    want = (q @ k.transpose(-1, -2)) * 0.5 * kerple_weight(d, pe.params["r3"], pe.params["r4"])
    assert torch.allclose(pe.logits(q, k, p, p, 0.5), want, atol=1e-6)
    with pytest.raises(ValueError):
        attention(q, k, v, pe, p, path="sdpa")
    assert (attention(q, k, v, pe, p, path="chunked", block=5) - attention(q, k, v, pe, p, path="naive")).abs().max() < 1e-6


def test_training_step_with_out_of_range_parameters_per_layer():
    "The in-place clamp must not break autograd when each layer recomputes the bias in one forward."
    m = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, pe="kerple_power:per_layer=true", max_len=16))
    with torch.no_grad():
        m.pe.params["r2"].fill_(3.0)
    idx = torch.randint(0, 256, (2, 16))
    _, loss = m(idx, idx.roll(-1, 1), path="naive")
    loss.backward()
    assert (m.pe.params["r2"] == 2.0).all() and m.pe.params["r1"].grad.abs().sum() > 0


# ---------------------------------------------------------------- the shift lemma's limits (chapter 21)
@pytest.mark.parametrize("N", [2, 3, 7, 64, 200])
def test_triangle_kernel_min_shift_is_half_the_length(N):
    "c − |m−n| is PD on 0..N−1 iff c ≥ (N−1)/2: Cauchy–Schwarz forces it, and it suffices."
    from lengthx.pe.kerple import min_pd_shift
    x = torch.arange(N, dtype=torch.float64)
    K = -(x[:, None] - x[None, :]).abs()
    c = (N - 1) / 2
    assert torch.linalg.eigvalsh(K + c).min() > -1e-9 * N * N
    assert torch.linalg.eigvalsh(K + c - 1e-3).min() < -1e-4
    assert abs(min_pd_shift(K) - c) < 1e-5


def test_shift_grows_with_length_for_log_and_power():
    from lengthx.pe.kerple import min_pd_shift
    for kern in (lambda d: kerple_log(d, 1.0, 1.0), lambda d: kerple_power(d, 1.0, 1.5)):
        cs = [min_pd_shift(gram(kern, torch.arange(N, dtype=torch.float64))) for N in (8, 32, 128)]
        assert cs[0] < cs[1] < cs[2]


def test_squared_distance_admits_no_shift_on_three_points():
    "For −(m−n)² on {0,1,2}, v = (1,−2,1) + t·1 gives vᵀ(K + c11ᵀ)v = −12t + (9c − 12)t² < 0 for small t, for every c."
    x = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    K = -(x[:, None] - x[None, :]) ** 2
    u, one = torch.tensor([1.0, -2.0, 1.0], dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    assert cpd_margin(K) > -1e-12                                     # CPD...
    assert u @ K @ u == 0 and torch.equal(K @ u, -2 * one)           # ...but not strictly
    for c in (0.5, 2.0, 100.0, 1e4):
        t = 6 / max(9 * c - 12, 1.0)
        v = u + t * one
        form = (v @ (K + c) @ v).item()
        assert abs(form - (-12 * t + (9 * c - 12) * t * t)) < 1e-6 * (1 + c) and form < 0


def test_power_init_draws_in_the_opposite_order_to_the_authors():
    "Their power kernel draws bias_p = 2U first, then bias_a = U; we draw r1 (= bias_a) first. Log draws in the same order."
    for seed in (0, 3):
        torch.manual_seed(seed)
        ours = build_pe("kerple_power", n_heads=8, head_dim=8)
        torch.manual_seed(seed)
        bias_p, bias_a = torch.rand(8)[:, None, None] * 2, torch.rand(8)[:, None, None]
        assert torch.equal(ours.params["r1"].data, bias_p / 2) and torch.equal(ours.params["r2"].data, bias_a * 2)
        torch.manual_seed(seed)
        ours_log = build_pe("kerple_log", n_heads=8, head_dim=8)
        torch.manual_seed(seed)
        assert torch.equal(ours_log.params["r1"].data, torch.rand(8)[:, None, None] * 2)
        assert torch.equal(ours_log.params["r2"].data, torch.rand(8)[:, None, None])


@pytest.mark.parametrize("spec", ["kerple_log", "kerple_power"])
def test_train_starts_from_the_seeded_initialization(spec):
    "Chapter 21 measures how far training moved the kernel from `torch.manual_seed(seed); GPT(cfg)`: train() must start there."
    from lengthx.train import TrainConfig, train
    cfg = GPTConfig.preset("tiny", pe=spec, max_len=32)
    tcfg = TrainConfig(steps=1, batch_size=2, length=32, lr=1e-12, min_lr=1e-13, warmup=0, seed=3)
    torch.manual_seed(tcfg.seed)
    first = GPT(cfg)
    first.pe.clamp_()                                                  # the first forward clamps draws below eps in place
    init = {n: p.detach().clone() for n, p in first.pe.params.items()}
    start, _ = train(cfg, tcfg, tokens=torch.randint(0, 256, (4096,)), progress=False)
    for n, p in init.items():
        assert torch.allclose(start.pe.params[n].detach(), p, atol=1e-9), n      # one step at lr 1e-12 moves nothing
    torch.manual_seed(tcfg.seed + 1)
    assert not torch.allclose(GPT(cfg).pe.params["r1"], init["r1"])              # a different seed would be caught
