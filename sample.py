"""
Generate from a checkpoint: text from a language stage, a .mid file from a music stage, token
strings from procedural and task stages; masked-diffusion (MDLM) checkpoints by iterative
unmasking. A [MASK] row (MIR, MDLM) is never emitted.

    python sample.py out/run/stage1-prose.pt --prompt "The river" --tokens 200
    python sample.py out/run/stage0-music.pt --midi sample.mid --tokens 1000
    python sample.py out/mdlm/stage0-prose.pt --tokens 128 --steps 64     # MDLM: 2 tokens a step
"""

import sys
from pathlib import Path

import torch

import diffusion
import checkpoint
from checkpoint import read_checkpoint
from data.common import ArgumentParser, UserError


def load_model(path, device="cpu", flag="checkpoint"):
    """(model in eval mode, checkpoint) of a checkpoint the user named (`flag` says where)."""
    return checkpoint.load_model(read_checkpoint(path, flag, map_location=device), device)


def real_vocab(ck):
    """Token ids a sample may contain: the corpus vocabulary, without the [MASK] row."""
    cfg = ck["model_config"]
    if ck.get("vocab") is not None:
        return ck["vocab"]
    return cfg["vocab_size"] - (1 if (ck.get("args") or {}).get("mir") or not cfg.get("causal", True) else 0)


def generate(model, ck, prompt_ids, n_tokens, samples, temperature, top_k, gen, steps):
    """(samples, len(prompt) + n_tokens) ids: autoregressive for causal models, iterative
    unmasking (diffusion.sample) for MDLM checkpoints (the prompt is then ignored)."""
    vocab, device = real_vocab(ck), next(model.parameters()).device
    if not model.config.causal:
        length = min(n_tokens, model.config.block_size)
        return diffusion.sample(model, samples, length, mask_id=vocab, steps=steps or length, generator=gen,
                                temperature=temperature, vocab_limit=vocab)
    x = torch.tensor([prompt_ids] * samples, dtype=torch.long, device=device)
    return model.generate(x, n_tokens, temperature, top_k, generator=gen, vocab_limit=vocab)


def main(argv=None):
    p = ArgumentParser(description="Sample from a prelude checkpoint (text, MIDI for music stages, token "
                                   "strings for procedural and task stages; MDLM by iterative unmasking).")
    p.add_argument("checkpoint", help="a stage checkpoint (OUT/stage<i>-<name>.pt) or OUT/ckpt.pt")
    p.add_argument("--prompt", default="\n", help="text prompt (language stages; default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="tokens to generate (default: %(default)s)")
    p.add_argument("--samples", type=int, default=1, help="how many samples (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=200, help="sample among the k most likely tokens (0 = all)")
    p.add_argument("--steps", type=int, default=None,
                   help="MDLM checkpoints: unmasking steps (default: one per token; fewer reveal several at once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--midi", default=None,
                   help="music stages: write the sample(s) to this .mid path, and beside each a piano-roll .png "
                        "(pitch against time, velocity as shade)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--cache-dir", default=None, help="the prepared-data cache (for the tokenizer files)")
    args = p.parse_args(argv)
    for flag in ("tokens", "samples", "steps"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            p.error(f"--{flag} must be positive, got {getattr(args, flag)}")
    if args.midi and not Path(args.midi).resolve().parent.is_dir():
        p.error(f"--midi {args.midi}: no folder {Path(args.midi).parent}; create it or give another path")
    try:
        sample(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def write_piano_roll(notes, path, title="", ax=None):
    """A piano-roll PNG of notes (data/midi.py Notes): pitch against time, velocity as shade.
    With `ax`, draws into that matplotlib axis instead (the ladder report puts a real piece and
    a sampled one side by side) and returns it; else writes PATH atomically and returns it."""
    import os
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from data.midi import piano_roll
    roll, lo, frame = piano_roll(notes)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 3.5))
    if roll.size:
        ax.imshow(roll, origin="lower", aspect="auto", cmap="Greys", vmin=0, vmax=127, interpolation="nearest",
                  extent=(0, roll.shape[1] * frame, lo - 0.5, lo + roll.shape[0] - 0.5))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("MIDI pitch")
    ax.set_title(title or f"{len(notes)} notes", fontsize=9)
    if fig is None:
        return ax
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    plt.close(fig)
    return path


def sample(args):
    model, ck = load_model(args.checkpoint, args.device)
    tokenizer = ck.get("tokenizer") or {50257: "gpt2", 160: "midi-events-160"}.get(real_vocab(ck))
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    top_k = args.top_k or None
    if tokenizer == "gpt2":
        from data.common import cache_dir
        from data.text import gpt2_encoding
        enc = gpt2_encoding(cache_dir(args.cache_dir))
        ids = enc.encode(args.prompt, allowed_special={"<|endoftext|>"}) or [enc.eot_token]
        for row in generate(model, ck, ids, args.tokens, args.samples, args.temperature, top_k, gen, args.steps).tolist():
            print(enc.decode(row))
            print("-" * 60)
        return
    if tokenizer == "midi-events-160":
        from data import music
        from data.midi import midi_to_notes
        y = generate(model, ck, [music.BOS], args.tokens, args.samples, args.temperature, top_k, gen, args.steps)
        out = Path(args.midi or "sample.mid")
        for i, row in enumerate(y.tolist()):
            path = out if args.samples == 1 else out.with_name(f"{out.stem}-{i}{out.suffix or '.mid'}")
            mid = music.decode(row)
            mid.save(path)
            notes = sum(1 for t in mid.tracks for m in t if m.type == "note_on" and m.velocity > 0)
            roll = write_piano_roll(midi_to_notes(path), path.with_suffix(".png"), f"sampled: {path.name}")
            print(f"wrote {path}: {notes} notes, {mid.length:.1f} s (piano roll: {roll})")
        return
    # procedural / task / other vocabularies: the ids, decoded where the stage's module can
    decode = None
    if str(tokenizer).startswith("tasks-"):
        from data.tasks import decode
    y = generate(model, ck, [0], args.tokens, args.samples, args.temperature, top_k, gen, args.steps)
    for row in y.tolist():
        print(decode(row) if decode else " ".join(map(str, row)))


if __name__ == "__main__":
    main()
