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
        assert line == f"wrote {f}: {len(got)} notes, {length:.1f} s"


def test_sample_prints_text_from_a_text_checkpoint(tmp_path, capsys, cache):
    save_tiny(tmp_path / "text.pt", 50257)
    sample.main([str(tmp_path / "text.pt"), "--prompt", "", "--tokens", "5"])
    sample.main([str(tmp_path / "text.pt"), "--prompt", "The river", "--tokens", "5"])
    assert capsys.readouterr().out.count("The river") == 1
