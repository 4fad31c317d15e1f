"""lengthx.bench: the FLOP floors chapter 43 draws its measurements against."""


def test_causal_flop_floor_counts_the_kept_pairs():
    "The causal floor is the dense one at T=1 (nothing masked), below it at every longer length, and above 1."
    from lengthx.bench import dape_fast_limits
    assert dape_fast_limits(1, 4, causal=True) == dape_fast_limits(1, 4)
    for T, B in ((512, 8), (2048, 1)):
        dense, causal = dape_fast_limits(T, B), dape_fast_limits(T, B, causal=True)
        assert all(1 < causal[n] < dense[n] for n in dense), (dense, causal)
        assert causal["dape"] < causal["cdape"]          # CDAPE's 1×3 taps do three times DAPE's work per pair
