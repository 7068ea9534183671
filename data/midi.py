"""
MIDI <-> a compact event vocabulary of 160 tokens (mido): the codec of the music stage.
Stage 1 of the ladder in "Listen and Chant Before You Read" (arXiv 2604.21265): music is
tokenised into a compact event vocabulary of 160 tokens (the paper's size, for MAESTRO piano
performances); the exact layout is ours.

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

The music corpora that use this codec (MAESTRO, folders, the music21 corpus, synthetic music)
are in data/music.py.
"""

import math
import os
import warnings
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


def piano_roll(notes, frame=None):
    """(roll, lowest pitch, frame seconds): roll[p - lowest, f] = the velocity (0..127) of the note
    that sounds pitch p during frame f (frames of `frame` s, default the 10 ms grid), the picture a
    piano-roll plot shows (pitch against time, loudness as shade); an empty roll for no notes."""
    frame = frame or TIME_QUANTUM
    if not notes:
        return np.zeros((0, 0), dtype=np.uint8), 0, frame
    lo, hi = min(n.pitch for n in notes), max(n.pitch for n in notes)
    roll = np.zeros((hi - lo + 1, int(round(max(n.end for n in notes) / frame)) + 1), dtype=np.uint8)
    for n in notes:
        a, b = int(round(n.start / frame)), max(int(round(n.end / frame)), int(round(n.start / frame)) + 1)
        roll[n.pitch - lo, a:b] = np.maximum(roll[n.pitch - lo, a:b], n.velocity)
    return roll, lo, frame


def encode(midi, stats=None, sustain=True):
    """Tokens (no BOS/EOS) of a MIDI path or mido.MidiFile. Raises MidiError if the file is
    not valid MIDI. If `stats` is a dict, the counts of the module docstring's choices are
    added to it."""
    return notes_to_tokens(midi_to_notes(midi, sustain=sustain, stats=stats), stats=stats)


def decode(tokens):
    """A playable type-0 mido.MidiFile of a token sequence."""
    return notes_to_midi(tokens_to_notes(tokens))


def warn_one_line(message):
    """warnings.warn(message), shown as ONE clean line on stderr, `warning: <message>`, instead of
    the default file:line: UserWarning: ... and the Python source line under it. The format is
    swapped only for this call (a filter, -W or pytest still sees a plain UserWarning)."""
    default = warnings.formatwarning
    warnings.formatwarning = lambda msg, *_, **__: f"warning: {msg}\n"
    try:
        warnings.warn(message, stacklevel=2)
    finally:
        warnings.formatwarning = default


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
        except (MidiError, OSError) as e:  # a MidiError's message starts with the path
            why = (str(e) if isinstance(e, MidiError) else
                   f"{path}: {'no such file' if isinstance(e, FileNotFoundError) else e.strerror or e}")
            warn_one_line(f"skipping {why}")
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
