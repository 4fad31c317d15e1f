"""Randomized positions (chapter 23): the wrapper changes a model only through the token positions it draws, so it
refuses inner PEs that read none, sizes a learned inner table to N, and a GPT built with it draws in training only."""
import pytest
import torch

from lengthx.attention import build_pe
from lengthx.model import GPT, GPTConfig


def _model(spec: str) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, pe=spec, max_len=32))


@pytest.mark.parametrize("inner", ["bipe:rope", "bipe:alibi", "fox", "cope"])
def test_refuses_an_inner_pe_that_does_not_read_token_positions(inner):
    "BiPE's inner PE reads in-segment indices, FoX and CoPE count their own: the draw would be a silent no-op."
    with pytest.raises(ValueError, match="does not change when the token positions do"):
        build_pe(f"randomized:{inner}", n_heads=2, head_dim=8, max_len=32)


@pytest.mark.parametrize("inner", ["rope", "alibi", "sinusoidal", "learned"])
def test_accepts_inner_pes_that_read_token_positions(inner):
    build_pe(f"randomized:{inner}", n_heads=2, head_dim=8, max_len=32)


def test_a_learned_inner_table_holds_n_rows_and_trains():
    "The draw reaches N − 1 = 127 while the model's length is 32: the default table gets N rows, and a step runs."
    m = _model("randomized:learned").train()
    assert m.pe.inner.max_len == m.pe.max_len == 128 and m.pe.inner.table.num_embeddings == 128
    ids = torch.randint(0, 256, (4, 32))
    for _ in range(20): m(ids, ids)[1].backward()           # 20 draws of 32 from 128: some reach far past row 31


def test_refuses_an_explicit_learned_table_smaller_than_n():
    with pytest.raises(ValueError, match="table of 64 rows"):
        build_pe("randomized:learned:max_len=64", n_heads=2, head_dim=8, max_len=32)
    assert build_pe("randomized:learned:max_len=200", n_heads=2, head_dim=8, max_len=32).inner.max_len == 200


@pytest.mark.parametrize("spec", ["randomized:rope", "randomized:alibi"])
def test_gpt_draws_positions_in_training_only(spec):
    "The model sends its positions through pe.make_positions: two training forwards differ, two eval forwards agree."
    m, ids = _model(spec), torch.randint(0, 256, (2, 32))
    with torch.no_grad():
        m.train(); a, b = m(ids), m(ids)
        assert (a - b).abs().max() > 1e-4
        m.eval(); c, d = m(ids), m(ids)
        assert torch.equal(c, d)
        plain = _model(spec.split(":", 1)[1]).eval()      # the inner PE alone, same seed: plain positions 0..T-1
        plain.load_state_dict(m.state_dict())
        assert torch.allclose(plain(ids), c)


def test_bare_nope_is_kept_for_layer_patterns():
    "A pattern builds positions once: its NoPE layers are wrapped too, and the model draws for every layer."
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, pe="randomized:rope/randomized:nope", max_len=32)).train()
    ids = torch.randint(0, 256, (2, 32))
    with torch.no_grad(): assert (m(ids) - m(ids)).abs().max() > 1e-4


@pytest.mark.parametrize("spec", ["randomized:max_len=8:cope", "randomized:max_len=12:fox", "randomized:max_len=3:cope",
                                  "randomized:max_len=4:bipe:rope"])
def test_the_probe_is_sized_to_n_so_a_small_n_is_still_checked(spec):
    "A small N must not skip the check: the probe is sized to N, so CoPE and FoX are refused at N = 3..12 too."
    with pytest.raises(ValueError, match="does not change when the token positions do"):
        build_pe(spec, n_heads=2, head_dim=8, max_len=2)


@pytest.mark.parametrize("spec", ["randomized:max_len=3:rope", "randomized:max_len=3:alibi", "randomized:max_len=4:learned",
                                  "randomized:max_len=5:sinusoidal"])
def test_a_small_n_accepts_pes_that_read_token_positions(spec):
    "The probe's moved positions stay below N: a learned table of N rows is indexed in range, and RoPE/ALiBi pass."
    pe = build_pe(spec, n_heads=2, head_dim=8, max_len=2)
    assert pe.max_len == int(spec.split("=")[1].split(":")[0])


def test_n_below_three_is_refused():
    with pytest.raises(ValueError, match="max_len >= 3"):
        build_pe("randomized:max_len=2:rope", n_heads=2, head_dim=8, max_len=2)
