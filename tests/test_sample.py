import mido
import pytest
import torch

import sample
from checkpoint import save_checkpoint
from data import midi
from model import GPT, GPTConfig


def save_tiny(path, vocab):
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=32, vocab_size=vocab, n_layer=1, n_head=2, n_embd=16)
    save_checkpoint(path, {"model": GPT(cfg).state_dict(), "model_config": cfg.__dict__})


def test_sample_writes_playable_midi_from_a_music_checkpoint(tmp_path, capsys):
    """Each file holds exactly the notes its sampled tokens decode to (the same seed drawn again
    here), lasts until its last note ends, and the printed counts are the files' own."""
    save_tiny(tmp_path / "music.pt", 160)
    sample.main([str(tmp_path / "music.pt"), "--midi", str(tmp_path / "piece"), "--samples", "2",
                 "--tokens", "60", "--temperature", "1.0"])
    files = sorted(tmp_path.glob("piece-*.mid"))
    assert [f.name for f in files] == ["piece-0.mid", "piece-1.mid"]
    model, ck = sample.load_model(tmp_path / "music.pt")
    rows = sample.generate(model, ck, [midi.BOS], 60, 2, 1.0, 200, torch.Generator().manual_seed(0), None)
    assert rows.shape == (2, 61) and rows[:, 0].eq(midi.BOS).all() and int(rows.max()) < 160
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2
    for f, row, line in zip(files, rows.tolist(), printed):
        want = midi.tokens_to_notes(row)
        got = midi.midi_to_notes(f)
        key = lambda n: (round(n.start, 3), n.pitch)
        assert want and sorted(map(key, got)) == sorted({key(n) for n in want})   # every note, where it was
        ends = {}                                            # a note may only be shortened (same-pitch overlap)
        for n in want:
            ends[key(n)] = max(ends.get(key(n), 0.0), n.end)
        assert all(n.end <= ends[key(n)] + 1e-3 and n.end > n.start for n in got)
        length = mido.MidiFile(f).length
        assert length > 0 and length == pytest.approx(max(n.end for n in got), abs=1e-3)
        assert line == f"wrote {f}: {len(got)} notes, {length:.1f} s (piano roll: {f.with_suffix('.png')})"
        assert f.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_piano_roll_marks_each_note_at_its_pitch_time_and_velocity():
    """data.midi.piano_roll: a known answer, built note by note."""
    import numpy as np
    notes = [midi.Note(0.0, 0.05, 60, 100), midi.Note(0.03, 0.10, 64, 40), midi.Note(0.02, 0.04, 60, 120)]
    roll, lo, frame = midi.piano_roll(notes)
    assert lo == 60 and frame == 0.01 and roll.shape == (5, 11)
    want = np.zeros((5, 11), dtype=np.uint8)
    want[0, 0:5] = 100
    want[0, 2:4] = 120          # overlapping notes of one pitch: the louder shade
    want[4, 3:10] = 40
    assert (roll == want).all()
    assert midi.piano_roll([])[0].size == 0


def test_sample_prints_text_from_a_text_checkpoint(tmp_path, capsys, cache):
    save_tiny(tmp_path / "text.pt", 50257)
    sample.main([str(tmp_path / "text.pt"), "--prompt", "", "--tokens", "5"])
    sample.main([str(tmp_path / "text.pt"), "--prompt", "The river", "--tokens", "5"])
    assert capsys.readouterr().out.count("The river") == 1
