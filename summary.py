"""
What a run tells as it goes: a stage's banner and its summary row, the table of stages, OUT/summary.json,
OUT/loss.png (one axis per vocabulary; save_figure draws every figure of a run, baseline.py's too), and the
last lines (where the run's files are, and how to sample from it).
"""

import io
import json
import math
from pathlib import Path

from batches import unigram_perplexity
from checkpoint import read_summary, stage_file, write_atomic
from flags import command_line


def where_things_are(out, stages, last_info):
    """The run's last lines: its folder, and the sample.py command for its last stage's checkpoint
    (a music stage samples into a MIDI file; last_info: that stage's corpus manifest, if loaded)."""
    last = stage_file(out, len(stages) - 1, stages[-1])
    music = (last_info.get("tokenizer") or "" if last_info is not None else stages[-1]).startswith(("midi", "music"))
    what = "--tokens 1000  # writes <checkpoint>-sample.mid beside it" if music else '--prompt "..." --tokens 100'
    plot = ", loss.png" if (out / "loss.png").exists() else ""
    return (f"\nthe run's files are in {out}/ (summary.json, metrics.jsonl{plot}, "
            f"stage checkpoints); sample from its last stage:\n  python sample.py {last} {what}")


def print_table(summaries):
    print(f"\n{'stage':<14}{'vocab':>7}{'steps':>7}{'tokens':>12}{'train':>8}{'val':>8}{'val ppl':>10}"
          f"{'unigram ppl':>13}")
    for s in summaries:
        uni = f"{s['unigram_val_ppl']:.1f}" if "unigram_val_ppl" in s else "-"
        tr = f"{s['train_loss']:>8.3f}" if s.get("train_loss") is not None else f"{'-':>8}"
        print(f"{s['name']:<14}{s['vocab_size']:>7}{s['iters']:>7}{s['tokens']:>12,}{tr}"
              f"{s['val_loss']:>8.3f}{s['val_ppl']:>10.1f}{uni:>13}"
              + (f"   accuracy {s['accuracy']:.3f}" if "accuracy" in s else "")
              + ("   (val = NLL bound)" if s.get("objective") == "mdlm" else ""))


def figure(n_axes=1):
    """(matplotlib figure, its axes side by side): the Agg backend, which draws without a screen."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, n_axes, figsize=(4.5 + 4 * n_axes, 4.8), squeeze=False)
    return fig, list(axes[0])


def save_figure(fig, path, title):
    """fig, titled (wrapped to its width), as a PNG at path by write_atomic: a temporary name, then a rename
    (a full disk: a DiskFull of one line); the figure is closed."""
    import textwrap
    import matplotlib.pyplot as plt
    fig.suptitle("\n".join(textwrap.wrap(title, int(fig.get_figwidth() * 13))), fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=110, format="png")
    finally:
        plt.close(fig)
    write_atomic(Path(path), buf.getvalue())


def read_events(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def plot_losses(out, args=None):
    """OUT/loss.png: train and val loss per stage against the global step, with each stage's unigram level (the
    log of its unigram perplexity: the loss of knowing token counts only); one axis per vocabulary (music's 160
    tokens and text's 50,257 have losses on other scales), titled with the command that made the run (args, or
    those of OUT/summary.json). Returns the vocabularies, one an axis."""
    import matplotlib
    events = read_events(Path(out) / "metrics.jsonl")
    args = args or (read_summary(out) or {}).get("args")
    names, vocab = [], {}
    for e in events:  # stage order as first seen
        if e.get("stage") is not None and (e["stage_index"], e["stage"]) not in names:
            names.append((e["stage_index"], e["stage"]))
        if e.get("event") == "stage_end":
            vocab[e["stage_index"]] = e.get("vocab_size")
    vocabs = list(dict.fromkeys(vocab.get(si) for si, _ in names)) or [None]
    fig, axes = figure(len(vocabs))
    offset, colors = 0, matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (si, name) in enumerate(names):
        ax = axes[vocabs.index(vocab.get(si))]
        tr = {e["iter"]: e["loss"] for e in events if e.get("event") == "train" and e.get("stage_index") == si}
        ev = {e["iter"]: e["val_loss"] for e in events if e.get("event") == "eval" and e.get("stage_index") == si}
        c = colors[i % len(colors)]
        ax.plot([offset + k for k in sorted(tr)], [tr[k] for k in sorted(tr)], color=c, alpha=0.6,
                label=f"{name} train")
        ax.plot([offset + k for k in sorted(ev)], [ev[k] for k in sorted(ev)], "o-", color=c, label=f"{name} val")
        end = offset + max(list(tr) + list(ev) + [0])
        uni = [e["unigram_val_ppl"] for e in events if e.get("event") == "stage_end" and e.get("stage_index") == si
               and e.get("unigram_val_ppl")]
        if uni:
            ax.hlines(math.log(uni[-1]), offset, end, colors=c, linestyles="dashed", lw=1,
                      label=f"{name} unigram level")
        offset = end
        ax.axvline(offset, color="grey", lw=0.5)
    for ax, v in zip(axes, vocabs):
        ax.set_title(f"vocabulary {v:,}" if v else "", fontsize=9)
        ax.set_xlabel("optimizer step (all stages)")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    save_figure(fig, Path(out) / "loss.png", "train and validation loss of each stage (dashed: its unigram level), "
                "one axis per vocabulary" + (f": {command_line(args)}" if args else ""))
    return vocabs


def stage_banner(S, args, index, n_stages, device):
    """The line a stage starts with: its data, budget, objective, model size, device and ProRes."""
    corpus, hook = S.corpus, S.prores
    return (f"\n== stage {index + 1}/{n_stages}: {S.name} | vocab {corpus.vocab_size}"
            f"{' + [MASK]' if S.objective.extra_tokens else ''} | train {len(corpus.train):,} tokens, val "
            f"{len(corpus.val):,} | {S.iters} steps of {S.tokens_per_iter:,} tokens | {S.objective.name} | "
            f"{S.model.get_num_params():,} non-embedding params | {device} {S.dtype}"
            f"{' (head ' + S.model.config.head_dtype + ')' if S.model.config.head_dtype else ''}"
            + (f" | ProRes on: T {hook.T:g} steps per layer, {hook.schedule}, warmup over the "
               f"{'run' if args.prores_scope == 'run' else 'stage'}" if hook is not None else "")
            + (" | ProRes: alpha = 1, the blocks arrive trained (--prores-scope fresh)"
               if args.prores and hook is None else ""))


def stage_summary(S, last_eval, master):
    """A finished stage's row of summary.json: its budget, losses and perplexity (and the unigram level, on
    rank 0, where it is computed)."""
    corpus, iters = S.corpus, S.plateau["stopped_at"] or S.iters
    stream = corpus.info.get("stream")  # a stream corpus draws fresh records every step: every token is new
    s = {"name": S.name, "vocab_size": corpus.vocab_size, "tokenizer": corpus.info.get("tokenizer"),
         "objective": S.objective.name, "iters": iters, "tokens": iters * S.tokens_per_iter,
         "unique_tokens": iters * S.tokens_per_iter if stream else len(corpus.train),
         "epochs": 1.0 if stream else iters * S.tokens_per_iter / len(corpus.train),
         "train_loss": last_eval.get("train"), "val_loss": last_eval["val"],
         "val_loss_kind": "nll bound" if S.objective.name == "mdlm" else "nll",
         "best_val_loss": min(S.plateau["best"], last_eval["val"]),
         "stopped_early": S.plateau["stopped_at"], "val_ppl": math.exp(min(last_eval["val"], 700))}
    if corpus.info.get("sha256"):  # the prepared corpus's files (its manifest): which data, to the byte
        s["data_sha256"] = corpus.info["sha256"]
    if "accuracy" in last_eval:
        s["accuracy"] = last_eval["accuracy"]
    if master:
        s["unigram_val_ppl"] = unigram_perplexity(corpus)
    return s


def finish(out, result, stages, last_info, args):
    """The run's end on rank 0: OUT/summary.json, the table of every stage, loss.png, where things are."""
    write_atomic(out / "summary.json", json.dumps(result, indent=2).encode())
    if len(result["stages"]) > 1:
        print("\nthe whole run:")
        print_table(result["stages"])
    if not args.no_plot:
        plot_losses(out, args)
    print(where_things_are(out, stages, last_info))
