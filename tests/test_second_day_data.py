"""A user's second day with their own data (issue #59): a corpus file edited in place is prepared
again (its new tokens, a new data_sha256), not read stale from the cache; a bad --poetry-file is one
line naming the file and its line; bytes of a text:FOLDER file that are not UTF-8 are replaced and said."""
import gzip
import hashlib
import json
import re
import time

import numpy as np
import pytest

import data
import data.common as common
import train
from conftest import write_paragraphs
from flags import parse_args
from test_errors import one_line_error
from test_train import TINY


def write_poetry(path, books=40, lines=5, word="verse", gz=True):
    """A small Gutenberg-Poetry-like ndjson file: `books` books of `lines` lines each."""
    rows = "".join(json.dumps({"s": f"Line {i} of the {word} of book {g}", "gid": str(g)}) + "\n"
                   for g in range(books) for i in range(lines))
    path.write_bytes(gzip.compress(rows.encode()) if gz else rows.encode())
    return path


def edit_in_place(path, old, new):
    """Replace bytes old by new (of the same length) in the file itself: its size is kept."""
    assert len(old) == len(new)
    content = path.read_bytes()
    assert old in content
    with open(path, "r+b") as f:
        f.write(content.replace(old, new))


def test_a_text_folder_edited_in_place_trains_on_the_new_text(cache, tmp_path):
    folder = write_paragraphs(tmp_path / "texts")
    first = train.run(parse_args(["--stages", f"text:{folder}", "--iters", "2", "--out", str(tmp_path / "a")] + TINY))
    for f in folder.iterdir():
        edit_in_place(f, b"river", b"otter")
    second = train.run(parse_args(["--stages", f"text:{folder}", "--iters", "2", "--out", str(tmp_path / "b")] + TINY))
    corpus = data.load(f"text:{folder}")
    seen = corpus.decode(np.concatenate([corpus.train, corpus.val]).tolist())
    assert "otter" in seen and "river" not in seen
    assert second["stages"][0]["data_sha256"] != first["stages"][0]["data_sha256"]
    assert second["stages"][0]["data_sha256"] == {f: hashlib.sha256(np.asarray(a).tobytes()).hexdigest()
                                                  for f, a in (("train.bin", corpus.train), ("val.bin", corpus.val))}


def test_a_poetry_file_edited_in_place_is_prepared_again(cache, tmp_path):
    path = write_poetry(tmp_path / "poems.ndjson.gz", word="verse")
    before = data.load("poetry", poetry_file=str(path))
    write_poetry(path, word="psalm")
    after = data.load("poetry", poetry_file=str(path))
    assert "psalm" in after.decode(after.train.tolist()) and "verse" not in after.decode(after.train.tolist())
    assert after.info["sha256"] != before.info["sha256"]
    assert after.info["source_sha256"] == common.sha256_of(path) != before.info["source_sha256"]


def test_a_remembered_hash_is_reused_and_a_same_size_edit_still_caught(cache, tmp_path, monkeypatch):
    """A file's sha256 is read again only when its size, times or inode change; older than RACY_NS, its
    hash is remembered (so a second load reads nothing), and an edit that keeps the size is still seen."""
    folder = write_paragraphs(tmp_path / "texts")
    time.sleep(common.RACY_NS / 1e9 + 0.2)
    data.load(f"text:{folder}")
    reread = []
    monkeypatch.setattr(common, "sha256_of", lambda p, sha=common.sha256_of: reread.append(p) or sha(p))
    data.load(f"text:{folder}")
    assert reread == []
    edit_in_place(folder / "part1.txt", b"quiet", b"noisy")
    corpus = data.load(f"text:{folder}")
    assert [p.name for p in reread if p.suffix == ".txt"] == ["part1.txt"]  # (and the new corpus's .bin files)
    assert "noisy" in corpus.decode(np.concatenate([corpus.train, corpus.val]).tolist())


def test_wikitext_from_a_data_dir_is_keyed_by_its_content(cache, tmp_path):
    (tmp_path / "wiki.train.raw").write_text(" = Alpha = \n\n The river runs .\n" * 50)
    (tmp_path / "wiki.valid.raw").write_text(" = Beta = \n\n The hill sleeps .\n" * 5)
    before = data.load("wikitext2", data_dir=str(tmp_path))
    edit_in_place(tmp_path / "wiki.train.raw", b"river", b"otter")
    after = data.load("wikitext2", data_dir=str(tmp_path))
    assert "otter" in after.decode(after.train.tolist()) and after.info["sha256"] != before.info["sha256"]


def test_plain_ndjson_is_read_like_the_gzip_one(cache, tmp_path):
    gz = data.load("poetry", poetry_file=str(write_poetry(tmp_path / "a.ndjson.gz")))
    plain = data.load("poetry", poetry_file=str(write_poetry(tmp_path / "b.ndjson", gz=False)))
    named_gz = data.load("poetry", poetry_file=str(write_poetry(tmp_path / "c.ndjson.gz", gz=False)))
    for c in (plain, named_gz):
        assert np.array_equal(c.train, gz.train) and np.array_equal(c.val, gz.val)


GOOD = json.dumps({"s": "A line of verse", "gid": "1"}) + "\n"
OTHER = json.dumps({"s": "Another line", "gid": "2"}) + "\n"
POETRY_CASES = [  # (id, the file's bytes, gzip it, words the one line must hold besides the file's name)
    ("no gid", GOOD + OTHER + '{"s": "a line"}\n', True, ["line 3", "'gid'", '"gid"']),
    ("no s", GOOD + '{"gid": "7"}\n', True, ["line 2", "'s'"]),
    ("not JSON", GOOD + OTHER + "\n" + '{"s": "cut short", "gid": "3"\n', True, ["line 4", "not JSON", "column 30"]),
    ("latin-1", (GOOD + '{"s": "caf\xe9", "gid": "4"}\n').encode("latin-1"), True, ["line 2", "0xe9", "UTF-8"]),
    ("s a number", GOOD + OTHER + GOOD + '{"s": 12, "gid": "5"}\n', True, ["line 4", "'s'", "not a string"]),
    ("an array row", GOOD + '["A line", "1"]\n', True, ["line 2", "not an object"]),
    ("gid a list", GOOD + '{"s": "x", "gid": [1]}\n', True, ["line 2", "'gid'"]),
    ("not gzip, not ndjson", b"PK\x03\x04 a zip file, not poetry", False,
     ["line 1", "not gzip-compressed, so it was read as plain ndjson"]),
    ("one book", GOOD * 3, True, ["3 rows of 1 book", "two books"]),
]


@pytest.mark.parametrize("content,gz,words", [c[1:] for c in POETRY_CASES], ids=[c[0] for c in POETRY_CASES])
def test_a_bad_poetry_file_is_one_line_naming_it_and_its_line(content, gz, words, capsys, cache, tmp_path):
    path = tmp_path / "poems.ndjson.gz"
    raw = content.encode() if isinstance(content, str) else content
    path.write_bytes(gzip.compress(raw) if gz else raw)
    code, lines = one_line_error(capsys, train.main, poetry_argv(path, tmp_path))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and f"--poetry-file {path}" in lines[0] and "give " in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_a_damaged_gzip_poetry_file_names_the_line_it_stops_at(capsys, cache, tmp_path):
    rows = "".join(json.dumps({"s": hashlib.sha256(str(i).encode()).hexdigest(), "gid": str(i % 50)}) + "\n"
                   for i in range(2000))
    path = tmp_path / "poems.ndjson.gz"
    whole = gzip.compress(rows.encode())
    path.write_bytes(whole[:len(whole) // 2])  # cut short: the second half is lost
    code, lines = one_line_error(capsys, train.main, poetry_argv(path, tmp_path))
    assert code == 2 and len(lines) == 1, lines
    assert f"--poetry-file {path}, line " in lines[0] and "damaged" in lines[0] and "download it again" in lines[0]
    assert 1 < int(re.search(r", line (\d+):", lines[0]).group(1)) < 2000


def test_a_folder_as_poetry_file_is_one_line(capsys, cache, tmp_path):
    code, lines = one_line_error(capsys, train.main, poetry_argv(tmp_path, tmp_path))
    assert code == 2 and len(lines) == 1 and f"--poetry-file {tmp_path}: not a file" in lines[0], lines


def poetry_argv(path, tmp_path):
    return ["--stages", "poetry", "--poetry-file", str(path), "--iters", "1", "--n-layer", "1", "--n-embd", "16",
            "--n-head", "2", "--block-size", "16", "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "out")]


def test_bytes_not_utf8_in_a_text_folder_are_replaced_and_said_once(cache, tmp_path, capsys):
    folder = write_paragraphs(tmp_path / "texts")
    with open(folder / "part1.txt", "ab") as f:
        f.write("\n\nCaf\xe9 au lait on the hill.\n\nA na\xefve song, and a \xe9clair.\n".encode("latin-1"))
    capsys.readouterr()
    corpus = data.load(f"text:{folder}")
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip() and "doc/s]" not in l]
    assert len(err) == 1 and "part1.txt (3 bytes on 2 lines)" in err[0] and "part0.txt" not in err[0], err
    assert "not UTF-8" in err[0] and "U+FFFD" in err[0] and "save the files as UTF-8" in err[0]
    assert "Caf\ufffd au lait" in corpus.decode(np.concatenate([corpus.train, corpus.val]).tolist())
    assert corpus.info["not_utf8_bytes_replaced"] == {"part1.txt": 3}
    data.load(f"text:{folder}")  # prepared already: nothing is said again
    assert capsys.readouterr().err == ""


def test_crlf_text_reads_as_lf_text(cache, tmp_path):
    lf = write_paragraphs(tmp_path / "lf")
    crlf = write_paragraphs(tmp_path / "crlf")
    for f in crlf.iterdir():
        f.write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
    a, b = data.load(f"text:{lf}"), data.load(f"text:{crlf}")
    assert a.info["documents"] == b.info["documents"] and np.array_equal(a.train, b.train)
