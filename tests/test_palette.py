"""The book's palette gives RoPE's context-extension options (PI, NTK-aware, dynamic NTK) looks of their own.

Before `PE_OPTION_STYLE`, `rope:pi=4`, `rope:ntk=4` and `rope:dynamic=1` all fell into the `rope` family and were
drawn in RoPE's blue, told apart only by line style or marker; chapter 12's figures read them as one method.
"""
from lengthx.evaluate import PE_COLOURS, PE_OPTION_STYLE, PE_STYLE, pe_family, pe_style, pe_styles

EXTENSIONS = ("rope:pi=4", "rope:ntk=4", "rope:dynamic=1")


def test_extension_options_have_their_own_colour():
    colours = [pe_style(s)["color"] for s in ("rope", *EXTENSIONS)]
    assert len(set(colours)) == len(colours), colours          # different from rope's and from each other
    assert pe_style("rope")["color"] == PE_COLOURS["blue"]     # RoPE keeps its blue


def test_family_names_the_option_and_ignores_the_rest():
    assert [pe_family(s) for s in EXTENSIONS] == ["rope:pi", "rope:ntk", "rope:dynamic"]
    assert pe_family("rope:frac=0.5:ntk=8") == "rope:ntk"       # the option that names a method, wherever it stands
    assert pe_family("rope:frac=0.5") == pe_family("rope:base=500000") == pe_family("rope (seed 1)") == "rope"
    assert pe_family("rope:pi=4 3") == "rope:pi"                # a curve label with a suffix (chapter 12)
    assert pe_family("nobody's pe") is None


def test_existing_families_keep_their_look():
    for fam, (colour, marker) in PE_STYLE.items():
        assert pe_style(fam) == dict(color=PE_COLOURS[colour], marker=marker), fam
    used = [c for c, _ in [*PE_STYLE.values(), *PE_OPTION_STYLE.values()]]
    assert set(used) <= set(PE_COLOURS) and "grey" not in used   # grey stays the colour of an unknown PE
    option_colours = {c for c, _ in PE_OPTION_STYLE.values()}
    assert not option_colours & {c for c, _ in PE_STYLE.values()}   # an option's colour is no family's colour


def test_pe_styles_gives_no_two_labels_the_same_look():
    labels = ["rope", *EXTENSIONS, "rope:ntk=8", "rope:pi=2", "yarn:s=4", "llama3:s=4", "dynamic_linear",
              "rerope:w=32", "self_extend:w=32:g=2", "pose:target=256:rope", "nope", "alibi", "rope:frac=0.5"]
    looks = pe_styles(labels)
    assert len({tuple(sorted(v.items())) for v in looks.values()}) == len(labels)
    assert looks["rope:ntk=4"]["color"] == looks["rope:ntk=8"]["color"]   # one method, one colour
    assert looks["rope:ntk=4"]["ls"] != looks["rope:ntk=8"]["ls"]         # its second curve told apart by line style


# The learned relative encodings (T5, Shaw, Transformer-XL) once shared one wine colour, and KERPLE's Gaussian kernel
# shared the log kernel's green (chapter 21 recoloured it by hand in one panel). Each now has its own colour, and the
# colours must stay apart for colour-blind readers too: `colour_distance` is the smallest CIELAB distance over normal
# vision and the three simulated dichromacies.
from lengthx.evaluate import DICHROMACY, colour_distance, colour_lab

MIN_APART = 20   # ΔE: the smallest gap the book accepts between two methods one figure draws side by side

# The specs each re-coloured method is drawn beside, figure by figure (the rows the figures plot).
DRAWN_TOGETHER = {
    "ch21 Gaussian vs log kernels": ["kerple_gauss", "kerple_log"],
    "ch24 trained growth": ["transformer_xl", "shaw", "shaw:value=false", "kerple_log"],
    "ch60 CHE grid": ["nope", "learned", "sinusoidal", "rope", "transformer_xl", "alibi", "kerple_log", "fire",
                      "dape:alibi", "dape:kerple_log", "dape:fire"],
    "ch70 baselines": ["transformer_xl", "shaw", "shaw:value=false", "cope", "dape_fb:kerple_log", "kerple_gauss",
                       "kerple_log", "dape:kerple_log", "rope", "alibi", "nope"],
    "ch70 additive biases": ["t5", "alibi", "randomized:alibi", "kerple_log", "kerple_power", "kerple_3log",
                             "kerple_biaswt", "sandwich", "fire", "bipe:alibi", "bipe:rope", "window:w=64:kerple_log"],
}
RECOLOURED = ("shaw", "transformer_xl", "kerple_gauss")


def _gap(a: str, b: str) -> float:
    return colour_distance(pe_style(a)["color"], pe_style(b)["color"])


def test_learned_relative_encodings_have_a_colour_each():
    trio = ("t5", "shaw", "transformer_xl")
    assert len({pe_style(s)["color"] for s in trio}) == 3
    gaps = {(a, b): _gap(a, b) for i, a in enumerate(trio) for b in trio[i + 1:]}
    assert min(gaps.values()) >= MIN_APART, gaps
    assert len({pe_style(s)["marker"] for s in trio}) == 3          # the marker stays a second cue


def test_kerple_gauss_is_not_kerple_log():
    assert pe_style("kerple_gauss")["color"] != pe_style("kerple_log")["color"]
    assert _gap("kerple_gauss", "kerple_log") >= MIN_APART
    assert pe_style("kerple_gauss")["marker"] != pe_style("kerple_log")["marker"]


def test_recoloured_methods_stand_apart_from_every_neighbour_in_their_figures():
    for fig, specs in DRAWN_TOGETHER.items():
        for s in specs:
            if pe_family(s) not in RECOLOURED: continue
            for o in specs:
                if pe_family(o) == pe_family(s): continue            # the same method's second curve: told apart by line style
                assert _gap(s, o) >= MIN_APART, (fig, s, o, _gap(s, o))


def test_colour_distance_sees_what_a_dichromat_sees():
    red, green = "#FF0000", "#00FF00"
    normal = float((colour_lab(red) - colour_lab(green)).norm())
    deutan = float((colour_lab(red, "deuteranopia") - colour_lab(green, "deuteranopia")).norm())
    assert deutan < normal / 2                                       # red and green merge for a deuteranope
    assert colour_distance(red, green) <= deutan < normal            # the measure takes the worst vision
    assert colour_distance("#0072B2", "#0072B2") == 0
    assert abs(float(colour_lab("#FFFFFF")[0]) - 100) < 0.01 and abs(float(colour_lab("#000000")[0])) < 1e-9
    for v, m in DICHROMACY.items():                                  # each simulation keeps white white (rows sum to 1)
        assert all(abs(sum(row) - 1) < 1e-3 for row in m), v


def test_colour_arguments_are_checked():
    import pytest
    with pytest.raises(ValueError, match="RRGGBB"): colour_lab("red")
    with pytest.raises(ValueError, match="vision"): colour_lab("#FF0000", "monochromacy")


# Chapter 12 draws Llama 3.1 beside YaRN (both once sky blue) and Self-Extend beside ReRoPE (both once teal), with PI,
# NTK-aware, dynamic NTK, plain RoPE and PoSE in the same panels. Each now has a colour of its own, apart from all of them.
CH12_DRAWN = ["rope", "rope:pi=4", "rope:ntk=4", "rope:dynamic=2", "yarn:s=4", "llama3:s=4", "rerope:w=16",
              "self_extend:w=16:g=2", "pose:target=128:rope"]


def test_llama3_and_self_extend_stand_apart_in_chapter_12():
    for s in ("llama3:s=4", "self_extend:w=16:g=2"):
        for o in CH12_DRAWN:
            if o == s: continue
            assert _gap(s, o) >= MIN_APART, (s, o, _gap(s, o))


# Chapter 12 draws dynamic YaRN beside static YaRN (its attention factor against the length) and chapter 13 reads it
# beside RoPE, dynamic NTK and NTK-by-parts; under the `yarn` family's sky blue it was told apart by line style alone.
DYNAMIC_YARN_DRAWN = ["rope", "yarn:s=8", "ntk_by_parts:s=2", "rope:dynamic=1", "rope:pi=2", "llama3:s=2",
                      "rerope:logn=true", "self_extend:g=4:w=1024", "dca"]


def test_dynamic_yarn_has_a_colour_of_its_own():
    assert pe_family("yarn:s=4:dynamic=true") == pe_family("yarn:dynamic=true") == "yarn:dynamic"
    assert pe_family("yarn:s=8") == "yarn"                                    # the static form keeps the family's sky
    for o in DYNAMIC_YARN_DRAWN:
        assert _gap("yarn:dynamic=true", o) >= MIN_APART, (o, _gap("yarn:dynamic=true", o))


def test_every_registered_family_has_a_style_and_nothing_extra():
    from lengthx.attention import known_pes
    from lengthx.evaluate import PE_STYLE
    assert set(PE_STYLE) == set(known_pes()), set(PE_STYLE) ^ set(known_pes())
