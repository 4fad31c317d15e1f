"""The exercise grader: every reference passes, every kept wrong answer is rejected for the right reason,
a crashing or silent function is a clean False, and every chapter's Exercises section names its ids."""
import inspect
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lengthx import exercises as E
from lengthx.pe.bias import _alibi_power_of_2
from lengthx.pe.rotary import rope_interleaved
from lengthx.tasks import evaluate_mod

NBS = Path(__file__).resolve().parents[1] / "nbs"


# ---- realistic wrong answers, at least one per autograded exercise ------------------------------------------------
def attend_masks_past(q, k, v, causal=False):
    "masks the past instead of the future (tril where triu was meant)"
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal: s = s.masked_fill(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).tril(-1), float("-inf"))
    return s.softmax(-1) @ v


def attend_softmax_queries(q, k, v, causal=False):
    "normalizes over the query axis"
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal: s = s.masked_fill(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-2).nan_to_num() @ v


def sinusoidal_exponent(pos, dim, base=10000.0):
    "ω_i = base^(−i/d): the exponent steps by 1/d instead of 2/d"
    ang = pos.double()[:, None] * base ** (-torch.arange(dim // 2, dtype=torch.float64) / dim)
    return torch.stack([ang.sin(), ang.cos()], -1).flatten(-2)


def rope_half_wrong_sign(x, pos, inv_freq):
    "rotates by −mθ"
    ang = pos.double()[:, None] * inv_freq
    c, s = ang.cos(), ang.sin()
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * c + x2 * s, x2 * c - x1 * s], -1)


def rope_half_scaled(x, pos, inv_freq):
    "uses cos for both coordinates (x·(cos + sin)): not a rotation"
    ang = pos.double()[:, None] * inv_freq
    c, s = ang.cos(), ang.sin()
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * (c + s), x2 * (c + s)], -1)


def perm_inverse(d):
    "the inverse of the right permutation (slot 2i takes dimension i)"
    pi = list(range(0, d, 2)) + list(range(1, d, 2))
    return sorted(range(d), key=lambda i: pi[i])


def perm_halves_swapped(d):
    "odd dimensions first"
    return list(range(1, d, 2)) + list(range(0, d, 2))


def counter_two_points(r1, r2, r3):
    "two points: c = (1, −1) gives cᵀKc = 2·r1·log(1 + r2|x₁ − x₂|^r3) > 0"
    return torch.tensor([0.0, 1.0]), torch.tensor([1.0, -1.0])


def counter_unit_spacing(r1, r2, r3):
    "the power kernel's answer {0, 1, 2}, (1, −2, 1): negative only while (1 + r2)^4 < 1 + 2^r3·r2, so it fails for large r2"
    return torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, -2.0, 1.0])


def xpos_key_factor(pos, dim, scale_base=512.0):
    "returns the key factor ζ^(−n/γ) instead of the query factor"
    return E.solution("11.1")(pos, dim, scale_base).reciprocal()


def ntk_is_pi(dim, base, scale):
    "Position Interpolation: every frequency divided by s"
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim) / scale


def alibi_naive_slopes(n_heads, length):
    "the power-of-two geometric rule applied to any head count"
    dist = (torch.arange(length)[:, None] - torch.arange(length)[None]).abs().double()
    return -torch.tensor(_alibi_power_of_2(n_heads), dtype=torch.float64)[:, None, None] * dist


def anchor_submatrix(K):
    "the leading (n−1)×(n−1) block of K, with no anchoring at all"
    return K.double()[:-1, :-1]


def anchor_one_side(K):
    "subtracts only the anchor column K_in and adds K_nn: not symmetric"
    K = K.double()
    return K[:-1, :-1] - K[:-1, -1:] + K[-1, -1]


def fire_no_plus_one(i, j, c, L):
    "ψ(x) = log|c·x| without the + 1"
    psi = lambda x: torch.log((c * x.double()).abs())
    return psi(i - j) / psi(torch.clamp(i.double(), min=L))


def random_with_replacement(length, max_len, generator):
    "sorted randint: duplicates"
    if length > max_len: raise ValueError("too long")
    return torch.randint(0, max_len, (length,), generator=generator).sort().values


def random_offset(length, max_len, generator):
    "a random start followed by consecutive positions"
    if length > max_len: raise ValueError("too long")
    start = torch.randint(0, max_len - length + 1, (1,), generator=generator).item()
    return torch.arange(start, start + length)


def random_stratified(length, max_len, generator):
    "one position per stratum: max_len cut into `length` equal strata, one uniform draw in each"
    if length > max_len: raise ValueError("too long")
    edges = [round(i * max_len / length) for i in range(length + 1)]
    return torch.tensor([torch.randint(a, b, (1,), generator=generator).item() for a, b in zip(edges, edges[1:])])


def random_unsorted(length, max_len, generator):
    "forgets to sort"
    if length > max_len: raise ValueError("too long")
    return torch.randperm(max_len, generator=generator)[:length]


def random_global_rng(length, max_len, generator):
    "ignores the generator it was given"
    if length > max_len: raise ValueError("too long")
    return torch.randperm(max_len)[:length].sort().values


def segments_intra_off_by_one(ids, sep_ids):
    "intra = t − (index of the last separator): the first token of a segment gets 1"
    intra, inter = E.solution("30.1")(ids, sep_ids)
    return torch.where(inter > 0, intra + 1, intra), inter


def dape_swapped(S, bias, W1, b1, W2, b2):
    "concatenates [B; S]"
    x = torch.cat([bias.expand_as(S), S], 1)
    h = F.leaky_relu(torch.einsum("dc,bcqk->bdqk", W1, x) + b1[:, None, None], 0.01)
    return S + bias + torch.einsum("hd,bdqk->bhqk", W2, h) + b2[:, None, None]


def dape_per_head(S, bias, W1, b1, W2, b2):
    "applies a scalar MLP to each head alone (no mixing): uses only W1's diagonal-ish entries"
    H = S.shape[1]
    out = []
    for h in range(H):
        x = torch.stack([S[:, h], bias[h].expand_as(S[:, h])], 1)                         # [B, 2, T, T]
        hid = F.leaky_relu(torch.einsum("dc,bcqk->bdqk", W1[:, [h, H + h]], x) + b1[:, None, None], 0.01)
        out.append(torch.einsum("d,bdqk->bqk", W2[h], hid) + b2[h])
    return S + bias + torch.stack(out, 1)


def dape_over_keys(S, bias, W1, b1, W2, b2):
    "a softmax-normalized f over the key axis: future keys leak"
    return E.solution("40.1")(S, bias, W1, b1, W2, b2) + S.softmax(-1)


def conv_tril_after(x, weight, bias):
    "masks the output instead of the input"
    T = x.shape[-1]
    return F.conv2d(x, weight, bias, padding=(0, weight.shape[-1] // 2)) * torch.ones(T, T).tril()


def conv_along_queries(x, weight, bias):
    "a k×1 kernel: mixes query rows"
    return F.conv2d(x.tril(), weight.transpose(-1, -2), bias, padding=(weight.shape[-1] // 2, 0))


def windows_overrun(n_tokens, length, k=256, n_windows=16):
    "span = n_tokens − length: the last window's last target is past the end"
    span = n_tokens - length
    n = max(1, min(n_windows, span + 1))
    return [(round(i * span / (n - 1)), length - min(k, length)) for i in range(n)]


def arith_no_mod(ids):
    "forgets to reduce mod 5"
    return eval("".join("01234+-*"[t] for t in ids))


def mqar_every_key(seq, n_keys):
    "scores every key, including first occurrences whose value is not known yet"
    return [seq[t + 1] if tok < n_keys and t + 1 < len(seq) else -100 for t, tok in enumerate(seq)]


def bins_sign_flipped(weights, k):
    "the offset i − j instead of j − i: past keys land in the bins above k"
    return E.solution("24.1")(weights, k).flip(-1)


def bins_overwrite(weights, k):
    "scatter_ instead of scatter_add_: one key's weight per bin survives"
    T = weights.shape[-1]
    pos = torch.arange(T)
    c = (pos[None] - pos[:, None]).clamp(-k, k) + k
    return weights.new_zeros(*weights.shape[:-1], 2 * k + 1).scatter_(-1, c.expand_as(weights), weights)


def alibi_causal(n_heads, length):
    "causal ALiBi: the entries above the diagonal masked to −inf"
    b = E.solution("20.1")(n_heads, length)
    return b.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))


def alibi_fairseq(n_heads, length):
    "fairseq's m_h·j: ALiBi on j ≤ i up to a constant per row"
    return -E.solution("20.1")(n_heads, length)[:, :1, :].expand(n_heads, length, length).clone()


def band_off_by_one(T, w, block):
    "0 ≤ i − j ≤ w: a window of w + 1 keys"
    return E.solution("25.1")(T, w + 1, block)


def band_block_distance(T, w, block):
    "key block b is visited when a − b < w/block (block distance, not token distance)"
    nb = -(-T // block)
    a = torch.arange(nb)
    d = a[:, None] - a[None]
    return (d >= 0) & (d * block < w)


# the package registers at least one wrong answer per exercise (E.mistakes); these are more of them
MORE_WRONG = {
    "1.1": [attend_masks_past, attend_softmax_queries],
    "2.1": [sinusoidal_exponent],
    "10.1": [rope_interleaved, rope_half_wrong_sign, rope_half_scaled],
    "10.2": [perm_inverse, perm_halves_swapped],
    "11.1": [xpos_key_factor],
    "12.1": [ntk_is_pi],
    "20.1": [alibi_naive_slopes, alibi_causal, alibi_fairseq],
    "21.1": [anchor_submatrix, anchor_one_side],
    "21.2": [counter_two_points, counter_unit_spacing],
    "22.1": [fire_no_plus_one],
    "23.1": [random_with_replacement, random_offset, random_stratified, random_unsorted, random_global_rng],
    "24.1": [bins_sign_flipped, bins_overwrite],
    "25.1": [band_off_by_one, band_block_distance],
    "30.1": [segments_intra_off_by_one],
    "40.1": [dape_swapped, dape_per_head, dape_over_keys],
    "41.1": [conv_tril_after, conv_along_queries],
    "53.1": [windows_overrun],
    "60.1": [arith_no_mod],
    "61.1": [mqar_every_key],
}
WRONG = {i: E.mistakes(i) + MORE_WRONG.get(i, []) for i in E.known(autograded_only=True)}
# the words the failure message must contain: the grader names the mistake, not only "wrong"
EXPECT = {
    "rope_interleaved": "interleaved", "rope_interleaved_layout": "interleaved", "rope_half_wrong_sign": "−m·θ", "anchor_first_no_corner": "K_nn", "anchor_one_side": "four terms",
    "segments_inclusive": "exclusive", "dape_no_residual": "residual", "dape_swapped": "[B; S]",
    "conv_no_tril": "tril", "conv_tril_after": "tril", "windows_overrun": "L + 1", "alibi_wrong_sign": "penalty",
    "ntk_exponent_one": "d/(d−2)", "sinusoidal_concat": "Interleave", "random_offset": "uniform", "random_wrapped": "subset", "random_stratified": "subset", "counter_not_sum_zero": "sum-zero", "counter_unit_spacing": "spacing", "perm_identity": "2i + 1", "bins_not_clipped": "far bin", "bins_sign_flipped": "j − i",
    "band_not_causal": "never seen", "band_off_by_one": "w − 1",
    "rope_negative_angle": "−m·θ", "conv_mask_after": "tril", "windows_clamp_k": "refuses k > length",
    "alibi_causal": "full matrix", "alibi_fairseq": "full matrix",
}


def test_every_autograded_exercise_has_wrong_answers():
    assert set(MORE_WRONG) <= set(E.known(autograded_only=True))
    assert all(E.mistakes(i) for i in E.known(autograded_only=True)), "every autograded exercise registers a wrong answer"


@pytest.mark.parametrize("id,wrong", [(i, w) for i in E.known(autograded_only=True) for w in E.mistakes(i)],
                         ids=lambda v: getattr(v, "__name__", v))
def test_registered_mistake_is_caught_by_its_named_check(id, wrong):
    "A registered wrong answer fails first on the property it names, by giving a wrong result, not by raising."
    verdicts = E.grade(id, wrong)
    first = next(v for v in verdicts if not v.holds)
    assert first.property == wrong.caught_by, (first.property, wrong.caught_by)
    assert not first.message.startswith("your function raised"), first.message
    assert wrong.__doc__ and inspect.getsource(wrong).startswith(f'@mistake("{id}"')


def test_grade_agrees_with_check(capsys):
    "grade returns one verdict per check, in order; check's report is built from the same verdicts."
    for id in ("10.1", "53.1"):
        for fn in [E.solution(id), *E.mistakes(id)]:
            verdicts = E.grade(id, fn)
            assert [v.property for v in verdicts] == [c.__doc__ for c in E.get(id).checks]
            assert all(v.holds == (v.message == "") for v in verdicts)
            assert E.check(id, fn) == all(v.holds for v in verdicts)
            out = capsys.readouterr().out
            assert all(("✓ " if v.holds else "✗ ") + v.property in out for v in verdicts)
    with pytest.raises(ValueError, match="in writing"): E.grade("10.3", lambda: None)
    assert [v.holds for v in E.grade("10.1", "not a function")] == [False] * 4


def test_mistake_must_name_one_of_its_exercises_checks():
    with pytest.raises(ValueError, match="not one of"):
        E.mistake("10.1", caught_by=E.get("20.1").checks[0])(lambda *a: None)


@pytest.mark.parametrize("id", E.known(autograded_only=True))
def test_reference_passes(id):
    assert E.check(id, E.solution(id), quiet=True)
    src = inspect.getsource(E.solution(id))                     # readable: the registration and the code, nothing hidden
    assert src.startswith(f'@autograded("{id}"') and f"def {E.solution(id).__name__}(" in src


@pytest.mark.parametrize("id,wrong", [(i, w) for i, ws in WRONG.items() for w in ws], ids=lambda v: getattr(v, "__name__", v))
def test_wrong_answer_rejected(id, wrong, capsys):
    assert not E.check(id, wrong)
    out = capsys.readouterr().out
    assert "First failure" in out and "✗" in out
    name = wrong.__name__.lstrip("_")
    if name in EXPECT: assert EXPECT[name] in out, out


@pytest.mark.parametrize("id", E.known(autograded_only=True))
def test_stub_crash_and_none_are_false_with_a_message(id, capsys):
    def stub(*a, **k): raise NotImplementedError("write me")
    assert E.check(id, stub) is False
    out = capsys.readouterr().out
    assert "not attempted yet" in out and "✗" not in out and "checks passed" not in out   # a stub is invited, not failed
    def crash(*a, **k): raise RuntimeError("write me")
    assert E.check(id, crash) is False
    assert "RuntimeError: write me when called with" in capsys.readouterr().out
    assert E.check(id, lambda *a, **k: None) is False
    assert "None" in capsys.readouterr().out
    assert E.check(id, "not a function") is False


JUNK = [lambda *a, **k: "oops", lambda *a, **k: 42, lambda *a, **k: True, lambda *a, **k: torch.zeros(1),
        lambda *a, **k: float("nan"), lambda *a, **k: (torch.zeros(2), "x"), lambda *a, **k: [None],
        lambda *a, **k: torch.full((3, 3), float("nan"))]


@pytest.mark.parametrize("id", E.known(autograded_only=True))
def test_junk_outputs_are_false_never_raise(id):
    "Whatever a student's function returns, check answers False and does not raise."
    for f in JUNK: assert E.check(id, f, quiet=True) is False


def test_in_place_student_does_not_corrupt_the_checks():
    "A correct answer that also scribbles on its input still passes: the checks hand out copies."
    def rope_in_place(x, pos, inv_freq):
        out = E.solution("10.1")(x, pos, inv_freq); x.zero_(); return out
    assert E.check("10.1", rope_in_place, quiet=True)


def test_unknown_and_written_ids():
    with pytest.raises(ValueError, match="10.1"): E.get("10.7")
    with pytest.raises(ValueError, match="did you mean"): E.solution("21.9")
    with pytest.raises(ValueError, match="in writing"): E.check("10.3", lambda: None)
    ids = E.known()
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("."))))
    assert set(E.known(autograded_only=True)) < set(ids)


def test_check_leaves_the_global_rng_alone():
    torch.manual_seed(123); a = torch.rand(3)
    torch.manual_seed(123); E.check("23.1", E.solution("23.1"), quiet=True); b = torch.rand(3)
    assert torch.equal(a, b)


CHAPTERS = ["01_attention", "02_absolute", "10_rope", "11_xpos", "12_context_extension", "20_t5_alibi", "21_kerple",
            "22_sandwich_fire", "23_randomized", "24_learned_relative", "25_window", "30_bipe", "40_dape", "41_cdape", "53_evaluate", "60_che", "61_recall_arithmetic"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_exercise_section(chapter):
    "Each method chapter ends with an Exercises section that names exactly its registered ids and checks a stub."
    cells = json.loads((NBS / f"{chapter}.ipynb").read_text())["cells"]
    src = ["".join(c["source"]) for c in cells]
    start = next(i for i, s in enumerate(src) if s.startswith("## Exercises"))
    section = "\n".join(src[start:])
    ids = [i for i in E.known() if E.get(i).chapter == chapter]
    assert len(ids) >= 3 and any(E.get(i).autograded for i in ids)
    named = set(re.findall(r"\*\*Exercise (\d+\.\d+)\*\*", section))
    assert named == set(ids), (chapter, named, ids)
    code = [c for c in cells[start:] if c["cell_type"] == "code"]
    assert any("check(" in "".join(c["source"]) for c in code)
    stored = "".join("".join(o.get("text", "")) for c in code for o in c.get("outputs", []))
    assert "not attempted yet" in stored and "✗" not in stored, "the stored stub output invites the reader; no red report"


def _page_exercises() -> dict[str, set]:
    "Every `**Exercise X.Y**` written on a page in nbs/, read from disk, by notebook."
    found = {}
    for path in sorted(NBS.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        ids = set(re.findall(r"\*\*Exercise (\d+\.\d+)\*\*", text))
        if ids: found[path.stem] = ids
    return found


def test_every_exercise_on_a_page_is_registered():
    "No page poses an exercise the registry (and so the table and the course page) does not know, nor under another chapter."
    for stem, ids in _page_exercises().items():
        for i in sorted(ids):
            assert i in E.EXERCISES, f"{stem} poses Exercise {i}, which is not registered in lengthx.exercises"
            assert E.get(i).chapter == stem, (i, E.get(i).chapter, stem)


def test_every_registered_exercise_is_on_its_page():
    found = _page_exercises()
    for i in E.known():
        assert i in found.get(E.get(i).chapter, set()), f"Exercise {i} is registered but {E.get(i).chapter} does not pose it"


def test_every_kind_is_known():
    assert all(E.get(i).kind in E.KINDS for i in E.known())


def test_exercise_table_escapes_pipes():
    "A title with |m − n| must not split its Markdown row: every row has exactly the header's five cells."
    rows = E.exercise_table().splitlines()
    cells = lambda r: len(re.split(r"(?<!\\)\|", r)) - 2
    assert all(cells(r) == 5 for r in rows), [r for r in rows if cells(r) != 5]
    assert any("\\|" in r for r in rows)          # the table does hold an escaped pipe (2.3's |m − n|)


@pytest.mark.parametrize("id", E.known(autograded_only=True))
def test_a_stub_is_not_attempted_on_every_check(id):
    "No check gives credit for a stub: every property of every exercise reports the stub as not attempted."
    def stub(*a, **k): raise NotImplementedError
    assert all(isinstance(E._run_one(c, stub), E.NotAttempted) for c in E.get(id).checks)
    assert all(not v.holds and "still the stub" in v.message for v in E.grade(id, stub))


@pytest.mark.parametrize("id", E.known(autograded_only=True))
def test_a_crash_passes_no_check(id):
    "A function that always crashes passes no property: a refusal is credited only after a pass on a valid input."
    def crash(*a, **k): raise RuntimeError("always")
    assert all(E._run_one(c, crash) is not None for c in E.get(id).checks)


def test_reference_solutions_are_private():
    "`from lengthx.exercises import *` hands out no answer and shadows no package function of the same name."
    ns = {}
    exec("from lengthx.exercises import *", ns)
    for id in E.known(autograded_only=True):
        ref = E.solution(id)
        assert ref.__name__.startswith("_ref_"), ref.__name__
        assert ref.__name__ not in E.__all__ and ref not in ns.values(), ref.__name__
    for name in ("rope_rotate_half", "sinusoidal", "xpos_scale", "dape_logits", "segment_positions", "last_k_windows"):
        assert name not in ns and not hasattr(E, name), name


def test_last_k_windows_exercise_refuses_k_beyond_length():
    "53.1 follows the package: k > length raises; the reference agrees with lengthx.evaluate.last_k_windows."
    from lengthx.evaluate import last_k_windows
    ref = E.solution("53.1")
    with pytest.raises(ValueError): ref(1000, 100, 256, 4)
    with pytest.raises(ValueError): last_k_windows(1000, 100, 256, 4)
    assert ref(1000, 100, 100, 4) == last_k_windows(1000, 100, 100, 4)
    clamps = lambda n, L, k=256, w=16: last_k_windows(n, L, min(k, L), w)
    verdicts = E.grade("53.1", clamps)
    assert [v.holds for v in verdicts] == [True, True, True, False] and "refuses k > length" in verdicts[-1].message


def test_alibi_causal_variants_are_told_why_the_full_matrix():
    "Causal ALiBi and fairseq's row-shifted form fail 20.1 with a message that says the full symmetric matrix is asked."
    for wrong in (alibi_causal, alibi_fairseq):
        first = next(v for v in E.grade("20.1", wrong) if not v.holds)
        assert "full matrix chapter 20 defines" in first.message, first.message
    assert "penalty" in E.grade("20.1", E.mistakes("20.1")[0])[0].message     # a sign error keeps its own message
