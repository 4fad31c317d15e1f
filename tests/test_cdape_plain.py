"CDAPE's f as its equation reads (`plain_score_conv`, what `ScoreConv.reference` calls) against the fast `forward`, and its row-locality."
import torch

from lengthx.attention import causal_mask
from lengthx.pe.cdape import ScoreConv, plain_score_conv, tril_masked


def _f(k: int = 3, h: int = 4, width: int = 16) -> ScoreConv:
    torch.manual_seed(0)
    return ScoreConv(2 * h, width, h, k)


def test_plain_matches_fast_path_with_shared_bias():
    f = _f()
    s, b, m = torch.randn(2, 4, 12, 12), torch.randn(1, 4, 12, 12), causal_mask(12, 12)
    with torch.no_grad():
        plain = plain_score_conv(f.conv1, f.conv2, f.slope, s, b, mask=m)
        assert torch.allclose(plain, f(s, b, mask=m), atol=1e-5)
        assert torch.equal(plain, f.reference(s, b, mask=m))


def test_plain_has_both_trils():
    "Dropping the second tril changes visible pixels next to the diagonal (they read the hidden map at key i+1)."
    f = _f()
    s, b, m = torch.randn(1, 4, 10, 10), torch.randn(1, 4, 10, 10), causal_mask(10, 10)
    with torch.no_grad():
        plain = plain_score_conv(f.conv1, f.conv2, f.slope, s, b, mask=m)
        x = torch.cat([s, b], 1)
        one_tril = f.conv2(torch.nn.functional.leaky_relu(f.conv1(tril_masked(x, m)), f.slope))
    diag = torch.arange(9)
    assert (plain[..., diag, diag] - one_tril[..., diag, diag]).abs().max() > 1e-4


def test_plain_block_equals_rows_of_full_map():
    "A block of queries 6..11 against keys 0..11 with its offset mask gives the same rows as the full 12×12 map."
    f = _f(k=5)
    s, b = torch.randn(2, 4, 12, 12), torch.randn(1, 4, 12, 12)
    with torch.no_grad():
        full = plain_score_conv(f.conv1, f.conv2, f.slope, s, b, mask=causal_mask(12, 12))
        block = plain_score_conv(f.conv1, f.conv2, f.slope, s[:, :, 6:], b[:, :, 6:], mask=causal_mask(6, 12, q_offset=6))
    assert torch.allclose(block, full[:, :, 6:], atol=1e-5)
