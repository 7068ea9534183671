"""
MIDI <-> a compact event vocabulary of 160 tokens (mido); real and synthetic music.
Stage 1 of the ladder in "Listen and Chant Before You Read" (arXiv 2604.21265): music is
tokenised into a 160-token event vocabulary (PAPERS.md section 1); the exact layout is ours.

Token layout (VOCAB_SIZE = 160):

    0               PAD
    1               BOS   (piece_stream puts BOS ... EOS around every piece)
    2               EOS
    3   .. 90       NOTE p          88 piano keys, MIDI pitch 21 (A0) .. 108 (C8)
    91  .. 98       VELOCITY b      8 bins of 16 (1-16, 17-32, ..., 113-127); a state:
                                    it applies to every following NOTE until the next one
    99  .. 126      TIME_SHIFT k    advance the clock by SHIFT_BINS[k] quanta of 10 ms:
                                    1..20 quanta (10..200 ms) and 30..100 (300 ms..1 s)
    127 .. 159      DURATION k      the preceding NOTE lasts DURATION_BINS[k] quanta,
                                    33 bins spaced geometrically from 10 ms to 6 s

A piece is a sequence of  [TIME_SHIFT...] [VELOCITY] NOTE DURATION  groups, notes sorted by
(onset, pitch); chords are notes with no TIME_SHIFT between them. Onsets are exact on the
10 ms grid: every onset is quantised in ABSOLUTE time (seconds from the start, through the
whole tempo map) and the shifts are differences of quantised onsets written as a sum of
shift bins (greedy; exact, since 1 is a bin), so the error never exceeds half a quantum and
never accumulates over a long piece. Durations are quantised to the nearest bin in log space
(never past the next onset of the same pitch). Leading silence is dropped.

Our choices for what real files contain (each one counted in the stats dict):
- type 0, 1 and 2 files: all tracks are merged; tempo events from any track form one tempo
  map (ticks -> seconds, exact per segment); SMPTE time division is supported.
- a note-on with velocity 0 is a note-off. Note-offs close the oldest open note of their
  channel and pitch (FIFO), never one that started on the same tick if an older one is open.
- sustain pedal (CC64 >= 64 is down, per channel): a note released while the pedal is down
  keeps sounding until the pedal goes up (or the same pitch is struck again) -- the MAESTRO /
  Magenta convention. `sustain=False` turns this off.
- the drum channel 10 (index 9) is skipped ("drum_notes").
- pitches outside 21..108 are transposed by octaves into the range ("transposed").
- overlapping notes of the same pitch (also across channels and tracks, since everything
  becomes one piano): the earlier note ends where the later one starts ("overlaps"); two
  onsets of one pitch in the same 10 ms quantum become one note, the longer and louder
  ("duplicates"). Notes never closed end at their track's last note event ("unterminated").
- program changes are ignored (everything is piano); notes longer than 6 s are clipped.

decode() writes a type-0 file at 120 bpm with 500 ticks per beat (1 tick = 1 ms), so decoded
onsets are exactly the quantised ones. Sampled (possibly ungrammatical) sequences decode
too: a NOTE not followed by a DURATION is dropped, stray DURATIONs are ignored, PAD and BOS
are ignored, EOS ends the piece.

Sources: maestro_files / download_maestro (MAESTRO v3, the paper's data), midi_folder_files
(any folder of .mid), music21_corpus_to_midi (the offline default: the music21 wheel's
corpus, converted to MIDI in child processes with a time limit per piece), and synthetic()
(algorithmic music in the same vocabulary: the paper's real-versus-synthetic control).
"""

import csv
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import warnings
import zipfile
from collections import deque
from pathlib import Path
from typing import NamedTuple

import mido
import numpy as np

# ----------------------------------------------------------------------------- vocabulary

TIME_QUANTUM = 0.01                     # seconds per quantum
MIN_PITCH, MAX_PITCH = 21, 108          # the 88 piano keys
N_NOTES = MAX_PITCH - MIN_PITCH + 1     # 88
N_VELOCITY = 8                          # velocity bins of 16
SHIFT_BINS = tuple(range(1, 21)) + tuple(range(30, 101, 10))     # quanta; 28 bins, max 1 s
# = np.unique(np.round(np.geomspace(1, 600, 38))): quanta, 10 ms .. 6 s, 33 bins
DURATION_BINS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 19, 22, 27, 32, 38, 45, 53, 63, 75,
                 90, 106, 127, 150, 179, 213, 253, 300, 357, 425, 505, 600)

PAD, BOS, EOS = 0, 1, 2
NOTE_OFFSET = 3
VELOCITY_OFFSET = NOTE_OFFSET + N_NOTES              # 91
SHIFT_OFFSET = VELOCITY_OFFSET + N_VELOCITY          # 99
DURATION_OFFSET = SHIFT_OFFSET + len(SHIFT_BINS)     # 127
VOCAB_SIZE = DURATION_OFFSET + len(DURATION_BINS)    # 160
assert VOCAB_SIZE == 160

DRUM_CHANNEL = 9
DECODE_TICKS_PER_BEAT, DECODE_TEMPO = 500, 500_000   # 1 tick = 1 ms
_TICKS_PER_QUANTUM = 10
_LOG_DURATIONS = np.log(np.array(DURATION_BINS, dtype=np.float64))


class MidiError(ValueError):
    """The file is not valid MIDI (or mido cannot read it)."""


class Note(NamedTuple):
    start: float     # seconds
    end: float       # seconds
    pitch: int       # MIDI pitch 0..127
    velocity: int    # 1..127


def _counter(stats, key, n=1):
    if stats is not None:
        stats[key] = stats.get(key, 0) + n


def velocity_bin(velocity):
    return min(N_VELOCITY - 1, max(0, (int(velocity) - 1) // 16))


def velocity_of_bin(b):
    return 16 * b + 8


# ----------------------------------------------------------------------------- MIDI -> notes

def read_midi(midi):
    """A mido.MidiFile from a path or a MidiFile; MidiError if it is not valid MIDI."""
    if isinstance(midi, mido.MidiFile):
        return midi
    path = os.fspath(midi)
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    try:
        mid = mido.MidiFile(path, clip=True)   # clip: tolerate data bytes > 127, as players do
    except Exception as e:   # mido raises OSError, EOFError, ValueError, KeyError, ... on bad files
        raise MidiError(f"{path}: not a valid MIDI file ({type(e).__name__}: {e})") from e
    if not mid.ticks_per_beat:
        raise MidiError(f"{path}: time division is 0")
    return mid


def _seconds_fn(mid, tempo_events):
    """ticks -> absolute seconds through the merged tempo map (exact per segment, no drift)."""
    division = mid.ticks_per_beat
    if division < 0:   # SMPTE (mido reads it signed): -frames per second, ticks per frame
        fps = {29: 29.97}.get(-(division >> 8), float(-(division >> 8)))
        sec_per_tick = 1.0 / (fps * (division & 0xFF or 1))
        return lambda ticks: np.asarray(ticks, dtype=np.float64) * sec_per_tick
    tempo_events = sorted(tempo_events, key=lambda e: e[0])  # stable: the last at a tick wins
    seg_ticks, seg_tempo = [0], [500_000]                    # the MIDI default, 120 bpm
    for tick, tempo in tempo_events:
        if tick == seg_ticks[-1]:
            seg_tempo[-1] = tempo
        else:
            seg_ticks.append(tick)
            seg_tempo.append(tempo)
    seg_ticks = np.array(seg_ticks, dtype=np.int64)
    sec_per_tick = np.array(seg_tempo, dtype=np.float64) / (1e6 * division)
    seg_start = np.concatenate([[0.0], np.cumsum(np.diff(seg_ticks) * sec_per_tick[:-1])])

    def seconds(ticks):
        ticks = np.asarray(ticks, dtype=np.int64)
        i = np.searchsorted(seg_ticks, ticks, side="right") - 1
        return seg_start[i] + (ticks - seg_ticks[i]) * sec_per_tick[i]
    return seconds


def midi_to_notes(midi, sustain=True, stats=None):
    """Notes (seconds) of a MIDI path or MidiFile: all tracks merged, drums skipped, the
    sustain pedal applied. Pitches are raw (0..127); notes_to_tokens folds them into range."""
    mid = read_midi(midi)
    events, tempos = [], []   # events: (tick, track, index, msg)
    for ti, track in enumerate(mid.tracks):
        tick = 0
        for mi, msg in enumerate(track):
            tick += msg.time
            if msg.type == "set_tempo":
                tempos.append((tick, msg.tempo))
            elif msg.type in ("note_on", "note_off") or (msg.type == "control_change" and msg.control == 64):
                events.append((tick, ti, mi, msg))
    events.sort(key=lambda e: e[:3])   # by tick; within a tick, file order
    if not events:
        return []
    seconds = _seconds_fn(mid, tempos)
    last_tick = {}
    for tick, ti, _, _ in events:
        last_tick[ti] = tick
    raw = []                                          # (start_tick, end_tick, pitch, velocity)
    open_notes = {}                                   # (channel, pitch) -> [(start_tick, vel)]
    held = {}                                         # channel -> {pitch: [(start_tick, vel)]}
    pedal = {}                                        # channel -> down?
    track_of_open = {}
    for tick, ti, _, msg in events:
        ch = msg.channel
        if msg.type == "control_change":
            down = msg.value >= 64
            if sustain and pedal.get(ch) and not down:       # pedal up: release held notes
                for p, notes in held.pop(ch, {}).items():
                    raw += [(s, tick, p, v) for s, v in notes]
            pedal[ch] = down
            continue
        if ch == DRUM_CHANNEL:
            if msg.type == "note_on" and msg.velocity > 0:
                _counter(stats, "drum_notes")
            continue
        key, p = (ch, msg.note), msg.note
        if msg.type == "note_on" and msg.velocity > 0:
            for s, v in held.get(ch, {}).pop(p, []):          # re-struck while held by pedal
                raw.append((s, tick, p, v))
            open_notes.setdefault(key, []).append((tick, msg.velocity))
            track_of_open[key] = ti
            continue
        # a note-off (or note-on with velocity 0): close the oldest open note that did not
        # start on this very tick, else the one that did (a zero-length note)
        stack = open_notes.get(key)
        if not stack:
            _counter(stats, "orphan_note_offs")
            continue
        j = next((k for k, (s, _) in enumerate(stack) if s != tick), 0)
        s, v = stack.pop(j)
        if sustain and pedal.get(ch):
            held.setdefault(ch, {}).setdefault(p, []).append((s, v))
        else:
            raw.append((s, tick, p, v))
    end = max(last_tick.values())
    for key, stack in open_notes.items():            # never closed: end with their track
        raw += [(s, last_tick.get(track_of_open[key], end), key[1], v) for s, v in stack]
        _counter(stats, "unterminated", len(stack))
    for ch, by_pitch in held.items():                # pedal never released: end of the piece
        for p, notes in by_pitch.items():
            raw += [(s, end, p, v) for s, v in notes]
    if not raw:
        return []
    arr = np.array(raw, dtype=np.int64)
    start, stop = seconds(arr[:, 0]), seconds(arr[:, 1])
    notes = [Note(float(a), float(b), int(p), int(v))
             for a, b, p, v in zip(start, stop, arr[:, 2], arr[:, 3])]
    notes.sort()
    return notes


# ----------------------------------------------------------------------------- notes <-> tokens

def _fold_pitch(p):
    while p < MIN_PITCH:
        p += 12
    while p > MAX_PITCH:
        p -= 12
    return p


def _resolve_same_pitch(rows, stats=None):
    """rows: [onset, pitch, offset, velocity] in quanta. Merge same-pitch onsets in one quantum
    and end each note no later than the next onset of its pitch. Returns rows sorted by
    (onset, pitch) and, for each, the onset of the next note of its pitch (or None)."""
    rows = sorted(rows)
    kept, last = [], {}
    for on, p, off, v in rows:
        j = last.get(p)
        if j is not None:
            prev = kept[j]
            if prev[0] == on:
                prev[2], prev[3] = max(prev[2], off), max(prev[3], v)
                _counter(stats, "duplicates")
                continue
            if prev[2] > on:
                prev[2] = on
                _counter(stats, "overlaps")
        last[p] = len(kept)
        kept.append([on, p, off, v])
    next_on, seen = [None] * len(kept), {}
    for i in range(len(kept) - 1, -1, -1):
        next_on[i] = seen.get(kept[i][1])
        seen[kept[i][1]] = kept[i][0]
    return kept, next_on


def _duration_token(quanta, limit=None):
    """The DURATION token nearest to `quanta` in log space, not longer than `limit`."""
    k = int(np.argmin(np.abs(_LOG_DURATIONS - math.log(max(1, quanta)))))
    if limit is not None:
        while k > 0 and DURATION_BINS[k] > limit:
            k -= 1
    return DURATION_OFFSET + k


def _shift_tokens(quanta):
    out = []
    for k in range(len(SHIFT_BINS) - 1, -1, -1):     # greedy from the largest bin: exact
        while quanta >= SHIFT_BINS[k]:
            out.append(SHIFT_OFFSET + k)
            quanta -= SHIFT_BINS[k]
    return out


def notes_to_tokens(notes, stats=None):
    """Tokens of a list of Notes (seconds): the one note -> token path that real and synthetic
    music share. Onsets are quantised in absolute time, so shifts never drift."""
    rows = []
    for n in notes:
        p = _fold_pitch(int(n.pitch))
        if p != n.pitch:
            _counter(stats, "transposed")
        on = math.floor(n.start / TIME_QUANTUM + 0.5)
        off = math.floor(n.end / TIME_QUANTUM + 0.5)
        rows.append([on, p, max(off, on + 1), int(min(127, max(1, n.velocity)))])
    rows, next_on = _resolve_same_pitch(rows, stats)
    tokens, t, vel = [], rows[0][0] if rows else 0, None   # leading silence is dropped
    for (on, p, off, v), nxt in zip(rows, next_on):
        tokens += _shift_tokens(on - t)
        t = on
        if velocity_bin(v) != vel:
            vel = velocity_bin(v)
            tokens.append(VELOCITY_OFFSET + vel)
        if off - on > DURATION_BINS[-1]:
            _counter(stats, "clipped_durations")
        tokens.append(NOTE_OFFSET + p - MIN_PITCH)
        tokens.append(_duration_token(off - on, None if nxt is None else nxt - on))
    _counter(stats, "notes", len(rows))
    return tokens


def tokens_to_notes(tokens):
    """Notes (seconds, on the 10 ms grid) of a token sequence; tolerant of sampled sequences
    (see the module docstring)."""
    notes, t, vel, pending = [], 0, velocity_of_bin(N_VELOCITY // 2), None
    for tok in tokens:
        tok = int(tok)
        if tok == EOS:
            break
        if DURATION_OFFSET <= tok < VOCAB_SIZE:
            if pending is not None:
                d = DURATION_BINS[tok - DURATION_OFFSET]
                notes.append(Note(t * TIME_QUANTUM, (t + d) * TIME_QUANTUM, pending, vel))
            pending = None
            continue
        pending = None
        if NOTE_OFFSET <= tok < VELOCITY_OFFSET:
            pending = MIN_PITCH + tok - NOTE_OFFSET
        elif VELOCITY_OFFSET <= tok < SHIFT_OFFSET:
            vel = velocity_of_bin(tok - VELOCITY_OFFSET)
        elif SHIFT_OFFSET <= tok < DURATION_OFFSET:
            t += SHIFT_BINS[tok - SHIFT_OFFSET]
    return notes


def notes_to_midi(notes):
    """A playable type-0 MidiFile (piano, 120 bpm, 1 tick = 1 ms) of a list of Notes."""
    rows = [[math.floor(n.start / TIME_QUANTUM + 0.5), int(n.pitch),
             max(math.floor(n.end / TIME_QUANTUM + 0.5), math.floor(n.start / TIME_QUANTUM + 0.5) + 1),
             int(n.velocity)] for n in notes]
    rows, _ = _resolve_same_pitch(rows)   # sampled sequences may overlap a pitch with itself
    events = []                           # (tick, 0 = off first, pitch, velocity)
    for on, p, off, v in rows:
        events.append((on * _TICKS_PER_QUANTUM, 1, p, v))
        events.append((off * _TICKS_PER_QUANTUM, 0, p, 0))
    events.sort()
    mid = mido.MidiFile(type=0, ticks_per_beat=DECODE_TICKS_PER_BEAT)
    track = mido.MidiTrack()
    mid.tracks.append(track)
    track.append(mido.MetaMessage("set_tempo", tempo=DECODE_TEMPO, time=0))
    track.append(mido.Message("program_change", program=0, channel=0, time=0))
    now = 0
    for tick, is_on, p, v in events:
        kind = "note_on" if is_on else "note_off"
        track.append(mido.Message(kind, note=p, velocity=v if is_on else 0, channel=0, time=tick - now))
        now = tick
    track.append(mido.MetaMessage("end_of_track", time=0))
    return mid


def encode(midi, stats=None, sustain=True):
    """Tokens (no BOS/EOS) of a MIDI path or mido.MidiFile. Raises MidiError if the file is
    not valid MIDI. If `stats` is a dict, the counts of the module docstring's choices are
    added to it."""
    return notes_to_tokens(midi_to_notes(midi, sustain=sustain, stats=stats), stats=stats)


def decode(tokens):
    """A playable type-0 mido.MidiFile of a token sequence."""
    return notes_to_midi(tokens_to_notes(tokens))


def encode_files(paths, sustain=True, progress=False):
    """Encode many files, never crashing: a file that is not valid MIDI is skipped with a
    warning and counted. Returns (token lists of the non-empty pieces, stats) where stats has
    files, skipped, empty, notes, tokens and the counts of the module docstring's choices."""
    stats = {"files": 0, "skipped": 0, "empty": 0, "notes": 0, "tokens": 0}
    out = []
    paths = list(paths)
    if progress:
        from tqdm import tqdm
        paths = tqdm(paths, desc="encode midi", unit="file")
    for path in paths:
        stats["files"] += 1
        try:
            tokens = encode(path, stats=stats, sustain=sustain)
        except (MidiError, OSError) as e:
            warnings.warn(f"skipping {path}: {e}")
            stats["skipped"] += 1
            continue
        if not tokens:
            stats["empty"] += 1
            continue
        out.append(tokens)
        stats["tokens"] += len(tokens)
    return out, stats


def piece_stream(token_lists):
    """One uint16 stream: every piece wrapped as BOS ... EOS, in order."""
    parts = [np.array([BOS] + list(t) + [EOS], dtype=np.uint16) for t in token_lists]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)


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
    zpath = download(MAESTRO_URL, dest / "maestro-v3.0.0-midi.zip")
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
    a piece takes longer than max_seconds_per_piece; such pieces, and pieces music21 fails on,
    are counted, recorded in out_dir/failed.json and not retried (unless retry_failed).
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
             "known_failures": 0}
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
                if w.job and w.started is not None and now - w.started > max_seconds_per_piece:
                    w.kill()
                    stats["timed_out"] += 1
                    finish(w, False, f"timed out after {max_seconds_per_piece} s")
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
            wheel = fetch_pypi_file(*MUSIC21_WHEEL, Path(cache) / "carriers")
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
