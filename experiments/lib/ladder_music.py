"""The ladder's music stage (arXiv 2604.21265: MIDI performances, a 160-token event vocabulary): its corpus, the check
that it holds the chunks a plan asks for, a real piece beside one sampled from a checkpoint (piano rolls, MIDI)."""

from data.common import UserError

MIDI_FILES = ("music-real.mid", "music-sampled.mid")


def music_corpus(a, stage=None):
    import data
    stage = stage or a.music_stage
    try:
        return data.load(stage, music_dir=a.music_dir, synthetic_tokens=a.synthetic_tokens,
                         block_size=a.block_size, seed=a.data_seed)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"stage {stage!r}: {e}") from None


def check_music_chunks(a, runs):
    """Before anything trains: every music stage of the plan holds 3N chunks (else one clear error)."""
    for stage in {r.meta["stage"] for r in runs.values() if r.meta["kind"] == "music"}:
        if (n := len(music_corpus(a, stage).train) // (a.block_size + 1)) < 3 * a.music_chunks:
            raise UserError(f"stage {stage!r} has {n:,} training chunks of {a.block_size + 1} tokens; --music-chunks "
                            f"{a.music_chunks} needs 3N = {3 * a.music_chunks:,}: lower it (at most {n // 3:,})")


def real_and_sampled(a, checkpoint, path, tokens=512):
    """PATH (if the checkpoint is there): the first `tokens` tokens of the validation stream from its first piece start
    (left) beside as many sampled from BOS (right; temperature 0.8, top-k 200, as sample.py), as notes; MIDI_FILES."""
    import io
    from pathlib import Path
    import torch
    import sample
    from data.midi import BOS, notes_to_midi, tokens_to_notes
    from experiments.lib import common
    if not Path(checkpoint).exists():
        return
    val = music_corpus(a).val
    first = next((i for i, t in enumerate(val[: 50 * tokens]) if int(t) == BOS), 0)
    model, ck = sample.load_model(checkpoint)
    with torch.no_grad():
        row = sample.generate(model, ck, [BOS], tokens, 1, 0.8, 200, torch.Generator().manual_seed(0), None)[0]
    real, fake = (tokens_to_notes(x) for x in ([int(t) for t in val[first:first + tokens]], row.tolist()))
    for name, notes in zip(MIDI_FILES, (real, fake)):  # (a temporary name, then a rename)
        notes_to_midi(notes).save(file=(midi := io.BytesIO()))
        common.atomic_write_bytes(Path(path).with_name(name), midi.getvalue())
    fig, axes = common.pyplot().subplots(1, 2, figsize=(13, 3.8), sharey=True)
    sample.write_piano_roll(real, None, f"real ({a.music_stage}, validation): {len(real)} notes", ax=axes[0])
    sample.write_piano_roll(fake, None, f"sampled from {Path(checkpoint).parent.name}: {len(fake)} notes", ax=axes[1])
    common.save_figure(fig, path)
