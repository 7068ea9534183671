import mido
import torch

import sample
import train
from model import GPT, GPTConfig


def save_tiny(path, vocab):
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=32, vocab_size=vocab, n_layer=1, n_head=2, n_embd=16)
    train.save_checkpoint(path, {"model": GPT(cfg).state_dict(), "model_config": cfg.__dict__})


def test_sample_writes_playable_midi_from_a_music_checkpoint(tmp_path, capsys):
    save_tiny(tmp_path / "music.pt", 160)
    sample.main([str(tmp_path / "music.pt"), "--midi", str(tmp_path / "piece"), "--samples", "2",
                 "--tokens", "60", "--temperature", "1.0"])
    files = sorted(tmp_path.glob("piece-*.mid"))
    assert [f.name for f in files] == ["piece-0.mid", "piece-1.mid"]
    for f in files:
        mido.MidiFile(f)  # parses
    assert "notes" in capsys.readouterr().out


def test_sample_prints_text_from_a_text_checkpoint(tmp_path, capsys, cache):
    save_tiny(tmp_path / "text.pt", 50257)
    sample.main([str(tmp_path / "text.pt"), "--prompt", "", "--tokens", "5"])
    sample.main([str(tmp_path / "text.pt"), "--prompt", "The river", "--tokens", "5"])
    assert capsys.readouterr().out.count("The river") == 1
