"""
Where MIR's gain sits, token by token (the data-constrained report's section 5): per validation
target, gain = CE(wd) - CE(wd+mir) of two matched runs (same size, U and seed), read from their
val_tokens.npy (lib/evaluate.evaluate_run), bucketed by how often the target token occurs in the
run's training subset. A decomposition of the runs' loss difference, not a test of it.
Xu et al., arXiv 2606.06888 (MIR: Loss = NTP(x, y) + lambda NTP(x^, y), x^ a masked copy of x).
"""

import numpy as np

from experiments.lib.common import read_summary
from experiments.lib.evaluate import run_corpus, val_windows

FREQ_EDGES = (0, 1, 10, 100, 1000, 10_000, 100_000)  # bucket k: EDGES[k] <= training count < EDGES[k+1]


def token_name(corpus, i):
    """A readable name for token id i of the corpus' vocabulary."""
    if str(corpus.info.get("tokenizer", "")).startswith("midi-events"):
        from data import midi as mu
        if i < mu.NOTE_OFFSET:
            return ("PAD", "BOS", "EOS")[i]
        if i < mu.VELOCITY_OFFSET:
            p = i - mu.NOTE_OFFSET + mu.MIN_PITCH
            return f"NOTE {('C', 'C#', 'D', 'D#', 'E', 'F', 'F#', 'G', 'G#', 'A', 'A#', 'B')[p % 12]}{p // 12 - 1}"
        if i < mu.SHIFT_OFFSET:
            return f"VELOCITY {i - mu.VELOCITY_OFFSET}"
        if i < mu.DURATION_OFFSET:
            return f"SHIFT {mu.SHIFT_BINS[i - mu.SHIFT_OFFSET] * 10} ms"
        if i < mu.VOCAB_SIZE:
            return f"DURATION {mu.DURATION_BINS[i - mu.DURATION_OFFSET] * 10} ms"
        return "[MASK]"
    try:
        t = corpus.decode([int(i)])
        return repr(t) if isinstance(t, str) else str(i)
    except Exception:  # a decoder that needs more than one token
        return str(i)


def matched_pairs(runs):
    """(wd record, wd+mir record) of every (size, U, seed) both methods finished."""
    ok = [r for r in runs if r["status"] == "done"]
    base = {(r["size"], r["U"], r["seed"]): r for r in ok if r["method"] == "wd"}
    return [(base[(r["size"], r["U"], r["seed"])], r) for r in ok
            if r["method"] == "wd+mir" and (r["size"], r["U"], r["seed"]) in base]


def per_token(runs, runs_dir, top_tokens=12, keep_first=8):
    """Where MIR's gain sits. Per validation target t of a matched pair, g_t = CE_wd(t) - CE_mir(t),
    summed into FREQ_EDGES buckets of the target token's count in that run's training subset;
    pooled over all pairs, per U and per size. Also the tokens with the largest summed gain (and
    the most negative), decoded, and the gain by position in the window (MIR never masks the
    first keep_first positions). None without a matched pair."""
    pairs = matched_pairs(runs)
    if not pairs:
        return None
    nb = len(FREQ_EDGES)
    labels = [f"{lo:,}-{hi - 1:,}" if hi - lo > 1 else f"{lo:,}" for lo, hi in zip(FREQ_EDGES, FREQ_EDGES[1:])]
    labels.append(f">= {FREQ_EDGES[-1]:,}")
    agg, n_pairs = {}, {}  # key -> per bucket [targets, sum CE wd, sum CE wd+mir, sum gain]; key -> pairs
    for rb, rm in pairs:
        args = read_summary(runs_dir / rb["name"])["args"]
        corpus = run_corpus(args)
        _, y, m = val_windows(corpus, args["block_size"])
        keep = m.numpy() > 0
        ce_b = np.load(runs_dir / rb["name"] / "val_tokens.npy")
        ce_m = np.load(runs_dir / rm["name"] / "val_tokens.npy")
        yk, gain = y.numpy()[keep], (ce_b - ce_m)[keep]
        counts = np.bincount(np.asarray(corpus.train, dtype=np.int64), minlength=corpus.vocab_size)
        bucket = np.searchsorted(FREQ_EDGES, counts[yk], side="right") - 1
        for key in ("all", f"U={rb['U']}", f"size={rb['size']}"):
            np.add.at(agg.setdefault(key, np.zeros((nb, 4))), bucket,
                      np.stack([np.ones_like(gain), ce_b[keep], ce_m[keep], gain], 1))
            n_pairs[key] = n_pairs.get(key, 0) + 1
        if "tokens" not in agg:
            agg["tokens"] = np.zeros((corpus.vocab_size, 2))  # per token id: summed gain, targets
            agg["position"] = np.zeros((y.shape[1], 2))       # per position in the window: likewise
        np.add.at(agg["tokens"], yk, np.stack([gain, np.ones_like(gain)], 1))
        agg["position"] += np.stack([((ce_b - ce_m) * keep).sum(0), keep.sum(0)], 1)

    def table(t, n):
        total = t[:, 3].sum()
        return [dict(bucket=labels[k], targets_per_pair=t[k, 0] / n, ce_wd=t[k, 1] / t[k, 0], ce_mir=t[k, 2] / t[k, 0],
                     gain=t[k, 3] / t[k, 0], gain_per_pair=t[k, 3] / n, share=t[k, 3] / total if total > 0 else None)
                for k in range(nb) if t[k, 0] > 0]
    tg, pos = agg.pop("tokens"), agg.pop("position")
    out = {"pairs": len(pairs), "bucket_labels": labels, "total_gain_per_pair": float(tg[:, 0].sum() / len(pairs)),
           "buckets": {key: table(t, n_pairs[key]) for key, t in agg.items()}}
    corpus = run_corpus(read_summary(runs_dir / pairs[0][0]["name"])["args"])
    tok = lambda i: dict(id=int(i), token=token_name(corpus, i), targets_per_pair=tg[i, 1] / len(pairs),  # noqa: E731
                         mean_gain=tg[i, 0] / tg[i, 1], gain_per_pair=tg[i, 0] / len(pairs),
                         share=tg[i, 0] / tg[:, 0].sum() if tg[:, 0].sum() > 0 else None)
    order = [i for i in np.argsort(-tg[:, 0]) if tg[i, 1] > 0]
    out["top_tokens"] = [tok(i) for i in order[:top_tokens]]
    out["bottom_tokens"] = [tok(i) for i in order[::-1][:5]]
    T = len(pos)
    spans = sorted({(0, min(keep_first, T)), (min(keep_first, T), min(32, T)), (min(32, T), T)})
    out["by_position"] = [dict(positions=f"{lo}-{hi - 1}", gain=float(pos[lo:hi, 0].sum() / pos[lo:hi, 1].sum()))
                          for lo, hi in spans if hi > lo and pos[lo:hi, 1].sum() > 0]
    return out
