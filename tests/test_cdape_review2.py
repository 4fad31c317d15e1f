"Chapter 41 after its second review: where the published tril order differs from ours, and the sign of ΔP on a model whose gain is known."
import torch
import torch.nn.functional as F
from torch import nn

from lengthx.attention import causal_mask
from lengthx.data import corpus_tokens
from lengthx.pe.cdape import ScoreConv, delta_p, tril_masked


def test_published_order_differs_on_every_diagonal_pixel_but_the_last_rows():
    "Tril on the input only (the published code) against ours (tril again before Conv2): same below the diagonal and on the last row, different on (i, i) for i < T-1."
    torch.manual_seed(0)
    h, T = 4, 10
    f, m = ScoreConv(2 * h, 16, h, 3), causal_mask(T, T)
    x = torch.randn(1, 2 * h, T, T)
    with torch.no_grad():
        ours = f.reference(x[:, :h], x[:, h:], mask=m)
        published = f.conv2(F.leaky_relu(f.conv1(tril_masked(x, m)), f.slope))
    gap = (ours - published).abs().amax((0, 1))
    differs = {(i, j) for i, j in m.nonzero().tolist() if gap[i, j] > 1e-6}
    assert differs == {(i, i) for i in range(T - 1)}


class UnigramCounts(nn.Module):
    "Next-byte logits from add-one counts of the bytes read so far: a longer input estimates the frequencies better."
    def forward(self, idx): return (F.one_hot(idx, 256).cumsum(1) + 1.0).log()


def test_delta_p_is_positive_for_a_model_that_gains_from_longer_input():
    "ΔP = P(local) − P(full) > 0 when the longer input helps; a sign error in delta_p makes it negative."
    r = delta_p(UnigramCounts(), corpus_tokens("test"), [32, 128], train_len=32, n_windows=4)
    assert r[32]["delta"] == 0.0
    assert r[128]["full"] < r[128]["local"] and r[128]["delta"] > 0
    assert abs(r[128]["delta"] - (r[128]["local"] - r[128]["full"])) < 1e-9
