"""The trainable successors of chapter 44 (`fox`, `stickbreak`, `sink:<inner>`, `path`) against formulas written out here.

Each reference below is computed from the module's own parameters by an independent loop or a plain softmax,
so a flipped gate sign, a cumulative sum off by one, a sink missing from the denominator, stick-breaking
without its product, or PaTH's maps in the wrong order, one token off, or from another layer's weights each fail a test.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from lengthx.attention import Positions, attention, build_pe, causal_mask, check_spec, pick_path
from lengthx.model import GPT, GPTConfig
from lengthx.train import TrainConfig, load_model, seed_everything, train

B, H, T, D, DM = 2, 4, 12, 8, 32


def qkv(seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(B, H, T, D, generator=g) for _ in range(3)]


def fox_loop_bias(pe, x, layer=0):
    "D_ij = Σ_{l=j+1..i} log σ(w_h·x_l + b_h) by an explicit loop, [B, H, T, T] in float64 (0 above the diagonal)."
    (b, t, _), h = x.shape, pe.gate_w.shape[1]
    logit = torch.einsum("btd,hd->bht", x.double(), pe.gate_w[layer].detach().double()) + pe.gate_b[layer].detach().double()[None, :, None]
    log_f = -torch.log1p(torch.exp(-logit))                               # log σ, written out
    out = torch.zeros(b, h, t, t, dtype=torch.float64)
    for i in range(t):
        for j in range(i + 1):
            for l in range(j + 1, i + 1): out[..., i, j] += log_f[..., l]
    return out


def softmax_ref(q, k, v, bias):
    "Causal softmax(q·k/√d + bias) @ v in float64, any [..., T, d]."
    t = q.shape[-2]
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    return s.masked_fill(~causal_mask(t, t), float("-inf")).softmax(-1) @ v.double()


def random_fox(seed=1):
    torch.manual_seed(seed)
    pe = build_pe("fox", n_heads=H, head_dim=D, d_model=DM, n_layers=2)
    with torch.no_grad():
        pe.gate_w.normal_(0, 0.3)
        pe.gate_b.normal_(0, 1.0)
    return pe


# ---- FoX -------------------------------------------------------------------------------------------

def test_fox_bias_is_the_sum_of_log_gates_after_the_key():
    pe, x = random_fox(), torch.randn(B, T, DM)
    for layer in (0, 1):
        pos = pe.gate(x, Positions.arange(B, T), layer)
        got = pe.bias(pos, pos, layer).double().tril()
        assert torch.allclose(got, fox_loop_bias(pe, x, layer), atol=1e-5), layer


@pytest.mark.parametrize("path", ["naive", "sdpa", "flex", "chunked"])
def test_fox_attention_on_every_path_equals_the_loop(path):
    pe, x = random_fox(), torch.randn(B, T, DM)
    q, k, v = qkv()
    pos = pe.gate(x, Positions.arange(B, T), 1)
    with torch.no_grad():
        out = attention(q, k, v, pe, pos, layer=1, path=path, block=5)
    assert torch.allclose(out.double(), softmax_ref(q, k, v, fox_loop_bias(pe, x, 1)), atol=1e-5)


def test_fox_gates_one_are_nope_and_constant_gates_are_alibi():
    pe, x = random_fox(), torch.randn(B, T, DM)
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    with torch.no_grad():
        pe.gate_w.zero_(); pe.gate_b.fill_(40.0)
        nope = attention(q, k, v, build_pe("nope", n_heads=H, head_dim=D), pos, path="naive")
        assert torch.allclose(attention(q, k, v, pe, pe.gate(x, pos), path="naive"), nope, atol=1e-5)
        b = torch.tensor([-2.0, -0.5, 0.5, 2.0])
        pe.gate_b.copy_(b.expand(2, H))
        slope = -F.logsigmoid(b).double()                                       # m_h = −log σ(b_h)
        dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
        alibi = softmax_ref(q, k, v, -slope[:, None, None] * dist)
        assert torch.allclose(attention(q, k, v, pe, pe.gate(x, pos), path="sdpa").double(), alibi, atol=1e-5)


def test_fox_gates_start_as_the_official_code():
    pe = build_pe("fox", n_heads=8, head_dim=16, d_model=128, n_layers=6)
    assert pe.gate_w.shape == (6, 8, 128) and pe.gate_b.shape == (6, 8)
    assert (pe.gate_b == 0).all() and abs(pe.gate_w.std().item() - 0.02) < 0.002


def test_fox_without_gates_is_one_clear_error():
    pe = random_fox()
    pos = Positions.arange(B, T)
    with pytest.raises(ValueError, match=r"pe\.gate\(x, pos, layer\)") as e:
        pe.bias(pos, pos)
    assert "\n" not in str(e.value)


def test_fox_model_reads_each_layers_input():
    "The model equals a forward written out by hand: layer l's gates from ln1 of its own input, its own weights."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="fox", max_len=T)).eval()
    with torch.no_grad():
        m.pe.gate_w.normal_(0, 0.3); m.pe.gate_b.normal_(0, 1.0)
        idx = torch.randint(0, 256, (B, T))
        x = m.tok(idx)
        for l, blk in enumerate(m.blocks):
            h = blk.ln1(x)
            q, k, v = blk.attn.qkv(h).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
            y = softmax_ref(q, k, v, fox_loop_bias(m.pe, h, l)).float()
            x = x + blk.attn.proj(y.transpose(1, 2).reshape(B, T, DM))
            x = x + blk.mlp(blk.ln2(x))
        ref = m.head(m.ln_f(x))
        for path in ("naive", "sdpa", "chunked"):
            assert torch.allclose(m(idx, path=path), ref, atol=1e-4), path


def test_fox_training_paths_give_the_naive_gradients():
    "sdpa (a float mask under autograd) and chunked (recomputed blocks) train the gates as the naive path does."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="fox", max_len=64))
    idx = torch.randint(0, 256, (1, 64))
    grads = {}
    for path in ("naive", "sdpa", "chunked"):
        m.zero_grad()
        m(idx, torch.roll(idx, -1, 1), path=path)[1].backward()
        grads[path] = m.pe.gate_w.grad.clone()
    assert grads["naive"].abs().max() > 0
    for path in ("sdpa", "chunked"):
        assert torch.allclose(grads["naive"], grads[path], atol=1e-6), path


# ---- stick-breaking ------------------------------------------------------------------------------

def stick_loop(q, k):
    "A_ij = σ(z_ij) Π_{j<l<i}(1 − σ(z_il)) for j < i, and the remainder 1 − Σ_j A_ij on j = i (the authors' o + rem·v)."
    z = q.double() @ k.double().transpose(-1, -2) / math.sqrt(D)
    beta, w = torch.sigmoid(z), torch.zeros_like(z)
    for i in range(T):
        left = torch.ones(z.shape[:-2], dtype=torch.float64)
        for j in range(i - 1, -1, -1):
            w[..., i, j] = beta[..., i, j] * left
            left = left * (1 - beta[..., i, j])
        w[..., i, i] = left
    return w


@pytest.mark.parametrize("path", ["naive", "chunked"])
def test_stickbreak_weights_and_output_equal_the_loop(path):
    pe = build_pe("stickbreak", n_heads=H, head_dim=D)
    q, k, v = qkv(scale=1.5)
    ref = stick_loop(q, k)
    with torch.no_grad():
        out, w = attention(q, k, v, pe, Positions.arange(B, T), path="naive", return_weights=True)
        assert torch.allclose(w.double(), ref, atol=1e-6)
        assert (w.double().tril(-1).sum(-1) <= 1 + 1e-6).all()
        got = attention(q, k, v, pe, Positions.arange(B, T), path=path, block=5)
    assert torch.allclose(got.double(), ref @ v.double(), atol=1e-5)


def _old_stick_normalize(scores, mask):
    "The `stickbreak` normaliser as committed results were trained with (a frozen copy): remainder on the own key."
    last = mask & ~F.pad(mask[..., 1:], (0, 1), value=False)
    seen = mask & ~last
    z = scores.float()
    log_rest = (-F.softplus(z)).masked_fill(~seen, 0.0)
    after = F.pad(log_rest.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1))
    a = (F.logsigmoid(z) + after).exp().masked_fill(~seen, 0.0)
    return a + last * (1 - a.sum(-1, keepdim=True))


def test_stickbreak_default_is_unchanged_bitwise():
    "The default `stickbreak` (rem=value) gives the same weights and output, bit for bit, as the committed normaliser."
    pe = build_pe("stickbreak", n_heads=H, head_dim=D)
    assert not pe.uses_value and not any(True for _ in pe.parameters())
    q, k, v = qkv(seed=3, scale=1.5)
    mask = causal_mask(T, T)
    with torch.no_grad():
        out, w = attention(q, k, v, pe, Positions.arange(B, T), path="naive", return_weights=True)
        pos = Positions.arange(B, T)
        w_old = _old_stick_normalize(pe.logits(q, k, pos, pos, 1.0 / math.sqrt(D)), mask)
        wide = 8 * torch.randn(B, H, T, T)                              # any logits: the normaliser itself
        assert torch.equal(pe.normalize(wide, mask), _old_stick_normalize(wide, mask))
    assert torch.equal(w, w_old) and torch.equal(out, w_old.to(v.dtype) @ v)


@pytest.mark.parametrize("path", ["naive", "chunked"])
def test_stickbreak_rem_bias_adds_the_remainder_times_the_layer_vector(path):
    "rem=bias: output = Σ_j A_ij v_j + (1 − Σ_j A_ij)·b_h with b the layer's own learned vector per head, by hand."
    pe = build_pe("stickbreak:rem=bias", n_heads=H, head_dim=D, n_layers=2)
    assert pe.rem_bias.shape == (2, H, D) and torch.equal(pe.rem_bias, torch.zeros(2, H, D))   # starts at zero
    q, k, v = qkv(seed=4, scale=1.5)
    with torch.no_grad():
        pe.rem_bias.normal_()
        a = stick_loop(q, k).tril(-1)                                   # the loop's weights without the remainder
        rem = 1 - a.sum(-1, keepdim=True)
        for layer in (0, 1):
            b = pe.rem_bias[layer].double()[None, :, None, :]
            got = attention(q, k, v, pe, Positions.arange(B, T), layer=layer, path=path, block=5)
            assert torch.allclose(got.double(), a @ v.double() + rem * b, atol=1e-5), layer
        assert not torch.allclose(pe.rem_bias[0], pe.rem_bias[1])


def test_stickbreak_rem_bias_trains_its_vector():
    "The remainder's vector gets a gradient through a model's loss (it is a parameter the model learns)."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="stickbreak:rem=bias", max_len=32))
    idx = torch.randint(0, 256, (2, 32))
    m(idx, torch.roll(idx, -1, 1))[1].backward()
    assert m.pe.rem_bias.grad is not None and (m.pe.rem_bias.grad.abs() > 0).all()


def test_stickbreak_is_finite_for_large_logits():
    pe = build_pe("stickbreak", n_heads=H, head_dim=D)
    q, k, v = qkv(scale=30.0)
    with torch.no_grad():
        out, w = attention(q, k, v, pe, Positions.arange(B, T), path="naive", return_weights=True)
    assert torch.isfinite(out).all() and torch.allclose(w.sum(-1), torch.ones(B, H, T), atol=1e-5)


def test_stickbreak_needs_a_causal_mask():
    pe = build_pe("stickbreak", n_heads=H, head_dim=D)
    q, k, v = qkv()
    with pytest.raises(ValueError, match="causal"):
        attention(q, k, v, pe, Positions.arange(B, T), causal=False, path="naive")


# ---- sink ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("inner", ["nope", "alibi"])
def test_sink_is_a_softmax_with_one_more_column(inner):
    torch.manual_seed(0)
    pe = build_pe(f"sink:{inner}", n_heads=H, head_dim=D, n_layers=2)
    with torch.no_grad(): pe.sink.copy_(torch.tensor([[-1.0, 0.0, 1.0, 3.0], [2.0, 2.0, -3.0, 0.5]]))
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    bias = build_pe(inner, n_heads=H, head_dim=D).bias(pos, pos)
    bias = torch.zeros(H, T, T) if bias is None else bias
    for layer in (0, 1):
        s = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(D) + bias.double()).masked_fill(~causal_mask(T, T), float("-inf"))
        e = s.exp()
        ref = e / (e.sum(-1, keepdim=True) + pe.sink[layer].detach().double().exp()[None, :, None, None])
        with torch.no_grad():
            out, w = attention(q, k, v, pe, pos, layer=layer, path="naive", return_weights=True)
            chunked = attention(q, k, v, pe, pos, layer=layer, path="chunked", block=5)
        assert torch.allclose(w.double(), ref, atol=1e-6), layer
        assert torch.allclose(chunked.double(), ref @ v.double(), atol=1e-5)
        assert (w.sum(-1) < 1).all()


def test_sink_starts_as_gpt_oss_and_refuses_a_non_softmax_inner():
    pe = build_pe("sink:rope", n_heads=16, head_dim=8, n_layers=8)
    assert pe.sink.shape == (8, 16) and abs(pe.sink.std().item() - 0.02) < 0.006 and pe.uses_rotate
    with pytest.raises(ValueError, match="sink cannot wrap 'stickbreak'"):
        build_pe("sink:stickbreak", n_heads=4, head_dim=8)


# ---- paths, errors, checkpoints ------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["stickbreak", "sink:nope", "sink:rope", "sink:fox", "path"])
def test_fused_paths_refuse_a_normaliser_in_one_line_and_are_never_picked(spec):
    pe = build_pe(spec, n_heads=H, head_dim=D, d_model=DM)
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    if pe.uses_gate: pos = pe.gate(torch.randn(B, T, DM), pos)
    for path in ("sdpa", "flex"):
        with pytest.raises(ValueError, match=f"path '{path}' cannot run") as e:
            attention(q, k, v, pe, pos, path=path)
        assert "\n" not in str(e.value)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            assert [pick_path(pe, L, torch.device(dev)) for L in (16, 4096) for dev in ("cpu", "cuda")] == \
                ["naive", "naive", "chunked", "chunked"]


def test_fox_is_chunked_at_long_lengths_on_a_cpu():
    pe = build_pe("fox", n_heads=H, head_dim=D, d_model=DM)
    assert pick_path(pe, 4096, torch.device("cpu")) == "chunked" and pick_path(pe, 64, torch.device("cpu")) == "sdpa"
    assert pick_path(pe, 64, torch.device("cuda")) == "flex"


@pytest.mark.parametrize("spec", ["fox", "stickbreak", "sink:nope", "path"])
def test_check_spec_runs_the_successors(spec):
    check_spec(spec, n_heads=H, head_dim=D, d_model=DM)


@pytest.mark.parametrize("spec", ["fox", "sink:rope", "path"])
def test_trained_gates_and_sinks_save_and_load(spec, tmp_path):
    torch.manual_seed(0)
    tokens = torch.randint(0, 256, (4000,))
    cfg = GPTConfig(n_layer=2, n_head=H, d_model=DM, pe=spec, max_len=16)
    m, _ = train(cfg, TrainConfig(steps=4, batch_size=2, length=16, lr=1e-2, warmup=1, device="cpu", ckpt_every=0),
                 tokens=tokens, run_dir=tmp_path / "run", progress=False, log=lambda s: None)
    seed_everything(0)                                                            # as `train` seeds before it builds
    fresh = GPT(cfg)
    names = {"fox": ["gate_w"], "sink:rope": ["sink"], "path": ["w_down", "w_up", "w_conv", "beta_w", "beta_b"]}[spec]
    back = load_model(tmp_path / "run")
    for name in names:
        trained = dict(m.pe.named_parameters())[name]
        assert not torch.equal(trained, dict(fresh.pe.named_parameters())[name]), name   # training moved it
        assert torch.equal(dict(back.pe.named_parameters())[name], trained), name
    idx = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        assert torch.allclose(back(idx), m.eval()(idx), atol=1e-6)


@pytest.mark.parametrize("spec", ["fox", "stickbreak", "sink:rope", "path"])
def test_chunked_never_builds_a_t_by_t_map(spec):
    "At a long length the chunked path holds one block of queries' maps at a time: no tensor as large as [B, H, T, T]."
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __init__(self): super().__init__(); self.most = 0
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor): self.most = max(self.most, t.numel())
            return out

    L, blk, h = 512, 64, 2
    pe = build_pe(spec, n_heads=h, head_dim=D, d_model=h * D)
    q, k, v = (torch.randn(1, h, L, D) for _ in range(3))
    pos = Positions.arange(1, L)
    if pe.uses_gate: pos = pe.gate(torch.randn(1, L, h * D), pos)
    assert pick_path(pe, 4096, torch.device("cpu")) == "chunked"
    with torch.no_grad(), Largest() as seen:
        attention(q, k, v, pe, pos, path="chunked", block=blk)
    assert seen.most <= 2 * h * blk * L < h * L * L, (spec, seen.most)


# ---- PaTH ----------------------------------------------------------------------------------------

def random_path(seed=1):
    "A `path` PE whose maps are far from the identity: strengths spread over (0, 2), directions that vary per token."
    torch.manual_seed(seed)
    pe = build_pe("path", n_heads=H, head_dim=D, d_model=DM, n_layers=2)
    with torch.no_grad():
        pe.beta_w.normal_(0, 0.3); pe.beta_b.normal_(0, 1.5); pe.w_conv.normal_(0, 0.5)
    return pe


def path_maps(pe, x, layer):
    "H_t = I − β_t ŵ_t ŵ_tᵀ of every token and head, written out from the PE's parameters: [B, H, T, D, D] (float64)."
    p = {n: t.detach().double() for n, t in pe.named_parameters()}
    x = x.double()
    w = x @ p["w_down"][layer].T @ p["w_up"][layer].T                        # [B, T, H·D], the low-rank projection
    taps = p["w_conv"][layer]                                                  # [H·D, K]; tap K−1 reads the token itself
    K = taps.shape[-1]
    conv = torch.zeros_like(w)
    for t in range(w.shape[1]):
        for s in range(K):
            if t - (K - 1) + s >= 0: conv[:, t] += taps[:, s] * w[:, t - (K - 1) + s]
    w = (conv * torch.sigmoid(conv)).view(x.shape[0], x.shape[1], H, D)     # SiLU
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.sigmoid(torch.einsum("btd,hd->bth", x, p["beta_w"][layer]) + p["beta_b"][layer])
    maps = torch.eye(D, dtype=torch.float64) - beta[..., None, None] * w[..., :, None] * w[..., None, :]
    return maps.permute(0, 2, 1, 3, 4)


def path_loop_logits(q, k, maps, causal=True):
    "s_ij = q_iᵀ H_i ⋯ H_{j+1} k_j / √d, carrying key j forward one token at a time; without a causal mask, for j > i,"
    "q_iᵀ H_{i+1} ⋯ H_j k_j (key j carried back, H_j first). −inf where masked."
    q, k = q.double(), k.double()
    n = q.shape[-2]
    s = torch.full((*q.shape[:-1], n), float("-inf"), dtype=torch.float64)
    for j in range(n):
        kj = k[..., j, :]
        for i in range(j, n):
            if i > j: kj = (maps[..., i, :, :] @ kj[..., None])[..., 0]
            s[..., i, j] = (q[..., i, :] * kj).sum(-1) / math.sqrt(D)
        kj = k[..., j, :]
        for i in range(j - 1, -1, -1) if not causal else ():
            kj = (maps[..., i + 1, :, :] @ kj[..., None])[..., 0]
            s[..., i, j] = (q[..., i, :] * kj).sum(-1) / math.sqrt(D)
    return s


def test_path_logits_are_the_loop_in_each_layer():
    pe, x = random_path(), torch.randn(B, T, DM)
    q, k, _ = qkv()
    for layer in (0, 1):
        pos = pe.gate(x, Positions.arange(B, T), layer)
        ref = path_loop_logits(q, k, path_maps(pe, x, layer))
        with torch.no_grad():
            got = pe.logits(q, k, pos, pos, 1 / math.sqrt(D), layer).double()
        seen = causal_mask(T, T)
        assert torch.allclose(got[..., seen], ref[..., seen], atol=1e-5), layer
        assert (got[..., seen] - (q @ k.transpose(-1, -2))[..., seen].double() / math.sqrt(D)).abs().max() > 0.1   # far from NoPE


@pytest.mark.parametrize("path", ["naive", "chunked"])
@pytest.mark.parametrize("causal", [True, False])
def test_path_attention_on_both_paths_equals_the_loop(path, causal):
    "Causal, and without a mask (keys after the query through the maps between them, the other way round)."
    pe, x = random_path(), torch.randn(B, T, DM)
    q, k, v = qkv()
    pos = pe.gate(x, Positions.arange(B, T), 1)
    ref = path_loop_logits(q, k, path_maps(pe, x, 1), causal).softmax(-1) @ v.double()
    with torch.no_grad():
        out = attention(q, k, v, pe, pos, layer=1, path=path, block=5, causal=causal)
    assert torch.allclose(out.double(), ref, atol=1e-5)


def test_path_strength_zero_is_nope():
    pe, x = random_path(), torch.randn(B, T, DM)
    q, k, v = qkv()
    pos = Positions.arange(B, T)
    with torch.no_grad():
        nope = attention(q, k, v, build_pe("nope", n_heads=H, head_dim=D), pos, path="naive")
        assert not torch.allclose(attention(q, k, v, pe, pe.gate(x, pos), path="naive"), nope, atol=1e-3)
        pe.beta_b.fill_(-80.0)                                                 # β = 2σ(−80 + …) ≈ 0: H = I
        for path in ("naive", "chunked"):
            assert torch.allclose(attention(q, k, v, pe, pe.gate(x, pos), path=path, block=5), nope, atol=1e-5), path


def test_path_starts_as_the_official_code_and_needs_its_vectors():
    pe = build_pe("path", n_heads=8, head_dim=16, d_model=128, n_layers=3)
    shapes = {n: tuple(p.shape) for n, p in pe.named_parameters()}
    assert shapes == {"w_down": (3, 32, 128), "w_up": (3, 128, 32), "w_conv": (3, 128, 3), "beta_w": (3, 8, 128), "beta_b": (3, 8)}
    assert (pe.beta_b == 0).all() and all(abs(getattr(pe, n).std().item() - 0.02) < 0.003 for n in ("w_down", "w_up", "beta_w"))
    v = pe.vectors(torch.randn(2, 5, 128))
    beta = v.pow(2).sum(-1)                                                   # |v|² = β = 2σ(w·x) with w ~ N(0, 0.02²)
    assert ((beta > 0.5) & (beta < 1.5)).all() and abs(beta.mean().item() - 1) < 0.05   # ≈ 1 at the start
    pos = Positions.arange(2, 5)
    with pytest.raises(ValueError, match=r"pe\.gate\(x, pos, layer\)") as e:
        pe.logits(torch.randn(2, 8, 5, 16), torch.randn(2, 8, 5, 16), pos, pos, 0.25)
    assert "\n" not in str(e.value)


def test_path_model_reads_each_layers_input():
    "The model equals a forward written out by hand: layer l's maps from ln1 of its own input, with layer l's weights."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="path", max_len=T)).eval()
    with torch.no_grad():
        m.pe.beta_w.normal_(0, 0.3); m.pe.beta_b.normal_(0, 1.5); m.pe.w_conv.normal_(0, 0.5)
        idx = torch.randint(0, 256, (B, T))
        x = m.tok(idx)
        for l, blk in enumerate(m.blocks):
            h = blk.ln1(x)
            q, k, v = blk.attn.qkv(h).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
            y = (path_loop_logits(q, k, path_maps(m.pe, h, l)).softmax(-1) @ v.double()).float()
            x = x + blk.attn.proj(y.transpose(1, 2).reshape(B, T, DM))
            x = x + blk.mlp(blk.ln2(x))
        ref = m.head(m.ln_f(x))
        for path in ("naive", "chunked"):
            assert torch.allclose(m(idx, path=path), ref, atol=1e-4), path


def test_path_chunked_gives_the_naive_forward_and_gradients():
    "chunked (blocks of queries, recomputed in backward) trains every map parameter as the naive path does."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="path", max_len=64))
    with torch.no_grad(): m.pe.beta_b.normal_(0, 1.5)
    idx = torch.randint(0, 256, (1, 64))
    losses, grads = {}, {}
    for path in ("naive", "chunked"):
        m.zero_grad()
        losses[path] = m(idx, torch.roll(idx, -1, 1), path=path)[1]
        losses[path].backward()
        grads[path] = {n: p.grad.clone() for n, p in m.named_parameters()}
    assert torch.allclose(losses["naive"], losses["chunked"], atol=1e-6)
    for n, g in grads["naive"].items():
        if n.startswith("pe."): assert g.abs().max() > 0, n
        assert torch.allclose(g, grads["chunked"][n], atol=1e-6), n


def test_path_training_reduces_the_loss():
    "A few steps on a repeating text lower the loss, with finite gradients through the recursion into every map parameter."
    torch.manual_seed(0)
    tokens = torch.tensor(list(b"def f(x):\n    return x + 1\n" * 200))
    cfg = GPTConfig(n_layer=2, n_head=H, d_model=DM, pe="path", max_len=32)
    m, hist = train(cfg, TrainConfig(steps=40, batch_size=4, length=32, lr=1e-2, warmup=2, device="cpu", ckpt_every=0),
                    tokens=tokens, progress=False, log=lambda s: None)
    losses = [h["loss"] for h in hist if "loss" in h]
    assert all(math.isfinite(l) for l in losses) and losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])
    assert all(torch.isfinite(p).all() for p in m.pe.parameters())
