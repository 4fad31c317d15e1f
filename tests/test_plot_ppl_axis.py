"""`plot_ppl` labels its length axis with the lengths drawn, as plain numbers (64, 128, ...), not as powers of two."""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

from lengthx.evaluate import eval_lengths, plot_ppl


def _labels(ax) -> list[str]:
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.get_xticklabels() if t.get_text()]


def test_the_length_axis_reads_plain_lengths():
    lens = eval_lengths(64, 16)                                       # 64 ... 1024
    ax = plot_ppl({"rope": {L: 10 + i for i, L in enumerate(lens)}, "nope": {L: 11.0 for L in lens}}, 64)
    assert _labels(ax) == ["64", "128", "256", "512", "1024"]
    assert not any("^" in t or "mathdefault" in t for t in _labels(ax))
    plt.close(ax.figure)


def test_many_lengths_are_thinned_to_every_other_one():
    lens = eval_lengths(16, 2 ** 11)                                  # 12 lengths, 16 ... 32768
    ax = plot_ppl({"alibi": {L: 5.0 + L / 1e4 for L in lens}}, 16)
    got = _labels(ax)
    assert 3 <= len(got) <= 8 and got == [str(L) for L in lens[::2]], got
    plt.close(ax.figure)
