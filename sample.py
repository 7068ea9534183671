"""
Generate from a checkpoint: text from a language stage, a .mid file from a music stage.

    python sample.py out/run/stage1-prose.pt --prompt "The river" --tokens 200
    python sample.py out/run/stage0-music.pt --midi sample.mid --tokens 1000
"""

import argparse
import sys

import torch

from model import GPT, GPTConfig
from train import load_checkpoint


def load_model(path, device="cpu"):
    ck = load_checkpoint(path, map_location=device)
    model = GPT(GPTConfig(**ck["model_config"]))
    model.load_state_dict(ck["model"])
    return model.to(device).eval(), ck


def main(argv=None):
    p = argparse.ArgumentParser(description="Sample from a prelude checkpoint (text, or MIDI for music stages).")
    p.add_argument("checkpoint", help="a stage checkpoint (OUT/stage<i>-<name>.pt) or OUT/ckpt.pt")
    p.add_argument("--prompt", default="\n", help="text prompt (language stages; default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="tokens to generate (default: %(default)s)")
    p.add_argument("--samples", type=int, default=1, help="how many samples (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=200, help="sample among the k most likely tokens (0 = all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--midi", default=None, help="music stages: write the sample(s) to this .mid path")
    p.add_argument("--device", default="cpu")
    p.add_argument("--cache-dir", default=None, help="the prepared-data cache (for the tokenizer files)")
    args = p.parse_args(argv)

    model, ck = load_model(args.checkpoint, args.device)
    vocab = ck["model_config"]["vocab_size"]
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    top_k = args.top_k or None
    if vocab == 50257:
        from data.common import cache_dir
        from data.text import gpt2_encoding
        enc = gpt2_encoding(cache_dir(args.cache_dir))
        ids = enc.encode(args.prompt, allowed_special={"<|endoftext|>"}) or [enc.eot_token]
        x = torch.tensor([ids] * args.samples, dtype=torch.long, device=args.device)
        y = model.generate(x, args.tokens, args.temperature, top_k, generator=gen)
        for row in y.tolist():
            print(enc.decode(row))
            print("-" * 60)
        return
    from data import music
    if vocab != music.VOCAB_SIZE:
        sys.exit(f"checkpoint vocabulary {vocab} is neither GPT-2 text (50257) nor music ({music.VOCAB_SIZE})")
    x = torch.full((args.samples, 1), music.BOS, dtype=torch.long, device=args.device)
    y = model.generate(x, args.tokens, args.temperature, top_k, generator=gen)
    from pathlib import Path
    out = Path(args.midi or "sample.mid")
    for i, row in enumerate(y.tolist()):
        path = out if args.samples == 1 else out.with_name(f"{out.stem}-{i}{out.suffix or '.mid'}")
        mid = music.decode(row)
        mid.save(path)
        notes = sum(1 for t in mid.tracks for m in t if m.type == "note_on" and m.velocity > 0)
        print(f"wrote {path}: {notes} notes, {mid.length:.1f} s")


if __name__ == "__main__":
    main()
