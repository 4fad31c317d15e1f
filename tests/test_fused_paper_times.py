"The DAPE papers' time table as chapter 43 keeps it (lengthx.pe.fused.PAPER_MS, PAPER_SHAPES, paper_ratios)."
import pytest

from lengthx.model import PRESETS
from lengthx.pe.dape import dape_flops, flop_limit
from lengthx.pe.fused import PAPER_MS, PAPER_SHAPES, paper_ratios

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
