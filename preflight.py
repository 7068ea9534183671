"""
Before a run writes anything: every stage's data loaded and checked (prepare_stages: one call a run),
each step's memory and predicted time, and the flags that need the machine. A problem is a UserError of one
line naming the fix, here, not a traceback steps or stages later.
"""

import sys
from typing import Any, NamedTuple

from batches import context_length, load_corpus, stage_iters
from data.common import UserError, cache_dir
from machine import FLOAT16_ON_CPU, available_memory_bytes, matmul_flops, rank0_first


class Prepared(NamedTuple):
    """A stage's data as the loop trains on it."""
    corpus: Any          # data.Corpus
    seq_len: int         # tokens of context per training row (batches.context_length)
    iters: int           # optimizer steps of the stage (batches.stage_iters)


def check_inputs(args, env):
    """The checks of flags that need the machine, before anything is written: a usable cache folder
    (--cache-dir, else $PRELUDE_CACHE, else ~/.cache/prelude); --dtype float16 on a CPU warns."""
    if env.device.type == "cpu" and args.dtype == "float16" and env.master:
        print(FLOAT16_ON_CPU, file=sys.stderr)
    cache_dir(args.cache_dir)


def prepare_stages(args, env, stages, first=0):
    """Every stage from `first` on, before any of them trains: its corpus loads (prepared once: rank 0
    first, the others then read the cache), its step fits in memory (check_step_fits) and its data hold a
    window of --block-size + 1 tokens in each split (check_windows): else a UserError of one line, not one at
    the first batch or evaluation, steps or stages later. A stage shorter than its warm-up is a warning, and so
    is a step predicted to take minutes (warn_slow_step).
    Returns {stage index: Prepared} for the stages from `first` on."""
    prepared, short = {}, []
    for si, name in list(enumerate(stages))[first:]:
        with rank0_first(env):
            corpus = load_corpus(name, args)
        seq_len = context_length(corpus, args.block_size)
        check_step_fits(args, corpus, seq_len)
        check_windows(corpus, name, args.block_size)
        if env.master:
            warn_slow_step(args, corpus, seq_len, env.device)
        rows_per_step = args.batch_size * args.grad_accum * env.world
        prepared[si] = Prepared(corpus, seq_len, stage_iters(args, corpus, rows_per_step))
        if 1 < prepared[si].iters < args.warmup_iters:  # (a stage of one step has no warm-up: lr_at gives it --lr)
            short.append(f"{name!r} ({prepared[si].iters} steps)")
    if short and env.master:
        print(f"warning: --warmup-iters {args.warmup_iters} is longer than {'stages' if len(short) > 1 else 'stage'} "
              f"{', '.join(short)}: the learning rate rises over all but the last step, reaches --lr only there and "
              "never decays; give --warmup-iters below the stage's steps (e.g. a tenth of them)", file=sys.stderr)
    return prepared


def check_windows(corpus, name, block_size):
    """The split of a corpus whose token stream is too short for get_batch's windows of block_size + 1
    tokens is a UserError naming the stage, the split and the largest --block-size that fits. Record
    corpora (one record a row: load_corpus checks their length), a stream's fresh training records and
    chunks of exactly block_size + 1 tokens need no check."""
    if corpus.info.get("seq_len"):
        return
    sizes = {"train": len(corpus.train), "val": len(corpus.val)}
    if corpus.info.get("stream") or corpus.info.get("chunk_len") == block_size + 1:
        del sizes["train"]
    short = {split: n for split, n in sizes.items() if n <= block_size + 1}
    if short:
        has = " and ".join(f"{split} split has {n:,} tokens" for split, n in short.items())
        fits = min(sizes.values()) - 2
        raise UserError(f"stage {name!r}: its {has}, too few for one window of --block-size {block_size} + 1 tokens; "
                        + (f"give --block-size {fits:,} or less, or more data" if fits > 0 else "give it more data"))


def step_memory_bytes(args, seq_len):
    """A lower bound on the memory one micro-batch's forward + backward holds: the activations a
    transformer block saves for backward, ~20 floats per token per width unit (qkv, attention
    output, the 4x MLP, norms, residuals), for every layer, in fp32."""
    return 4 * args.batch_size * seq_len * args.n_embd * (20 * args.n_layer + 4)


def check_step_fits(args, corpus, seq_len):
    """Refuse a step that cannot run here (instead of a hang or an out-of-memory kill)."""
    need = step_memory_bytes(args, seq_len)
    have = available_memory_bytes()
    if have and need > have:
        raise UserError(f"stage {corpus.name!r}: a step of --batch-size {args.batch_size} x --block-size {seq_len} "
                        f"x --n-layer {args.n_layer} x --n-embd {args.n_embd} needs at least {need / 2**30:.1f} GiB "
                        f"of activations, more than the {have / 2**30:.1f} GiB available; lower --block-size or "
                        "--batch-size (--grad-accum keeps the tokens per step)")
    if args.mir and args.mir_keep_first >= seq_len:
        raise UserError(f"--mir-keep-first {args.mir_keep_first} keeps every position of stage {corpus.name!r}'s "
                        f"{seq_len}-token rows unmasked, so MIR would mask nothing; give a value below {seq_len}")


SLOW_STEP_SECONDS = 180  # a step predicted to take longer than this is said before the run trains


def step_flops(args, vocab_size, seq_len):
    """About the FLOPs of one optimizer step of one process: 6 a parameter a token (forward and backward) for
    the blocks (12 n_embd^2 parameters each) and the LM head, and attention's 12 n_layer T n_embd a token (the
    T x T scores and their weighted sum, forward and backward)."""
    L, d = args.n_layer, args.n_embd
    return args.batch_size * args.grad_accum * seq_len * (6 * (12 * L * d * d + vocab_size * d) + 12 * L * seq_len * d)


def warn_slow_step(args, corpus, seq_len, device):
    """Say in one line, before any step, a step predicted (step_flops over this machine's matmul speed,
    machine.matmul_flops: a lower bound) to take more than SLOW_STEP_SECONDS, and what shortens it."""
    flops = step_flops(args, corpus.vocab_size, seq_len)
    if flops < SLOW_STEP_SECONDS * 1e9:  # (within the time even at 1 GFLOP/s: nothing to measure)
        return
    rate = matmul_flops(device)
    seconds = flops / rate
    if seconds > SLOW_STEP_SECONDS:
        took = f"{seconds / 60:.0f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"
        accum = f" x --grad-accum {args.grad_accum}" if args.grad_accum > 1 else ""
        print(f"warning: stage {corpus.name!r}: one step (--batch-size {args.batch_size}{accum} x --block-size "
              f"{seq_len:,}: {flops:.1e} FLOPs) is predicted to take at least {took} on this {device.type} "
              f"({rate / 1e9:,.0f} GFLOP/s measured); lower --block-size or --batch-size for shorter steps (a "
              f"Ctrl-C or SIGTERM waits at most --stop-grace {args.stop_grace:g} s for a step)", file=sys.stderr)
