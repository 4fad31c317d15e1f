"""The quick start (`lengthx sweep` with no options): one encoding per family, a summary computed from the run that says
what its intervals can separate and where the larger runs are, and a figure whose lines differ by more than colour."""
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from lengthx import cli
from lengthx.attention import known_pes, pe_examples
from lengthx.cli import main
from lengthx.evaluate import Protocol
from lengthx.experiments import UNIT
from lengthx.model import GPTConfig, check_model_spec
from lengthx.evaluate import pe_styles
from lengthx.sweep import (BUDGETS, ZOOM_BAND, QUICK_PES, growth, zoom_rows, plot_sweep, relative_growth, resolution,
                           resolution_note, run_sweep, spec_family, sweep_specs, sweep_table)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import plotcheck  # noqa: E402


def test_the_quick_set_is_one_encoding_per_registry_family():
    fams = [spec_family(s) for s in QUICK_PES.values()]
    assert len(set(fams)) == len(fams), fams                        # no two lines of one family
    assert set(fams) <= set(known_pes()), set(fams) - set(known_pes())   # every family it names is registered
    assert 6 <= len(fams) <= 8                                      # few enough lines to read in one figure
    assert {"nope", "rope", "alibi"} <= set(fams)                   # the baselines every comparison needs
    for s in QUICK_PES.values(): check_model_spec(GPTConfig.preset("tiny", pe=s, max_len=64))


def test_the_command_without_options_runs_the_quick_set_and_the_full_set_is_one_option_away():
    sub = cli._subparsers(cli.build_parser())["sweep"]
    assert sweep_specs(sub.parse_args([]).pes) == list(QUICK_PES.values())
    assert sweep_specs(sub.parse_args(["--pes", "quick"]).pes) == list(QUICK_PES.values())
    full = sweep_specs(sub.parse_args(["--pes", "default"]).pes)
    assert full == pe_examples("default") and len(full) > len(QUICK_PES)   # every registry family, as before
    assert sweep_specs(sub.parse_args(["--pes", "alibi,nope,alibi"]).pes) == ["alibi", "nope"]


def _row(spec, band16, band32):
    "A sweep row at lengths 16 and 32 with the point at each interval's middle."
    mid = lambda b: (b[0] + b[1]) / 2
    return {"spec": spec, "ppl": {16: mid(band16), 32: mid(band32)}, "ppl_interval": {16: list(band16), 32: list(band32)},
            "train_seconds": 1.0}


def test_the_note_is_read_from_the_intervals():
    rows = {"a": _row("a", (9, 11), (11, 13)), "b": _row("b", (19, 23), (21.5, 22.5)), "c": _row("c", (10, 16), (12.5, 17))}
    res = {"settings": {"train_len": 16, "max_factor": 2, "n_windows": 7}, "rows": rows}
    r = resolution(res)
    assert r["at_L"]["ppl"] == 2 and r["at_top"]["ppl"] == 1           # medians of (1, 2, 3) and (1, 0.5, 2.25)
    note = resolution_note(res)
    assert note.startswith("with 7 windows per length the 90% intervals are about ±2 ppl (±") and "±1 ppl" in note
    assert "unpaired intervals on levels" in note and "say nothing about another seed" in note
    wider = {**res, "rows": {**rows, "a": _row("a", (5, 15), (11, 13))}}
    assert resolution(wider)["at_L"]["ppl"] == 3 and resolution_note(wider) != note


def test_the_note_narrows_with_more_windows(tmp_path):
    "The same model scored on 4 and on 32 windows: the note follows the run, not a typed number."
    b = replace(BUDGETS["quick"], train_len=16, steps=3, batch_size=2)
    notes, halves = {}, {}
    for n in (4, 32):
        res = run_sweep(["nope", "alibi"], b, tmp_path / str(n), protocol=Protocol(n_windows=n, max_factor=2), progress=False)
        notes[n], halves[n] = resolution_note(res), resolution(res)["at_L"]["ppl"]
    assert notes[4].startswith("with 4 windows") and notes[32].startswith("with 32 windows")
    assert halves[32] < halves[4], halves


def test_the_command_prints_the_note_and_where_the_larger_runs_are(tmp_path, capsys):
    argv = ["sweep", "--train-len", "16", "--steps", "2", "--max-factor", "2", "--n-windows", "3", "--quiet"]
    assert main([*argv, "--pes", "nope,alibi", "--out", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert "with 3 windows per length the 90% intervals are about ±" in out and "are not resolved here" in out
    assert "`lengthx reproduce --only sweep`" in out and f"{UNIT['cpu']['sweep']['protocol']['n_windows']} windows" in out
    assert "chapter 57" in out


def _look(ln) -> tuple:
    "What tells a line apart in the legend: colour, line style, marker."
    return (matplotlib.colors.to_hex(ln.get_color()), ln.get_linestyle(), ln.get_marker())


def test_the_quick_figure_draws_the_book_palette_in_the_asked_order_and_no_two_lines_alike(tmp_path):
    specs = list(QUICK_PES.values())
    rows = {s: _row(s, (10 + i, 11 + i), (10.5 + 1.1 * i, 11.5 + 1.1 * i)) for i, s in enumerate(specs)}
    res = {"settings": {"train_len": 16, "max_factor": 2, "n_windows": 16, "preset": "tiny", "steps": 150,
                        "protocol": "last_k", "k": 16}, "rows": rows}
    asked = specs[1::2] + specs[::2]                                   # growth rises along specs: asked in neither order
    fig = plot_sweep(res, tmp_path / "sweep.png", order=asked)
    top = fig.axes[0]
    lines = [ln for ln in top.get_lines() if any(ln.get_label().startswith(s + "  ") for s in specs)]
    assert len(lines) == len(specs)
    assert len({_look(ln) for ln in lines}) == len(specs)              # no two lines alike (colour, style, marker)
    assert plotcheck.look_alike_lines(fig) == []
    book = pe_styles(asked)                                            # the book's colour of each family, chapter 53
    assert [_look(ln) for ln in lines] == [(matplotlib.colors.to_hex(book[s]["color"]), book[s]["ls"], book[s]["marker"])
                                           for s in asked]
    legend = top.get_legend()
    title = legend.get_title().get_text()
    assert title.startswith("PE  g at 2×") and not any(w in title for w in ("rank", "best", "order"))   # no ranking in the title
    assert [t.get_text().split("  ")[0] for t in legend.get_texts()][:len(asked)] == asked   # the order asked for
    assert [t.get_text() for t in fig.axes[-1].get_yticklabels()] == asked                    # the bottom panel too
    assert plotcheck.backwards_lines(fig) == []                        # x runs forwards
    assert [t.get_text() for t in top.get_xticklabels()] == ["16\n1×", "32\n2×"]   # every length labelled, plainly
    plt.close(fig)


def test_a_long_sweep_still_draws_no_two_lines_alike(tmp_path):
    specs = pe_examples("all")[:40]
    rows = {s: _row(s, (10 + i / 10, 11 + i / 10), (10.5 + i / 9, 11.5 + i / 9)) for i, s in enumerate(specs)}
    res = {"settings": {"train_len": 16, "max_factor": 2, "n_windows": 16}, "rows": rows}
    fig = plot_sweep(res)
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_label() != "×1: no change"]
    assert len({(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in lines}) == len(specs) == 40
    plt.close(fig)


def test_the_sweep_draws_its_figure_in_the_order_the_encodings_were_asked_for(tmp_path, monkeypatch):
    import lengthx.sweep as S
    seen = []
    real = S.plot_sweep
    def spy(res, path=None, ymax=None, order=None):
        seen.append(list(order or []))
        return real(res, path, ymax=ymax, order=order)
    monkeypatch.setattr(S, "plot_sweep", spy)
    b = replace(BUDGETS["quick"], train_len=16, steps=2, batch_size=2)
    run_sweep(["nope", "alibi"], b, tmp_path, protocol=Protocol(n_windows=3, max_factor=2), progress=False, figure=True)
    assert seen == [["nope", "alibi"]]
    run_sweep(["alibi", "nope"], b, tmp_path, protocol=Protocol(n_windows=3, max_factor=2), progress=False, figure=True)
    assert seen[-1] == ["alibi", "nope"]                                 # resumed and asked the other way round


def test_growth_is_divided_by_the_value_at_the_training_length():
    "Not by the shortest length present, and none when the training length itself has no value."
    row = {"spec": "a", "ppl": {"32": 10.0, "64": 8.0, "128": 12.0}}
    assert growth(row, 64) == 12.0 / 8.0                                # the shortest length (32) is not L
    assert growth({"spec": "a", "ppl": {"32": 10.0, "128": 12.0}}, 64) is None
    assert growth({"spec": "a", "ppl": {"64": 8.0, "128": "error: too long"}}, 64) is None   # nothing beyond L


def test_the_interval_level_is_read_from_the_rows():
    "Rows scored at 80% are labelled 80% everywhere, though the settings do not say it."
    rows = {s: {**_row(s, (10, 12), (11, 14)), "interval_level": 0.8} for s in ("a", "b")}
    res = {"settings": {"train_len": 16, "max_factor": 2, "n_windows": 7}, "rows": rows}
    assert resolution(res)["level"] == 0.8 and "the 80% intervals" in resolution_note(res)
    assert "[80%]" in sweep_table(res).splitlines()[0] and "[90%]" not in sweep_table(res)
    fig = plot_sweep(res)
    assert "80% bootstrap" in fig.axes[-1].get_title()
    plt.close(fig)


def test_the_note_counts_no_pairs_as_if_level_intervals_were_a_test():
    "Level intervals of one model per encoding say nothing about seeds: the note never counts pairs 'apart'."
    rows = {"a": _row("a", (9, 11), (11, 12)), "b": _row("b", (19, 23), (21.5, 22.5)), "c": _row("c", (30, 31), (40, 41))}
    res = {"settings": {"train_len": 16, "max_factor": 2, "n_windows": 7}, "rows": rows}
    note = resolution_note(res)
    assert "pairs" not in note and "apart" not in note and set(resolution(res)) >= {"at_L", "at_top"}
    assert "apart" not in resolution(res) and "gets no interval from them" in note


def _window_sweep():
    "A sweep whose window row drops at 2x and stays flat; 'near' within 1% of it, 'far' 10% above, 'short' only at L."
    g = {"window:w=16:kerple_log": (1, 0.99, 0.99), "near": (1, 0.995, 1.0), "near2": (1, 0.99, 0.985),
         "far": (1, 1.05, 1.09)}
    rows = {s: {"spec": s, "ppl": {16: 10 * a, 32: 10 * b, 64: 10 * c}, "ppl_interval": {16: [9 * a, 11 * a], 64: [9 * c, 11 * c]},
                "interval_level": 0.9, "train_seconds": 1.0} for s, (a, b, c) in g.items()}
    rows["short"] = {"spec": "short", "ppl": {16: 11.0, 32: "error: table", 64: "error: table"}, "ppl_interval": {16: [10, 12]},
                     "interval_level": 0.9, "train_seconds": 1.0}
    return {"settings": {"train_len": 16, "max_factor": 4, "n_windows": 16, "k": 16}, "rows": rows}


def test_growth_is_read_against_the_window_row():
    res = _window_sweep()
    rel = relative_growth(res)
    assert abs(rel["far"][64] - 1.09 / 0.99) < 1e-12 and abs(rel["near"][32] - 0.995 / 0.99) < 1e-12
    assert rel["short"] == {} and all(abs(v - 1) < 1e-12 for v in rel["window:w=16:kerple_log"].values())
    assert zoom_rows(res) == ["window:w=16:kerple_log", "near", "near2"] and ZOOM_BAND < 1.09 / 0.99 - 1
    table = sweep_table(res).splitlines()
    assert "÷ window" in table[0] and f"| ×1.090 | {1.09 / 0.99:.3f} |" in next(l for l in table if l.startswith("| far |"))
    assert relative_growth({**res, "rows": {s: r for s, r in res["rows"].items() if not s.startswith("window")}}) == {}


def test_the_figure_draws_the_window_as_reference_zooms_near_it_and_shows_a_single_point(tmp_path):
    res = _window_sweep()
    fig = plot_sweep(res, tmp_path / "sweep.png")
    top, zoom, bottom = fig.axes
    band = [ln for ln in top.get_lines() if ln.get_label() == "_window band"]
    assert len(band) == 1 and band[0].get_linewidth() > 3 and list(band[0].get_ydata()) == [1, 0.99, 0.99]
    drawn = {ln.get_label().split("  ")[0] for ln in zoom.get_lines() if ln.get_label() not in ("_window band", "×1: no change")}
    assert drawn == {"_near", "_near2", "_window:w=16:kerple_log"}          # only the rows near the window, zoomed
    lo, hi = zoom.get_ylim()
    assert hi - lo < 0.05 and lo <= 0.985 and hi >= 1.0                      # a narrow axis that still holds every point
    short = next(ln for ln in top.get_lines() if ln.get_label().startswith("short  "))
    assert len(short.get_xdata()) == 1 and short.get_markersize() >= 8      # a value at L alone, drawn large on top
    note = next(t for t in top.texts if t.get_text().startswith("short: a value at 1× only"))
    assert note.get_transform() == top.transAxes and note.get_position()[1] > 0.9   # in the panel's corner, off the lines
    assert "unpaired" in bottom.get_title() and "fit at L = 16" in bottom.get_title()
    assert "see the zoom" in top.get_title()          # the band is too thin to see at full range: the title points to the zoom
    plt.close(fig)
    far = {**res, "rows": {s: r for s, r in res["rows"].items() if s != "near2"}}
    fig = plot_sweep(far)
    assert len(fig.axes) == 2                                                 # one row near the window: no zoom panel
    assert "zoom" not in fig.axes[0].get_title() and "broad: the window" in fig.axes[0].get_title()
    plt.close(fig)


def test_a_table_without_a_window_row_has_no_time_column():
    "Without a window row the table ends at growth: a training time is no reading of extrapolation."
    res = _window_sweep()
    res["rows"] = {s: r for s, r in res["rows"].items() if not s.startswith("window")}
    table = sweep_table(res).splitlines()
    n_cols = table[0].count("|") - 1
    assert table[0].rstrip().endswith("growth 4x/1x |") and "train" not in table[0]
    assert all(l.count("|") - 1 == n_cols for l in table) and "1s" not in sweep_table(res)


def test_the_zoom_names_each_line_at_its_right_end_in_its_colour_and_no_two_names_overlap(tmp_path):
    "Where colours repeat, the zoom panel's lines are told apart by name: one label per line, at its end, none overlapping."
    res = _window_sweep()
    twin = res["rows"]["near2"]          # a line ending a hair above near2's: their names must be pushed apart
    res["rows"]["twin"] = {**twin, "spec": "twin", "ppl": {**twin["ppl"], 64: twin["ppl"][64] * 1.0005}}
    fig = plot_sweep(res, tmp_path / "sweep.png")
    top, zoom, _ = fig.axes
    fig.canvas.draw()
    names = {t.get_text(): t for t in zoom.texts}
    assert set(names) == {"window:w=16:kerple_log", "near", "near2", "twin"}
    lines = {ln.get_label().lstrip("_"): ln for ln in zoom.get_lines() if ln.get_label().lstrip("_") in names}
    for s, t in names.items():
        assert t.get_color() == lines[s].get_color() and t.xy == (64, lines[s].get_ydata()[-1])   # at the line's right end
    boxes = [t.get_window_extent() for t in names.values()]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert {t.get_text() for t in top.texts if hasattr(t, "xy")} == {"far"}     # the top panel names the lines outside the zoom
    plt.close(fig)
