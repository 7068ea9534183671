"""
Generate from a checkpoint: text from a language stage, a .mid file from a music stage, token
strings from procedural and task stages; masked-diffusion (MDLM) checkpoints by iterative
unmasking. A [MASK] row (MIR, MDLM) is never emitted.

    python sample.py out/run/stage1-prose.pt --prompt "The river" --tokens 200
    python sample.py out/run/stage0-music.pt --tokens 1000      # out/run/stage0-music-sample.mid (+ .png)
    python sample.py out/run/stage0-music.pt --midi piece.mid --prompt opening.mid   # continues opening.mid
    python sample.py out/mdlm/stage0-prose.pt --tokens 128 --steps 64     # MDLM: 2 tokens a step

A music sample is written beside its checkpoint unless --midi says where. A flag the checkpoint
would ignore (a text --prompt for music, --steps for an autoregressive model, --midi for text)
is refused in one line, as is a negative or non-finite --temperature (0 = greedy), or --tokens over
1,000,000 (MAX_TOKENS). Above 500 tokens a progress bar shows on stderr; Ctrl-C prints (or, for music,
writes) the tokens drawn so far, says so in one line and exits 130. A prompt longer than the model's
context is said in one line: the model reads only its last block_size tokens.
"""

import io
import math
import sys
from pathlib import Path

import torch

import diffusion
import checkpoint
from checkpoint import check_device, read_checkpoint
from data.common import ArgumentParser, UserError, atomic_write_bytes, check_output


def load_model(path, device="cpu", flag="checkpoint"):
    """(model in eval mode, checkpoint) of a checkpoint the user named (`flag` says where)."""
    return checkpoint.load_model(read_checkpoint(path, flag, map_location=device), device, name=path)


def real_vocab(ck):
    """Token ids a sample may contain: the corpus vocabulary, without the [MASK] row."""
    cfg = ck["model_config"]
    if ck.get("vocab") is not None:
        return ck["vocab"]
    return cfg["vocab_size"] - (1 if (ck.get("args") or {}).get("mir") or not cfg.get("causal", True) else 0)


MAX_TOKENS = 1_000_000  # --tokens' cap: one pass of the model a token (~10-20 ms for the default model on a CPU)
PROGRESS_FROM = 500     # a progress bar on stderr for samples longer than this


class Stopped(KeyboardInterrupt):
    """Ctrl-C during generate(): `partial` holds the ids drawn so far (the prompt and every complete step)."""

    def __init__(self, partial):
        super().__init__()
        self.partial = partial


def generate(model, ck, prompt_ids, n_tokens, samples, temperature, top_k, gen, steps, progress=False):
    """(samples, len(prompt) + n_tokens) ids: autoregressive for causal models, iterative
    unmasking (diffusion.sample) for MDLM checkpoints (the prompt is then ignored). Autoregressive:
    the tokens of GPT.generate, one step at a time into a tensor of the final length (no copy of the
    whole sample per token), a tqdm bar on stderr with `progress`; Ctrl-C raises Stopped."""
    vocab, device = real_vocab(ck), next(model.parameters()).device
    if not model.config.causal:
        length = min(n_tokens, model.config.block_size)
        return diffusion.sample(model, samples, length, mask_id=vocab, steps=steps or length, generator=gen,
                                temperature=temperature, vocab_limit=vocab)
    from tqdm import tqdm
    n, T = len(prompt_ids), model.config.block_size
    out = torch.empty(samples, n + n_tokens, dtype=torch.long, device=device)
    out[:, :n] = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    t = n
    with tqdm(total=n_tokens, desc="sampling", unit="token", disable=not progress, file=sys.stderr) as bar:
        try:
            for t in range(n, n + n_tokens):
                out[:, t] = model.generate(out[:, max(0, t - T):t], 1, temperature, top_k, generator=gen,
                                           vocab_limit=vocab)[:, -1]
                bar.update()
        except KeyboardInterrupt:
            raise Stopped(out[:, :t]) from None
    return out


def main(argv=None):
    p = ArgumentParser(prog="sample.py",
                       description="Sample from a prelude checkpoint (text, MIDI for music stages, token "
                                   "strings for procedural and task stages; MDLM by iterative unmasking).")
    p.add_argument("checkpoint", help="a stage checkpoint (OUT/stage<i>-<name>.pt) or OUT/ckpt.pt")
    p.add_argument("--prompt", default=None,
                   help="what the sample continues: text for language stages (default: a newline); a .mid file "
                        "for music stages (default: none, from the start token); token ids separated by spaces "
                        "for procedural stages, the task's own text (e.g. '12345+54321=') for task stages "
                        "(default: id 0); MDLM checkpoints take none")
    p.add_argument("--tokens", type=int, default=200,
                   help=f"tokens to generate, at most {MAX_TOKENS:,}: each is one pass of the model (~10-20 ms for "
                        "the default model on a CPU: a million take hours); a progress bar on stderr above "
                        f"{PROGRESS_FROM}; Ctrl-C keeps the tokens drawn so far (default: %(default)s)")
    p.add_argument("--samples", type=int, default=1, help="how many samples (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="softmax temperature, zero or more; 0 = greedy (always the most likely token) "
                        "(default: %(default)s)")
    p.add_argument("--top-k", type=int, default=None,
                   help="autoregressive checkpoints: sample among the k most likely tokens (0 = all; default 200)")
    p.add_argument("--steps", type=int, default=None,
                   help="MDLM checkpoints: unmasking steps (default: one per token; fewer reveal several at once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--midi", "--out", dest="midi", default=None, metavar="PATH",
                   help="music stages: write the sample(s) to this .mid path (a folder: CKPT-sample.mid in it), "
                        "and beside each a piano-roll .png (pitch against time, velocity as shade); default: "
                        "beside the checkpoint, <checkpoint>-sample.mid")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--cache-dir", default=None,
                   help="text stages: the prepared-data cache, for the GPT-2 tokenizer files "
                        "(default: $PRELUDE_CACHE or ~/.cache/prelude)")
    p.add_argument("--verbose", action="store_true",
                   help="with an error, its details too (e.g. every tensor of a checkpoint that does not fit)")
    args = p.parse_args(argv)
    for flag in ("tokens", "samples", "steps"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            p.error(f"--{flag} must be positive, got {getattr(args, flag)}")
    if args.tokens > MAX_TOKENS:
        p.error(f"--tokens {args.tokens:,} is more than the cap of {MAX_TOKENS:,} (each token is one pass of the "
                f"model: a million take hours on a CPU); give --tokens {MAX_TOKENS} or fewer, several runs for more")
    if not math.isfinite(args.temperature) or args.temperature < 0:
        p.error(f"--temperature must be a finite number, zero or more (0 = greedy), got {args.temperature}")
    if args.top_k is not None and args.top_k < 0:
        p.error(f"--top-k must be zero (all tokens) or positive, got {args.top_k}")
    if not -2 ** 63 <= args.seed < 2 ** 64:
        p.error(f"--seed {args.seed} is out of range; give a seed from 0 to 2**64 - 1")
    try:
        check_device(args.device)
        if args.midi is not None:  # a path the user gave: checked before the checkpoint is read
            music_output(args.midi, args.checkpoint)
        sample(args)
    except UserError as e:
        print(f"sample.py: error: {' '.join(str(e).split())}", file=sys.stderr)
        if args.verbose and e.details:
            print(e.details, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:  # Stopped's partial sample is printed or written, and says so, in sample()
        print(f"sample.py: {e.args[0] if e.args else 'interrupted (Ctrl-C); nothing more printed or written'}",
              file=sys.stderr)
        sys.exit(130)


def write_piano_roll(notes, path, title="", ax=None):
    """A piano-roll PNG of notes (data/midi.py Notes): pitch against time, velocity as shade.
    With `ax`, draws into that matplotlib axis instead (the ladder report puts a real piece and
    a sampled one side by side) and returns it; else writes PATH atomically and returns it."""
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
    path, png = Path(path), io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())  # (a full disk: a DiskFull of one line, no temporary file left)
    return path


def sample(args):
    model, ck = load_model(args.checkpoint, args.device)
    tokenizer = ck.get("tokenizer") or {50257: "gpt2", 160: "midi-events-160"}.get(real_vocab(ck))
    kind = {"gpt2": "text", "midi-events-160": "music"}.get(tokenizer) or \
        ("task" if str(tokenizer).startswith("tasks-") else "ids")
    check_flags(args, model, kind)  # a flag this checkpoint would ignore, before any work
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    top_k = 200 if args.top_k is None else (args.top_k or None)
    if kind == "text":
        enc = text_encoding(args.cache_dir)
        prompt = "\n" if args.prompt is None else args.prompt
        ids = enc.encode(prompt, allowed_special={"<|endoftext|>"}) or [enc.eot_token]
        y, stopped = draw(args, model, ck, ids, top_k, gen)
        for row in y.tolist():
            print(enc.decode(row))
            print("-" * 60)
        if stopped:
            raise KeyboardInterrupt(f"{stopped}: printed them above")
        return
    if kind == "music":
        from data import music
        from data.midi import midi_to_notes
        out = music_output(args.midi, args.checkpoint)  # refused before sampling, not after
        ids = music_prompt(args.prompt)
        y, stopped = draw(args, model, ck, ids, top_k, gen)
        for i, row in enumerate(y.tolist()):
            path = out if args.samples == 1 else out.with_name(f"{out.stem}-{i}{out.suffix}")
            mid, midi_bytes = music.decode(row), io.BytesIO()
            mid.save(file=midi_bytes)
            atomic_write_bytes(path, midi_bytes.getvalue())
            notes = sum(1 for t in mid.tracks for m in t if m.type == "note_on" and m.velocity > 0)
            roll = write_piano_roll(midi_to_notes(path), path.with_suffix(".png"), f"sampled: {path.name}")
            print(f"wrote {path}: {notes} notes, {mid.length:.1f} s (piano roll: {roll})")
        if stopped:
            raise KeyboardInterrupt(f"{stopped}: wrote them (above)")
        return
    # procedural / task / other vocabularies: the ids, decoded where the stage's module can
    decode = None
    if kind == "task":
        from data.tasks import decode
        ids = [0] if args.prompt is None else task_prompt(args.prompt)
    else:
        ids = [0] if args.prompt is None else id_prompt(args.prompt, real_vocab(ck))
    y, stopped = draw(args, model, ck, ids, top_k, gen)
    for row in y.tolist():
        print(decode(row) if decode else " ".join(map(str, row)))
    if stopped:
        raise KeyboardInterrupt(f"{stopped}: printed them above")


def draw(args, model, ck, ids, top_k, gen):
    """(ids, None) of generate() for the command, or (the ids drawn so far, what was drawn) after Ctrl-C; a
    prompt longer than the model's context is said in one line (the model reads only its last block_size)."""
    T = model.config.block_size
    if model.config.causal and len(ids) > T:
        print(f"sample.py: note: the prompt is {len(ids):,} tokens, more than the model's context: it reads the last "
              f"{T} of them (the first {len(ids) - T:,} are printed, not read); give a shorter --prompt to see all of "
              "it read", file=sys.stderr)
    try:
        return generate(model, ck, ids, args.tokens, args.samples, args.temperature, top_k, gen, args.steps,
                        progress=args.tokens > PROGRESS_FROM), None
    except Stopped as e:
        done = e.partial.shape[1] - len(ids)
        return e.partial, f"interrupted (Ctrl-C) after {done:,} of {args.tokens:,} tokens"


def check_flags(args, model, kind):
    """The flags this checkpoint would otherwise ignore without a word are refused, each in one line."""
    ckpt = args.checkpoint
    if not model.config.causal:
        if args.prompt is not None:
            raise UserError(f"--prompt: {ckpt} is an MDLM checkpoint, which samples without a prompt (it unmasks "
                            "from all [MASK]); leave out --prompt")
        if args.top_k is not None:
            raise UserError(f"--top-k: {ckpt} is an MDLM checkpoint, which samples from every token; leave out --top-k")
        if args.tokens > model.config.block_size:
            raise UserError(f"--tokens {args.tokens}: {ckpt} is an MDLM checkpoint, which samples at most its context "
                            f"of {model.config.block_size} tokens at once; give --tokens {model.config.block_size} "
                            "or fewer")
    elif args.steps is not None:
        raise UserError(f"--steps: {ckpt} is autoregressive (one token a step); --steps is for MDLM checkpoints: "
                        "leave it out")
    if args.midi is not None and kind != "music":
        raise UserError(f"--midi {args.midi}: {ckpt} is not a music checkpoint (its samples are printed); leave out "
                        "--midi")


def text_encoding(cache):
    """The GPT-2 encoding, its files from the cache folder: an unusable folder is a UserError."""
    from data.common import cache_dir
    from data.text import gpt2_encoding
    name = f"--cache-dir {cache}" if cache else "the cache folder ($PRELUDE_CACHE or ~/.cache/prelude)"
    folder = cache_dir(cache)  # (an unusable one: a UserError of one line)
    try:
        return gpt2_encoding(folder)
    except OSError as e:
        raise UserError(f"{name}: cannot write the GPT-2 tokenizer files in {folder} ({e.strerror or e}); give "
                        "--cache-dir a writable folder") from None


def music_output(midi, checkpoint):
    """Where a music sample goes: --midi PATH (a folder: <checkpoint>-sample.mid in it), by default
    beside the checkpoint; a path without a suffix gets .mid. Checked writable (one line if not)."""
    name = f"{Path(checkpoint).stem}-sample.mid"
    if midi is not None and not str(midi).strip():
        raise UserError(f"--midi: an empty path; give a file such as {name}, or leave out --midi to write it "
                        "beside the checkpoint")
    out = Path(checkpoint).parent / name if midi is None else Path(midi)
    if midi is not None and out.is_dir():
        out = out / name
    if not out.suffix:
        out = out.with_suffix(".mid")
    if midi is not None:
        return check_output(out, "--midi", example=name)
    try:
        return check_output(out, "output", example=name)
    except UserError as e:
        raise UserError(f"{e} (the default, beside the checkpoint), or give --midi PATH") from None


def music_prompt(prompt):
    """[BOS] and the tokens of the .mid file a music sample continues (none: [BOS] alone); text,
    a missing or unreadable file is a UserError saying what a music checkpoint takes."""
    from data.midi import BOS, MidiError, encode
    if prompt is None:
        return [BOS]
    takes = "a music checkpoint takes a .mid file to continue (--prompt piece.mid), or no --prompt (it starts " \
            "from the start token)"
    path = Path(prompt)
    if not path.is_file():
        if path.suffix.lower() in (".mid", ".midi"):
            raise UserError(f"--prompt {prompt}: no such file; {takes}")
        raise UserError(f"--prompt {prompt!r}: a music checkpoint cannot encode text; it takes a .mid file to "
                        "continue (--prompt piece.mid), or no --prompt (it starts from the start token)")
    try:
        tokens = encode(path)
    except (MidiError, OSError):
        raise UserError(f"--prompt {prompt}: not a readable MIDI file; {takes}") from None
    if not tokens:
        raise UserError(f"--prompt {prompt}: the MIDI file has no notes to continue; {takes}")
    return [BOS] + list(tokens)


def task_prompt(text):
    """Token ids of a task stage's text, as data.tasks.decode writes it ('12345+54321=', 'k3 v17 ? k3')."""
    import re
    from data.tasks import KEY0, N_KEYS, N_VALUES, SYMBOLS, VAL0
    single = {c: i for i, c in enumerate(SYMBOLS) if len(c) == 1}
    takes = (f"it takes the digits, {' '.join(c for c in single if not c.isdigit())}, keys k0..k"
             f"{N_KEYS - 1} and values v1..v{N_VALUES}, e.g. '12345+54321=' or 'k3 v17 k8 v2 ? k3'")
    ids = []
    for m in re.finditer(r"\s+|k(\d+)|v(\d+)|(.)", text):
        key, value, char = m.groups()
        if key is not None and int(key) < N_KEYS:
            ids.append(KEY0 + int(key))
        elif value is not None and 1 <= int(value) <= N_VALUES:
            ids.append(VAL0 + int(value) - 1)
        elif char in single:
            ids.append(single[char])
        elif not m.group().isspace():
            raise UserError(f"--prompt {text!r}: a task checkpoint cannot encode {m.group()!r}; {takes}")
    if not ids:
        raise UserError(f"--prompt {text!r}: a task checkpoint needs at least one token; {takes}")
    return ids


def id_prompt(text, vocab):
    """Token ids separated by spaces (or commas), each below the checkpoint's vocabulary."""
    takes = f"this checkpoint (vocabulary {vocab}) takes token ids separated by spaces, each from 0 to {vocab - 1}"
    words = text.replace(",", " ").split()
    if not words:
        raise UserError(f"--prompt {text!r}: no ids; {takes}")
    bad = next((w for w in words if not (w.isascii() and w.isdigit() and int(w) < vocab)), None)
    if bad is not None:
        raise UserError(f"--prompt {text!r}: cannot encode {bad!r}; {takes}")
    return [int(w) for w in words]


if __name__ == "__main__":
    main()
