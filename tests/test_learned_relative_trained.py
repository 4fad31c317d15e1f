"""Chapter 24's trained-model readings: Transformer-XL's position term as a function (`txl_position_scores`) equals
the definition pair by pair on every branch, the curve the chapter draws from W_R R_δ is what the PE computes, and
a causal Shaw model trains exactly the table rows it reads (c ≤ k) and never the rows of keys after the query."""
import pytest
import torch

from lengthx.attention import Positions, build_pe
from lengthx.model import GPT, GPTConfig
from lengthx.pe.relative import sinusoid_table, txl_position_scores
from lengthx.train import seed_everything


def direct_scores(qv, w_r, pos_q, pos_k, H, D):
    "(q_i + v)·W_R R_{i−j} for every pair, one pair at a time: [B, H, Tq, Tk]."
    B, _, Tq, _ = qv.shape
    out = torch.zeros(B, H, Tq, pos_k.shape[1])
    for b in range(B):
        tq, tk = pos_q.token[b if pos_q.token.shape[0] > 1 else 0], pos_k.token[b if pos_k.token.shape[0] > 1 else 0]
        for i in range(Tq):
            for j in range(len(tk)):
                r = (sinusoid_table((tq[i] - tk[j])[None], w_r.shape[0]) @ w_r).view(H, D)
                out[b, :, i, j] = (qv[b, :, i] * r).sum(-1)
    return out


@pytest.mark.parametrize("pos_q,pos_k", [
    (Positions.arange(2, 6), Positions.arange(2, 6)),                                      # square, consecutive: the shift
    (Positions.arange(2, 3, offset=4), Positions.arange(2, 7)),                            # a block of the last queries
    (Positions(torch.tensor([[0, 3, 4, 9, 15, 16]])), Positions(torch.tensor([[0, 3, 4, 9, 15, 16]]))),   # randomized
    (Positions(torch.tensor([[0, 2, 5], [1, 7, 8]])), Positions(torch.tensor([[0, 2, 5], [1, 7, 8]]))),    # a draw per row
])
def test_txl_position_scores_equals_pairs(pos_q, pos_k):
    "Every branch of `txl_position_scores` (shift, grid gather, per-pair gather) gives the definition's number for each pair."
    torch.manual_seed(0)
    H, D, dm = 2, 3, 6
    w_r = torch.randn(dm, H * D)
    qv = torch.randn(2, H, pos_q.shape[1], D)
    r_heads = lambda d: (sinusoid_table(d, dm) @ w_r).view(len(d), H, D).transpose(0, 1)
    got = txl_position_scores(qv, pos_q, pos_k, r_heads)
    torch.testing.assert_close(got, direct_scores(qv, w_r, pos_q, pos_k, H, D))


def test_txl_curve_is_what_the_pe_computes():
    "One query at position T − 1 against keys 0..T − 1 reads (q + v)·W_R R_δ at δ = T − 1 … 0, the chapter's curve backwards."
    torch.manual_seed(0)
    pe = build_pe("transformer_xl", n_heads=4, head_dim=8, n_layers=2)
    with torch.no_grad():
        pe.w_r.normal_(0, 0.3)
        qv = torch.randn(4, 8)
        T = 20
        curve = torch.einsum("hd,hnd->hn", qv, pe.r_heads(torch.arange(T), 1))
        got = pe.position_scores(qv[None, :, None], Positions.arange(1, 1, offset=T - 1), Positions.arange(1, T), 1)[0, :, 0]
    torch.testing.assert_close(got.flip(-1), curve)
    assert (got - curve).abs().max() > 1e-3                     # read forwards it is another curve: the order matters


def test_causal_shaw_trains_only_the_rows_it_reads():
    "A few AdamW steps on a causal Shaw model move every row c ≤ k of both tables and leave the rows c > k as they started."
    seed_everything(0)
    k = 3
    model = GPT(GPTConfig(vocab_size=32, n_layer=2, n_head=2, d_model=16, pe=f"shaw:clip={k}", max_len=12))
    start = {n: getattr(model.pe, n).detach().clone() for n in ("w_k", "w_v")}
    opt = torch.optim.AdamW(model.pe.parameters(), lr=1e-2, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        idx = torch.randint(0, 32, (4, 12), generator=g)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad(); loss.backward(); opt.step()
    for n, w0 in start.items():
        w = getattr(model.pe, n).detach()
        assert torch.equal(w[:, k + 1:], w0[:, k + 1:]), n      # keys after the query: never read by a causal model
        assert ((w[:, : k + 1] - w0[:, : k + 1]).abs().amax(-1) > 0).all(), n
