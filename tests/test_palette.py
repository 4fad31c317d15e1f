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
