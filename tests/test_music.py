"""Tests for data/music.py: MIDI <-> 160-token events, synthetic music, the real-music sources.
CPU-only, no network, no music21 (a fake music21 package tests the conversion machinery)."""

import io
import json
import math
import random
import struct
import zipfile

import mido
import numpy as np
import pytest

from data import midi
from data import music as m

Q = midi.TIME_QUANTUM
TOL = Q / 2 + 1e-9          # onsets are quantised in absolute time: never more than half a quantum


# ----------------------------------------------------------------------------- fixture helpers

def track_of(events):
    """A MidiTrack from (absolute tick, message) pairs (stable order within a tick)."""
    track, now = mido.MidiTrack(), 0
    for tick, msg in sorted(events, key=lambda e: e[0]):
        track.append(msg.copy(time=tick - now))
        now = tick
    return track


def note_events(notes, channel=0, zero_velocity_off=False):
    """(tick, message) pairs of notes given as (on_tick, off_tick, pitch, velocity)."""
    out = []
    for on, off, p, v in notes:
        out.append((on, mido.Message("note_on", note=p, velocity=v, channel=channel)))
        off_msg = (mido.Message("note_on", note=p, velocity=0, channel=channel) if zero_velocity_off
                   else mido.Message("note_off", note=p, velocity=64, channel=channel))
        out.append((off, off_msg))
    return out


def tempo(tick, bpm):
    return (tick, mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(bpm)))


def pedal(tick, value, channel=0):
    return (tick, mido.Message("control_change", control=64, value=value, channel=channel))


def midi_of(*tracks, type=1, tpb=480):
    mid = mido.MidiFile(type=type, ticks_per_beat=tpb)
    mid.tracks.extend(track_of(t) for t in tracks)
    return mid


def reload(mid):
    """Save and re-read a MidiFile: what a player would see."""
    buf = io.BytesIO()
    mid.save(file=buf)
    buf.seek(0)
    return mido.MidiFile(file=buf)


def reference_onsets(mid):
    """{pitch: sorted onsets (s)} of every non-drum note, by mido's own tempo handling (an
    independent implementation), pitches folded into the piano range."""
    t, out = 0.0, {}
    for msg in mid:              # tracks merged, msg.time in seconds
        t += msg.time
        if msg.type == "note_on" and msg.velocity > 0 and msg.channel != 9:
            out.setdefault(midi._fold_pitch(msg.note), []).append(t)
    return {p: np.array(sorted(v)) for p, v in out.items()}


def decoded_notes(tokens):
    """{pitch: [(onset, duration)]} of a decoded, saved and re-read file."""
    mid = reload(midi.decode(tokens))
    t, opened, out = 0.0, {}, {}
    for msg in mid:
        t += msg.time
        if msg.type == "note_on" and msg.velocity > 0:
            opened[msg.note] = t
        elif msg.type in ("note_on", "note_off"):
            on = opened.pop(msg.note)
            out.setdefault(msg.note, []).append((on, t - on))
    return {p: sorted(v) for p, v in out.items()}


def assert_onsets_kept(mid, tokens):
    """Every non-drum note's (folded) pitch is kept, its onset within half a quantum."""
    ref, got = reference_onsets(mid), decoded_notes(tokens)
    assert sorted(ref) == sorted(got)
    first = min(v[0] for v in ref.values())       # leading silence is dropped, on the grid
    first = math.floor(first / Q + 0.5) * Q
    worst = 0.0
    for p, onsets in ref.items():
        dec = np.array([on for on, _ in got[p]]) + first
        assert len(dec) == len(onsets), f"pitch {p}: {len(dec)} notes decoded, {len(onsets)} in the file"
        worst = max(worst, float(np.abs(dec - onsets).max()))
    assert worst <= TOL, worst
    return worst


def assert_grammar(tokens):
    assert all(0 <= t < midi.VOCAB_SIZE for t in tokens)
    assert not {midi.PAD, midi.BOS, midi.EOS} & set(tokens)
    for i, t in enumerate(tokens):
        if midi.NOTE_OFFSET <= t < midi.VELOCITY_OFFSET:
            assert midi.DURATION_OFFSET <= tokens[i + 1] < midi.VOCAB_SIZE


def close_in_log(a, b, tol=0.11):   # durations: nearest of 33 geometric bins (ratio <= 1.23)
    return abs(math.log(a / b)) <= tol


# ----------------------------------------------------------------------------- vocabulary

def test_vocabulary_layout():
    assert midi.VOCAB_SIZE == 160
    assert (midi.PAD, midi.BOS, midi.EOS, midi.NOTE_OFFSET) == (0, 1, 2, 3)
    assert midi.VELOCITY_OFFSET - midi.NOTE_OFFSET == 88 == midi.N_NOTES
    assert midi.DURATION_OFFSET + len(midi.DURATION_BINS) == 160
    assert max(midi.SHIFT_BINS) * Q == pytest.approx(1.0) and min(midi.SHIFT_BINS) == 1
    assert list(midi.DURATION_BINS) == sorted(set(midi.DURATION_BINS)) and midi.DURATION_BINS[0] == 1
    for n in range(0, 1000, 7):       # any gap is an exact sum of shift bins
        assert sum(midi.SHIFT_BINS[t - midi.SHIFT_OFFSET] for t in midi._shift_tokens(n)) == n


# ----------------------------------------------------------------------------- real-file features

def test_type1_several_tracks_tempo_changes(tmp_path):
    conductor = [tempo(0, 120), tempo(4 * 384, 150), tempo(9 * 384 + 17, 63.7),
                 (0, mido.MetaMessage("time_signature", numerator=3, denominator=4))]
    a = note_events([(0, 380, 60, 80), (384, 700, 64, 70), (1500, 1700, 67, 90), (1536, 2000, 72, 60),
                     (3000, 3100, 60, 100), (3517, 4000, 62, 30), (5000, 6000, 64, 110)], channel=0)
    b = note_events([(0, 768, 48, 50), (1537, 2300, 43, 55), (3456 + 5, 3900, 55, 65), (4444, 5555, 47, 75)],
                    channel=1, zero_velocity_off=True)
    b.append(tempo(4000, 200))   # a tempo change outside the conductor track: merged too
    mid = midi_of(conductor, a, b, tpb=384)
    path = tmp_path / "type1.mid"
    mid.save(path)
    tokens = midi.encode(path)
    assert tokens == midi.encode(mido.MidiFile(path)) == midi.encode(str(path))
    assert_grammar(tokens)
    assert_onsets_kept(mido.MidiFile(path), tokens)
    # the tempo map is really used: tick 3000 = 4 beats at 120 bpm, then 3.8125 beats at 150 bpm
    secs = midi._seconds_fn(mido.MidiFile(path), [(0, 500000), (1536, 400000), (3473, mido.bpm2tempo(63.7)),
                                                (4000, 300000)])
    expected = 1536 / 384 * 0.5 + (3000 - 1536) / 384 * 0.4
    assert float(secs(3000)) == pytest.approx(expected, abs=1e-12)
    assert any(abs(on - expected) <= TOL for on, _ in decoded_notes(tokens)[60])


def test_type0_running_status_raw_bytes(tmp_path):
    # Written byte by byte, so running status really is in the file (mido never writes it).
    def vlq(n):
        out = [n & 0x7F]
        while n > 0x7F:
            n >>= 7
            out.insert(0, (n & 0x7F) | 0x80)
        return bytes(out)
    ev = b"".join([
        vlq(0), b"\xff\x51\x03\x07\xa1\x20",            # tempo 500000 (120 bpm)
        vlq(0), b"\x90\x3c\x40",                       # C4 on, status 0x90
        vlq(0), b"\x40\x50",                           # E4 on (running status)
        vlq(96), b"\x3c\x00",                          # C4 off: velocity 0 (running status)
        vlq(0), b"\x40\x00",                           # E4 off
        vlq(48), b"\x91\x43\x50",                      # G4 on, channel 2
        vlq(0), b"\x48\x30",                           # C5 on (running status, channel 2)
        vlq(200), b"\x43\x00",                         # G4 off
        vlq(0), b"\x81\x48\x40",                       # C5 off with a real note-off
        vlq(1), b"\x99\x24\x64",                       # a drum (channel 10), ignored
        vlq(10), b"\x24\x00",
        vlq(0), b"\xff\x2f\x00"])
    data = b"MThd" + struct.pack(">IHHH", 6, 0, 1, 96) + b"MTrk" + struct.pack(">I", len(ev)) + ev
    path = tmp_path / "running.mid"
    path.write_bytes(data)
    mid = mido.MidiFile(path)
    assert mid.type == 0 and len(mid.tracks) == 1
    stats = {}
    tokens = midi.encode(path, stats=stats)
    assert stats["notes"] == 4 and stats["drum_notes"] == 1
    got = decoded_notes(tokens)
    tick = 0.5 / 96
    assert sorted(got) == [60, 64, 67, 72]
    assert got[60][0][0] == got[64][0][0] == 0.0
    assert abs(got[67][0][0] - 144 * tick) <= TOL and abs(got[72][0][0] - 144 * tick) <= TOL
    assert close_in_log(got[60][0][1], 96 * tick) and close_in_log(got[67][0][1], 200 * tick)
    assert_onsets_kept(mid, tokens)


def test_drums_skipped_and_out_of_range_pitches_transposed():
    notes = [(0, 100, 60, 80), (100, 200, 12, 80), (200, 300, 115, 80), (300, 400, 21, 80), (400, 500, 108, 80)]
    drums = note_events([(0, 50, 36, 100), (240, 300, 42, 100)], channel=9)
    mid = midi_of(note_events(notes) + drums, type=0)
    stats = {}
    tokens = midi.encode(mid, stats=stats)
    assert stats["drum_notes"] == 2 and stats["transposed"] == 2 and stats["notes"] == 5
    got = decoded_notes(tokens)
    assert sorted(got) == [21, 24, 60, 103, 108]          # 12 -> 24, 115 -> 103 (by octaves)
    assert_onsets_kept(mid, tokens)


def test_sustain_pedal_extends_notes():
    tpb = 480                                             # 120 bpm: 1 s = 960 ticks
    notes = note_events([(0, 480, 60, 80),                # released at 0.5 s, pedal until 2 s
                         (288, 336, 62, 80), (576, 672, 62, 80),   # re-struck while held
                         (2400, 2880, 64, 80)])           # after the pedal: unaffected
    mid = midi_of(notes + [pedal(240, 127), pedal(1920, 0)], type=0, tpb=tpb)
    got = decoded_notes(midi.encode(mid))
    assert close_in_log(got[60][0][1], 2.0)
    assert got[62][0][0] == pytest.approx(0.3) and close_in_log(got[62][0][1], 0.3)   # to the re-strike
    assert close_in_log(got[62][1][1], 2.0 - 0.6)
    assert close_in_log(got[64][0][1], 0.5)
    dry = decoded_notes(midi.encode(mid, sustain=False))
    assert close_in_log(dry[60][0][1], 0.5) and close_in_log(dry[62][0][1], 0.05)


def test_overlapping_same_pitch_and_unisons():
    # 64: on 0, on 0.5 s, off 1.0 s, off 1.5 s -> (0, 0.5) and (0.5, 1.5): FIFO note-offs, and
    # the earlier note ends where the later starts. 67 on two channels at once -> one note.
    a = note_events([(0, 960, 64, 80), (480, 1440, 64, 90), (0, 480, 67, 70)], channel=0)
    b = note_events([(0, 960, 67, 100)], channel=1)
    mid = midi_of(a, b, type=1)
    stats = {}
    tokens = midi.encode(mid, stats=stats)
    assert stats["overlaps"] == 1 and stats["duplicates"] == 1
    got = decoded_notes(tokens)
    assert [on for on, _ in got[64]] == [0.0, 0.5]
    assert close_in_log(got[64][0][1], 0.5) and close_in_log(got[64][1][1], 1.0)
    assert len(got[67]) == 1 and close_in_log(got[67][0][1], 1.0)   # the longer one


def test_long_piece_no_drift(tmp_path):
    """Eight minutes, 5000 notes at irregular times on two tracks, 60 tempo changes: the onset
    error stays within half a quantum to the end (quantising deltas would drift)."""
    rng = random.Random(0)
    tpb, tick, last, notes = 480, 0, {}, ([], [])
    while sum(map(len, notes)) < 5000:
        tick += rng.choice([0, 0, 1, 7, 33, 60, 97, 120, 161, 240, 333])
        p = rng.randint(21, 108)
        if tick - last.get(p, -10**9) < 150:             # same-pitch onsets stay apart
            continue
        last[p] = tick
        notes[rng.random() < 0.5].append((tick, tick + rng.randint(1, 900), p, rng.randint(1, 127)))
    conductor = [tempo(0, 100)] + [tempo(rng.randint(1, tick), rng.uniform(40, 220)) for _ in range(60)]
    mid = midi_of(conductor, note_events(notes[0], 0), note_events(notes[1], 3, zero_velocity_off=True), tpb=tpb)
    path = tmp_path / "long.mid"
    mid.save(path)
    mid = mido.MidiFile(path)
    assert mid.length > 300
    stats = {}
    tokens = midi.encode(path, stats=stats)
    assert stats["notes"] == 5000
    assert_grammar(tokens)
    worst = assert_onsets_kept(mid, tokens)
    assert worst > 0.004                                 # irregular times really were rounded
    assert midi.encode(midi.decode(tokens)) == tokens          # the vocabulary is a fixed point


def test_decode_is_playable_and_idempotent():
    mid = midi_of(note_events([(0, 480, 60, 80), (240, 960, 67, 20), (240, 300, 76, 127)]), type=0)
    tokens = midi.encode(mid)
    out = reload(midi.decode(tokens))
    assert out.type in (0, 1) and out.length == pytest.approx(1.0, abs=0.02)
    assert midi.encode(out) == tokens
    assert midi.decode([]).length == 0


def test_decode_tolerates_sampled_sequences():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, midi.VOCAB_SIZE, size=3000).tolist()
    mid = reload(midi.decode(tokens))
    assert all(0 <= msg.note <= 127 for msg in mid if msg.type.startswith("note"))
    notes = midi.tokens_to_notes([midi.BOS, midi.NOTE_OFFSET + 39, midi.DURATION_OFFSET + 10, midi.EOS,
                               midi.NOTE_OFFSET + 40, midi.DURATION_OFFSET])
    assert [n.pitch for n in notes] == [60]              # EOS ends the piece


# ----------------------------------------------------------------------------- corrupt files

def test_corrupt_files_raise_and_are_skipped(tmp_path):
    good = tmp_path / "good.mid"
    midi_of(note_events([(0, 480, 60, 80), (480, 960, 62, 80)]), type=0).save(good)
    junk = tmp_path / "junk.mid"
    junk.write_bytes(b"this is not a MIDI file " * 20)
    truncated = tmp_path / "truncated.mid"
    truncated.write_bytes(good.read_bytes()[:30])
    empty = tmp_path / "empty.mid"
    empty.write_bytes(b"")
    for bad in (junk, truncated, empty):
        with pytest.raises(midi.MidiError):
            midi.encode(bad)
    with pytest.warns(UserWarning, match="skipping"):
        token_lists, stats = midi.encode_files([good, junk, truncated, empty])
    assert stats["files"] == 4 and stats["skipped"] == 3 and stats["notes"] == 2
    assert len(token_lists) == 1 and stats["tokens"] == len(token_lists[0])


def test_skipped_files_are_one_clean_line_each_on_stderr(tmp_path):
    """What a user sees: `warning: skipping PATH: why`, one line a file, no source line of ours
    and no file:line: UserWarning prefix (a real process, so Python's own warning display runs)."""
    import subprocess
    import sys
    from conftest import ROOT
    junk, missing = tmp_path / "junk.mid", tmp_path / "missing.mid"
    junk.write_bytes(b"MThd" + bytes(range(40)) * 3)
    code = ("import sys, warnings; from data import midi; midi.encode_files(sys.argv[1:]); "
            "assert warnings.formatwarning is warnings._formatwarning_orig")  # the swap was local
    out = subprocess.run([sys.executable, "-c", code, str(junk), str(missing)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"warning: skipping {junk}: not a valid MIDI file (")
    assert lines[1] == f"warning: skipping {missing}: no such file"
    assert "UserWarning" not in out.stderr and "midi.py" not in out.stderr and "warn_one_line" not in out.stderr


def test_piece_stream():
    s = midi.piece_stream([[5, 6], [7]])
    assert s.dtype == np.uint16 and s.tolist() == [midi.BOS, 5, 6, midi.EOS, midi.BOS, 7, midi.EOS]
    assert midi.piece_stream([]).size == 0


# ----------------------------------------------------------------------------- synthetic music

def test_synthetic_deterministic_in_vocab_and_decodable():
    a, b, c = m.synthetic(4, seed=0), m.synthetic(4, seed=0), m.synthetic(4, seed=1)
    assert a == b and a != c
    assert m.synthetic(2, seed=0) == a[:2]               # piece i depends on (seed, i) only
    for tokens in a + c:
        assert len(tokens) > 100
        assert_grammar(tokens)
        mid = reload(midi.decode(tokens))
        assert mid.length > 10
        assert midi.encode(mid) == tokens                   # exactly the real-music grammar
    flat = np.concatenate([np.array(t) for t in a])
    vel = flat[(flat >= midi.VELOCITY_OFFSET) & (flat < midi.SHIFT_OFFSET)]
    shifts = flat[(flat >= midi.SHIFT_OFFSET) & (flat < midi.DURATION_OFFSET)]
    assert len(set(vel.tolist())) >= 4 and len(set(shifts.tolist())) >= 6   # dynamics, rhythm
    many = m.synthetic(n_tokens=5000, seed=3)
    assert sum(map(len, many)) >= 5000 and sum(map(len, many[:-1])) < 5000
    with pytest.raises(ValueError):
        m.synthetic(2, n_tokens=10)


# ----------------------------------------------------------------------------- sources

def test_midi_folder_files(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("z.mid", "a/y.MIDI", "a/b/x.midi", "a/notes.txt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.relative_to(tmp_path).as_posix() for p in m.midi_folder_files(tmp_path)] == \
        ["a/b/x.midi", "a/y.MIDI", "z.mid"]


def test_maestro_files(tmp_path):
    root = tmp_path / "maestro-v3.0.0"
    (root / "2004").mkdir(parents=True)
    rows = [("Bach", "Fugue", "train", "2004/a.midi"), ("Chopin", "Etude", "validation", "2004/b.midi"),
            ("Liszt", "Sonata", "test", "2004/c.midi"), ("Bach", "Prelude", "train", "2004/d.midi")]
    lines = ["canonical_composer,canonical_title,split,year,midi_filename,audio_filename,duration"]
    for comp, title, split, fn in rows:
        lines.append(f'{comp},"{title}, Op. 1",{split},2004,{fn},{fn[:-5]}.wav,1.0')
        (root / fn).write_bytes(b"")
    (root / "maestro-v3.0.0.csv").write_text("\n".join(lines) + "\n")
    assert [p.name for p in m.maestro_files(root, "train")] == ["a.midi", "d.midi"]
    assert [p.name for p in m.maestro_files(tmp_path, "test")] == ["c.midi"]   # the parent works too
    assert len(m.maestro_files(root)) == 4
    with pytest.raises(ValueError):
        m.maestro_files(root, "dev")
    (root / "2004" / "b.midi").unlink()
    with pytest.raises(FileNotFoundError):
        m.maestro_files(root, "validation")


FAKE_CONVERTER = '''
import time, mido
class _Score:
    def write(self, fmt, fp):
        assert fmt == "midi"
        mid = mido.MidiFile(type=0)
        mid.tracks.append(mido.MidiTrack([mido.Message("note_on", note=60, velocity=64, time=0),
                                          mido.Message("note_off", note=60, time=480)]))
        mid.save(fp)
def parse(path, forceSource=False):
    text = open(path).read()
    if "slow" in text:
        time.sleep(60)
    if "heavy" in text:  # over the first limit, within the retry's 4x
        time.sleep(1.5)
    if "bad" in text:
        raise ValueError("cannot parse this score")
    return _Score()
'''


def fake_music21_wheel(tmp_path, broken=False):
    """A zip laid out like the music21 wheel: the package and its corpus folder."""
    files = {"music21/__init__.py": "raise ImportError('no more_itertools')" if broken else "__version__ = '0.fake'",
             "music21/converter.py": FAKE_CONVERTER,
             "music21/corpus/bach/bwv1.mxl": "ok", "music21/corpus/bach/bwv2.xml": "ok",
             "music21/corpus/bach/sub/bwv3.krn": "slow", "music21/corpus/bach/bwv4.mxl": "bad",
             "music21/corpus/bach/bwv5.mxl": "heavy",
             "music21/corpus/bach/bwv1.rntxt": "not a score"}
    whl = tmp_path / ("broken" if broken else "fake") / "music21-0.fake-py3-none-any.whl"
    whl.parent.mkdir()
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return whl


def test_music21_conversion_machinery_with_a_fake_music21(tmp_path):
    whl, out = fake_music21_wheel(tmp_path), tmp_path / "midi"
    stats = m.music21_corpus_to_midi(out, whl, composers=("bach",), max_seconds_per_piece=1.0,
                                     progress=False, workers=2)
    assert (stats["pieces"], stats["converted"], stats["failed"]) == (5, 3, 1)
    assert (stats["timed_out"], stats["retried"]) == (1, 2)  # the heavy piece on its retry, the slow one never
    files = m.midi_folder_files(out)
    assert [p.relative_to(out).as_posix() for p in files] == ["bach/bwv1.mxl.mid", "bach/bwv2.xml.mid",
                                                              "bach/bwv5.mxl.mid"]
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    token_lists, enc = midi.encode_files(files)
    assert enc["skipped"] == 0 and enc["notes"] == 3
    failed = json.loads((out / "failed.json").read_text())
    assert sorted(failed) == ["bach/bwv4.mxl", "bach/sub/bwv3.krn"] and "timed out" in failed["bach/sub/bwv3.krn"]
    again = m.music21_corpus_to_midi(out, whl, composers=("bach",), progress=False)   # resumes
    assert (again["cached"], again["known_failures"], again["converted"]) == (3, 2, 0)
    with pytest.raises(RuntimeError, match="could not be imported"):
        m.music21_corpus_to_midi(tmp_path / "midi2", fake_music21_wheel(tmp_path, broken=True),
                                 composers=("bach",), progress=False)
