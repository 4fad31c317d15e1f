"""Chapter 25's claims about where the window's [T, T] mask exists and why a window of the training length is the
inner model in training: in a model on consecutive positions the window's bias is asked for once per offset (2T - 1
keys against one query), never pair by pair, and equals the pair-by-pair bias; on positions that are not one run it
is asked for pair by pair; and a model trained with `window:w=L:kerple_log` at length L computes bit for bit what
the `kerple_log` model of the same seed computes (loss and gradients), so a windowed and a plain run of one seed
have the same P(L)."""
import pytest
import torch

from lengthx.attention import Positions, additive_mask, build_pe, relative_bias_matrix
from lengthx.model import GPT, GPTConfig
from lengthx.pe.window import WindowPE


def _spy(pe: WindowPE) -> list:
    "Record the (Tq, Tk) of every call to this window's bias."
    calls, bias = [], pe.bias
    def spy(pos_q, pos_k, layer=0):
        calls.append((pos_q.shape[1], pos_k.shape[1])); return bias(pos_q, pos_k, layer)
    pe.bias = spy
    return calls


@pytest.mark.parametrize("layout", [relative_bias_matrix, lambda pe, pos: additive_mask(pe, pos, causal=False)])
def test_on_consecutive_positions_the_window_bias_is_built_from_2T_minus_1_offsets(layout):
    T, w = 20, 5
    pe = build_pe(f"window:w={w}:kerple_log", n_heads=2, head_dim=4, max_len=T).eval()
    pos = Positions.arange(1, T)
    want = pe.bias(pos, pos)                                              # pair by pair
    calls = _spy(pe)
    with torch.no_grad(): got = layout(pe, pos)
    assert calls == [(1, 2 * T - 1)]                                      # one query against 2T - 1 offsets
    assert torch.allclose(got.reshape(want.shape), want)                  # the same bias, window edge included


def test_on_positions_that_are_not_one_run_the_window_bias_is_built_pair_by_pair():
    T, w = 8, 3
    pe = build_pe(f"window:w={w}:kerple_log", n_heads=2, head_dim=4, max_len=32).eval()
    pos = Positions(torch.tensor([[0, 2, 3, 5, 8, 9, 12, 13]]))
    calls = _spy(pe)
    with torch.no_grad(): relative_bias_matrix(pe, pos)
    assert calls == [(T, T)]


def test_a_window_of_the_training_length_trains_as_its_inner_encoding_bit_for_bit():
    L = 32
    runs = {}
    for spec in ("kerple_log", f"window:w={L}:kerple_log"):
        torch.manual_seed(0)
        model = GPT(GPTConfig.preset("tiny", pe=spec, max_len=L)).train()
        ids = torch.randint(0, model.cfg.vocab_size, (2, L + 1), generator=torch.Generator().manual_seed(1))
        loss = model(ids[:, :-1], ids[:, 1:])[1]
        loss.backward()
        runs[spec] = (loss.detach(), {n.replace("inner.", ""): p.grad for n, p in model.named_parameters()})
    (l0, g0), (l1, g1) = runs.values()
    assert torch.equal(l0, l1) and g0.keys() == g1.keys()
    assert all(torch.equal(g0[n], g1[n]) for n in g0)
    # a window one shorter binds at distance L - 1: the loss moves
    torch.manual_seed(0)
    short = GPT(GPTConfig.preset("tiny", pe=f"window:w={L - 1}:kerple_log", max_len=L)).train()
    ids = torch.randint(0, short.cfg.vocab_size, (2, L + 1), generator=torch.Generator().manual_seed(1))
    assert not torch.equal(short(ids[:, :-1], ids[:, 1:])[1].detach(), l0)
