"""Where MIR's gain sits, token by token (the data-constrained report): per validation target, CE(wd) - CE(wd+mir)
of two matched runs (their val_tokens.npy), by the target's count in the training subset: a decomposition, no test."""

import numpy as np

from experiments.lib.common import read_summary
from evaluate import run_corpus, val_windows

FREQ_EDGES = (0, 1, 10, 100, 1000, 10_000, 100_000)  # bucket k: EDGES[k] <= training count < EDGES[k+1]


def token_name(corpus, i):
    """A readable name for token id i of the corpus' vocabulary (MIDI events: data/midi.py's layout)."""
    if str(corpus.info.get("tokenizer", "")).startswith("midi-events"):
        from data import midi as mu
        if not mu.NOTE_OFFSET <= i < mu.VOCAB_SIZE:
            return ("PAD", "BOS", "EOS")[i] if i < mu.NOTE_OFFSET else "[MASK]"
        p = i - mu.NOTE_OFFSET + mu.MIN_PITCH
        return (f"NOTE {'C C# D D# E F F# G G# A A# B'.split()[p % 12]}{p // 12 - 1}" if i < mu.VELOCITY_OFFSET else
                f"VELOCITY {i - mu.VELOCITY_OFFSET}" if i < mu.SHIFT_OFFSET else
                f"SHIFT {mu.SHIFT_BINS[i - mu.SHIFT_OFFSET] * 10} ms" if i < mu.DURATION_OFFSET else
                f"DURATION {mu.DURATION_BINS[i - mu.DURATION_OFFSET] * 10} ms")
    try:
        t = corpus.decode([int(i)])
        return repr(t) if isinstance(t, str) else str(i)
    except Exception:  # a decoder that needs more than one token
        return str(i)


def per_token(runs, runs_dir, top_tokens=12):
    """The gain per FREQ_EDGES bucket, pooled over the matched (wd, wd+mir) pairs (same size, U, seed) with folders in
    runs_dir (`pairs` of `pairs_of`), and the tokens with the largest summed gain, decoded; None without a pair."""
    ok = [r for r in runs if r["status"] == "done"]
    base = {(r["size"], r["U"], r["seed"]): r for r in ok if r["method"] == "wd"}
    every = [(base[k], r) for r in ok if r["method"] == "wd+mir" and (k := (r["size"], r["U"], r["seed"])) in base]
    if not (pairs := [p for p in every if all((runs_dir / r["name"] / "val_tokens.npy").exists() for r in p)]):
        return None
    labels = [f">= {lo:,}" if hi is None else f"{lo:,}-{hi - 1:,}" if hi - lo > 1 else f"{lo:,}"
              for lo, hi in zip(FREQ_EDGES, FREQ_EDGES[1:] + (None,))]
    t, tg = np.zeros((len(FREQ_EDGES), 4)), None  # per bucket: targets, sum CE wd, sum CE wd+mir, sum gain
    for rb, rm in pairs:
        corpus = run_corpus(args := read_summary(runs_dir / rb["name"])["args"])
        _, y, m = val_windows(corpus, args["block_size"])
        keep = m.numpy() > 0
        ce_b, ce_m = (np.load(runs_dir / r["name"] / "val_tokens.npy")[keep] for r in (rb, rm))
        yk = y.numpy()[keep]
        counts = np.bincount(np.asarray(corpus.train, dtype=np.int64), minlength=corpus.vocab_size)
        bucket = np.searchsorted(FREQ_EDGES, counts[yk], side="right") - 1
        np.add.at(t, bucket, np.stack([np.ones_like(ce_b), ce_b, ce_m, ce_b - ce_m], 1))
        tg = np.zeros((corpus.vocab_size, 2)) if tg is None else tg  # per token id: summed gain, targets
        np.add.at(tg, yk, np.stack([ce_b - ce_m, np.ones_like(ce_b)], 1))
    n, total, per_pair = len(pairs), t[:, 3].sum(), float(tg[:, 0].sum() / len(pairs))
    out = dict(pairs=n, pairs_of=len(every), bucket_labels=labels, total_gain_per_pair=per_pair, buckets={"all": [
        dict(bucket=labels[k], targets_per_pair=t[k, 0] / n, ce_wd=t[k, 1] / t[k, 0], ce_mir=t[k, 2] / t[k, 0],
             gain=t[k, 3] / t[k, 0], gain_per_pair=t[k, 3] / n, share=t[k, 3] / total if total > 0 else None)
        for k in range(len(FREQ_EDGES)) if t[k, 0] > 0]})
    order = [i for i in np.argsort(-tg[:, 0]) if tg[i, 1] > 0][:top_tokens]
    out["top_tokens"] = [dict(id=int(i), token=token_name(corpus, i), targets_per_pair=tg[i, 1] / n,
                              mean_gain=tg[i, 0] / tg[i, 1], gain_per_pair=tg[i, 0] / n,
                              share=tg[i, 0] / tg[:, 0].sum() if tg[:, 0].sum() > 0 else None) for i in order]
    return out
