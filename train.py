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
One live run per --out folder (OUT/.lock, checkpoint.RunLock); a run that fails before it writes anything
leaves its folder as it found it. Ctrl-C or `kill PID` (SIGTERM) saves the step in flight and says how to
resume; a full disk is one line (checkpoint.DiskFull), the last checkpoint kept.
"""

import argparse
import json
import math
import os
import sys
import time
import signal
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Protocol

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import diffusion
import mir
import prores
import transfer
from batches import get_batch, load_corpus, row_generators, stage_iters, task_accuracy, unigram_perplexity
from checkpoint import (NO_SPACE, MetricsLog, RunLock, check_device, check_resume_args, claim_out_folder,
                        load_model, load_state_checked, model_config, read_checkpoint, remove_empty,
                        save_run_checkpoint, stage_file, write_atomic)
from data.common import UserError, cache_dir
from flags import parse_args
from model import GPT, GPTConfig, group_of


class TrainingDiverged(UserError):
    pass




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

class Objective(Protocol):
    """What the loop asks of an objective (NextToken below, mir.MIR, diffusion.MDLM):

    name              recorded in each stage's summary ("ar", "mir", "mdlm")
    extra_tokens      vocabulary rows it adds after the corpus's ([MASK]: 1)
    causal            whether the model attends causally (MDLM: False, bidirectional)
    needs_generators  whether loss() draws per-row randomness from `generators` (row_generators:
                      one torch.Generator per row, so masks do not depend on how a batch is split)
    loss(model, x, y, loss_mask, generators) -> scalar training loss (differentiable)
    eval_loss(model, x, y, loss_mask, key)   -> scalar evaluation loss, deterministic given key
    """
    name: str
    extra_tokens: int
    causal: bool
    needs_generators: bool

    def loss(self, model, x, y, loss_mask, generators): ...

    def eval_loss(self, model, x, y, loss_mask, key): ...


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
    check_device(dev)
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
# step 1.8x SLOWER (170 vs 303 ms) and a d16 2-layer step 2.4x slower (10 vs 24 ms): small
# matmuls pay for the casts. `python bench.py --grid` measures the whole step (2026-11-30: auto
# within 4% of the faster of fp32 and bf16 on every shape, 0.86-0.98x of it on the text shapes).
HEAD_BF16_MIN_VOCAB = 1024

# float16 autocast on a CPU is slow, with nothing to gain: CPUs have no fast float16 matmuls. Measured on
# this 2-core CPU (2026-12-03, one thread, d64 4-layer model, 16 x 128 tokens, forward + backward,
# best of 3): vocabulary 160: 189 ms float32, 1,624 ms float16 (8.6x); vocabulary 50,257 (the GPT-2
# text stages): 1,288 ms vs 22,519 ms (17.5x). A warning, not a refusal: float16's numerics (the
# GradScaler path) may be what a CPU run is for.
FLOAT16_ON_CPU = ("warning: --dtype float16 on a CPU runs a step about 9-18x slower than float32 (measured on a "
                  "d64 model: 8.6x at vocabulary 160, 17.5x at 50,257); use --dtype float32 or auto unless "
                  "float16's numerics are the point")


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
    native = cpu_info()[1] & {"avx512_bf16", "amx_bf16"}
    return "float32", ("bfloat16" if native and (vocab_size or 0) >= HEAD_BF16_MIN_VOCAB else "")


def cpu_info():
    """(model name, set of instruction-set flags) of this machine's CPU, from /proc/cpuinfo; ("", set()) without it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    return (next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), ""),
            next((set(ln.split(":", 1)[1].split()) for ln in lines if ln.startswith(("flags", "Features"))), set()))


# --loss-impl auto. On a GPU torch.compile fuses the standard head and cross-entropy into a few
# kernels; it cannot do that for the chunked loop of lm_loss.py (kept out of the graph). `python
# bench.py --device cuda --shapes gpt2 --compiled` on one H200 (torch 2.11; 12 layers, d 768, GPT-2's
# vocabulary, 16 x 1,024 tokens, bf16 autocast): 36 ms a compiled step with the standard head, 72 ms
# with the fused one (2.02x; peak memory 8.7 vs 6.2 GB). train.py's own runs there: 417k vs 220k
# tokens/s compiled; eager 203k vs 196k, not worth the full logits' memory.
def resolve_loss_impl(name, device, compiled=False):
    """--loss-impl: auto is the standard LM head + loss where the compiler fuses it (a GPU under
    --compile, numbers above), else the fused, chunked one (on a CPU the full logits are most of a
    step: lm_loss.py). The two compute the same loss and gradients (tests/test_model.py), so a run
    may resume under the other."""
    if name != "auto":
        return name
    return "standard" if device.type == "cuda" and compiled else "fused"


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
    autocast dtype name, whether its blocks arrive trained: attention or MLP weights transferred)."""
    dtype, head_dtype = resolve_dtype(args.dtype, device, corpus.vocab_size)
    cfg = GPTConfig(block_size=args.block_size, vocab_size=corpus.vocab_size + objective.extra_tokens,
                    n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                    dropout_at=args.dropout_at,
                    bias=not args.no_bias, tie_weights=not args.no_tie, norm=args.norm, init=args.init,
                    causal=objective.causal, loss_impl=resolve_loss_impl(args.loss_impl, device, args.compile),
                    head_dtype=head_dtype)
    model = GPT(cfg)
    blocks_trained = False
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
        blocks_trained = any(group_of(n) in ("attn", "mlp") for n in report["copied"])
        if args.embed_init == "mean" and "embed" not in groups:
            transfer.mean_embedding_init(prev["model"], model)
        if args.freeze:
            transfer.freeze(model, transfer.parse_groups(args.freeze))
        if master:
            print(f"transfer {src_tok} -> {dst_tok}: copied {', '.join(report['groups'])} ({len(report['copied'])} "
                  f"tensors), fresh: {len(report['skipped'])} tensors"
                  + ("; embedding and head rows = the previous embedding rows' mean"
                     if args.embed_init == "mean" and "embed" not in groups else "")
                  + (f"; frozen: {args.freeze}" if args.freeze else ""))
    return model, cfg, dtype, blocks_trained


class Env(NamedTuple):
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def master(self):
        return self.rank == 0


def check_inputs(args, env):
    """The checks of flags that need the machine, before anything is written: a usable cache folder
    (--cache-dir, else $PRELUDE_CACHE, else ~/.cache/prelude); --dtype float16 on a CPU warns."""
    if env.device.type == "cpu" and args.dtype == "float16" and env.master:
        print(FLOAT16_ON_CPU, file=sys.stderr)
    cache_dir(args.cache_dir)


def check_stages(args, env, stages, first=0):
    """Every stage from `first` on, before any of them trains: its corpus loads (prepared once: rank 0
    first, the others then read the cache), its step fits in memory (check_step_fits) and its data hold a
    window of --block-size + 1 tokens in each split (check_windows): else a UserError of one line, not one at
    the first batch or evaluation, steps or stages later. A stage shorter than its warm-up is a warning.
    Returns the stages' steps (those from `first` on)."""
    steps, short = [], []
    for name in stages[first:]:
        if env.world > 1 and not env.master:
            dist.barrier()
        corpus = load_corpus(name, args)
        if env.world > 1 and env.master:
            dist.barrier()
        check_step_fits(args, corpus, corpus.info["seq_len"] - 1 if corpus.info.get("seq_len") else args.block_size)
        check_windows(corpus, name, args.block_size)
        steps.append(stage_iters(args, corpus, args.batch_size * args.grad_accum * env.world))
        if 1 < steps[-1] < args.warmup_iters:  # (a stage of one step has no warm-up: lr_at gives it --lr)
            short.append(f"{name!r} ({steps[-1]} steps)")
    if short and env.master:
        print(f"warning: --warmup-iters {args.warmup_iters} is longer than {'stages' if len(short) > 1 else 'stage'} "
              f"{', '.join(short)}: the learning rate rises over all but the last step, reaches --lr only there and "
              "never decays; give --warmup-iters below the stage's steps (e.g. a tenth of them)", file=sys.stderr)
    return steps


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


def open_run(args, out, stages, env):
    """(resume checkpoint or None, stage summaries so far, the weights the next stage starts
    from): --resume checks that the checkpoint is a run of these stages and flags. Writes nothing."""
    ckpt_path = out / "ckpt.pt"
    resume = read_checkpoint(ckpt_path, "--resume") if args.resume and ckpt_path.exists() else None
    if resume is not None:
        if resume["stages"] != stages:
            raise UserError(f"--resume: {ckpt_path} is a run of stages {resume['stages']}, not {stages}; "
                            "use another --out or the same --stages")
        check_resume_args(resume.get("args", {}), args, ckpt_path)
    if env.master and args.resume:
        if resume is None:
            print(f"--resume: no checkpoint at {ckpt_path}; starting from scratch")
        elif resume["stage_index"] >= len(stages):
            print(f"--resume: the run in {out} has finished all {len(stages)} stages; nothing to train")
        else:
            print(f"resumed at step {resume['iter']} of stage {resume['stage_index'] + 1}/{len(stages)} "
                  f"({stages[resume['stage_index']]}) from {ckpt_path}")
    prev = read_checkpoint(args.init_from, "--init-from") if args.init_from else None
    if resume is not None and resume["stage_index"] > 0:
        prev = read_checkpoint(stage_file(out, resume["stage_index"] - 1, stages[resume["stage_index"] - 1]),
                               "--resume")
    return resume, list(resume["summaries"]) if resume else [], prev


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: signum) in the training loop, after the step in flight finished and was
    checkpointed (to `ckpt`)."""

    def __init__(self, message, ckpt=None, signum=signal.SIGINT):
        super().__init__(message)
        self.ckpt, self.signum = ckpt, signum


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) where it stops at once: outside the training loop, or a second one in it. A
    KeyboardInterrupt, so that every `finally` runs (the lock released, no temporary file left)."""
    signum = signal.SIGTERM


class CtrlC:
    """Turns the first Ctrl-C or SIGTERM during training into a request the loop honours between steps
    (checkpoint, then Interrupted), so an interrupted run resumes exactly; a second one stops at once.
    Single process only: under torchrun the ranks would not agree on the step."""

    def __init__(self, active):
        self.active, self.asked, self.signum, self._old = active, False, None, {}

    def _handler(self, signum, frame):
        if self.asked:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        self.asked, self.signum = True, signum
        print(f"\n{'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'}: finishing this step and saving a "
              "checkpoint (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self):
        if self.active:
            self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}


@dataclass
class Stage:
    """One stage of the curriculum as the loop trains it (built by setup_stage)."""
    name: str
    index: int                # position in --stages
    corpus: Any               # data.Corpus
    objective: Objective
    model: GPT                # the stage's own model (state_dict, eval, checkpoints)
    fwd: Any                  # what the training step calls: model, compiled and/or DDP-wrapped
    cfg: GPTConfig
    dtype: str                # autocast dtype name ("float32": none)
    amp: Any                  # the autocast context (nullcontext in fp32)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    params: list              # trainable parameters (clipped together)
    seq_len: int              # tokens of context per training row (record length - 1 for record corpora)
    iters: int                # optimizer steps of the stage
    tokens_per_iter: int      # global tokens per step (all processes, all micro-batches)
    prores_hook: Optional[prores.ProRes] = None  # alpha(l, t) writer, with --prores
    start_iter: int = 0       # 0, or the resumed checkpoint's step
    plateau: dict = field(default_factory=lambda: {"best": float("inf"), "bad_evals": 0, "stopped_at": None})


def setup_stage(args, env, si, name, prev, resume, prores_T_run):
    """Everything a stage trains with: corpus, objective, model (with the previous stage's
    weights), autocast, optimizer, scaler, budget, ProRes hook, and where it starts (step 0, or
    the resumed checkpoint's step, optimizer and RNG)."""
    if env.world > 1 and not env.master:  # rank 0 prepares the corpus first; the others then read the cache
        dist.barrier()
    corpus = load_corpus(name, args)
    if env.world > 1 and env.master:
        dist.barrier()
    objective = make_objective(args, corpus.vocab_size)
    seq_len = corpus.info["seq_len"] - 1 if corpus.info.get("seq_len") else args.block_size
    torch.manual_seed(args.seed + si)
    model, cfg, dtype, blocks_trained = build_model(args, corpus, objective, prev, env.device, env.master)
    model.to(env.device)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    fwd = torch.compile(model) if args.compile else model
    if env.world > 1:
        fwd = DDP(fwd, device_ids=[env.local_rank] if env.device.type == "cuda" else None)
    iters = stage_iters(args, corpus, args.batch_size * args.grad_accum * env.world)
    S = Stage(name=name, index=si, corpus=corpus, objective=objective, model=model, fwd=fwd, cfg=cfg, dtype=dtype,
              amp=nullcontext() if ptdtype == torch.float32 else torch.autocast(env.device.type, dtype=ptdtype),
              optimizer=model.configure_optimizers(args.weight_decay, args.lr, (args.beta1, args.beta2),
                                                   env.device.type),
              scaler=torch.amp.GradScaler(env.device.type, enabled=ptdtype == torch.float16),
              params=[p for p in model.parameters() if p.requires_grad], seq_len=seq_len, iters=iters,
              tokens_per_iter=args.batch_size * args.grad_accum * env.world * seq_len)
    if resume is not None and si == resume["stage_index"] and resume["iter"] > 0:
        load_state_checked(S.model, resume["model"])
        S.optimizer.load_state_dict(resume["optimizer"])
        S.scaler.load_state_dict(resume["scaler"])
        torch.set_rng_state(resume["rng"])
        if env.device.type == "cuda" and resume.get("cuda_rng"):
            torch.cuda.set_rng_state_all(resume["cuda_rng"])
        S.start_iter, S.plateau = resume["iter"], resume.get("plateau", S.plateau)
        if S.plateau["stopped_at"]:  # killed after --patience ended the stage: do not train on
            S.start_iter = S.iters
    if args.prores and prores.ramps(args.prores_scope, blocks_trained):  # (else alpha stays 1: the buffer's ones)
        T = args.prores_T if args.prores_T != "auto" else prores_T_run or max(1, round(S.iters / (2 * args.n_layer)))
        S.prores_hook = prores.ProRes(S.model, T, args.prores_schedule)
    return S


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


def available_memory_bytes():
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def train_step(S, args, env, it):
    """One optimizer update: grad_accum micro-batches through the objective (one call), the
    mean loss over processes, clipping, AdamW. Returns (loss, grad norm before clipping)."""
    loss_sum = torch.zeros((), device=env.device)
    key = [args.seed, S.index, it]
    for micro in range(args.grad_accum):
        x, y, m = get_batch(S.corpus, "train", args.batch_size, S.seq_len, key, env.rank, env.world, env.device,
                            micro, args.grad_accum)
        first = (micro * env.world + env.rank) * args.batch_size  # this micro-batch's first global row
        gens = row_generators(key, first, args.batch_size) if S.objective.needs_generators else None
        sync = env.world == 1 or micro == args.grad_accum - 1
        with (nullcontext() if sync else S.fwd.no_sync()), S.amp:
            loss = S.objective.loss(S.fwd, x, y, m, gens) / args.grad_accum
        S.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    loss = all_mean(loss_sum.item(), env.world, env.device)
    if not math.isfinite(loss):
        raise TrainingDiverged(
            f"the training loss became {loss} at stage {S.name!r}, step {it}. The last good checkpoint "
            f"is {args.out}/ckpt.pt (kept unchanged). Lower --lr, raise --warmup-iters, or use --grad-clip; "
            "then rerun with --resume.")
    S.scaler.unscale_(S.optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(S.params, args.grad_clip or float("inf")).item()
    if not math.isfinite(grad_norm) and not S.scaler.is_enabled():  # (a GradScaler skips such steps)
        raise TrainingDiverged(
            f"the gradient norm became {grad_norm} at stage {S.name!r}, step {it}. The last good checkpoint "
            f"is {args.out}/ckpt.pt (kept unchanged). Lower --lr or use --grad-clip; then rerun with --resume.")
    S.scaler.step(S.optimizer)
    S.scaler.update()
    S.optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


@torch.no_grad()
def evaluate(S, args, env):
    """Mean objective loss on --eval-iters fixed batches of each split in --eval-splits (the same
    batches at every evaluation and for every --seed), and a task stage's exact-answer accuracy
    on its whole test split."""
    S.model.eval()
    res, first_val = {}, None
    for split in args.eval_splits.split(","):
        total = 0.0
        for k in range(env.rank, args.eval_iters, env.world):  # eval batches are shared out
            # the same windows at every evaluation, and for every --seed (chosen by --data-seed)
            x, y, m = get_batch(S.corpus, split, args.batch_size, args.block_size,
                                [args.data_seed, 1_000_003, S.index, k, split == "val"], 0, 1, env.device)
            with S.amp:
                total += S.objective.eval_loss(S.model, x, y, m, k).item()
            first_val = x if split == "val" and first_val is None else first_val
        res[split] = all_mean(total, env.world, env.device) * env.world / args.eval_iters
    if S.corpus.info.get("task") and S.objective.causal:
        res["accuracy"] = task_accuracy(S.model, S.corpus, args.batch_size * 8, env.device, S.amp)
    if not all(math.isfinite(v) for v in res.values()):
        raise TrainingDiverged(f"the evaluation loss became {res} at stage {S.name!r}; the last good "
                               f"checkpoint {args.out}/ckpt.pt is kept unchanged.")
    if first_val is not None:  # the residual stream's RMS after each block on the first validation batch
        with S.amp:            # (the ProRes paper's activation norms, followed over training)
            res["act_rms"] = S.model.residual_rms(first_val)
    S.model.train()
    return res


def run(args, inner=False):
    """Train the curriculum into args.out; returns the summary dict. Rank 0 holds the folder's
    lock (RunLock) from start to end, however the run ends; a run that fails before it has
    written anything leaves the folder as it found it (one it created is removed again).
    inner: a --baseline arm, run inside another run (which ends the process group afterwards)."""
    rank, world, local_rank, device = setup_distributed(args)
    env = Env(rank, world, local_rank, device)
    out = Path(args.out)
    check_inputs(args, env)
    lock = RunLock(out)
    made = claim_out_folder_on_rank0(args, env, out, lock)
    finished = False
    try:
        result = train_curriculum(args, env, out)
        finished = True
    finally:
        lock.release()
        if not finished:
            remove_empty(made)
    result = with_baseline(args, env, out, result) if args.baseline else result
    if world > 1 and not inner:
        dist.barrier()
        dist.destroy_process_group()
    return result


def claim_out_folder_on_rank0(args, env, out, lock):
    """Rank 0 claims --out (checkpoint.claim_out_folder); under torchrun every other rank learns of a refusal
    and stops with the same error, instead of waiting at the first collective for a rank 0 that has gone."""
    made, refusal = [], None
    if env.master:
        try:
            made = claim_out_folder(args, out, lock)
        except UserError as e:
            refusal = e
    if env.world > 1:
        box = [None if refusal is None else str(refusal)]
        dist.broadcast_object_list(box, src=0)
        refusal = refusal or (box[0] and UserError(f"rank 0 refused --out: {box[0]}"))
    if refusal:
        raise refusal
    return made


def baseline_arms(args, result):
    """--baseline's arms: [(name, folder, what it keeps, its flags)], the last stage alone from random init with
    the same seed, so that the curriculum's gain is read beside what it cost. Each keeps every other flag:
      same budget      the last stage's own budget, every flag (exactly `--stages <last>` without --init-from);
      plain            the same without --prores, where --prores is on: what a user would otherwise type (ProRes
                       warms a model from scratch up slowly, which costs a short run);
      compute-matched  as many optimizer steps as the whole curriculum took (every stage's, summed: the ladder
                       paper's control; --iters, with --epochs / --tokens dropped), without --prores where it is
                       on; --unique-tokens stays, so scarce data is repeated for the extra steps.
    With --init-from the checkpoint's own training is not counted (it is not known here)."""
    last, total = args.stages.split(",")[-1], sum(s["iters"] for s in result["stages"])
    same = {**vars(args), "stages": last, "init_from": None, "baseline": False}
    plain = {**same, "prores": False}
    arms = [("same budget", "baseline", "every flag", same)]
    if args.prores:
        arms.append(("plain", "baseline-plain", "every flag but --prores", plain))
    if total != result["stages"][-1]["iters"]:  # (one stage from --init-from: the same-budget arm already is it)
        arms.append(("compute-matched", "baseline-matched", f"every flag{' but --prores' if args.prores else ''}, "
                     f"--iters {total}", {**plain, "iters": total, "epochs": None, "tokens": None}))
    return [(name, folder, keeps, argparse.Namespace(**{**flags, "out": str(Path(args.out) / folder)}))
            for name, folder, keeps, flags in arms]


def with_baseline(args, env, out, result):
    """--baseline: each of baseline_arms as a run of its own in OUT/<its folder> (resumable like any run); the
    curriculum's last-stage perplexity beside each arm's, with their steps and tokens, on screen and in
    OUT/summary.json ("baseline")."""
    last, stages = args.stages.split(",")[-1], result["stages"]
    cur = {"val_ppl": stages[-1]["val_ppl"], "steps": sum(s["iters"] for s in stages),
           "tokens": sum(s["tokens"] for s in stages)}
    arms = []
    for name, folder, keeps, base in baseline_arms(args, result):
        if env.master:
            print(f"\n--baseline, {name}: {last} alone from random init, the same seed, {keeps}, in {base.out}")
        s = run(base, inner=True)["stages"][-1]
        arms.append({"arm": name, "folder": folder, "keeps": keeps, "val_ppl": s["val_ppl"], "steps": s["iters"],
                     "tokens": s["tokens"], "change": cur["val_ppl"] / s["val_ppl"] - 1})
    result["baseline"] = {"stage": last, "curriculum": cur, "arms": arms}
    if env.master:
        write_atomic(out / "summary.json", json.dumps(result, indent=2).encode())
        print(baseline_table(last, cur, arms))
    return result


def baseline_table(last, cur, arms):
    """--baseline's closing lines: each arm's perplexity, steps and tokens, the curriculum's change against it, and
    what the compute-matched arm says of the gain."""
    rows = [(f"the curriculum, every stage (its {last} stage's ppl)", cur, "")] + [
        (f"{last} alone, {a['arm']} ({a['keeps']})", a, f"{100 * a['change']:+.1f}%") for a in arms]
    w = max(len(r[0]) for r in rows)
    lines = [f"\n{'arm':<{w}}  {'steps':>7}  {'tokens':>11}  {'val ppl':>9}  the curriculum vs it"] + [
        f"{n:<{w}}  {r['steps']:>7,}  {r['tokens']:>11,}  {r['val_ppl']:>9.1f}  {c}" for n, r, c in rows]
    matched = [a for a in arms if a["arm"] == "compute-matched"]
    if matched:
        m = matched[0]
        lines.append(f"compute-matched: {last} alone for the curriculum's {m['steps']:,} steps ends "
                     + (f"LOWER ({m['val_ppl']:.1f} vs {cur['val_ppl']:.1f}): at this budget the curriculum's gain "
                        "over the same-budget arm is the extra training, not the earlier stages"
                        if m["val_ppl"] <= cur["val_ppl"] else
                        f"higher ({m['val_ppl']:.1f} vs {cur['val_ppl']:.1f}): the curriculum's gain is more than "
                        "its extra training") + " (one seed; experiments/ladder.py --preset headline reads five)")
    else:  # one stage from --init-from: the steps that made the checkpoint are not known here
        lines.append("no compute-matched arm: the steps that made --init-from's checkpoint are not known here, so "
                     "the change above leaves them out; train every stage in one run (--stages a,b) to get one")
    return "\n".join(lines)


def train_curriculum(args, env, out):
    """The run itself, in the claimed folder: each stage set up, trained, evaluated, saved."""
    device, world = env.device, env.world
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    stages = args.stages.split(",")
    resume, summaries, prev = open_run(args, out, stages, env)
    prores_T_run = None  # --prores-scope run with T auto: one T from the whole run's steps
    whole_run = args.prores and args.prores_scope == "run" and args.prores_T == "auto"
    steps = check_stages(args, env, stages, 0 if whole_run or resume is None else resume["stage_index"])
    if whole_run:
        prores_T_run = max(1, round(sum(steps) / (2 * args.n_layer)))
    t_start, seconds_before = time.time(), (resume or {}).get("seconds", 0.0)  # earlier parts of a resumed run
    log = MetricsLog(out / "metrics.jsonl", resume, env.master)
    if resume is not None:
        log.open()  # its log trimmed to the checkpoint (a damaged line said) before any step

    def emit(**event):
        log.write(event)

    def checkpoint(S, it, stage_index):
        if env.master:
            log.open()  # (a resumed run's log is trimmed to its checkpoint before a newer one is saved)
            save_run_checkpoint(out / "ckpt.pt", {
                "model": S.model.state_dict(), "optimizer": S.optimizer.state_dict(),
                "scaler": S.scaler.state_dict(), "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else [],
                "stage_index": stage_index, "stage": S.name, "iter": it, "stages": stages,
                "summaries": summaries, "plateau": S.plateau, "model_config": model_config(S.cfg),
                "args": vars(args), "seconds": seconds_before + time.time() - t_start})

    S = None
    ctrl_c = CtrlC(active=world == 1)
    for si, name in enumerate(stages):
        if resume is not None and si < resume["stage_index"]:
            continue
        S = setup_stage(args, env, si, name, prev, resume, prores_T_run)
        step_offset = sum(s["iters"] for s in summaries) if args.prores_scope == "run" else 0
        unigram = unigram_perplexity(S.corpus) if env.master else None
        if env.master:
            print(f"\n== stage {si + 1}/{len(stages)}: {name} | vocab {S.corpus.vocab_size}"
                  f"{' + [MASK]' if S.objective.extra_tokens else ''} | train {len(S.corpus.train):,} tokens, val "
                  f"{len(S.corpus.val):,} | {S.iters} steps of {S.tokens_per_iter:,} tokens | {S.objective.name} | "
                  f"{S.model.get_num_params():,} non-embedding params | {device} {S.dtype}"
                  f"{' (head ' + S.cfg.head_dtype + ')' if S.cfg.head_dtype else ''}"
                  + (f" | ProRes on: T {S.prores_hook.T:g} steps per layer, {S.prores_hook.schedule}, warmup over "
                     f"the {'run' if args.prores_scope == 'run' else 'stage'}" if S.prores_hook is not None else "")
                  + (" | ProRes: alpha = 1, the blocks arrive trained (--prores-scope fresh)"
                     if args.prores and S.prores_hook is None else ""))
        S.model.train()
        last_eval, t0 = None, time.time()
        bar = tqdm(total=S.iters, initial=S.start_iter, desc=name, disable=not env.master or args.no_progress,
                   dynamic_ncols=True)
        with ctrl_c:
            for it in range(S.start_iter, S.iters):  # the loop: lr, ProRes, one update, log, eval, checkpoint
                lr = lr_at(it, S.iters, args)
                for group in S.optimizer.param_groups:
                    group["lr"] = lr
                if S.prores_hook is not None:
                    S.prores_hook.update(step_offset + it)  # alpha(l, t), t = updates done so far
                loss, grad_norm = train_step(S, args, env, it)
                done = it + 1
                if not args.no_progress:
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", refresh=False)
                if done % args.log_interval == 0 or done == S.iters:
                    emit(event="train", stage=name, stage_index=si, iter=done, loss=loss, lr=lr, grad_norm=grad_norm,
                         tok_s=S.tokens_per_iter * args.log_interval / max(time.time() - t0, 1e-9))
                    t0 = time.time()
                if done % args.eval_interval == 0 or done == S.iters:
                    last_eval = evaluate(S, args, env)
                    emit(event="eval", stage=name, stage_index=si, iter=done,
                         **{(k if k in ("accuracy", "act_rms") else f"{k}_loss"): v for k, v in last_eval.items()})
                    p = S.plateau
                    if last_eval["val"] < p["best"] - args.min_delta:  # an improvement: by more than --min-delta
                        p["best"], p["bad_evals"] = last_eval["val"], 0
                    else:
                        p["bad_evals"] += 1
                    if args.patience and p["bad_evals"] >= args.patience and done < S.iters:
                        p["stopped_at"] = done
                    checkpoint(S, done, si)
                    if p["stopped_at"]:
                        if env.master:
                            print(f"\n{name}: no improvement by more than {args.min_delta:g} in {args.patience} "
                                  f"evaluations: stopped at step {done} (best val loss {p['best']:.4f})")
                        break
                if ctrl_c.asked:  # the step is done: save it, then stop
                    if done % args.eval_interval and done != S.iters:
                        checkpoint(S, done, si)
                    bar.close()
                    raise Interrupted(f"step {done} of stage {si + 1}/{len(stages)} ({name})", out / "ckpt.pt",
                                      ctrl_c.signum)
        bar.close()
        iters = S.plateau["stopped_at"] or S.iters
        if last_eval is None:  # a resumed stage that had already finished its steps
            last_eval = evaluate(S, args, env)
        summary = {"name": name, "vocab_size": S.corpus.vocab_size, "tokenizer": S.corpus.info.get("tokenizer"),
                   "objective": S.objective.name, "iters": iters, "tokens": iters * S.tokens_per_iter,
                   # a stream corpus draws fresh records every step: every token seen is a new one
                   "unique_tokens": iters * S.tokens_per_iter if S.corpus.info.get("stream") else len(S.corpus.train),
                   "epochs": 1.0 if S.corpus.info.get("stream") else iters * S.tokens_per_iter / len(S.corpus.train),
                   "train_loss": last_eval.get("train"), "val_loss": last_eval["val"],
                   "val_loss_kind": "nll bound" if S.objective.name == "mdlm" else "nll",
                   "best_val_loss": min(S.plateau["best"], last_eval["val"]),
                   "stopped_early": S.plateau["stopped_at"], "val_ppl": math.exp(min(last_eval["val"], 700))}
        if S.corpus.info.get("sha256"):  # the prepared corpus's files (its manifest): which data, to the byte
            summary["data_sha256"] = S.corpus.info["sha256"]
        if "accuracy" in last_eval:
            summary["accuracy"] = last_eval["accuracy"]
        if unigram is not None:
            summary["unigram_val_ppl"] = unigram
        summaries.append(summary)
        emit(event="stage_end", stage_index=si, **summary)
        prev = {"model": {k: v.detach().cpu() for k, v in S.model.state_dict().items()},
                "model_config": model_config(S.cfg), "stage": name, "tokenizer": S.corpus.info.get("tokenizer"),
                "vocab": S.corpus.vocab_size, "objective": S.objective.name,
                "mask_id": S.corpus.vocab_size if S.objective.extra_tokens else None}
        if env.master:
            save_run_checkpoint(stage_file(out, si, name), prev)
            print_table([summary])  # this stage's row, as it ends
        # one atomic write moves the run on: the next stage at step 0 (stage_index == number
        # of stages: the run is finished), with this stage's summary recorded
        checkpoint(S, 0, si + 1)

    model = S.model if S is not None else load_model(stage_file(out, len(stages) - 1, stages[-1]))[0]
    result = {"stages": summaries, "params": model.get_num_params(),
              "params_total": model.get_num_params(non_embedding=False),
              "seconds": seconds_before + time.time() - t_start, "args": vars(args)}
    if env.master:
        log.open()  # (a resumed run that had finished: its log as it was)
        write_atomic(out / "summary.json", json.dumps(result, indent=2).encode())
        if len(summaries) > 1:
            print("\nthe whole run:")
            print_table(summaries)
        if not args.no_plot:
            plot_losses(out)
        log.close()
        print(where_things_are(out, stages, S.corpus.info if S is not None else None))
    return result


def where_things_are(out, stages, last_info):
    """The run's last lines: its folder, and the sample.py command for its last stage's checkpoint
    (a music stage samples into a MIDI file; last_info: that stage's corpus manifest, if loaded)."""
    last = stage_file(out, len(stages) - 1, stages[-1])
    music = (last_info.get("tokenizer") or "" if last_info is not None else stages[-1]).startswith(("midi", "music"))
    what = "--tokens 1000  # writes <checkpoint>-sample.mid beside it" if music else '--prompt "..." --tokens 100'
    return (f"\nthe run's files are in {out}/ (summary.json, metrics.jsonl{', loss.png' if (out / 'loss.png').exists() else ''}, "
            f"stage checkpoints); sample from its last stage:\n  python sample.py {last} {what}")


def print_table(summaries):
    print(f"\n{'stage':<14}{'vocab':>7}{'steps':>7}{'tokens':>12}{'train':>8}{'val':>8}{'val ppl':>10}{'unigram ppl':>13}")
    for s in summaries:
        uni = f"{s['unigram_val_ppl']:.1f}" if "unigram_val_ppl" in s else "-"
        tr = f"{s['train_loss']:>8.3f}" if s.get("train_loss") is not None else f"{'-':>8}"
        print(f"{s['name']:<14}{s['vocab_size']:>7}{s['iters']:>7}{s['tokens']:>12,}{tr}"
              f"{s['val_loss']:>8.3f}{s['val_ppl']:>10.1f}{uni:>13}"
              + (f"   accuracy {s['accuracy']:.3f}" if "accuracy" in s else "")
              + ("   (val = NLL bound)" if s.get("objective") == "mdlm" else ""))


def plot_losses(out):
    """OUT/loss.png: train and val loss per stage against the global step, with each stage's
    unigram level (the log of its unigram perplexity: the loss of knowing token counts only)."""
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
        end = offset + max(list(tr) + list(ev) + [0])
        uni = [e["unigram_val_ppl"] for e in events if e.get("event") == "stage_end" and e.get("stage_index") == si
               and e.get("unigram_val_ppl")]
        if uni:
            ax.hlines(math.log(uni[-1]), offset, end, colors=c, linestyles="dashed", lw=1,
                      label=f"{name} unigram level")
        offset = end
        ax.axvline(offset, color="grey", lw=0.5)
    ax.set_xlabel("optimizer step (all stages)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = Path(out) / f".loss.png.tmp-{os.getpid()}"
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, Path(out) / "loss.png")
    finally:
        tmp.unlink(missing_ok=True)
        plt.close(fig)


def terminate(signum, frame):
    """train.py's SIGTERM outside the training loop (where CtrlC takes it): stop as a Ctrl-C would."""
    raise Terminated


def main(argv=None):
    """train.py: run, with a UserError (a full disk included) as one line and exit 2, and Ctrl-C or SIGTERM
    (`kill PID`) as a line saying how to resume, exit 130 or 143 (128 + the signal)."""
    args = parse_args(argv)
    try:
        old_term = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: signals stay as they are
        old_term = None
    try:
        run(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        if e.errno not in NO_SPACE:
            raise
        print(f"error: no space left on the disk{' of ' + str(e.filename) if e.filename else ''}: free some space, "
              f"then run the same command with --resume to continue", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        ckpt = getattr(e, "ckpt", None) or Path(args.out) / "ckpt.pt"  # (--baseline: OUT/baseline's)
        if isinstance(e, Interrupted):
            print(f"\ninterrupted after {e}; saved {ckpt}: continue with the same command and --resume",
                  file=sys.stderr)
        elif ckpt.exists():  # (an --out with another run's files is refused before anything starts)
            print(f"\ninterrupted; the last checkpoint is {ckpt}: continue with the same command and --resume",
                  file=sys.stderr)
        else:
            print("\ninterrupted before the first step: nothing was saved", file=sys.stderr)
        sys.exit(128 + getattr(e, "signum", signal.SIGINT))
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


if __name__ == "__main__":
    main()
