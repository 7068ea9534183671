"""
Music for the ladder's first stage: real MIDI sources and synthetic music, as corpora of the
160-token event vocabulary of data/midi.py. "Listen and Chant Before You Read" (arXiv
2604.21265), its stage 1: the paper's music is MAESTRO piano performances, and its controls
include synthetic (algorithmic) music in the same vocabulary and 12k vs 36k music chunks.

Sources: maestro_files / download_maestro (MAESTRO v3, the paper's data), midi_folder_files
(any folder of .mid), music21_corpus_to_midi (the offline default: the music21 wheel's
corpus, converted to MIDI in child processes with a time limit per piece), and synthetic()
(algorithmic music in the same vocabulary: the paper's real-versus-synthetic control).
load_music and load_music_synthetic are the `music` and `music-synthetic` stages.
"""

import csv
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections import deque
from pathlib import Path

import numpy as np

from .midi import Note, decode, encode_files, notes_to_tokens, piece_stream
from .midi import BOS, EOS, PAD, VOCAB_SIZE, encode  # noqa: F401  (re-exported: the stage's vocabulary)

# ----------------------------------------------------------------------------- synthetic music

_MAJOR = (0, 2, 4, 5, 7, 9, 11)
_MINOR = (0, 2, 3, 5, 7, 8, 11)        # harmonic minor
_PROGRESSIONS = ((0, 3, 4, 0), (0, 5, 3, 4), (1, 4, 0, 0), (0, 4, 5, 3), (0, 3, 0, 4),
                 (5, 1, 4, 0), (0, 5, 1, 4))          # scale degrees of the chord roots, one a bar
_RHYTHMS = ((1.0,), (0.5, 0.5), (0.75, 0.25), (0.25,) * 4, (1 / 3,) * 3, (0.5, 0.25, 0.25),
            (0.25, 0.25, 0.5))                         # one beat each, in beats
_TEXTURES = ("scale", "arpeggio", "alberti", "chorale", "walk")


def _synthetic_piece(rng, seconds):
    """Notes of one algorithmic piece: a key, a tempo and a meter; 4-bar sections, each a chord
    progression with a texture (scale runs, arpeggios, Alberti bass, chorale, random walk) and
    a crescendo or diminuendo, downbeat accents, optional human timing jitter."""
    scale = _MAJOR if rng.random() < 0.6 else _MINOR
    tonic = 48 + int(rng.integers(12))                 # C3..B3
    beat = 60.0 / rng.uniform(60, 160)
    meter = int(rng.choice([2, 3, 4]))
    jitter = float(rng.choice([0.0, 0.004, 0.008]))    # s.d. of timing noise, seconds
    target = rng.uniform(*seconds)
    notes = []

    def pitch(degree, octave=0):
        return tonic + 12 * (octave + degree // 7) + scale[degree % 7]

    def add(t, dur, p, v):
        dt = rng.normal(0.0, jitter) if jitter else 0.0
        notes.append(Note(max(0.0, t + dt), max(0.0, t + dt) + dur, int(p), int(np.clip(v, 1, 127))))

    t, mel, direction = 0.0, 14, 1                     # melody as a scale degree above the tonic
    while t < target:
        prog = _PROGRESSIONS[rng.integers(len(_PROGRESSIONS))]
        texture = _TEXTURES[rng.integers(len(_TEXTURES))]
        v0, v1 = rng.integers(35, 110, size=2)         # the section's dynamic arc
        n_beats = len(prog) * meter
        for b, root in enumerate(prog):
            chord = (root, root + 2, root + 4)
            for k in range(meter):
                tb, i = t + (b * meter + k) * beat, b * meter + k
                vel = v0 + (v1 - v0) * i / n_beats + (12 if k == 0 else 0)
                # accompaniment
                if texture in ("scale", "walk") and k == 0:
                    for d in chord:
                        add(tb, meter * beat * 0.95, pitch(d), vel - 15)
                elif texture == "arpeggio" and k == 0:
                    add(tb, meter * beat, pitch(root, -1), vel - 10)
                elif texture == "alberti":
                    for j, d in enumerate((chord[0], chord[2], chord[1], chord[2])):
                        add(tb + j * beat / 4, beat / 4 * 0.9, pitch(d), vel - 20)
                elif texture == "chorale":
                    for d in chord:
                        add(tb, beat * 0.9, pitch(d), vel - 10)
                    add(tb, beat * 0.9, pitch(root, -1), vel - 10)
                # melody: one rhythm pattern per beat
                pattern = _RHYTHMS[0] if texture == "chorale" else _RHYTHMS[rng.integers(len(_RHYTHMS))]
                off = 0.0
                for frac in pattern:
                    if texture == "scale":
                        mel += direction
                    elif texture == "arpeggio":            # step to the next chord tone
                        mel += direction
                        while (mel - root) % 7 not in (0, 2, 4):
                            mel += direction
                    else:                                  # random walk, pulled to chord tones
                        mel += int(rng.choice([-2, -1, -1, 0, 1, 1, 2]))
                        if off == 0.0 and (mel - root) % 7 not in (0, 2, 4) and rng.random() < 0.6:
                            mel += 1
                    if mel > 24 or mel < 9:
                        direction = -1 if mel > 24 else 1
                        mel = min(24, max(9, mel))
                    add(tb + off * beat, frac * beat * rng.uniform(0.6, 1.0), pitch(mel),
                        vel + int(rng.integers(-4, 5)))
                    off += frac
        t += n_beats * beat
    return notes


def synthetic(n_pieces=None, seed=0, n_tokens=None, seconds=(20.0, 60.0)):
    """Algorithmic pieces in the music vocabulary, through the same note -> token path as real
    music. Give n_pieces, or n_tokens (pieces are made until their total reaches it).
    Deterministic: piece i depends only on (seed, i)."""
    if (n_pieces is None) == (n_tokens is None):
        raise ValueError("give exactly one of n_pieces and n_tokens")
    out, total = [], 0
    while (n_pieces is not None and len(out) < n_pieces) or (n_tokens is not None and total < n_tokens):
        rng = np.random.default_rng([seed, len(out)])
        out.append(notes_to_tokens(_synthetic_piece(rng, seconds)))
        total += len(out[-1])
    return out


# ----------------------------------------------------------------------------- real sources

MAESTRO_URL = "https://storage.googleapis.com/magentadata/datasets/maestro/v3.0.0/maestro-v3.0.0-midi.zip"
MAESTRO_SPLITS = ("train", "validation", "test")


def midi_folder_files(root):
    """Every .mid / .midi file under root (recursive, any case), sorted."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in (".mid", ".midi") and p.is_file())


def _maestro_csv(root):
    root = Path(root)
    for folder in (root, root / "maestro-v3.0.0"):
        found = sorted(folder.glob("maestro-v*.csv")) if folder.is_dir() else []
        if found:
            return found[-1]
    raise FileNotFoundError(f"no maestro-v*.csv in {root} (or {root / 'maestro-v3.0.0'})")


def maestro_files(root, split=None):
    """MIDI paths of a local MAESTRO folder, in the dataset's own train/validation/test split
    (its CSV: canonical_composer, canonical_title, split, midi_filename, ...); split=None: all."""
    if split is not None and split not in MAESTRO_SPLITS:
        raise ValueError(f"split must be one of {MAESTRO_SPLITS} or None, not {split!r}")
    csv_path = _maestro_csv(root)
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    paths = [csv_path.parent / r["midi_filename"] for r in rows if split is None or r["split"] == split]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} MAESTRO files listed in {csv_path.name} are missing, e.g. {missing[0]}")
    return paths


def _unpack_maestro_zip(zpath, dest):
    """Unpack a local copy of the official MAESTRO zip once; returns the folder with the CSV."""
    root = dest / zpath.stem
    if not any(root.glob("*/maestro-v*.csv")) and not any(root.glob("maestro-v*.csv")):
        tmp = dest / f".unzip-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(zpath) as z:
            z.extractall(tmp)
        dest.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, root)
    return root


def download_maestro(dest):
    """Download and unpack the official MAESTRO v3 MIDI zip (~57 MB; needs internet) into
    dest; returns the folder holding maestro-v3.0.0.csv. Done once: a finished folder is reused."""
    from .common import download
    dest = Path(dest)
    root = dest / "maestro-v3.0.0"
    if (root / "maestro-v3.0.0.csv").is_file():
        return root
    zpath = download(MAESTRO_URL, dest / "maestro-v3.0.0-midi.zip",
                     "without a network, give --music-dir a copy of maestro-v3.0.0-midi.zip or its unpacked "
                     "maestro-v3.0.0/ folder, or leave out --music-dir: the default is the music21 corpus, from PyPI")
    tmp = dest / f".unzip-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(zpath) as z:
        z.extractall(tmp)
    os.replace(tmp / "maestro-v3.0.0", root)   # the csv is inside, so "finished" means complete
    shutil.rmtree(tmp, ignore_errors=True)
    return root


# ----------------------------------------------------------------------------- music21 corpus

# Default selection (music21 10.5.1), measured on a busy 2-core CPU with the defaults below:
#   composer    pieces (converted)  notes    tokens     hours of music  conversion
#   bach        413 (412)           117,871  308,499     3.9            176 s
#   palestrina  1318 (1318)         650,841  1,622,271  66.4            770 s
#   monteverdi  49 (49)             39,160   102,500     2.4             40 s
#   haydn       9 (7)               16,062   45,218      0.5             17 s
#   mozart      16 (14)             32,194   92,258      1.0             31 s
#   beethoven   26 (19)             86,249   247,599     2.9            352 s (4 time-outs)
#   total       1831 (1819)         942,377  2,418,345  77.1            ~23 min
# Failures are music21's (badly formed repeats) or time-outs. rntxt files (roman numeral
# analyses) and abc files (many tunes per file) are left out.
MUSIC21_COMPOSERS = ("bach", "palestrina", "monteverdi", "haydn", "mozart", "beethoven")
MUSIC21_EXTENSIONS = (".mxl", ".xml", ".musicxml", ".krn")

# The child process: puts the unpacked wheel (and any dependency folders) on sys.path, imports
# music21 once, then converts one score per line of stdin and answers one JSON line each.
_WORKER = r"""
import json, os, sys, time
for p in reversed(json.loads(sys.argv[1])):
    sys.path.insert(0, p)
reply, sys.stdout = sys.stdout, sys.stderr     # music21 may print: keep the protocol clean
def say(obj):
    reply.write(json.dumps(obj) + "\n"); reply.flush()
try:
    import music21
    from music21 import converter
except Exception as e:
    say({"ready": False, "error": "%s: %s" % (type(e).__name__, e)}); sys.exit(1)
say({"ready": True, "version": music21.__version__})
for line in sys.stdin:
    job, t0 = json.loads(line), time.time()
    tmp = job["dst"] + ".tmp-%d" % os.getpid()
    try:
        converter.parse(job["src"], forceSource=True).write("midi", fp=tmp)
        os.replace(tmp, job["dst"])
        out = {"ok": True}
    except Exception as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        out = {"ok": False, "error": "%s: %s" % (type(e).__name__, str(e)[:300])}
    out["seconds"] = time.time() - t0
    say(out)
"""


_STARTUP_SECONDS = 300     # importing music21 takes ~1.5 s; this only catches a hung import


class _Music21Worker:
    """One child process running _WORKER; a thread forwards its replies to a shared queue."""

    def __init__(self, sys_paths, replies):
        self.job, self.started, self.ready, self.dead = None, None, False, False
        self.born = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(sys_paths)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        threading.Thread(target=self._pump, args=(replies,), daemon=True).start()

    def _pump(self, replies):
        with self.proc.stdout:
            for line in self.proc.stdout:
                replies.put((self, json.loads(line)))
        replies.put((self, None))   # end of output: the process is gone

    def send(self, job):
        self.job, self.started = job, (time.monotonic() if self.ready else None)
        try:
            self.proc.stdin.write(json.dumps({"src": str(job[0]), "dst": str(job[1])}) + "\n")
            self.proc.stdin.flush()
        except OSError:   # it died: its end-of-output message is on the way
            pass

    def kill(self):
        self.dead = True
        self.proc.kill()
        self.proc.wait()
        self._close_stdin()

    def close(self):
        self.dead = True
        self._close_stdin()   # the worker's loop ends at end of input
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def _close_stdin(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass


def music21_root(wheel_path):
    """The folder to put on sys.path for music21: wheel_path itself if it is an unpacked
    folder, else the wheel (a zip) unpacked once next to it (music21's corpus lists folders,
    which it cannot do inside a zip)."""
    wheel_path = Path(wheel_path)
    if wheel_path.is_dir():
        return wheel_path
    root = wheel_path.with_suffix("")           # music21-10.5.1-py3-none-any.whl -> ...-any/
    if (root / "music21" / "__init__.py").is_file():
        return root
    tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel_path) as z:
        z.extractall(tmp)
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
    return root


def music21_scores(root, composers=MUSIC21_COMPOSERS, extensions=MUSIC21_EXTENSIONS):
    """(composer-relative path, absolute path) of the corpus scores of the given composers."""
    corpus = Path(root) / "music21" / "corpus"
    out = []
    for c in composers:
        folder = corpus / c
        if not folder.is_dir():
            raise FileNotFoundError(f"no corpus folder {folder} (composer {c!r})")
        out += sorted((p.relative_to(corpus).as_posix(), p) for p in folder.rglob("*")
                      if p.is_file() and p.suffix.lower() in extensions)
    return out


def music21_corpus_to_midi(out_dir, wheel_path, composers=MUSIC21_COMPOSERS, max_seconds_per_piece=60.0,
                           max_pieces=None, progress=True, workers=None, extra_paths=(), retry_failed=False):
    """Convert the music21 wheel's corpus to MIDI files under out_dir (<composer>/<file>.mid),
    the offline default source of real music. Returns stats.

    Each score is converted by music21 (`converter.parse(path).write('midi', fp=...)`) in a
    child process (`workers` of them, default the CPU count) that is killed and replaced when
    a piece takes longer than max_seconds_per_piece. Such a piece is tried once more with 4x the
    limit (a loaded machine must not drop pieces a quiet one keeps); one that times out again,
    and pieces music21 fails on, are counted, recorded in out_dir/failed.json and not retried
    (unless retry_failed).
    Writes go to a temporary name and are renamed; pieces already converted are skipped, so an
    interrupted run resumes. music21 is never imported here: wheel_path is the music21 wheel
    (or its unpacked folder); extra_paths are folders prepended to the child's sys.path (e.g.
    a `pip install --target` folder holding music21's import dependencies)."""
    t_start = time.time()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    root = music21_root(wheel_path)
    scores = music21_scores(root, composers)
    if max_pieces is not None:
        scores = scores[:max_pieces]
    failed_path = out_dir / "failed.json"
    failed = json.loads(failed_path.read_text()) if failed_path.is_file() else {}
    stats = {"pieces": len(scores), "converted": 0, "cached": 0, "failed": 0, "timed_out": 0,
             "known_failures": 0, "retried": 0}
    limit = {}  # rel -> its time limit, once it has timed out at max_seconds_per_piece
    todo = deque()
    for rel, src in scores:
        dst = out_dir / (rel + ".mid")
        if dst.is_file():
            stats["cached"] += 1
        elif rel in failed and not retry_failed:
            stats["known_failures"] += 1
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            todo.append((src, dst, rel))
    bar = None
    if progress and todo:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), desc="music21 -> midi", unit="piece")
    sys_paths = [str(root)] + [str(p) for p in extra_paths]
    replies = queue.Queue()
    n_workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    pids = []

    def spawn():
        w = _Music21Worker(sys_paths, replies)
        pids.append(w.proc.pid)
        return w

    pool = [spawn() for _ in range(n_workers if todo else 0)]

    def finish(w, ok, why=None):
        rel = w.job[2]
        if ok:
            stats["converted"] += 1
            failed.pop(rel, None)
        else:
            failed[rel] = why
        w.job, w.started = None, None
        if bar is not None:
            bar.update(1)

    try:
        while todo or any(w.job for w in pool):
            for w in pool:
                if w.job is None and todo and not w.dead:
                    w.send(todo.popleft())
            try:
                w, msg = replies.get(timeout=0.2)
            except queue.Empty:
                w, msg = None, None
            if w is not None and not w.dead:
                if msg is None or msg.get("ready") is False:
                    why = (msg or {}).get("error", "worker exited")
                    if not w.ready:   # music21 does not import: a setup error, not a bad piece
                        raise RuntimeError(f"music21 could not be imported in the worker ({why}). Its import "
                                           "needs requests, more-itertools and webcolors: pip install them, "
                                           "or pass extra_paths")
                    if w.job:
                        stats["failed"] += 1
                        finish(w, False, "worker died")
                    pool[pool.index(w)] = spawn()
                    w.kill()
                elif msg.get("ready"):
                    w.ready = True
                    if w.job:
                        w.started = time.monotonic()
                elif w.job:
                    if not msg["ok"]:
                        stats["failed"] += 1
                    finish(w, msg["ok"], msg.get("error"))
            now = time.monotonic()
            for i, w in enumerate(pool):
                if not w.ready and now - w.born > _STARTUP_SECONDS:
                    raise RuntimeError(f"music21 worker did not start within {_STARTUP_SECONDS} s")
                rel = w.job and w.job[2]
                if w.job and w.started is not None and now - w.started > limit.get(rel, max_seconds_per_piece):
                    w.kill()
                    if rel in limit:
                        stats["timed_out"] += 1
                        finish(w, False, f"timed out after {max_seconds_per_piece} s and {limit[rel]} s")
                    else:  # once more, alone in a fresh worker, with a longer limit
                        limit[rel], stats["retried"] = 4 * max_seconds_per_piece, stats["retried"] + 1
                        todo.append(w.job)
                    pool[i] = spawn()
    finally:
        for w in pool:
            w.kill() if w.job else w.close()
        for pid in pids:       # nothing half-written is left behind by a killed worker
            for tmp in out_dir.rglob(f"*.mid.tmp-{pid}"):
                tmp.unlink(missing_ok=True)
        tmp = failed_path.with_name(f".failed.json.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(failed, indent=1, sort_keys=True))
        os.replace(tmp, failed_path)
        if bar is not None:
            bar.close()
    stats["seconds"] = round(time.time() - t_start, 2)
    stats["midi_files"] = sum(1 for rel, _ in scores if (out_dir / (rel + ".mid")).is_file())
    return stats


# ----------------------------------------------------------------------------- corpora (stages)

MUSIC21_WHEEL = ("music21", "10.5.1", "dc3309498c4c95cebdf8d4f20c868deb6b63bce1d929cad4f51a7ccc982987b1")
# The default selection converts in a few minutes on 2 cores (~540k tokens); "all" adds
# Palestrina (1,318 masses and motets, ~1.6M tokens) and the Beethoven quartets (~13 min more).
DEFAULT_COMPOSERS = ("bach", "monteverdi", "haydn", "mozart")
VAL_PERCENT = 5.0


def _music_corpus(cache, key, name, build):
    from .common import prepared
    return prepared(cache, key, name, VOCAB_SIZE, "midi-events-160", decode, build)


def _keep_chunks(corpus, music_chunks, block_size, seed):
    """With music_chunks, train on that many whole chunks of block_size + 1 tokens (the paper's
    data-volume control); train.get_batch then draws whole chunks (info["chunk_len"])."""
    if music_chunks:
        from .common import select_chunks
        corpus.train = select_chunks(corpus.train, block_size + 1, music_chunks, seed)
        corpus.info = dict(corpus.info, chunks=music_chunks, chunk_len=block_size + 1)
    return corpus


def _split_pieces(paths, keys, val_of):
    """Encode paths (skipping bad files with a warning) into train/val streams; val_of(key)."""
    train, val, stats = [], [], None
    for is_val in (False, True):
        chosen = [p for p, k in zip(paths, keys) if val_of(k) == is_val]
        lists, s = encode_files(chosen, progress=True)
        (val if is_val else train).extend(lists)
        stats = s if stats is None else {k: stats.get(k, 0) + s.get(k, 0) for k in stats.keys() | s.keys()}
    if not train and not val:
        raise ValueError(f"none of the {stats['files']} MIDI files could be read ({stats['skipped']} skipped as "
                         f"not valid MIDI, {stats['empty']} without notes); give a folder of valid .mid files")
    return piece_stream(train), piece_stream(val), stats


def load_music(cache, music_dir=None, music_composers=None, music_chunks=None, block_size=128,
               seed=0, **_):
    """Real music. music_dir: "maestro" (download the official zip), a local copy of that zip,
    a MAESTRO v3 folder (its CSV's train/validation split) or any
    folder of .mid files (5% of pieces to validation by crc32 of the relative path); default:
    the music21 corpus (composers `music_composers`, default DEFAULT_COMPOSERS, or "all"),
    converted to MIDI once. music_chunks: keep that many training chunks (see select_chunks)."""
    import hashlib
    from .common import fetch_pypi_file, split_is_val
    if music_dir == "maestro":  # the official MAESTRO v3 zip, downloaded once (needs internet)
        music_dir = download_maestro(Path(cache) / "downloads")
    elif music_dir and str(music_dir).endswith(".zip"):  # a local copy of the official zip
        music_dir = _unpack_maestro_zip(Path(music_dir), Path(cache) / "downloads")
    if music_dir:
        root = Path(music_dir).expanduser()
        try:
            csv_path = _maestro_csv(root)
        except FileNotFoundError:
            csv_path = None
        if csv_path is not None:
            def build():
                tr, va = maestro_files(root, "train"), maestro_files(root, "validation")
                keys = [0] * len(tr) + [1] * len(va)
                train, val, stats = _split_pieces(tr + va, keys, bool)
                return train, val, dict(stats, source=f"MAESTRO {csv_path}", split="MAESTRO csv train/validation")
            key = "music-maestro-" + hashlib.sha1(str(csv_path.resolve()).encode()).hexdigest()[:8]
        else:
            files = midi_folder_files(root)
            if not files:
                raise FileNotFoundError(f"{root}: no .mid/.midi files found")

            def build():
                keys = [str(p.relative_to(root)) for p in files]
                train, val, stats = _split_pieces(files, keys, lambda k: split_is_val(k, VAL_PERCENT))
                return train, val, dict(stats, source=str(root.resolve()), split="by file path, 5% validation")
            stamp = repr([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]).encode()
            key = "music-folder-" + hashlib.sha1(stamp).hexdigest()[:12]
    else:
        asked = DEFAULT_COMPOSERS if not music_composers else \
            MUSIC21_COMPOSERS if music_composers == "all" else tuple(c.strip() for c in music_composers.split(","))
        unknown = [c for c in asked if c not in MUSIC21_COMPOSERS]
        if unknown:
            raise ValueError(f"unknown music21 composer(s) {unknown}; choose from {MUSIC21_COMPOSERS} or 'all'")
        composers = tuple(c for c in MUSIC21_COMPOSERS if c in asked)  # one order, no repeats: one cache key

        def build():
            wheel = fetch_pypi_file(*MUSIC21_WHEEL, Path(cache) / "carriers",
                                    instead="give --music-dir a folder of .mid files")
            out = Path(cache) / "music21-midi"
            conv = music21_corpus_to_midi(out, wheel, composers=composers, max_seconds_per_piece=30.0)
            files = [p for c in composers for p in midi_folder_files(out / c)]
            keys = [str(p.relative_to(out)) for p in files]
            train, val, stats = _split_pieces(files, keys, lambda k: split_is_val(k, VAL_PERCENT))
            return train, val, dict(stats, conversion=conv, composers=list(composers),
                                    source=f"PyPI music21=={MUSIC21_WHEEL[1]} corpus, converted to MIDI",
                                    split="by piece path, 5% validation")
        key = "music-music21-" + "-".join(composers)
    corpus = _music_corpus(cache, key, "music", build)
    return _keep_chunks(corpus, music_chunks, block_size, seed)


def load_music_synthetic(cache, synthetic_tokens=600_000, music_chunks=None, block_size=128, seed=0, **_):
    """Algorithmic music in the same vocabulary (the real-vs-synthetic control), deterministic
    by seed: synthetic_tokens tokens of training pieces plus 5% as many validation pieces."""
    def build():
        n_val = max(int(synthetic_tokens * VAL_PERCENT / 100), 2000)
        train = piece_stream(synthetic(n_tokens=synthetic_tokens, seed=seed))
        val = piece_stream(synthetic(n_tokens=n_val, seed=seed + 1_000_000))
        return train, val, {"source": "data.music.synthetic", "seed": seed,
                            "split": "separate pieces drawn with seed + 1,000,000"}
    corpus = _music_corpus(cache, f"music-synthetic-{synthetic_tokens}-seed{seed}", "music-synthetic", build)
    return _keep_chunks(corpus, music_chunks, block_size, seed)
