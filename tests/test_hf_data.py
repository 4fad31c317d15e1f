"""lengthx.data's Hugging Face loaders, offline: every source in HF_CORPORA re-pointed at small local files.

The sources differ from the hub ones only in `path`/`name`/`data_files`, so `datasets.load_dataset`, the
record filter, the wikitext grouping, the caps, the tokenizer and the cache all run as they would on Colab.
"""
import json
import sys
from dataclasses import replace

import pytest
import torch

datasets = pytest.importorskip("datasets")   # a dev requirement: CI installs it

from lengthx.data import (HF_CORPORA, SPLITS, BPETokenizer, ByteTokenizer, HFSource, hf_cache_key, hf_documents,
                          hf_source, hf_tokens, load_tokens, wikitext_articles)

PILE = {
    "train": [("ArXiv", "We prove that every bounded sequence has a convergent subsequence."),
              ("Github", "def f(x):\n    return x + 1\n"),
              ("Pile-CC", "Buy cheap shoes online."),
              ("Github", "class A:\n    pass\n"),
              ("ArXiv", "Attention is a kernel smoother; positional biases reshape it.")],
    "test": [("Github", "import os\nprint(os.getcwd())\n"), ("ArXiv", "Théorème: la suite converge."),
             ("Pile-CC", "Weather today: sunny.")],
}
BOOKS = {"train": ["It was a dark and stormy night.\n" * 30, "Call me Ishmael.\n" * 20],
         "test": ["The end of the story is near.\n" * 25]}
WIKI = (" = Valkyria = \n \n Valkyria is a game . \n \n = = Gameplay = = \n \n You play it . \n"
        " = Tower = \n \n A tower is tall . \n \n = = = Height = = = \n \n Very . \n")


@pytest.fixture
def local(tmp_path):
    "Local copies in each source's own format: Pile jsonl (meta.pile_set_name), PG-19 jsonl, wikitext lines."
    pile = {}
    for split, recs in PILE.items():
        f = tmp_path / f"pile_{split}.jsonl"
        f.write_text("".join(json.dumps({"text": t, "meta": {"pile_set_name": s}}) + "\n" for s, t in recs))
        pile[split] = str(f)
    pg = {}
    for split, books in BOOKS.items():
        f = tmp_path / f"pg19_{split}.jsonl"
        f.write_text("".join(json.dumps({"short_book_title": f"b{i}", "publication_date": 1900, "url": "u", "text": t}) + "\n"
                             for i, t in enumerate(books)))
        pg[split] = str(f)
    (tmp_path / "wiki_test.txt").write_text(WIKI)
    return {
        "arxiv": replace(HF_CORPORA["arxiv"], path="json", data_files=pile),
        "github": replace(HF_CORPORA["github"], path="json", data_files=pile),
        "pg19": replace(HF_CORPORA["pg19"], path="json", data_files=pg),
        "wikitext103": replace(HF_CORPORA["wikitext103"], path="text", name=None,
                               data_files={"test": str(tmp_path / "wiki_test.txt")}),
    }


def test_every_registered_corpus_is_covered(local):
    assert set(local) == set(HF_CORPORA) == {"pg19", "arxiv", "github", "wikitext103"}
    for name, src in local.items():   # only where the data lives differs from the hub source
        hub = HF_CORPORA[name]
        assert (src.text_field, src.where, src.group, src.splits) == (hub.text_field, hub.where, hub.group, hub.splits)


@pytest.mark.parametrize("streaming", [True, False])
def test_pile_subsets_keep_only_their_records(local, streaming):
    for name, tag in [("arxiv", "ArXiv"), ("github", "Github")]:
        src = replace(local[name], streaming=streaming)
        for split in ("train", "test"):
            assert list(hf_documents(src, split)) == [t for s, t in PILE[split] if s == tag]


def test_pg19_books_are_documents(local):
    assert list(hf_documents(local["pg19"], "train")) == BOOKS["train"]
    assert list(hf_documents(local["pg19"], "test")) == BOOKS["test"]


def test_wikitext_lines_become_articles(local):
    arts = list(hf_documents(local["wikitext103"], "test"))
    assert [a.splitlines()[0] for a in arts] == [" = Valkyria = ", " = Tower = "]
    assert "= = Gameplay = =" in arts[0] and "= = = Height = = =" in arts[1]     # sections stay inside
    # records of the hub copy end with "\n" and blank records separate paragraphs: same articles
    rows = [l + "\n" for l in WIKI.split("\n")[:-1]]
    assert list(wikitext_articles(rows)) == list(wikitext_articles(WIKI.split("\n")))


def test_caps(local):
    assert list(hf_documents(local["github"], "train", max_docs=1)) == [PILE["train"][1][1]]
    first = PILE["train"][0][1]
    assert list(hf_documents(local["arxiv"], "train", max_bytes=len(first.encode()))) == [first]   # reached: stop
    assert len(list(hf_documents(local["arxiv"], "train", max_bytes=len(first.encode()) + 1))) == 2


def test_tokens_are_cached_once(local, tmp_path, monkeypatch):
    calls = []
    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **kw: (calls.append(a[0]), real(*a, **kw))[1])
    cache = tmp_path / "cache"
    a = hf_tokens(local["github"], "train", cache_dir=cache)
    b = hf_tokens(local["github"], "train", cache_dir=cache)
    assert calls == ["json"] and torch.equal(a, b) and a.dtype == torch.long
    assert ByteTokenizer().decode(a).split("\x00") == [t for s, t in PILE["train"] if s == "Github"]
    hf_tokens(local["arxiv"], "train", cache_dir=cache)                 # another subset: another entry
    hf_tokens(local["github"], "train", cache_dir=cache, max_docs=1)    # another cap: another entry
    assert len(list(cache.iterdir())) == 3 and len(calls) == 3
    # a changed local file changes the key, so the cache is not trusted for it
    k = hf_cache_key(local["github"], "train", ByteTokenizer())
    with open(local["github"].data_files["train"], "a") as f:
        f.write(json.dumps({"text": "x = 1\n", "meta": {"pile_set_name": "Github"}}) + "\n")
    assert hf_cache_key(local["github"], "train", ByteTokenizer()) != k
    assert hf_tokens(local["github"], "train", cache_dir=cache).numel() == a.numel() + len("x = 1\n") + 1


def test_bpe_tokenizer_through_the_same_path(local, tmp_path):
    pytest.importorskip("tokenizers")
    docs = list(hf_documents(local["pg19"], "train"))
    bpe = BPETokenizer.train(docs, vocab_size=300, min_frequency=1)
    t = hf_tokens(local["pg19"], "test", bpe, cache_dir=tmp_path)
    assert bpe.decode(t) == BOOKS["test"][0] and t.numel() < len(BOOKS["test"][0])   # fewer tokens than bytes
    assert torch.equal(hf_tokens(local["pg19"], "test", bpe, cache_dir=tmp_path), t)
    assert hf_cache_key(local["pg19"], "test", bpe) != hf_cache_key(local["pg19"], "test", ByteTokenizer())


def test_errors(local, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown corpus 'pile'.*arxiv"): hf_source("pile")
    with pytest.raises(ValueError, match="unknown split"): list(hf_documents(local["pg19"], "dev"))
    with pytest.raises(ValueError, match="no split for 'test'"):
        HFSource("json", splits={"train": "train"}).split_name("test")
    none = replace(local["github"], where=("meta.pile_set_name", "Books3"))
    with pytest.raises(ValueError, match="produced no documents"): hf_tokens(none, "train", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown group"): list(hf_documents(replace(local["pg19"], group="books"), "test"))
    monkeypatch.setitem(sys.modules, "datasets", None)                 # as if it were not installed
    with pytest.raises(ImportError, match="pip install datasets"): list(hf_documents(local["pg19"], "test"))


def test_meta_as_json_text_and_load_tokens(local, tmp_path):
    "Some Pile copies store `meta` as a JSON string; the filter reads it too. `load_tokens` dispatches by name."
    f = tmp_path / "pile_str.jsonl"
    f.write_text("".join(json.dumps({"text": t, "meta": json.dumps({"pile_set_name": s})}) + "\n" for s, t in PILE["test"]))
    src = replace(HF_CORPORA["github"], path="json", data_files={"test": str(f)})
    assert list(hf_documents(src, "test")) == [PILE["test"][0][1]]
    assert torch.equal(load_tokens(src, "test", cache_dir=tmp_path), hf_tokens(src, "test", cache_dir=tmp_path))
    assert set(SPLITS) == set(HF_CORPORA["pg19"].splits)
