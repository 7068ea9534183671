"""
What the loop reads: a stage's corpus with the run's data flags, its budget in steps, and its
batches (random windows of a token stream, whole records of procedural and task corpora, or
fresh records of a stream corpus, each with its loss mask), plus the per-row generators
objectives draw their masks from and the task stages' exact-answer accuracy.
"""

import math

import numpy as np
import torch

import data
from data.common import UserError


# data: random windows (or whole records) of the token stream. Each step draws ONE global batch
# of grad_accum x world x B rows from a generator seeded by the step itself; micro-batch m of
# rank r takes rows [(m * world + r) * B, ... + B). So a resumed run draws exactly the batches of
# the uninterrupted run, and 2 processes (or 2 accumulation steps) at batch B see the rows of 1
# at batch 2B. A stream corpus (info["stream"]: the authors' diagnostics, data/tasks.py) has no
# fixed training set: the global batch is generated from the same key, never a test record.

def get_batch(corpus, split, batch_size, block_size, key, rank, world, device, micro=0, accum=1):
    """(x, y, loss_mask or None): rows (micro * world + rank) * B ... + B of the global batch `key`."""
    stream = corpus.train if split == "train" else corpus.val
    mask = corpus.train_mask if split == "train" else corpus.val_mask
    n_rows = accum * world * batch_size
    first = (micro * world + rank) * batch_size
    if split == "train" and corpus.info.get("stream"):
        from data.tasks import stream_records
        rows, rows_mask = stream_records(corpus, key, n_rows)
        return _to_device(rows[first:first + batch_size], rows_mask[first:first + batch_size, 1:], device)
    rng = np.random.default_rng(key)
    seq = corpus.info.get("seq_len")
    chunk = corpus.info.get("chunk_len") if split == "train" else None
    if seq:  # fixed-length records (procedural data, tasks): one row = one record
        width = seq
        starts = rng.integers(0, len(stream) // seq, size=n_rows) * seq
    elif chunk == block_size + 1:  # a stream of selected chunks: one training sequence = one chunk
        width = chunk
        starts = rng.integers(0, len(stream) // chunk, size=n_rows) * chunk
    else:
        if len(stream) <= block_size + 1:
            raise UserError(f"{corpus.name} {split} has {len(stream)} tokens; --block-size {block_size} needs "
                            "more: lower --block-size or give more data")
        width = block_size + 1
        starts = rng.integers(0, len(stream) - block_size - 1, size=n_rows)
    starts = starts[first:first + batch_size]
    idx = starts[:, None] + np.arange(width)                             # (B, width)
    return _to_device(stream[idx], None if mask is None else mask[idx[:, 1:]], device)


def _to_device(rows, target_mask, device):
    """(x, y, loss_mask or None) of rows (B, width) and the mask of their targets (B, width - 1)."""
    xy = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    m = None if target_mask is None else torch.from_numpy(np.asarray(target_mask, dtype=np.int64))
    x, y = xy[:, :-1], xy[:, 1:]
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        m = m.pin_memory().to(device, non_blocking=True) if m is not None else None
    return x.contiguous(), y.contiguous(), m


def row_generators(key, first, n):
    """One torch.Generator per row of a micro-batch, seeded by (step key, global row index): the
    randomness an objective draws for a row (MIR's masked copy, MDLM's masks) does not depend on
    how the global batch is split into micro-batches or processes."""
    return [torch.Generator().manual_seed(int(np.random.SeedSequence(list(key) + [r]).generate_state(1)[0]))
            for r in range(first, first + n)]


def unigram_perplexity(corpus):
    """Perplexity of the validation targets under the training targets' unigram distribution
    (add-one smoothing; only targets that count, where a loss mask exists): the bar a model
    must clear to have learnt more than token counts."""
    tr, va = np.asarray(corpus.train), np.asarray(corpus.val)
    if corpus.train_mask is not None:
        tr, va = tr[np.asarray(corpus.train_mask) > 0], va[np.asarray(corpus.val_mask) > 0]
    counts = np.bincount(tr, minlength=corpus.vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(np.exp(-logp[va].mean())) if len(va) else float("nan")


def keep_unique_tokens(corpus, n):
    """The data-constrained regime: only the first n training tokens (whole records for record
    corpora, whole chunks for chunked music), repeated for as many epochs as the budget asks."""
    if corpus.info.get("stream"):
        raise UserError(f"--unique-tokens: stage {corpus.name!r} is a stream of fresh records (it has no fixed "
                        "training set to keep part of); leave out --unique-tokens or use a task: stage")
    unit = corpus.info.get("seq_len") or corpus.info.get("chunk_len") or 1
    given, n = int(n), int(n) // unit * unit
    if n < unit or n > len(corpus.train):
        raise UserError(f"--unique-tokens {given:,}: stage {corpus.name!r} has {len(corpus.train):,} training tokens"
                        + (f" in records of {unit}" if unit > 1 else "")
                        + f"; give a value from {unit:,} to {len(corpus.train) // unit * unit:,}")
    corpus.train = corpus.train[:n]
    if corpus.train_mask is not None:
        corpus.train_mask = corpus.train_mask[:n]
    return corpus


def load_corpus(name, args):
    """data.load for a stage, with the run's data options; a problem with the user's data
    (a missing folder, an empty one, junk files) becomes a one-line UserError."""
    opts = dict(cache_dir=args.cache_dir, prose=args.prose, poetry_file=args.poetry_file,
                poetry_lines=args.poetry_lines, data_dir=args.data_dir, music_dir=args.music_dir,
                music_composers=args.music_composers, music_chunks=args.music_chunks,
                synthetic_tokens=args.synthetic_tokens, block_size=args.block_size, seed=args.data_seed,
                procedural_sequences=args.procedural_sequences, procedural_vocab=args.procedural_vocab,
                task_train=args.task_train,
                task_test=args.task_test, math_problems=args.math_problems)
    try:
        corpus = data.load(name, **opts)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"stage {name!r}: {e}") from None
    if corpus.info.get("seq_len", 0) - 1 > args.block_size:
        raise UserError(f"stage {name!r} has records of {corpus.info['seq_len']} tokens; it needs --block-size "
                        f">= {corpus.info['seq_len'] - 1}")
    return keep_unique_tokens(corpus, args.unique_tokens) if args.unique_tokens else corpus


def context_length(corpus, block_size):
    """Tokens of context per training row: a record corpus's record length - 1 (one record a row),
    else --block-size."""
    return corpus.info["seq_len"] - 1 if corpus.info.get("seq_len") else block_size


def stage_iters(args, corpus, rows_per_iter):
    """Optimizer steps of a stage: --epochs / --tokens converted at this stage's tokens per step
    (a record corpus counts whole records, context = record length - 1), capped by --iters;
    or --iters alone."""
    if args.epochs is None and args.tokens is None:
        return args.iters
    T = context_length(corpus, args.block_size)
    if args.epochs is not None:
        per_row = T + 1 if corpus.info.get("seq_len") else T
        n = max(1, math.ceil(args.epochs * len(corpus.train) / (rows_per_iter * per_row)))
    else:
        n = max(1, math.ceil(args.tokens / (rows_per_iter * T)))
    return min(n, args.iters) if args.iters else n


@torch.no_grad()
def task_predictions(model, corpus, batch, device, amp):
    """(records (N, S), the model's argmax next-token predictions (N, S-1) with the true prefix
    fed) over a task's whole test split."""
    S = corpus.info["seq_len"]
    rows = np.asarray(corpus.val).reshape(-1, S)
    preds = []
    for i in range(0, len(rows), batch):
        r = torch.from_numpy(rows[i:i + batch].astype(np.int64)).to(device)
        with amp:
            logits = model(r[:, :-1])[0]
        preds.append(logits[..., :corpus.vocab_size].argmax(-1).cpu().numpy())
    return rows, np.concatenate(preds)


def answer_targets(corpus, rows):
    """The target-aligned answer span (N, S-1) of a task's records: the loss mask of task:NAME,
    the whole answer (data.tasks.answer_span) of the authors' layout, whose loss mask is theirs."""
    from data.tasks import answer_span
    if corpus.info.get("layout") == "authors":
        return answer_span(corpus.info["task"], rows)
    return np.asarray(corpus.val_mask).reshape(rows.shape)[:, 1:]


def task_accuracy(model, corpus, batch, device, amp):
    """Exact-answer accuracy on a task's whole test split (data/tasks.py): the answer span is
    right iff every teacher-forced argmax on it is right, which is exactly greedy decoding."""
    from data.tasks import answer_accuracy
    rows, pred = task_predictions(model, corpus, batch, device, amp)
    return answer_accuracy(pred, rows[:, 1:], answer_targets(corpus, rows))
