"The DAPE papers' time table as chapter 43 keeps it (lengthx.pe.fused.PAPER_MS, PAPER_SHAPES, paper_ratios)."
import pytest

from lengthx.model import PRESETS
from lengthx.pe.dape import dape_flops, flop_limit
from lengthx.pe.fused import PAPER_MS, PAPER_PEER_MS, PAPER_SHAPES, paper_peer_ratios, paper_ratios

# The ratio columns as the papers print them, transcribed apart from the milliseconds: Kerple ÷ DAPE-Kerple
# (DAPE, Table 1); Kerple ÷ CDAPE-Kerple and DAPE-Kerple ÷ CDAPE-Kerple (CDAPE, Table 8).
PRINTED = {"350M": (0.8469, 0.7511, 0.8868), "2.7B": (0.8765, 0.8205, 0.9361), "6.7B": (0.9224, 0.8918, 0.9667)}
HEAD_WIDTH = {"350M": 64, "2.7B": 80, "6.7B": 128}   # GPT-3 Table 2.1's d_head for the sizes of these names


@pytest.mark.parametrize("size", list(PRINTED))
def test_milliseconds_give_the_printed_ratio_columns(size):
    "Each printed ratio is the quotient of the milliseconds cut to four places: a wrong digit in a time fails."
    ms = PAPER_MS[size]
    ours = (ms["Kerple"] / ms["DAPE-Kerple"], ms["Kerple"] / ms["CDAPE-Kerple"], ms["DAPE-Kerple"] / ms["CDAPE-Kerple"])
    for got, printed in zip(ours, PRINTED[size]):
        assert 0 <= got - printed < 1e-4, (size, got, printed)


def test_paper_ratios_divide_by_kerple():
    "paper_ratios is each method's time over Kerple's (not over DAPE-Kerple's, the papers' own reference)."
    for size, (k_over_dape, k_over_cdape, _) in PRINTED.items():
        r = paper_ratios(size)
        assert r["DAPE-Kerple"] == pytest.approx(1 / k_over_dape, rel=2e-4)
        assert r["CDAPE-Kerple"] == pytest.approx(1 / k_over_cdape, rel=2e-4)
    assert paper_ratios("350M")["DAPE-Kerple"] == pytest.approx(1.18, abs=5e-3)   # the papers' quoted 1.18x and 1.33x
    assert paper_ratios("350M")["CDAPE-Kerple"] == pytest.approx(1.33, abs=5e-3)


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="350M, 2.7B, 6.7B"):
        paper_ratios("1.3B")


def test_shapes():
    "350M is the book's gpt2-medium (the papers' configuration table); 2.7B and 6.7B have GPT-3's head widths."
    assert PAPER_SHAPES["350M"] == PRESETS["gpt2-medium"]
    assert list(PAPER_SHAPES) == list(PAPER_MS)
    for size, c in PAPER_SHAPES.items():
        assert c["d_model"] == c["n_head"] * HEAD_WIDTH[size], size


def test_ratios_and_floors_fall_with_size_and_ratios_stay_above():
    "At each size the papers' ratio lies above its FLOP floor; both fall from size to size, the floor faster."
    sizes = list(PAPER_MS)
    for key, k in (("DAPE-Kerple", 1), ("CDAPE-Kerple", 3)):
        floors, ratios = [], []
        for size in sizes:
            c = PAPER_SHAPES[size]
            floors.append(flop_limit(k * dape_flops(1, c["n_head"], 512, 512), c["d_model"], c["n_layer"], 512, 1, vocab=50304))
            ratios.append(paper_ratios(size)[key])
        assert all(r > f > 1 for r, f in zip(ratios, floors)), (key, ratios, floors)
        assert floors == sorted(floors, reverse=True) and ratios == sorted(ratios, reverse=True)
        assert (floors[0] - 1) / (floors[-1] - 1) > (ratios[0] - floors[0]) / (ratios[-1] - floors[-1])


# DAPE Table 1's ratio column for the encodings of about Kerple's FLOPs, as printed: RoPE, ALiBi, T5's bias ÷ DAPE-Kerple.
PRINTED_PEERS = {"350M": (0.9366, 0.7697, 1.5839), "2.7B": (1.1187, 0.7715, 1.2725), "6.7B": (0.8858, 0.8317, 1.1273)}


@pytest.mark.parametrize("size", list(PRINTED_PEERS))
def test_peer_milliseconds_give_the_printed_ratio_column(size):
    "Each peer's printed ratio is its milliseconds over DAPE-Kerple's cut to four places: a wrong digit in a time fails."
    got = [PAPER_PEER_MS[size][n] / PAPER_MS[size]["DAPE-Kerple"] for n in ("RoPE", "ALiBi", "T5's bias")]
    for g, printed in zip(got, PRINTED_PEERS[size]):
        assert 0 <= g - printed < 1e-4, (size, g, printed)


def test_peer_ratios_divide_by_kerple():
    "paper_peer_ratios is each peer's time over Kerple's (not DAPE-Kerple's): the band of equal-FLOP encodings."
    r = {z: paper_peer_ratios(z) for z in PAPER_PEER_MS}
    assert [round(r[z]["RoPE"], 2) for z in r] == [1.11, 1.28, 0.96]
    assert [round(r[z]["ALiBi"], 2) for z in r] == [0.91, 0.88, 0.90]
    assert [round(r[z]["T5's bias"], 2) for z in r] == [1.87, 1.45, 1.22]
    assert list(PAPER_PEER_MS) == list(PAPER_MS)
    with pytest.raises(ValueError, match="350M, 2.7B, 6.7B"):
        paper_peer_ratios("1.3B")
