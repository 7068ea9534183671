"""
A finished run evaluated again: its stage model, rebuilt from its checkpoint (checkpoint.load_model),
run over fixed batches without gradients; the engine the experiments' reports share, and a command:

    python evaluate.py out/run [out/run2 ...] [--jobs 2]   # each run's loss on its whole validation split

    model, ck = stage_model(run_folder, 1, "prose")      # the model a stage ended with
    corpus = run_corpus(summary["args"])                 # the corpus (and training subset) it saw
    x, y, mask = val_windows(corpus, 128)                # the whole validation split, in windows
    e = evaluate_run(run_folder, corpus)                 # full-validation loss, cached in the folder
    rms = activation_rms(model, x[:16])                  # residual-stream RMS after each block
    sc = task_scores(run_folder, "haystack", 0, 4000)    # a stream:TASK run's accuracies on its test records

Every function here only reads a run's files and computes; nothing trains, nothing draws a
random number that is not fixed (MDLM's evaluation masks are seeded by the batch index).
"""

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from batches import get_batch, load_corpus, task_predictions, unigram_perplexity
from checkpoint import load_model, read_summary, stage_file
from data.common import UserError, atomic_write_bytes, one_line_errors
from flags import parse_args


def stage_model(folder, stage_index, name, device="cpu"):
    """(GPT in eval mode, checkpoint dict) of stage `stage_index` (`name`) of the run in folder."""
    return load_model(stage_file(folder, stage_index, name), device)


# ---------------------------------------------------------------------------------------------
# the data a run saw

# the flags batches.load_corpus reads (and --stages, --unique-tokens): two runs that agree on
# these saw the same corpus and the same training subset
DATA_FLAGS = ("stages", "cache_dir", "prose", "poetry_file", "poetry_lines", "data_dir", "music_dir",
              "music_composers", "music_chunks", "synthetic_tokens", "block_size", "data_seed",
              "procedural_sequences", "procedural_vocab", "task_train", "task_test", "math_problems", "unique_tokens")
_CORPORA = {}


def run_corpus(args):
    """The corpus of a one-stage run, its training subset as the run saw it, from the run's
    parsed flags (a Namespace) or its summary's `args` dict; loaded once per distinct DATA_FLAGS."""
    d = args if isinstance(args, dict) else vars(args)
    key = tuple(repr(d.get(k)) for k in DATA_FLAGS)
    if key not in _CORPORA:
        a = parse_args(["--stages", d["stages"]])
        for k, v in d.items():
            setattr(a, k, v)
        _CORPORA[key] = load_corpus(d["stages"], a)
    return _CORPORA[key]


def unigram_loss(corpus):
    """ln of the unigram validation perplexity (batches.unigram_perplexity): the loss of a model
    that has learnt the token counts and nothing more (nats per token)."""
    return math.log(unigram_perplexity(corpus))


def val_batch(corpus, batch_size, block_size, key=20260305):
    """One fixed validation batch (the inputs x), the same for every run of a corpus: global
    batch `key` of batches.get_batch, drawn on the CPU."""
    return get_batch(corpus, "val", batch_size, block_size, [key], 0, 1, torch.device("cpu"))[0]


def val_windows(corpus, T):
    """(x, y, mask) of the whole validation split: records (record corpora) or non-overlapping
    windows of T + 1 tokens with stride T (every target once, the first token of the split excepted)."""
    val = np.asarray(corpus.val, dtype=np.int64)
    mask = None if corpus.val_mask is None else np.asarray(corpus.val_mask, dtype=np.int64)
    seq = corpus.info.get("seq_len")
    if seq:
        idx = np.arange(len(val) // seq)[:, None] * seq + np.arange(seq)
    else:
        n = (len(val) - 1) // T
        if n < 1:
            raise UserError(f"{corpus.name}: validation has {len(val)} tokens, fewer than one window of {T + 1}")
        idx = np.arange(n)[:, None] * T + np.arange(T + 1)
    w = torch.from_numpy(val[idx])
    m = torch.ones(w[:, 1:].shape, dtype=torch.long) if mask is None else torch.from_numpy(mask[idx[:, 1:]])
    return w[:, :-1], w[:, 1:], m


# ---------------------------------------------------------------------------------------------
# full-validation loss of a run's final checkpoint

def cached_eval(folder, summary):
    """The run's val_eval.json if it was computed from this summary's checkpoint, else None."""
    path = Path(folder) / "val_eval.json"
    e = json.loads(path.read_text()) if path.exists() else None
    return e if e and e.get("summary_seconds") == summary["seconds"] else None


@torch.no_grad()
def evaluate_run(folder, corpus=None, batch=64):
    """Full-validation loss of a finished one-stage run, cached in <folder>/val_eval.json (an AR
    run also writes val_tokens.npy, the cross-entropy of every target, shape of val_windows' y).

    AR:   the mean of -log p(y_t | x_<=t) over every target of val_windows that counts (mask);
    MDLM: diffusion.MDLM.eval_loss, its NLL bound at fixed noise levels, masks seeded by the
          batch index, so every run is scored on the same masks.
    None if the run has not finished."""
    import diffusion
    folder = Path(folder)
    s = read_summary(folder)
    if s is None:
        return None
    e = cached_eval(folder, s)
    if e is not None:
        return e
    args = s["args"]
    corpus = corpus if corpus is not None else run_corpus(args)
    model, ck = stage_model(folder, 0, args["stages"])
    x, y, m = val_windows(corpus, args["block_size"])
    if ck.get("objective") == "mdlm":
        mdlm, lm = diffusion.MDLM(mask_id=ck["mask_id"]), corpus.val_mask is not None
        total = sum(mdlm.eval_loss(model, x[i:i + batch], y[i:i + batch], m[i:i + batch] if lm else None,
                                   i // batch).item() * len(x[i:i + batch]) for i in range(0, len(x), batch))
        loss, kind, n = total / len(x), "nll bound", int(x.numel())
    else:
        ce = torch.cat([F.cross_entropy(model(x[i:i + batch])[0].float().flatten(0, 1), y[i:i + batch].flatten(),
                                        reduction="none") for i in range(0, len(x), batch)])
        keep = m.flatten() > 0
        loss, kind, n = ce[keep].mean().item(), "nll", int(keep.sum())
        np.save(folder / "val_tokens.npy", ce.view(y.shape).numpy().astype(np.float32))
    e = {"loss": loss, "kind": kind, "tokens": n, "summary_seconds": s["seconds"]}
    atomic_write_bytes(folder / "val_eval.json", json.dumps(e, indent=1).encode())
    return e


@torch.no_grad()
def task_scores(folder, task, data_seed, task_test):
    """{exact, token}: a stream:TASK run's exact-answer accuracy and the procedural authors' token-level accuracy
    (data/tasks.py) on its test records, from its final checkpoint; cached in <folder>/scores.json (computed
    again when the checkpoint or the test set changed)."""
    from contextlib import nullcontext
    import data
    from data.tasks import answer_accuracy, answer_span, their_loss_mask, token_accuracy
    path, cache = stage_file(folder, 0, f"stream:{task}"), Path(folder) / "scores.json"
    key = {"checkpoint_mtime": path.stat().st_mtime, "data_seed": data_seed, "task_test": task_test}
    if cache.exists() and (out := json.loads(cache.read_text())).items() >= key.items():
        return out
    model, _ = stage_model(folder, 0, f"stream:{task}")
    corpus = data.load(f"stream:{task}", seed=data_seed, task_test=task_test)
    rows, pred = task_predictions(model, corpus, 1000, torch.device("cpu"), nullcontext())
    out = {"exact": answer_accuracy(pred, rows[:, 1:], answer_span(task, rows)),
           "token": token_accuracy(pred, rows[:, 1:], their_loss_mask(task, rows)[:, 1:]),
           "test_records": len(rows), **key}
    atomic_write_bytes(cache, json.dumps(out, indent=1).encode())
    return out


def _eval_worker(folder, threads):
    torch.set_num_threads(threads)
    evaluate_run(folder)
    return folder


def evaluate_runs(folders, jobs=1, threads=0):
    """evaluate_run for every finished run without a current val_eval.json, `jobs` at a time
    (spawned processes, as common.run_sweep: small models gain more from two processes than
    from two threads). Returns how many were evaluated now."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    todo = list(dict.fromkeys(str(f) for f in folders if read_summary(f) and not cached_eval(f, read_summary(f))))
    if todo:
        print(f"   evaluating {len(todo)} checkpoint(s) on the whole validation split", flush=True)
    if jobs <= 1 or len(todo) <= 1:
        for f in todo:
            evaluate_run(f)
        return len(todo)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_eval_worker, todo, [threads or max(1, (os.cpu_count() or 1) // jobs)] * len(todo)))
    return len(todo)


# ---------------------------------------------------------------------------------------------
# inside the model

@torch.no_grad()
def activation_rms(model, x):
    """RMS of the residual stream after the embeddings and after each block on inputs x, a list
    of L + 1 floats: sqrt(mean(h_l^2)) over every position and channel, with the model's
    residual scales as the run left them (model.GPT.residual_rms; dropout is off in eval)."""
    return model.residual_rms(x)


@one_line_errors("evaluate.py")
def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="Each finished run's loss on its whole validation split (an AR run: "
                                "the mean NLL of every target; MDLM: its NLL bound), cached in RUN/val_eval.json.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="a run folder (train.py --out) with summary.json")
    p.add_argument("--jobs", type=int, default=1, help="runs evaluated at a time (default 1)")
    p.add_argument("--verbose", action="store_true",
                   help="with an error, its details too (e.g. every tensor of a checkpoint that does not fit)")
    a = p.parse_args(argv)
    if missing := [r for r in a.runs if read_summary(r) is None]:
        p.error(f"no finished run (summary.json) in {', '.join(missing)}: give train.py --out folders of finished runs")
    evaluate_runs(a.runs, max(1, a.jobs))
    for r in a.runs:
        e = evaluate_run(r)
        print(f"{r}: {e['kind']} {e['loss']:.4f} nats/token over {e['tokens']:,} validation tokens "
              f"(perplexity {math.exp(e['loss']):.2f})" if e["kind"] == "nll" else
              f"{r}: {e['kind']} {e['loss']:.4f} nats/token over {e['tokens']:,} validation tokens")


if __name__ == "__main__":
    sys.exit(main())
