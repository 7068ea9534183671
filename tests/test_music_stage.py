"""The music stages as corpora and inside train.py (fixtures written with mido)."""
import json
import warnings

import mido
import numpy as np
import pytest

import torch

import data
import train
import transfer
from data import music
from data.common import select_chunks
from flags import parse_args
from model import group_of


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
def test_music_then_text_runs_with_selective_transfer(cache, midi_dir, text_dir, tmp_path, monkeypatch):
    """music (160 tokens) -> text (50,257): the text stage starts with the music stage's final
    attention, MLP and norm tensors, and a fresh embedding/head and fresh positions (the paper's
    list). The text model is caught right after the transfer, before it trains."""
    fresh, at_transfer = {}, {}
    real = transfer.transfer

    def spy(src_state, dst_model, groups, **kw):
        fresh.update({k: v.detach().clone() for k, v in dst_model.state_dict().items()})
        report = real(src_state, dst_model, groups, **kw)
        at_transfer.update({k: v.detach().clone() for k, v in dst_model.state_dict().items()})
        return report
    monkeypatch.setattr(transfer, "transfer", spy)
    out = tmp_path / "run"
    args = parse_args(["--stages", f"music,text:{text_dir}", "--music-dir", str(midi_dir),
                       "--music-chunks", "50", "--iters", "3", "--eval-interval", "3",
                       "--out", str(out), "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
                       "--block-size", "16", "--batch-size", "4", "--eval-iters", "2",
                       "--no-progress", "--threads", "1"])
    summary = train.run(args)
    assert [s["vocab_size"] for s in summary["stages"]] == [160, 50257]
    saved = json.loads((out / "summary.json").read_text())
    assert saved["stages"][0]["name"] == "music"
    music_end = torch.load(out / "stage0-music.pt", weights_only=True)["model"]
    assert at_transfer, "the text stage received no transfer"
    groups = {}
    for name, p in at_transfer.items():
        if name == "residual_scale":
            continue
        g = group_of(name)
        groups.setdefault(g, []).append(name)
        if g in ("attn", "mlp", "norm"):
            assert torch.equal(p, music_end[name]), name               # copied from the music stage
            assert g == "norm" or not torch.equal(p, fresh[name]), name  # (a matrix that moved)
        else:                                                          # left at the fresh init
            assert torch.equal(p, fresh[name]), name
            if g == "pos":
                assert not torch.equal(p, music_end[name]), name
            else:                                                      # embed and head: the new vocabulary
                assert p.shape == (50257, 16) and music_end[name].shape == (160, 16)
    assert set(groups) == {"embed", "head", "pos", "attn", "mlp", "norm"}
    assert len(groups["norm"]) == 2 * 2 * 2 + 2                         # ln_1, ln_2 per block + ln_f, w and b
