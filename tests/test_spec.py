"""PE spec strings: the typed options each family declares, a one-line `ValueError` for every bad
spec, help text generated from the declarations, and Hypothesis fuzzing (grammar-based and garbage)
of the property "a spec builds a PE, or raises a ValueError whose message is one line starting
with the spec" — never another exception type, never a traceback-length message."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import lengthx.attention as lx
from lengthx.attention import (MAX_SPEC_DEPTH, PE, Opt, attention, build_pe, known_pes, parse_spec, pe_examples,
                               pe_help, pe_options_markdown, register_pe)

SHAPE = dict(n_heads=2, head_dim=8, max_len=32)
FAMILIES = known_pes()
REG = lx._REGISTRY


def error_of(spec, **shape) -> str:
    "The message of the ValueError `build_pe(spec)` must raise, checked to be one line that starts with the spec."
    with pytest.raises(ValueError) as ei:
        build_pe(spec, **(shape or SHAPE))
    msg = str(ei.value)
    assert len(msg.splitlines()) == 1 and msg.startswith(f"bad PE spec {spec!r}: "), msg
    return msg


def spec_text(v) -> str:
    "A typed option value written as a spec writes it."
    return str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)


# ------------------------------------------------------------------ every bad spec of the issue, exact messages
ISSUE_BAD = {
    "rope:pi=abc": "rope option 'pi' must be a float >= 1 and <= 1e6 (got 'abc')",
    "rope:pi=inf": "rope option 'pi' must be a finite float >= 1 and <= 1e6 (got 'inf')",
    "alibi:scale=nan": "alibi option 'scale' must be a finite float > 0 and <= 1e6 (got 'nan')",
    "kerple_log:eps=-1": "kerple_log option 'eps' must be a float > 0 and <= 2 (got '-1')",
    "fire:width=0": "fire option 'width' must be an integer >= 1 and <= 4096 (got '0')",
    "fire:width=-2": "fire option 'width' must be an integer >= 1 and <= 4096 (got '-2')",
    "t5:num_buckets=-3": "t5 option 'num_buckets' must be an integer >= 2 and <= 65536 (got '-3')",
    "t5:max_distance=0": "t5 option 'max_distance' must be an integer >= 1 and <= 10^9 (got '0')",
    "yarn:s=8:s=4": "yarn option 's' is given twice (s=8 and s=4)",
}


@pytest.mark.parametrize("spec", ISSUE_BAD)
def test_issue_specs_are_one_line_errors(spec):
    assert error_of(spec) == f"bad PE spec {spec!r}: {ISSUE_BAD[spec]}"
    with pytest.raises(ValueError, match="bad PE spec"):   # parse_spec alone refuses them too, before any build
        parse_spec(spec)


MORE_BAD = {   # spec -> what the message must contain
    "rope:pii=4": "unknown option 'pii' for 'rope' (did you mean 'pi'?); 'rope' accepts base, frac, pi, ntk, dynamic, original_max_len",
    "nope:x=1": "'nope' accepts no options",
    "ropee": "unknown positional encoding 'ropee'. Did you mean 'rope'",
    "zzzz": "Known: alibi",
    "dape": "'dape' wraps another PE: write e.g. 'dape:kerple_log'",
    "dape:": "empty field",
    "rope::pi=4": "empty field",
    "rope:pi=4:alibi": "'rope' takes options key=value, not an inner spec 'alibi'",
    "dape:rope:pi=abc": "rope option 'pi' must be a float",          # the whole spec leads, the inner family is named
    "window:w=8:dape:kerple_log": "window cannot wrap 'dape:kerple_log'",
    "t5:bidirectional=yes": "t5 option 'bidirectional' must be true or false (got 'yes')",
    "learned:max_len=4.0": "learned option 'max_len' must be an integer >= 1 and <= 10^6 (got '4.0')",
    "rerope:w=1e99": "rerope option 'w' must be an integer",
    "rerope:w=" + "9" * 5000: "rerope option 'w' must be an integer",
    "yarn:s=1e999": "must be a finite float",
    "dape:variant=concat_res:alibi": "one of concat, concat_residual, add_residual (got 'concat_res'); did you mean 'concat_residual'?",
    "t5:max_distance=16": "max_distance=16 must exceed the 16 exactly-bucketed distances (num_buckets // 2)",
    "t5:bidirectional=true:num_buckets=3": "bidirectional buckets need num_buckets >= 4",
    "yarn:beta_fast=1:beta_slow=2": "beta_fast=1 must exceed beta_slow=2",
    "rope:pi=2:ntk=2": "choose at most one of pi=, ntk=, dynamic=",
    "sandwich:dbar=7": "even dbar",
    "cdape:k=4:alibi": "odd kernel size",
    "rope:frac=0.1": "rotary dimension",
    "bipe:slope_scale=2:rope": "multiplies ALiBi slopes",
    "dape:" * (MAX_SPEC_DEPTH + 1) + "nope": f"more than {MAX_SPEC_DEPTH} nested PEs",
    "ro\npe": r"unknown positional encoding 'ro\npe'",
    "": "a PE spec must be a non-empty string",
    "   ": "a PE spec must be a non-empty string",
}


@pytest.mark.parametrize("spec", MORE_BAD)
def test_bad_specs_are_one_line_errors(spec):
    assert MORE_BAD[spec] in error_of(spec)


@pytest.mark.parametrize("spec", [None, 3, b"rope", ["rope"]])
def test_non_strings_are_one_line_errors(spec):
    with pytest.raises(ValueError, match="a PE spec must be a non-empty string") as ei:
        build_pe(spec, **SHAPE)
    assert len(str(ei.value).splitlines()) == 1


def test_values_are_typed_and_checked():
    assert parse_spec("rope:pi=4") == ("rope", {"pi": 4.0}, None) and type(parse_spec("rope:pi=4")[1]["pi"]) is float
    assert parse_spec(" T5 : num_buckets = 16 : bidirectional=TRUE ") == ("t5", {"num_buckets": 16, "bidirectional": True}, None)
    assert parse_spec("kerple_log:per_layer=0")[1] == {"per_layer": False}
    assert parse_spec("cdape:k=3:window:w=4:kerple_log") == ("cdape", {"k": 3}, "window:w=4:kerple_log")
    assert parse_spec("dape:variant=add_residual:alibi")[1] == {"variant": "add_residual"}
    # bounds are exactly as declared: open at 0 for eps, closed at 2
    assert parse_spec("kerple_log:eps=2")[1] == {"eps": 2.0}
    assert "must be a float > 0 and <= 2 (got '2.5')" in error_of("kerple_log:eps=2.5")
    assert "(got '0')" in error_of("kerple_log:eps=0")


# ------------------------------------------------------------------ declarations
def test_every_family_declares_exactly_its_builders_options():
    import inspect
    for name in FAMILIES:
        fam = REG[name]
        params = list(inspect.signature(fam.builder).parameters.values())[2 if fam.wraps else 1:]
        assert {o.name: o.default for o in fam.options} == {p.name: p.default for p in params}, name
        for o in fam.options:
            assert isinstance(o, Opt) and o.type in (int, float, bool, str) and o.doc, (name, o)


def test_a_declaration_that_differs_from_the_builder_is_refused():
    def builder(ctx, width: int = 4): return PE(ctx)
    with pytest.raises(TypeError, match="differ from the builder's keyword arguments"):
        register_pe("_test_family", options=[Opt("wdth", int, 4, "typo")])(builder)
    with pytest.raises(TypeError, match="declares default 8 but the builder's is 4"):
        register_pe("_test_family", options=[Opt("width", int, 8, "wrong default")])(builder)
    assert "_test_family" not in REG


@pytest.mark.parametrize("name", FAMILIES)
def test_every_option_example_reaches_the_builder_typed(name, monkeypatch):
    "name:opt=example builds, and the builder receives the example value with the declared type."
    fam = REG[name]
    inner = parse_spec(fam.examples[0])[2]
    seen = {}
    real = fam.builder
    def spy(ctx, *args, **kw):
        seen.update(kw)
        return real(ctx, *args, **kw)
    monkeypatch.setattr(fam, "builder", spy)
    for o in fam.options:
        assert o.example is not None and o.example != o.default, (name, o.name)
        spec = ":".join([name, f"{o.name}={spec_text(o.example)}"] + ([inner] if inner else []))
        seen.clear()
        pe = build_pe(spec, **SHAPE)
        assert isinstance(pe, PE) and pe.spec == spec
        assert seen == {o.name: o.example} and type(seen[o.name]) is o.type, (spec, seen)


@pytest.mark.parametrize("spec", pe_examples("all"))
def test_example_specs_round_trip(spec):
    "Every example parses, writes back to an equivalent spec, and builds a PE that keeps its spec."
    name, opts, inner = parse_spec(spec)
    assert name == spec.split(":")[0] and (inner is not None) == REG[name].wraps
    again = ":".join([name] + [f"{k}={spec_text(v)}" for k, v in opts.items()] + ([inner] if inner else []))
    assert parse_spec(again) == (name, opts, inner)
    for k, v in opts.items():
        assert type(v) is REG[name].option(k).type
    assert build_pe(spec, **SHAPE).spec == spec


# ------------------------------------------------------------------ help text and the docs table
@pytest.mark.parametrize("name", FAMILIES)
def test_help_lists_every_option_and_example(name):
    fam, text = REG[name], pe_help(name)
    assert text.startswith(f"{name}: {fam.doc}")
    for o in fam.options:
        line = next(l for l in text.splitlines() if l.strip().startswith(o.name + " "))
        assert o.type.__name__ in line and lx._default_text(o) in line and o.range_text() in line and o.doc in line
    if not fam.options: assert "options: none" in text
    assert all(e in text for e in fam.examples)
    assert pe_help(fam.examples[0]) == text            # a whole spec names its family too


def test_help_of_unknown_family():
    with pytest.raises(ValueError, match="Did you mean 'rope'"):
        pe_help("ropee")


def test_options_table_has_a_row_per_option():
    rows = pe_options_markdown().splitlines()
    assert rows[0] == "| PE | option | type | default | allowed | meaning |"
    body = rows[2:]
    assert len(body) == sum(max(1, len(REG[n].options)) for n in FAMILIES)
    for r in body:   # six cells: '|' inside a cell is escaped
        assert r.replace("\\|", "").count("|") == 7, r
    for n in FAMILIES:
        for o in REG[n].options: assert any(f"`{o.name}`" in r and o.range_text().replace("|", "\\|") in r for r in body)


# ------------------------------------------------------------------ Hypothesis
ALNUM = "abcdefghijklmnopqrstuvwxyz_0123456789"
ODD_VALUES = ["", "abc", "nan", "inf", "-inf", "1e999", "-0", "0x10", "1_0", " 3 ", "\u0663", "true", "false",
              "2.5", "-1", "0", "1", "1e-320", "4.0", str(10**20), "=", "a=b"]


@st.composite
def raw_values(draw, o: Opt) -> str:
    "Text for option `o`: mostly values its declaration allows, sometimes its bounds or odd text."
    if o.type is bool: ok = st.sampled_from(["true", "false", "1", "0", "TRUE"])
    elif o.type is str: ok = st.sampled_from(list(o.choices or ["x"]))
    elif o.type is int: ok = st.integers(int(o.lo), int(min(o.hi, o.lo + 64))).map(str)
    else: ok = st.floats(o.lo, o.hi, exclude_min=o.lo_open, exclude_max=o.hi_open).map(repr)
    edges = [spec_text(x) for x in (o.lo, o.hi, o.default, o.example) if x is not None]
    if o.type is float:   # just inside each bound, where float arithmetic is most fragile
        edges += [repr(math.nextafter(o.lo, math.inf)), repr(o.lo + 5e-324)] if o.lo is not None else []
        edges += [repr(math.nextafter(o.hi, -math.inf))] if o.hi is not None else []
    pick = draw(st.integers(0, 9))
    if pick <= 6: return draw(ok)
    if pick == 7: return draw(st.sampled_from(edges or ["1"]))
    if pick == 8: return draw(st.sampled_from(ODD_VALUES))
    return draw(st.one_of(st.integers().map(str), st.floats().map(repr), st.text(max_size=5)))


@st.composite
def grammar_specs(draw, depth: int = 0) -> str:
    "family[:key=value]...[:inner spec], mostly from the registry's names and declared options."
    pick = draw(st.integers(0, 9))
    name = draw(st.sampled_from(FAMILIES))
    if pick == 8: name = name.upper()
    if pick == 9: name = draw(st.text(ALNUM, min_size=1, max_size=8))
    fam = REG.get(name.lower())
    parts = [name]
    for _ in range(draw(st.integers(0, 2))):
        if fam is not None and fam.options and draw(st.integers(0, 7)):
            o = draw(st.sampled_from(fam.options))
            parts.append(f"{o.name}={draw(raw_values(o))}")
        else:
            parts.append(f"{draw(st.text(ALNUM, max_size=6))}={draw(st.sampled_from(ODD_VALUES))}")
    if (fam is not None and fam.wraps) or draw(st.integers(0, 19)) == 0:
        parts.append(draw(grammar_specs(depth + 1)) if depth < 3 else draw(st.sampled_from(FAMILIES)))
    return ":".join(parts)


garbage = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=":=.-_ \t\n0123456789abcdefghijklmnopqrstuvwxyz", max_size=40),
    st.lists(st.sampled_from(FAMILIES + [o.name for n in FAMILIES for o in REG[n].options]
                             + [":", "=", "::", "1", "-1", "nan", "inf", "true", " ", "\n"]), max_size=12).map("".join))

FUZZ = settings(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def build_or_refuse(spec) -> "PE | None":
    "The property: build a PE, or raise a ValueError with one line starting with the spec; nothing else."
    try:
        return build_pe(spec, **SHAPE)
    except ValueError as e:
        msg = str(e)
        assert len(msg.splitlines()) == 1 and msg.startswith(f"bad PE spec {spec!r}: "), msg
        return None


def runs_or_refuses(pe: PE) -> None:
    "A built PE runs a short forward with finite outputs (or refuses with a one-line ValueError)."
    pe.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (1, 12), generator=g)
    ids[:, ::4] = 10
    q, k, v = (torch.randn(1, SHAPE["n_heads"], 12, SHAPE["head_dim"], generator=g) for _ in range(3))
    try:
        with torch.no_grad():
            pos = pe.make_positions(ids)
            out = attention(q, k, v, pe, pos, path="naive")
            if pe.uses_embed: out = pe.embed(torch.zeros(1, 12, SHAPE["n_heads"] * SHAPE["head_dim"]), pos)
    except ValueError as e:
        assert len(str(e).splitlines()) == 1, e
        return
    assert torch.isfinite(out).all(), pe.spec


def bound_values(o: Opt) -> list[str]:
    "Each declared bound and the values just inside it (for an open bound, the next float, and the smallest step)."
    if o.type is bool: return ["true", "false"]
    if o.type is str: return list(o.choices)
    out = []
    for b, is_open, up in ((o.lo, o.lo_open, True), (o.hi, o.hi_open, False)):
        if b is None: continue
        if o.type is int: out.append(str(int(b) + (0 if not is_open else 1 if up else -1)))
        else:
            inside = math.nextafter(float(b), math.inf if up else -math.inf)
            out += [repr(inside)] + ([repr(float(b))] if not is_open else [repr(float(b) + 5e-324)] if up else [])
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_every_option_at_its_bounds(name):
    "Every allowed extreme of every option builds and runs with finite outputs, or is refused in one line."
    fam = REG[name]
    inner = parse_spec(fam.examples[0])[2]
    for o in fam.options:
        for v in bound_values(o):
            pe = build_or_refuse(":".join([name, f"{o.name}={v}"] + ([inner] if inner else [])))
            if pe is not None: runs_or_refuses(pe)


def test_fuzz_grammar_specs():
    "Registry names x declared options x values (in range, at the bounds, odd), nested up to 4 deep."
    count = {"built": 0, "refused": 0}
    @settings(FUZZ, max_examples=1000)
    @given(grammar_specs())
    def prop(spec):
        pe = build_or_refuse(spec)
        count["built" if pe is not None else "refused"] += 1
        if pe is not None: runs_or_refuses(pe)
    prop()
    print("grammar spec cases:", count)
    assert count["built"] >= 100 and count["refused"] >= 100, count   # both outcomes exercised


def test_fuzz_garbage_specs():
    "Arbitrary text, spec-like text, and shuffled family and option names."
    count = {"built": 0, "refused": 0}
    @settings(FUZZ, max_examples=1500)
    @given(garbage)
    def prop(spec):
        count["built" if build_or_refuse(spec) is not None else "refused"] += 1
    prop()
    print("garbage spec cases:", count)
    assert count["refused"] >= 1000, count
