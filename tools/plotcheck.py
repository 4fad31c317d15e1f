"""A figure check run while the notebooks execute: no line plot's x may run backwards.

A line drawn through points whose x goes down somewhere doubles back on itself, and the reader sees a
zigzag instead of a curve (a dict iterated in the wrong order, lengths sorted as strings, ...). A
marker-only scatter has no line and is fine; a line with fewer than two finite points is fine; a curve
that is meant to double back (a circle, a trajectory) says so with `line.set_gid("parametric")`.

    import plotcheck; plotcheck.install()        # every plt.show() and savefig checks the figure first

Two more mechanical faults fail the same way: two labelled lines of one axes that look alike (same
colour, line style and marker: the legend cannot tell them apart; `LookAlikeLines`), and a log axis
labelled at fewer than `MIN_LOG_LABELS` ticks inside its view (the reader cannot read a value off it;
`UnreadableLogAxis`), and a log axis labelled as powers of a base other than ten (2^6, 2^7, ... under lengths
64, 128, ...: the reader has to work out every value; `PowerTickLabels`).

`install` wraps `matplotlib.pyplot.show` and `Figure.savefig`; a figure with a backwards line raises
`BackwardsLine` in the cell that shows it. It is installed in every notebook kernel that nbval starts
(nbs/conftest.py points PYTHONSTARTUP at tools/plotcheck_startup.py) and in `tools/nbtool.py run`.
"""
from __future__ import annotations

import re

import numpy as np

PARAMETRIC = "parametric"      # a line's gid that allows its x to double back


class BackwardsLine(AssertionError):
    "A line plot whose x goes backwards."


def _numeric_x(line) -> np.ndarray | None:
    "The line's x as floats (dates and numbers), or None for categorical or empty x."
    x = line.get_xdata(orig=False)
    try: x = np.asarray(line.convert_xunits(x), dtype=float)
    except (TypeError, ValueError): return None
    return x[np.isfinite(x)] if x.ndim == 1 else None


def draws_a_line(line) -> bool:
    "True when the Line2D connects its points (any line style but none)."
    return line.get_linestyle() not in ("None", "none", "", " ") and line.get_linewidth() > 0


def backwards_lines(fig) -> list[str]:
    "One description per line of `fig` that is drawn as a line and whose numeric x decreases somewhere."
    bad = []
    for i, ax in enumerate(fig.axes):
        for line in ax.get_lines():
            if not draws_a_line(line) or line.get_gid() == PARAMETRIC: continue
            x = _numeric_x(line)
            if x is None or len(x) < 2: continue
            steps = np.diff(x)
            if (steps < 0).any():
                j = int(np.argmax(steps < 0))
                title = ax.get_title() or f"axes {i}"
                bad.append(f"{title!r}, line {line.get_label()!r}: x goes from {x[j]:g} back to {x[j + 1]:g} "
                           f"(point {j + 1} of {len(x)})")
    return bad


class LookAlikeLines(AssertionError):
    "Two labelled lines of one axes drawn with the same colour, line style and marker."


class UnreadableLogAxis(AssertionError):
    "A log axis with too few labelled ticks inside its view to read a value off it."


class PowerTickLabels(AssertionError):
    "A log axis whose tick labels are powers of 2 (or of e) rather than the values they stand for."


MIN_LOG_LABELS = 3   # labelled ticks a log axis needs inside its view (two only fix the ends of the scale)


def _look(line) -> tuple:
    "What tells a line apart in a legend: its colour, line style and marker."
    from matplotlib.colors import to_rgba
    return to_rgba(line.get_color()), line.get_linestyle(), line.get_marker()


def look_alike_lines(fig) -> list[str]:
    "One description per pair of differently labelled lines in one axes that look the same."
    bad = []
    for i, ax in enumerate(fig.axes):
        first = {}
        for line in ax.get_lines():
            label = line.get_label()
            if label.startswith("_"): continue            # not in the legend
            other = first.setdefault(_look(line), label)
            if other != label: bad.append(f"{ax.get_title() or f'axes {i}'!r}: {other!r} and {label!r}")
    return bad


def _log_axes(fig):
    "(index, axes, 'x' or 'y', axis) for every visible log-scaled axis of `fig`, the figure drawn first (tick labels exist only then)."
    found = [(i, ax, name, axis) for i, ax in enumerate(fig.axes) for name, axis in (("x", ax.xaxis), ("y", ax.yaxis))
             if axis.get_scale() == "log" and axis.get_visible() and ax.axison]
    if found: fig.canvas.draw()
    return found


def unreadable_log_axes(fig, need: int = MIN_LOG_LABELS) -> list[str]:
    "One description per log-scaled axis of `fig` labelled at fewer than `need` ticks inside its view."
    bad = []
    for i, ax, name, axis in _log_axes(fig):
        lo, hi = sorted(axis.get_view_interval())
        labels = {round(float(t.get_position()[0 if name == "x" else 1]), 12) for t in axis.get_ticklabels(minor=False) +
                  axis.get_ticklabels(minor=True) if t.get_text().strip() and t.get_visible()}
        n = sum(lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9) for v in labels)
        shared = getattr(ax, f"get_shared_{name}_axes")().get_siblings(ax)
        if n == 0 and len(shared) > 1: continue     # a shared axis labelled on its sibling (checked in its own turn)
        if n < need: bad.append(f"{ax.get_title() or f'axes {i}'!r}: log {name} axis from {lo:g} to {hi:g} labelled at {n} tick(s)")
    return bad


POWER_LABEL = re.compile(r"(?<![0-9.])([0-9]+(?:\.[0-9]+)?|e)\s*\^")   # "2^{6}" in a label's mathtext: base, then a caret


def power_tick_labels(fig) -> list[str]:
    "One description per log axis of `fig` with a visible tick label written as a power of a base other than ten."
    bad = []
    for i, ax, name, axis in _log_axes(fig):
        texts = [t.get_text() for t in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True) if t.get_visible()]
        powers = [t for t in texts if any(b != "10" for b in POWER_LABEL.findall(t))]
        if powers: bad.append(f"{ax.get_title() or f'axes {i}'!r}: log {name} axis labelled {powers[0]!r}")
    return bad


def check_figure(fig) -> None:
    "Raise BackwardsLine, LookAlikeLines, UnreadableLogAxis or PowerTickLabels for the first kind of fault `fig` has."
    bad = backwards_lines(fig)
    if bad: raise BackwardsLine("a line plot's x runs backwards (sort the points by x, or draw markers only): " + "; ".join(bad))
    bad = look_alike_lines(fig)
    if bad: raise LookAlikeLines("two labelled lines look the same (give each its own colour, line style or marker, "
                                 "e.g. lengthx.evaluate.pe_styles): " + "; ".join(bad))
    bad = unreadable_log_axes(fig)
    if bad: raise UnreadableLogAxis(f"a log axis needs at least {MIN_LOG_LABELS} labelled ticks over its range "
                                    "(a LogFormatter with labelOnlyBase=False, or FixedLocator ticks): " + "; ".join(bad))
    bad = power_tick_labels(fig)
    if bad: raise PowerTickLabels("a log axis is labelled as powers (2^6, ...) instead of the values (64, ...): label it at the "
                                  "values, e.g. lengthx.evaluate.label_length_axis or ax.set_xticks(lengths, lengths): " + "; ".join(bad))


def check_open_figures() -> None:
    "Check every figure pyplot holds open."
    import matplotlib.pyplot as plt
    for n in plt.get_fignums(): check_figure(plt.figure(n))


def install() -> None:
    "Check figures before pyplot shows them and before any figure is saved (idempotent)."
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    if getattr(plt.show, "_plotcheck", False): return
    show, savefig = plt.show, Figure.savefig

    def checked_show(*a, **kw):
        check_open_figures()
        return show(*a, **kw)

    def checked_savefig(self, *a, **kw):
        check_figure(self)
        return savefig(self, *a, **kw)

    checked_show._plotcheck = checked_savefig._plotcheck = True
    plt.show, Figure.savefig = checked_show, checked_savefig

