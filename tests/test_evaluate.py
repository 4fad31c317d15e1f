"""Perplexity protocols: exact values on models with known answers, window bookkeeping, clear errors."""
import math

import pytest
import torch

from lengthx.evaluate import PROTOCOLS, last_k_windows, nonoverlap_windows, perplexity, position_losses, sliding_windows

V = 256


def uniform(ids):
    return torch.zeros(*ids.shape, V)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("length", [16, 100, 512])
def test_uniform_model_has_vocab_perplexity(protocol, length):
    toks = torch.randint(0, V, (3000,))
    ppl = perplexity(uniform, toks, length, protocol=protocol, k=32, stride=max(1, length // 4))
    assert abs(ppl - V) < 1e-6 * V


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_peaked_model_has_inverse_probability_perplexity(protocol):
    "A model giving probability p to the true next token (here: next token = current + 1 mod V) has ppl 1/p."
    toks = torch.arange(5000) % V
    p = 0.25
    def model(ids):
        logp = torch.full((*ids.shape, V), math.log((1 - p) / (V - 1)))
        logp.scatter_(-1, ((ids + 1) % V)[..., None], math.log(p))
        return logp
    assert abs(perplexity(model, toks, 64, protocol=protocol, k=16) - 1 / p) < 1e-4  # float32 log-probs


def test_last_k_scores_same_token_count_at_every_length():
    for L in (64, 256, 1024):
        w = last_k_windows(10_000, L, k=64, n_windows=8)
        assert len(w) == 8 and sum(L - f for _, f in w) == 8 * 64


def test_nonoverlap_windows_tile_the_stream():
    w = nonoverlap_windows(1001, 100)
    assert [s for s, _ in w] == list(range(0, 1000, 100)) and all(f == 0 for _, f in w)


def test_sliding_scores_each_target_once():
    w = sliding_windows(2000, 128, stride=32)
    scored = [t for s, f in w for t in range(s + f, s + 128)]
    assert scored == list(range(len(scored)))


def test_position_losses_shape_and_value():
    assert torch.allclose(position_losses(uniform, torch.randint(0, V, (2000,)), 50), torch.full((50,), math.log(V)))


def test_clear_errors():
    toks = torch.randint(0, V, (100,))
    with pytest.raises(ValueError, match="unknown protocol"):
        perplexity(uniform, toks, 10, protocol="overlap")
    with pytest.raises(ValueError, match="need"):
        perplexity(uniform, toks, 200)
    with pytest.raises(ValueError, match="stride"):
        perplexity(uniform, toks, 10, protocol="sliding", stride=20)
