import gzip
import json

import numpy as np
import pytest

import data
import data.text as text
from data.common import read_manifest, split_is_val


def test_gpt2_tokenizer_works_offline(cache, no_network, monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-tiktoken-cache"))
    monkeypatch.setattr(text, "_ENCODING", None)
    enc = text.gpt2_encoding(cache)
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.n_vocab == 50257 and enc.eot_token == 50256
    assert enc.decode(enc.encode("Listen and chant before you read.")) == "Listen and chant before you read."


def test_text_folder_corpus_round_trip_and_cache(cache, text_dir, monkeypatch):
    c = data.load(f"text:{text_dir}")
    assert c.vocab_size == 50257 and c.train.dtype == np.uint16
    assert len(c.train) > 0 and len(c.val) > 0
    assert c.info["train_tokens"] == len(c.train)
    decoded = c.decode(c.train.tolist())
    assert "river" in decoded and "<|endoftext|>" in decoded
    # a second load reuses the prepared tokens: tokenizing again would fail here
    monkeypatch.setattr(text, "tokenize_documents", lambda *a, **k: pytest.fail("prepared twice"))
    again = data.load(f"text:{text_dir}")
    assert np.array_equal(again.train, c.train)


def test_unfinished_preparation_is_redone(cache, text_dir):
    before = np.array(data.load(f"text:{text_dir}").train)
    folder = next((cache / "corpora").iterdir())
    (folder / "manifest.json").unlink()          # as if the process died before the manifest
    (folder / "train.bin").write_bytes(b"\x00\x01")  # and left a half file behind
    assert read_manifest(folder) is None
    again = data.load(f"text:{text_dir}")
    assert np.array_equal(again.train, before)
    assert not list(folder.glob(".*tmp*"))


def test_split_is_deterministic_by_document():
    keys = [f"doc{i}" for i in range(20000)]
    first = [split_is_val(k, 5.0) for k in keys]
    assert first == [split_is_val(k, 5.0) for k in reversed(keys)][::-1]
    assert 0.04 < np.mean(first) < 0.06
    assert not any(split_is_val(k, 0.0) for k in keys)


def test_poetry_loader_reads_the_official_ndjson(cache, tmp_path):
    path = tmp_path / "gutenberg-poetry-v001.ndjson.gz"
    with gzip.open(path, "wt") as f:
        for gid in range(400):
            for line in range(5):
                f.write(json.dumps({"s": f"Line {line} of the book number {gid}", "gid": str(gid)}) + "\n")
    c = data.load("poetry", poetry_file=str(path))
    assert c.info["documents"] == 400 and c.info["lines"] == 2000
    n_val_books = sum(split_is_val(str(g), 0.5) for g in range(400))
    assert c.decode(c.val.tolist()).count("<|endoftext|>") == n_val_books
    capped = data.load("poetry", poetry_file=str(path), poetry_lines=1000)
    assert capped.info["lines"] == 1000 and len(capped.train) + len(capped.val) < len(c.train) + len(c.val)


def test_unknown_stage_lists_the_valid_ones():
    with pytest.raises(ValueError) as e:
        data.load("poetryy")
    msg = str(e.value)
    assert "poetryy" in msg and "poetry" in msg and "prose" in msg and "text:PATH" in msg


def test_missing_text_folder_says_what_to_do(cache, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        data.load(f"text:{tmp_path / 'nothing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .txt files"):
        data.load(f"text:{tmp_path / 'empty'}")
