"""tools/plotcheck.py: a line plot whose x runs backwards is caught; sorted lines, scatters and marked curves pass."""
import os, sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import plotcheck  # noqa: E402


def fig_with(*lines, **kw):
    fig, ax = plt.subplots()
    for x, y, fmt in lines: ax.plot(x, y, fmt, **kw)
    return fig


def test_unsorted_line_is_caught():
    fig = fig_with(([64, 256, 128, 512], [1, 2, 3, 4], "o-"))
    bad = plotcheck.backwards_lines(fig)
    assert len(bad) == 1 and "256" in bad[0] and "128" in bad[0], bad
    with pytest.raises(plotcheck.BackwardsLine): plotcheck.check_figure(fig)
    plt.close(fig)


def test_descending_line_is_caught():
    fig = fig_with((np.arange(10)[::-1], np.arange(10), "-"))
    assert plotcheck.backwards_lines(fig)
    plt.close(fig)


def test_sorted_lines_scatters_and_references_pass():
    fig = fig_with(([64, 128, 256, 512], [1, 2, 3, 4], "o-"), ([1, 1, 2, 2], [0, 1, 0, 1], "s--"),
                   ([3, 1, 2], [1, 2, 3], "o"))                          # repeated x, and a marker-only scatter
    ax = fig.axes[0]
    ax.scatter([5, 2, 9], [1, 2, 3]); ax.axvline(100); ax.axhline(2)
    ax.plot([1e-3, 1, 1e3], [1, 2, 3]); ax.set_xscale("log")
    ax.plot([0, np.nan, 2, 3], [1, 2, 3, 4])                              # gaps are skipped, not compared
    c = ax.plot(np.cos(np.linspace(0, 6.3, 50)), np.sin(np.linspace(0, 6.3, 50)), "-")[0]
    c.set_gid(plotcheck.PARAMETRIC)                                      # a circle says it doubles back
    assert plotcheck.backwards_lines(fig) == []
    plotcheck.check_figure(fig)
    plt.close(fig)


def test_categorical_x_is_not_numeric():
    fig = fig_with((["b", "a", "c"], [1, 2, 3], "o-"))
    assert plotcheck.backwards_lines(fig) == []
    plt.close(fig)


def test_installed_show_fails_the_cell_in_a_kernel():
    "In a Jupyter kernel started as nbval starts them (PYTHONSTARTUP from nbs/conftest.py): a backwards line fails its cell."
    from jupyter_client.manager import start_new_kernel
    env = dict(os.environ, MPLBACKEND="Agg", LENGTHX_PLOTCHECK_DIR=str(ROOT / "tools"),
               PYTHONSTARTUP=str(ROOT / "tools" / "plotcheck_startup.py"))
    km, kc = start_new_kernel(kernel_name="python3", env=env)

    def run(code: str) -> tuple[str, str]:
        "(status, text printed or the error's name) of one cell."
        msg_id, out = kc.execute(code), []
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["parent_header"].get("msg_id") != msg_id: continue
            if m["msg_type"] == "stream": out.append(m["content"]["text"])
            if m["msg_type"] == "error": out.append(m["content"]["ename"])
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle": break
        while (reply := kc.get_shell_msg(timeout=60))["parent_header"].get("msg_id") != msg_id: pass
        return reply["content"]["status"], "".join(out)

    try:
        assert run('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 2, 3], "o-"); plt.show(); plt.close("all")')[0] == "ok"
        status, text = run('plt.plot([1, 3, 2], [1, 2, 3], "o-"); plt.show()')
        assert status == "error" and "BackwardsLine" in text, (status, text)
        assert run('print("_install_plotcheck" in dir(), "np" in dir())') == ("ok", "False False\n")   # no names left behind
    finally:
        kc.stop_channels(); km.shutdown_kernel(now=True)


def test_look_alike_lines_are_caught_and_told_apart_lines_pass():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], "o-", color="C0", label="rope")
    ax.plot([1, 2], [2, 3], "o-", color="C0", label="alibi")          # same look, other method
    ax.plot([1, 2], [3, 4], "o-", color="C0", label="_helper")        # not in the legend
    bad = plotcheck.look_alike_lines(fig)
    assert len(bad) == 1 and "rope" in bad[0] and "alibi" in bad[0]
    with pytest.raises(plotcheck.LookAlikeLines): plotcheck.check_figure(fig)
    ax.lines[1].set_linestyle("--")
    assert plotcheck.look_alike_lines(fig) == []
    plt.close(fig)


def test_a_log_axis_with_one_label_is_unreadable_and_label_log_axis_fixes_it():
    from lengthx.evaluate import label_log_axis
    fig, ax = plt.subplots()
    ax.plot([64, 128, 256, 512], [12, 14, 18, 30], "o-"); ax.set_xscale("log", base=2); ax.set_yscale("log")
    bad = plotcheck.unreadable_log_axes(fig)       # y from ~11 to ~32 on base 10: one major label (10 is outside)
    assert len(bad) == 1 and "log y axis" in bad[0], bad
    with pytest.raises(plotcheck.UnreadableLogAxis): plotcheck.check_figure(fig)
    label_log_axis(ax.yaxis)                        # 15, 20, 30
    assert plotcheck.unreadable_log_axes(fig) == []
    plt.close(fig)


def test_a_shared_log_axis_is_read_on_the_panel_that_labels_it():
    fig, (a, b) = plt.subplots(2, 1, sharex=True)
    for ax in (a, b): ax.plot([64, 128, 256, 512], [1, 2, 3, 4], "o-"); ax.set_xscale("log", base=2)
    assert plotcheck.unreadable_log_axes(fig) == []          # the top panel's hidden labels are the bottom one's
    a.set_xscale("linear"); b.set_yscale("log"); b.set_ylim(1.1, 3.9)   # an unshared log axis is still checked
    assert len(plotcheck.unreadable_log_axes(fig)) == 1
    plt.close(fig)


def test_a_log_axis_labelled_as_powers_of_two_is_caught_and_plain_lengths_pass():
    from lengthx.evaluate import label_length_axis
    fig, ax = plt.subplots()
    ax.plot([64, 128, 256, 512], [12, 14, 18, 30], "o-"); ax.set_xscale("log", base=2)   # matplotlib's default: 2^6 .. 2^9
    bad = plotcheck.power_tick_labels(fig)
    assert len(bad) == 1 and "log x axis" in bad[0] and "2^{" in bad[0], bad
    with pytest.raises(plotcheck.PowerTickLabels): plotcheck.check_figure(fig)
    label_length_axis(ax.xaxis, [64, 128, 256, 512])                # 64, 128, 256, 512
    assert plotcheck.power_tick_labels(fig) == []
    plotcheck.check_figure(fig)
    plt.close(fig)


def test_powers_of_ten_and_linear_axes_are_not_power_labels():
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([1, 10, 100, 1000], [1, 2, 3, 4], "o-"); a.set_xscale("log")                 # 10^0 .. 10^3: the usual decades
    b.plot([1, 2, 3], [1, 2, 3], "o-"); b.set_xticks([1, 2, 3], ["$2^1$", "$2^2$", "$2^3$"])   # not a log axis: not this check
    assert plotcheck.power_tick_labels(fig) == []
    b.plot([200, 300, 500], [1, 2, 3], "s-"); b.set_yscale("log"); b.set_ylim(1, 3)     # minor labels such as 2×10^0
    b.set_xscale("log"); b.set_xlim(150, 600)                                            # minor labels 2×10^2, 3×10^2, ...
    assert plotcheck.power_tick_labels(fig) == []
    a.set_xscale("log", base=2)                                                          # the same data at base 2: 2^0 .. 2^9
    assert len(plotcheck.power_tick_labels(fig)) == 1
    plt.close(fig)
