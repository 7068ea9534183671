"""The music stages as corpora and inside train.py (fixtures written with mido)."""
import json
import warnings

import mido
import numpy as np
import pytest

import data
import train
from data import music
from data.common import select_chunks


def write_piece(path, seed):
    rng = np.random.default_rng(seed)
    mid = mido.MidiFile(type=1, ticks_per_beat=480)
    for ch in range(2):
        track = mido.MidiTrack()
        mid.tracks.append(track)
        if ch == 0:
            track.append(mido.MetaMessage("set_tempo", tempo=int(rng.integers(400000, 700000))))
        for _ in range(120):
            p = int(rng.integers(40, 90))
            track.append(mido.Message("note_on", channel=ch, note=p, velocity=80, time=int(rng.integers(0, 240))))
            track.append(mido.Message("note_off", channel=ch, note=p, velocity=0, time=int(rng.integers(60, 480))))
    mid.save(path)


@pytest.fixture
def midi_dir(tmp_path):
    d = tmp_path / "midi"
    d.mkdir()
    for i in range(40):
        write_piece(d / f"piece{i:02d}.mid", i)
    (d / "broken.mid").write_bytes(b"MThd\x00\x00\x00\x06 this is not midi")
    return d


def test_music_folder_corpus_skips_a_corrupt_file_with_a_warning(cache, midi_dir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = data.load("music", music_dir=str(midi_dir))
    assert any("broken.mid" in str(w.message) for w in caught)
    assert c.info["skipped"] == 1 and c.info["files"] == 41
    assert c.vocab_size == 160 == music.VOCAB_SIZE
    assert int(np.max(c.train)) < 160 and len(c.val) > 0
    assert (np.asarray(c.train) == music.BOS).sum() == (np.asarray(c.train) == music.EOS).sum()


def test_select_chunks_is_deterministic_and_says_when_there_are_too_few():
    stream = np.arange(1000, dtype=np.uint16)
    a, b = select_chunks(stream, 10, 30, seed=1), select_chunks(stream, 10, 30, seed=1)
    assert np.array_equal(a, b) and len(a) == 300
    assert not np.array_equal(a, select_chunks(stream, 10, 30, seed=2))
    rows = a.reshape(30, 10)
    assert all(r[0] % 10 == 0 and np.array_equal(r, np.arange(r[0], r[0] + 10)) for r in rows)
    with pytest.raises(ValueError, match="only 100"):
        select_chunks(stream, 10, 101, seed=0)


@pytest.mark.filterwarnings("ignore:skipping")
def test_music_then_text_runs_with_selective_transfer(cache, midi_dir, text_dir, tmp_path):
    out = tmp_path / "run"
    args = train.parse_args(["--stages", f"music,text:{text_dir}", "--music-dir", str(midi_dir),
                             "--music-chunks", "50", "--iters", "3", "--eval-interval", "3",
                             "--out", str(out), "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
                             "--block-size", "16", "--batch-size", "4", "--eval-iters", "2",
                             "--no-progress", "--threads", "1"])
    summary = train.run(args)
    assert [s["vocab_size"] for s in summary["stages"]] == [160, 50257]
    saved = json.loads((out / "summary.json").read_text())
    assert saved["stages"][0]["name"] == "music"
