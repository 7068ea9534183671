"""
The ladder report's look and listen at the music stage: a real piece and one sampled from a music
checkpoint, side by side as piano rolls (pitch against time, velocity as shade; sample.write_piano_roll)
and as two playable .mid files beside the figure, and how many training chunks the music corpus holds
(N and 3N are scaled to it).
arXiv 2604.21265 ("Listen and Chant Before You Read"): stage 1 trains on MIDI performances in a
160-token event vocabulary; the paper's volume contrast is 12k vs 36k chunks of MAESTRO.

    n = train_chunks(a)                                    # chunks of block_size + 1 tokens
    real_and_sampled(a, checkpoint, out / "music.png")     # the figure + music-real.mid, music-sampled.mid
"""

MIDI_FILES = ("music-real.mid", "music-sampled.mid")  # beside the figure: the two pieces, to listen to

from data.common import UserError


def music_corpus(a):
    import data
    try:
        return data.load(a.music_stage, music_dir=a.music_dir, synthetic_tokens=a.synthetic_tokens,
                         block_size=a.block_size, seed=a.data_seed)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"stage {a.music_stage!r}: {e}") from None


def train_chunks(a):
    """Training chunks of block_size + 1 tokens in the real music stage (3N must fit in them)."""
    return len(music_corpus(a).train) // (a.block_size + 1)


def real_piece(val, tokens):
    """The first `tokens` tokens of the validation stream from its first piece start (BOS)."""
    from data.midi import BOS
    starts = [i for i, t in enumerate(val[: 50 * tokens]) if int(t) == BOS]
    first = starts[0] if starts else 0
    return [int(t) for t in val[first:first + tokens]]


def sampled_piece(checkpoint, tokens, seed=0):
    """`tokens` tokens sampled from a music checkpoint from BOS (temperature 0.8, top-k 200, as sample.py)."""
    import torch
    import sample
    from data.midi import BOS
    model, ck = sample.load_model(checkpoint)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        row = sample.generate(model, ck, [BOS], tokens, 1, 0.8, 200, gen, None)[0]
    return row.tolist()


def real_and_sampled(a, checkpoint, path, tokens=512):
    """Write PATH: the real piece (left) and a sample of the checkpoint (right), each its first `tokens`
    tokens decoded to notes (data.midi.tokens_to_notes), and beside it MIDI_FILES, the same two pieces
    as playable .mid files. Returns PATH, or None without the checkpoint."""
    import os
    from pathlib import Path
    import sample
    from data.midi import notes_to_midi, tokens_to_notes
    from experiments.lib import common
    if not Path(checkpoint).exists():
        return None
    real = tokens_to_notes(real_piece(music_corpus(a).val, tokens))
    fake = tokens_to_notes(sampled_piece(checkpoint, tokens))
    for name, notes in zip(MIDI_FILES, (real, fake)):
        target = Path(path).with_name(name)
        tmp = target.with_name(f".{name}.tmp")
        notes_to_midi(notes).save(tmp)
        os.replace(tmp, target)
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.8), sharey=True)
    sample.write_piano_roll(real, None, f"real ({a.music_stage}, validation): {len(real)} notes", ax=axes[0])
    sample.write_piano_roll(fake, None, f"sampled from {Path(checkpoint).parent.name}: {len(fake)} notes", ax=axes[1])
    fig.tight_layout()
    common.save_figure(fig, path)
    return path
