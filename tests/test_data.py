"""lengthx.data: stdlib corpus splits, tokenizers, the on-disk token cache, batches."""
import hashlib
import os
import platform
import shutil
import warnings
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
import torch

from lengthx.data import (SPLITS, BPETokenizer, ByteTokenizer, DataWarning, batch_at, corpus_info, corpus_tokens,
                          decode_utf8, default_cache_dir, encode_corpus, get_batch, read_token_cache, split_of,
                          stdlib_corpus, stdlib_files, stdlib_root, text_file_corpus)


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    "A copy of ~60 stdlib files (keeping relative paths), plus things that must be skipped."
    src = stdlib_root()
    root = tmp_path_factory.mktemp("stdlib")
    for p in stdlib_files()[::12]:
        dst = root / p.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
    for skipped in ("site-packages/pkg/mod.py", "test/test_x.py", "idlelib/idle_test/t.py"):
        (root / skipped).parent.mkdir(parents=True, exist_ok=True)
        (root / skipped).write_text("x = 1\n")
    return root


def test_stdlib_root_is_the_running_interpreters():
    root = stdlib_root()
    assert (root / "os.py").is_file() and (root / "json" / "__init__.py").is_file()
    assert corpus_info()["python"] == platform.python_version()


def test_files_skip_site_packages_and_test_suites(small_root):
    rels = [p.relative_to(small_root).as_posix() for p in stdlib_files(small_root)]
    assert rels == sorted(rels) and len(rels) >= 50
    assert not any(r.startswith(("site-packages/", "test/")) or "/idle_test/" in r for r in rels)


def test_split_proportions_and_disjointness():
    root = stdlib_root()
    per = {s: {p.relative_to(root).as_posix() for p in stdlib_files(root, s)} for s in SPLITS}
    everything = {p.relative_to(root).as_posix() for p in stdlib_files(root)}
    assert per["train"] | per["validation"] | per["test"] == everything
    assert not (per["train"] & per["validation"]) and not (per["train"] & per["test"]) and not (per["validation"] & per["test"])
    n = len(everything)
    # binomial(n, 0.9): 4 standard deviations is ~ 0.045 for n ~ 700
    assert abs(len(per["train"]) / n - 0.90) < 4 * (0.9 * 0.1 / n) ** 0.5
    assert len(per["validation"]) > 0 and len(per["test"]) > 0


def test_split_is_a_function_of_the_relative_path_only(small_root):
    "The same file gets the same split under another root, and with Windows separators."
    src = stdlib_root()
    in_src = {s: set(stdlib_files(src, s)) for s in SPLITS}
    for s in SPLITS:
        for p in stdlib_files(small_root, s):
            rel = p.relative_to(small_root)
            assert split_of(rel) == split_of(str(rel)) == split_of(PureWindowsPath(*rel.parts)) == s
            assert (src / rel) in in_src[s]
    # a path's bucket is the md5 of its posix form mod 100 (independent recomputation on a known pair)
    b = lambda s: int(hashlib.md5(s.encode()).hexdigest()[:8], 16) % 100
    names = [f"pkg/mod{i}.py" for i in range(400)]
    assert {split_of(n) for n in names if b(n) < 90} == {"train"}
    assert {split_of(n) for n in names if 90 <= b(n) < 95} == {"validation"}
    assert {split_of(n) for n in names if b(n) >= 95} == {"test"}


def test_corpus_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown split"): stdlib_corpus("valid")
    with pytest.raises(ValueError, match="does not exist"): stdlib_corpus("train", root=tmp_path / "nope")
    with pytest.raises(ValueError, match="no .py files"): stdlib_corpus("train", root=tmp_path)
    with pytest.raises(ValueError, match="unknown split"): corpus_tokens("dev")


def test_corpus_info_counts_match_the_files(small_root):
    info = corpus_info(small_root)
    for s in SPLITS:
        files = stdlib_files(small_root, s) if info["files"][s] else []
        assert info["files"][s] == len(files)
        assert info["bytes"][s] == sum(p.stat().st_size for p in files)


def test_byte_tokenizer_round_trip_and_separators():
    tok = ByteTokenizer()
    text = "def f(x):\n    return x.real  # ünïcödé → ok\n"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8")) and all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text and tok.decode(torch.tensor(ids)) == text
    assert tok.sep_ids == (10, 46) == tok.separator_ids() and tok.separator_ids(("\n",)) == (10,)
    with pytest.raises(ValueError, match="exactly one"): tok.separator_ids(("é",))  # two bytes in UTF-8


def test_encode_documents_joins_with_eot():
    tok = ByteTokenizer()
    docs = stdlib_corpus("validation")[:20]
    t = tok.encode_documents(docs)
    assert t.dtype == torch.long and t.dim() == 1
    assert t.numel() == sum(len(d.encode()) for d in docs) + len(docs) - 1
    assert int((t == tok.eot_id).sum()) == len(docs) - 1  # NUL never occurs in source files
    parts = tok.decode(t).split(chr(tok.eot_id))
    assert parts == docs


def test_corpus_tokens_cached_once(small_root, tmp_path):
    class Counting(ByteTokenizer):
        calls = 0
        def encode_documents(self, docs):
            Counting.calls += 1
            return super().encode_documents(docs)

    tok = Counting()
    a = corpus_tokens("train", tok, root=small_root, cache_dir=tmp_path)
    assert Counting.calls == 1 and len(list(tmp_path.glob("*.safetensors"))) == 1
    assert not list(tmp_path.glob("*.tmp"))  # the atomic write left no temporary file
    b = corpus_tokens("train", tok, root=small_root, cache_dir=tmp_path)
    assert Counting.calls == 1 and torch.equal(a, b) and b.dtype == torch.long
    assert torch.equal(a, ByteTokenizer().encode_documents(stdlib_corpus("train", small_root)))
    # another split is another cache entry; a changed file invalidates the key
    corpus_tokens("validation", tok, root=small_root, cache_dir=tmp_path)
    assert Counting.calls == 2
    f = stdlib_files(small_root, "train")[0]
    f.write_text(f.read_text() + "\n# edited\n")
    c = corpus_tokens("train", tok, root=small_root, cache_dir=tmp_path)
    assert Counting.calls == 3 and c.numel() == a.numel() + len("\n# edited\n")


def test_corrupt_cache_entry_is_rebuilt(small_root, tmp_path):
    a = corpus_tokens("test", root=small_root, cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.safetensors")
    entry.write_bytes(b"garbage")
    with pytest.warns(DataWarning, match="failed its check .*not a readable safetensors file.*rebuilding it"):
        assert torch.equal(corpus_tokens("test", root=small_root, cache_dir=tmp_path), a)


def flip_token_bytes(entry, n=2000):
    "Flip `n` bytes inside the token array (the tail of the file): the file still parses."
    data = bytearray(entry.read_bytes())
    for i in range(len(data) - n, len(data)): data[i] ^= 0x01
    entry.write_bytes(bytes(data))


def test_cache_checksum_catches_flipped_tokens(small_root, tmp_path):
    a = corpus_tokens("train", root=small_root, cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.safetensors")
    assert torch.equal(read_token_cache(entry), a)
    flip_token_bytes(entry)
    from safetensors.torch import load
    assert not torch.equal(load(entry.read_bytes())["tokens"].long(), a)     # parses, but the tokens are wrong
    with pytest.raises(ValueError, match="SHA-256 does not match"): read_token_cache(entry)
    with pytest.warns(DataWarning, match="SHA-256 does not match the tokens\\); rebuilding it"):
        b = corpus_tokens("train", root=small_root, cache_dir=tmp_path)
    assert torch.equal(a, b) and torch.equal(read_token_cache(entry), a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                      # a good entry is read silently
        corpus_tokens("train", root=small_root, cache_dir=tmp_path)
    # an entry written before checksums existed is rebuilt too
    from safetensors.torch import save
    entry.write_bytes(save({"tokens": a.to(torch.uint8)}))
    with pytest.warns(DataWarning, match="no lengthx-tokens/2 checksum"):
        corpus_tokens("train", root=small_root, cache_dir=tmp_path)


def test_cache_that_cannot_be_written_is_a_warning_not_a_failure(small_root, tmp_path, monkeypatch):
    import errno
    import lengthx.data as D
    def full(path, data): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(D, "atomic_write_bytes", full)
    with pytest.warns(DataWarning, match="could not write the token cache .*No space left on device.*continuing without it"):
        t = corpus_tokens("test", root=small_root, cache_dir=tmp_path)
    assert t.numel() > 0 and not list(tmp_path.iterdir())


def test_cache_dir_that_is_a_file_is_a_one_line_error(small_root, tmp_path, monkeypatch):
    f = tmp_path / "afile"; f.write_text("x")
    monkeypatch.setenv("LENGTHX_CACHE", str(f))
    with pytest.raises(ValueError, match=rf"^LENGTHX_CACHE '{f}' is not a directory \('{f}' is a file\); point it at a directory"):
        corpus_tokens("test", root=small_root)
    monkeypatch.setenv("LENGTHX_CACHE", str(f / "sub"))
    with pytest.raises(ValueError, match="is not a directory"): default_cache_dir()
    with pytest.raises(ValueError, match="cache_dir .* is not a directory"): corpus_tokens("test", root=small_root, cache_dir=f)


def test_nul_inside_a_document_is_refused_not_read_as_end_of_text():
    tok = ByteTokenizer()
    with pytest.raises(ValueError, match=r"^document 1 contains a NUL byte \(at byte 3\), which ByteTokenizer reserves as its end-of-text token"):
        tok.encode_documents(["fine", "abc\x00def"])
    with pytest.raises(ValueError, match="NUL"): encode_corpus(["\x00"])
    assert tok.encode("a\x00b") == [97, 0, 98]          # plain encode stays lossless; only documents are checked


def test_invalid_utf8_is_counted_and_reported(tmp_path):
    assert decode_utf8("ok \ufffd".encode()) == ("ok \ufffd", 0)          # a real U+FFFD is not a replacement
    text, n = decode_utf8(b"a\xffb\xc3(c")
    assert n == 2 and text == "a\ufffdb\ufffd(c"
    (tmp_path / "a.txt").write_bytes(b"caf\xe9\n")              # Latin-1, not UTF-8
    (tmp_path / "b.txt").write_text("fine\n")
    with pytest.warns(DataWarning, match=r"^1 invalid UTF-8 sequences in 1 file\(s\) \(first: '.*a\.txt'\) were replaced by U\+FFFD"):
        docs = text_file_corpus(tmp_path)
    assert docs == ["caf\ufffd\n", "fine\n"]
    with pytest.raises(ValueError, match=r"a\.txt' is not valid UTF-8 \(byte 3: b'\\xe9\\n'\); fix the file or pass errors='replace'"):
        text_file_corpus(tmp_path, errors="strict")
    with pytest.raises(ValueError, match="errors must be"): text_file_corpus(tmp_path, errors="ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text_file_corpus(tmp_path / "b.txt") == ["fine\n"]             # valid text: no warning


def test_cache_dir_from_environment(small_root, tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHX_CACHE", str(tmp_path / "c"))
    corpus_tokens("validation", root=small_root)
    assert len(list((tmp_path / "c").glob("*validation-bytes*.safetensors"))) == 1


def test_get_batch_windows_are_contiguous_and_shifted():
    tokens = torch.arange(1000)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(tokens, 32, 50, g)
    assert x.shape == y.shape == (32, 50) and x.dtype == torch.long
    assert torch.equal(y, x + 1) and torch.equal(x[:, 1:] - x[:, :-1], torch.ones(32, 49, dtype=torch.long))
    assert int(x.min()) >= 0 and int(y.max()) <= 999 and len(set(x[:, 0].tolist())) > 16
    x, y = get_batch(torch.arange(11), 4, 10, g)  # exactly one possible window
    assert torch.equal(x, torch.arange(10).expand(4, 10))
    with pytest.raises(ValueError, match="too few"): get_batch(torch.arange(10), 4, 10, g)
    with pytest.raises(ValueError, match="1-D"): get_batch(torch.zeros(2, 100), 4, 10, g)


def test_batch_at_depends_only_on_seed_and_step():
    tokens = torch.arange(100_000)
    a = batch_at(tokens, 7, 8, 16, seed=3)
    torch.manual_seed(123); get_batch(tokens, 5, 5)  # unrelated randomness in between
    assert torch.equal(batch_at(tokens, 7, 8, 16, seed=3)[0], a[0])
    assert not torch.equal(batch_at(tokens, 8, 8, 16, seed=3)[0], a[0])
    assert not torch.equal(batch_at(tokens, 7, 8, 16, seed=4)[0], a[0])


def test_text_file_corpus(tmp_path):
    (tmp_path / "a.txt").write_text("hello.\nworld\n")
    (tmp_path / "sub").mkdir(); (tmp_path / "sub" / "b.md").write_text("# B\n")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    (tmp_path / "empty.txt").write_text("")
    assert text_file_corpus(tmp_path) == ["hello.\nworld\n", "# B\n"]
    assert text_file_corpus([tmp_path / "sub" / "b.md"]) == ["# B\n"]
    t = encode_corpus(text_file_corpus(tmp_path))
    assert ByteTokenizer().decode(t) == "hello.\nworld\n\x00# B\n"
    with pytest.raises(FileNotFoundError, match="does not exist"): text_file_corpus(tmp_path / "missing")
    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError, match="no non-empty text files"): text_file_corpus(tmp_path / "e")
    with pytest.raises(ValueError, match="no non-empty text files"): text_file_corpus(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="no documents"): encode_corpus([])


def test_bpe_missing_package_gives_clear_error_or_trains():
    docs = stdlib_corpus("validation")[:30]
    try:
        import tokenizers  # noqa: F401  (optional extra)
    except ImportError:
        with pytest.raises(ImportError, match="pip install tokenizers"): BPETokenizer.train(docs, vocab_size=300)
        return
    tok = BPETokenizer.train(docs, vocab_size=400)
    assert tok.vocab_size == 400 and tok.decode(tok.encode(docs[0])) == docs[0]
    assert len(tok.encode(docs[0])) < len(docs[0].encode())  # merges shorten the sequence
    t = tok.encode_documents(docs[:3])
    assert int((t == tok.eot_id).sum()) == 2 and set(tok.encode("\n") + tok.encode(".")) <= set(tok.sep_ids)
    assert tok.encode("<|endoftext|>") == [tok.eot_id]           # the collision a document could cause
    with pytest.raises(ValueError, match="document 1 contains the literal text '<\\|endoftext\\|>'"):
        tok.encode_documents(["a", "x <|endoftext|> y"])


def test_bpe_sep_ids_cover_every_newline_and_full_stop():
    "BiPE segments at every '\\n' and '.': with byte-level BPE they sit inside merged tokens ('\\n    ', '._'), which sep_ids must list."
    pytest.importorskip("tokenizers")
    docs = stdlib_corpus("validation")[:30]
    tok = BPETokenizer.train(docs, vocab_size=600)
    sep = set(tok.sep_ids)
    assert tok.encode("\n") == [min(i for i in sep if tok.decode([i]) == "\n")]     # the bare separators are listed too
    assert any(tok.decode([i]) not in ("\n", ".") for i in sep)                    # merged ones exist in code
    for d in docs[:10]:
        enc = tok.tok.encode(d)
        for i, (a, b) in zip(enc.ids, enc.offsets):
            assert (i in sep) == any(c in d[a:b] for c in "\n."), (d[a:b], i in sep)   # exactly the tokens holding one
    assert tok.eot_id not in sep and tok.separator_ids(("\n",)) != tok.sep_ids


def test_corpus_split_caps_a_hub_corpus(monkeypatch):
    "A command's `--corpus pg19|github|arxiv` streams at most `HF_MAX_BYTES`, never the whole corpus."
    import lengthx.data as D
    calls = []
    monkeypatch.setattr(D, "_import_datasets", lambda: None)           # check_corpus needs `datasets` only to exist
    monkeypatch.setattr(D, "hf_tokens", lambda corpus, split, tokenizer=None, **kw: calls.append((corpus, split, kw)) or
                        torch.zeros(3, dtype=torch.long))
    for name in ("pg19", "github", "arxiv"):
        D.corpus_split(name, "train")
    D.corpus_split("pg19", "test", max_bytes=1000)
    assert 0 < D.HF_MAX_BYTES < 10**12
    assert [kw.get("max_bytes") for *_, kw in calls] == [D.HF_MAX_BYTES] * 3 + [1000]
    assert [(c, s) for c, s, _ in calls] == [("pg19", "train"), ("github", "train"), ("arxiv", "train"), ("pg19", "test")]
