"""RULER's six synthetic tasks (lengthx.ruler, chapter 15): each generator fits its length as RULER does (the most filler
whose prompt plus answer budget fits), its answers are really the task's answers in the prompt, the same seed gives the
same sample, RULER's metric on hand-computed cases, and the runner scores a right and a wrong model."""
import random
import re
import time
from collections import Counter

import pytest
import torch
from torch import nn

from lengthx.ruler import (BASE, NIAH, RULER_TASKS, TEMPLATES, THRESHOLD, RulerSample, _maker, chat_template,
                           effective_length, family, fit_length, in_template, match_all_scores, mean_by_length,
                           ruler_answer, ruler_grid, ruler_sample, ruler_samples, stdlib_words, string_match_all,
                           string_match_part, zeta)


class WordTok:
    "A lossless word-level tokenizer built in code: a word or punctuation mark with its leading spaces is one token."
    def __init__(self):
        self.vocab, self.inv = {}, []

    def _id(self, piece):
        if piece not in self.vocab: self.vocab[piece] = len(self.inv); self.inv.append(piece)
        return self.vocab[piece]

    def __call__(self, s, add_special_tokens=False):
        return type("Enc", (), {"input_ids": [self._id(p) for p in re.findall(r"\s*\w+|\s*[^\w\s]|\s+", s)]})()

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.inv[i] for i in ids)


TOK = WordTok()
LENGTHS = (1024, 2048, 4096)


def n_prompt(text: str) -> int:
    return len(TOK(text).input_ids)


@pytest.mark.parametrize("task", RULER_TASKS)
def test_each_task_fills_its_length_and_no_more(task):
    "At every length the sample is at most the target, within 40 tokens of it, and one more unit of filler overflows."
    for L in LENGTHS:
        s = ruler_sample(task, TOK, L, 7)
        assert s.n_tokens == len(s.ids) + s.max_new_tokens <= L, (task, L, s.n_tokens)
        assert L - s.n_tokens <= 40, (task, L, s.n_tokens)
        assert TOK.decode(s.ids.tolist()) == s.text
        make, lo, most = _maker(task, TOK, L, random.Random(7).getrandbits(62))
        assert make(s.filler)[0] == s.text
        assert n_prompt(make(s.filler + 1)[0]) + s.max_new_tokens > L, (task, L)


def test_lengths_grow_the_filler_not_the_rest():
    "A longer target holds more filler (the search is not stuck at its lower bound); under 4096, where cwe keeps one set of frequencies."
    for task in RULER_TASKS:
        fill = [ruler_sample(task, TOK, L, 3).filler for L in (1024, 2048, 3072)]
        assert fill[0] < fill[1] < fill[2], (task, fill)


def test_too_short_a_length_is_one_clear_error():
    with pytest.raises(ValueError, match="over the budget"): ruler_sample("cwe", TOK, 300, 0)
    with pytest.raises(ValueError, match="unknown RULER task"): ruler_sample("niah_single_9", TOK, 1024, 0)
    with pytest.raises(ValueError, match="unknown RULER task"): ruler_grid(None, TOK, ["qa_1"], [1024], 1)


def test_fit_length_finds_the_largest_fitting_filler():
    "Against a brute-force scan on a prompt whose size is known."
    make = lambda n: (" x" * (3 * n + 5), [])
    for budget in (8, 9, 50, 301, 1000):
        n = fit_length(make, TOK, budget)[0]
        assert n == max(k for k in range(1, budget) if 3 * k + 5 <= budget)
    assert fit_length(make, TOK, 10_000, 1, most=20)[0] == 20   # the filler runs out before the budget


@pytest.mark.parametrize("task", list(NIAH))
def test_niah_needle_value_appears_once_with_its_key(task):
    for seed in range(3):
        s = ruler_sample(task, TOK, 2048, seed)
        (value,) = s.answers
        assert s.text.count(value) == 1
        key = re.search(r"for (\S+) mentioned in the provided text\?", s.text).group(1)
        assert f"for {key} is: {value}." in s.text and s.text.count(f"for {key} is:") == 1
        if task != "niah_single_1": assert s.text.count("One of the special magic") > 20   # a haystack of needles


def _assigned(text: str, value: str) -> set[str]:
    "Every variable that holds `value` by following the VAR lines of `text` (a reference solver)."
    direct = dict(re.findall(r"VAR (\w+) = (\d+)", text))
    links = dict(re.findall(r"VAR (\w+) = VAR (\w+)", text))
    def val(v, depth=0): return direct.get(v) if v in direct else (val(links[v], depth + 1) if v in links and depth < 50 else None)
    return {v for v in set(direct) | set(links) if val(v) == value}


def test_vt_answer_is_exactly_the_chain_of_the_value():
    for L in (1024, 4096):
        s = ruler_sample("vt", TOK, L, 11)
        question = s.text.rsplit("Memorize and track", 1)[1]   # the task after the worked example
        value = re.search(r"assigned the value (\d+) in the text above", question).group(1)
        assert _assigned(question, value) == set(s.answers) and len(s.answers) == 5
        assert re.search(r"5 variables are assigned the value \d+, they are: $", s.text)
        example = s.text.rsplit("Memorize and track", 1)[0]
        assert example.count("VAR ") >= 9   # the worked example carries its own chain and its answer


def test_vt_worked_example_and_task_are_joined_by_a_blank_line():
    "RULER puts the worked example, then a blank line, then the task."
    s = ruler_sample("vt", TOK, 1024, 11)
    example, task = s.text.split("\n\nMemorize and track", 1)
    assert example.startswith("Memorize and track") and re.search(r"they are: +(\w{3} ){4}\w{3}$", example)
    assert set(s.answers) <= set(re.findall(r"VAR (\w+)", task))   # the task's own chain follows the blank line


def test_stdlib_words_leave_out_code_names():
    "Docstring words that the code uses as names (arguments, methods, modules) are not words of the lists."
    words = set(stdlib_words())
    for name in ("sizehint", "hexdigest", "expanduser", "args", "self", "kwargs"):
        assert name not in words, name
    assert {"different", "following", "meaning"} <= words and len(words) > 2000   # English stays, enough for cwe


FAKE_CHAT = "<s>[SYSTEM] be brief [USER] {task_template} [ASSISTANT]"


@pytest.mark.parametrize("task", RULER_TASKS)
def test_model_template_wraps_the_task_and_leaves_the_prefix_to_the_answer(task):
    "As RULER: the task template inside the model template, the answer prefix after it; the whole still fits."
    L = 1024
    s = ruler_sample(task, TOK, L, 5, model_template=FAKE_CHAT)
    assert s.text.startswith("<s>[SYSTEM] be brief [USER] ") and s.text.count("[ASSISTANT]") == 1
    task_text, answer = s.text.split(" [ASSISTANT]")
    assert answer.startswith(TEMPLATES[family(task)][1][:10]) and "Question" not in answer and "?" not in answer
    make, lo, most = _maker(task, TOK, L, random.Random(5).getrandbits(62))
    assert in_template(make, task, FAKE_CHAT)(s.filler)[0] == s.text
    assert task_text[len("<s>[SYSTEM] be brief [USER] "):] + answer == make(s.filler)[0]   # the base prompt, unchanged
    assert s.n_tokens <= L and n_prompt(in_template(make, task, FAKE_CHAT)(s.filler + 1)[0]) + s.max_new_tokens > L
    assert chat_template(TOK) == BASE and ruler_sample(task, TOK, L, 5).text == make(ruler_sample(task, TOK, L, 5).filler)[0]


def test_cwe_answers_are_the_ten_most_common_words():
    for L in (1024, 4096):
        s = ruler_sample("cwe", TOK, L, 5)
        counts = Counter(re.findall(r"\d+\. ([a-z]+)", s.text.rsplit("most often.\n", 1)[1].split("\nQuestion")[0]))
        top = set(s.answers)
        assert len(top) == 10 and min(counts[w] for w in top) > max(c for w, c in counts.items() if w not in top)
        assert min(counts[w] for w in top) == (30 if L >= 4096 else 6)


def test_fwe_answers_are_the_three_most_frequent_coded_words():
    for L in (1024, 4096):
        s = ruler_sample("fwe", TOK, L, 2)
        counts = Counter(s.text.split("coded words. ", 1)[1].split("\nQuestion")[0].split())
        ranked = [w for w, _ in counts.most_common()]
        assert ranked[0] == "..." and ranked[1:4] == s.answers
        assert counts[s.answers[2]] > counts[ranked[4]]   # no tie at the cut


def test_zeta():
    assert zeta(2.0) == pytest.approx(torch.pi ** 2 / 6, rel=1e-9) and zeta(4.0) == pytest.approx(torch.pi ** 4 / 90, rel=1e-9)


def test_same_seed_same_sample_other_seed_other_sample():
    for task in RULER_TASKS:
        a, b = ruler_samples(task, TOK, 1024, 2, seed=1), ruler_samples(task, TOK, 1024, 2, seed=1)
        assert [x.text for x in a] == [x.text for x in b]
        assert a[0].text != a[1].text and a[0].text != ruler_samples(task, TOK, 1024, 1, seed=2)[0].text


def test_string_match_all_by_hand():
    assert string_match_all(["The number is 1234567."], [["1234567"]]) == 100.0
    assert string_match_all(["abcde and FGHIJ"], [["ABCDE", "fghij", "klmno"]]) == 66.67
    assert string_match_all(["x", "a b c"], [["y"], ["a", "b", "c", "d"]]) == 37.5   # (0 + 3/4) / 2
    assert match_all_scores(["a b c"], [["a", "b", "c", "d"]]) == [0.75]
    assert string_match_part(["x", "a"], [["y"], ["a", "b"]]) == 50.0
    with pytest.raises(ValueError, match="as many predictions"): string_match_all(["a"], [])


def test_effective_length():
    assert effective_length({4096: 95.0, 8192: 86.0, 16384: THRESHOLD, 32768: 99.0}) == 8192
    assert effective_length({4096: 80.0}) == 0 and effective_length({4096: 90, 8192: 88}) == 8192
    g = {"a": {"1024": {"score": 100.0}, "2048": {"score": 50.0}}, "b": {"1024": {"score": 80.0}, "2048": {"score": 0.0}}}
    assert mean_by_length(g) == {1024: 90.0, 2048: 25.0}


class EchoModel(nn.Module):
    "A fake causal LM whose greedy answer to a known prompt is a fixed text (the right answers, or not)."
    def __init__(self, answers: dict, right: bool):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.answers, self.right = answers, right
        self.prefill, self.step = 0.0, 0.0
        self.config = type("C", (), {"eos_token_id": 0})()

    def generate(self, ids, attention_mask, max_new_tokens, do_sample, pad_token_id, logits_processor=None):
        assert not do_sample and attention_mask.shape == ids.shape
        refs = self.answers[tuple(ids[0].tolist())]
        text = " " + (", ".join(refs) if self.right else "I do not know")
        new = torch.tensor(TOK(text).input_ids[:max_new_tokens])
        for j in range(len(new)):   # as Hugging Face's loop: a forward (the prompt's first, slower), then the processors
            time.sleep(self.prefill if j == 0 else self.step)
            for p in logits_processor or []: p(ids, torch.zeros(1, 8))
        return torch.cat([ids[0], new])[None]


def test_runner_scores_right_and_wrong_models():
    tasks, lengths = ["niah_single_1", "vt", "fwe"], [1024, 2048]
    known = {tuple(s.ids.tolist()): s.answers for t in tasks for L in lengths for s in ruler_samples(t, TOK, L, 2, seed=4)}
    right = ruler_grid(EchoModel(known, True), TOK, tasks, lengths, n_samples=2, seed=4)
    wrong = ruler_grid(EchoModel(known, False), TOK, tasks, lengths, n_samples=2, seed=4)
    for t in tasks:
        for L in map(str, lengths):
            assert right[t][L]["score"] == 100.0 and right[t][L]["scores"] == [1.0, 1.0]
            assert wrong[t][L]["score"] == 0.0 and wrong[t][L]["scores"] == [0.0, 0.0]
    assert effective_length(mean_by_length(right)) == 2048 and effective_length(mean_by_length(wrong)) == 0
    cell, again = right["vt"]["1024"], ruler_samples("vt", TOK, 1024, 2, seed=4)
    assert cell["refs"] == [x.answers for x in again] and cell["prompts"] == [x.text for x in again]
    assert cell["fillers"] == [x.filler for x in again] and cell["fit_s"] >= 0 and cell["answer_s"] >= 0
    assert cell["tokenizations"] == [x.tokenizations for x in again] and min(cell["tokenizations"]) >= 2
    s = ruler_samples("niah_single_1", TOK, 1024, 1, seed=4)[0]
    assert ruler_answer(EchoModel(known, True), TOK, s) == " " + s.answers[0]
    assert ruler_answer(EchoModel(known, True), TOK, s, max_new_tokens=1) == TOK.decode(TOK(" " + s.answers[0]).input_ids[:1])


def test_runner_splits_prefill_from_decoding():
    "The prompt's forward (until the first logits) and the decoding steps are timed apart, and add up to the answering time."
    known = {tuple(s.ids.tolist()): s.answers for s in ruler_samples("vt", TOK, 1024, 2, seed=4)}
    slow = EchoModel(known, True)
    slow.prefill, slow.step = 0.2, 0.02
    cell = ruler_grid(slow, TOK, ["vt"], [1024], n_samples=2, seed=4)["vt"]["1024"]
    steps = sum(len(TOK(p).input_ids) - 1 for p in cell["preds"])   # five names: nine tokens, eight after the first
    assert steps == 16
    assert 2 * 0.2 <= cell["prefill_s"] < 2 * 0.2 + 0.02 * steps   # the first step's wait, not the others
    assert cell["decode_s"] >= 0.02 * steps and cell["prefill_s"] + cell["decode_s"] <= cell["answer_s"]


class CountingTok(WordTok):
    "WordTok that counts the texts it tokenizes."
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __call__(self, s, add_special_tokens=False):
        self.calls += 1
        return super().__call__(s, add_special_tokens)


@pytest.mark.parametrize("task", ["niah_multikey_2", "fwe"])
def test_samples_count_their_tokenizations(task):
    "A sample reports how many prompts its length search tokenized (counted, not 2 log2 n), and the grid keeps it per sample."
    tok = CountingTok()
    s = ruler_sample(task, tok, 2048, 3)
    assert s.tokenizations == tok.calls and s.tokenizations >= 2
    again = ruler_samples(task, tok, 2048, 2, seed=3)
    before = tok.calls
    assert [x.tokenizations for x in ruler_samples(task, tok, 2048, 2, seed=3)] == [x.tokenizations for x in again]
    assert tok.calls - before == sum(x.tokenizations for x in again)


def test_with_smollm2_tokenizer():
    "SmolLM2's own tokenizer (offline, from its GGUF file): the samples fit and count their tokens with it."
    transformers = pytest.importorskip("transformers")
    from lengthx.pretrained import weights_location
    try: folder, gguf = weights_location("smollm2-135m")
    except FileNotFoundError as e: pytest.skip(str(e))
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
    chat = chat_template(tok)
    assert chat.count(BASE) == 1 and chat.rstrip().endswith("<|im_start|>assistant")
    s = ruler_sample("niah_single_1", tok, 2048, 0, model_template=chat)
    assert s.n_tokens <= 2048 and tok.convert_tokens_to_ids("<|im_start|>") in s.ids.tolist()   # special tokens, not text
    for task in RULER_TASKS:
        s = ruler_sample(task, tok, 2048, 0)
        assert s.n_tokens <= 2048 and s.ids.tolist() == tok(s.text, add_special_tokens=False).input_ids
        make = _maker(task, tok, 2048, random.Random(0).getrandbits(62))[0]
        assert len(tok(make(s.filler + 1)[0], add_special_tokens=False).input_ids) + s.max_new_tokens > 2048, task
