"""
Train one GPT through a curriculum of stages: `python train.py --stages music,poetry,prose --prores`.

Read it top to bottom, as nanoGPT's: `run` sets up the machine and the run folder; `train_curriculum`
takes each stage in turn (setup_stage: its data, a fresh GPT with the previous stage's weights through
transfer.py, AdamW, ProRes); `train_stage` is the loop (learning rate, ProRes' alpha, one step, log,
evaluation, checkpoint); `train_step` is one step: batch -> the objective's loss -> backward -> clip ->
optimizer step. Each paper enters through one visible line: the objective (next-token prediction, MIR
or masked diffusion: objectives.py, mir.py, diffusion.py), `prores.update` in the loop, `transfer` in
build_model. What is not training lives beside this file: flags.py (the command line), preflight.py
(every check before anything is written), machine.py (DDP, device, precision), run_folder.py (OUT and
its lock), checkpoint.py, interrupts.py (Ctrl-C and SIGTERM), baseline.py (--baseline's arms) and
summary.py (tables, summary.json, loss.png).

Single process:   python train.py --stages poetry,prose
Distributed:      torchrun --standalone --nproc_per_node=2 train.py --stages poetry,prose
                  (DDP; gloo on CPU, nccl on GPU; --batch-size is per process)
Experiments call `run(parse_args([...]))`, which returns the summary dict.
"""

import math
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import prores
import summary
import transfer
from baseline import with_baseline
from batches import get_batch, row_generators, task_accuracy
from checkpoint import (MetricsLog, check_resume_args, load_model, model_config, read_checkpoint, restore_run_state,
                        run_state, save_run_checkpoint, stage_file)
from data.common import UserError, no_space
from flags import parse_args
from interrupts import CtrlC, Interrupted, exit_code, sigterm_stops
from machine import all_mean, resolve_dtype, resolve_loss_impl, setup_distributed
from model import GPT, GPTConfig, group_of
from objectives import Objective, make_objective
from preflight import check_inputs, prepare_stages
from run_folder import claimed


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


def build_model(args, corpus, objective, prev, device, master):
    """A fresh GPT for this stage's vocabulary (+ the objective's [MASK] row), with the previous
    stage's weights transferred (prev = {"model": state, "tokenizer": ...} or None), the embedding
    optionally set to the previous rows' mean, and --freeze applied. Returns (model, autocast dtype
    name, whether its blocks arrive trained: attention or MLP weights transferred)."""
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
        # the ladder's selective transfer, the procedural paper's attention-only / MLP-only (transfer.py)
        report = transfer.transfer_checked(prev["model"], model, groups, src_tok == dst_tok,
                                           f"--init-from {args.init_from}" if args.init_from else "the previous stage")
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
    return model, dtype, blocks_trained


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


@dataclass
class Stage:
    """One stage of the curriculum as the loop trains it (built by setup_stage)."""
    name: str
    index: int                # position in --stages
    corpus: Any               # data.Corpus
    objective: Objective
    model: GPT                # the stage's own model (state_dict, eval, checkpoints)
    fwd: Any                  # what the training step calls: model, compiled and/or DDP-wrapped
    dtype: str                # autocast dtype name ("float32": none)
    amp: Any                  # the autocast context (nullcontext in fp32)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    seq_len: int              # tokens of context per training row (record length - 1 for record corpora)
    iters: int                # optimizer steps of the stage
    tokens_per_iter: int      # global tokens per step (all processes, all micro-batches)
    prores: Any = None        # prores.ProRes, which writes alpha(l, t) into the model, with --prores
    start_iter: int = 0       # 0, or the resumed checkpoint's step
    plateau: dict = field(default_factory=lambda: {"best": float("inf"), "bad_evals": 0, "stopped_at": None})


def setup_stage(args, env, si, name, data, prev, resume, prores_T_run):
    """Everything a stage trains with: its data (preflight.Prepared), objective, model (with the previous
    stage's weights), autocast, optimizer, scaler, budget, ProRes, and where it starts (step 0, or the
    resumed checkpoint's step, optimizer and RNG)."""
    objective = make_objective(args, data.corpus.vocab_size)
    torch.manual_seed(args.seed + si)
    model, dtype, blocks_trained = build_model(args, data.corpus, objective, prev, env.device, env.master)
    model.to(env.device)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    fwd = torch.compile(model) if args.compile else model
    if env.world > 1:
        fwd = DDP(fwd, device_ids=[env.local_rank] if env.device.type == "cuda" else None)
    S = Stage(name=name, index=si, corpus=data.corpus, objective=objective, model=model, fwd=fwd, dtype=dtype,
              amp=nullcontext() if ptdtype == torch.float32 else torch.autocast(env.device.type, dtype=ptdtype),
              optimizer=model.configure_optimizers(args.weight_decay, args.lr, (args.beta1, args.beta2),
                                                   env.device.type),
              scaler=torch.amp.GradScaler(env.device.type, enabled=ptdtype == torch.float16),
              seq_len=data.seq_len, iters=data.iters,
              tokens_per_iter=args.batch_size * args.grad_accum * env.world * data.seq_len)
    if resume is not None and si == resume["stage_index"] and resume["iter"] > 0:
        restore_run_state(S, resume)
    if args.prores and prores.ramps(args.prores_scope, blocks_trained):  # (else alpha stays 1: the buffer's ones)
        T = args.prores_T if args.prores_T != "auto" else prores_T_run or max(1, round(S.iters / (2 * args.n_layer)))
        S.prores = prores.ProRes(S.model, T, args.prores_schedule)
    return S


def train_step(S, args, env, it):
    """One optimizer update: grad_accum micro-batches, each a batch through the objective's loss and
    backward; then the mean loss over processes, clipping and the optimizer step.
    Returns (loss, grad norm before clipping)."""
    loss_sum, key = torch.zeros((), device=env.device), [args.seed, S.index, it]
    for micro in range(args.grad_accum):
        x, y, m = get_batch(S.corpus, "train", args.batch_size, S.seq_len, key, env.rank, env.world, env.device,
                            micro, args.grad_accum)                      # (B, T) each; m: loss mask or None
        first = (micro * env.world + env.rank) * args.batch_size        # this micro-batch's first global row
        gens = row_generators(key, first, args.batch_size) if S.objective.needs_generators else None
        sync = env.world == 1 or micro == args.grad_accum - 1           # DDP: reduce gradients once, at the end
        with (nullcontext() if sync else S.fwd.no_sync()), S.amp:
            loss = S.objective.loss(S.fwd, x, y, m, gens) / args.grad_accum   # NTP, MIR or MDLM
        S.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    loss = all_mean(loss_sum.item(), env.world, env.device)
    if not math.isfinite(loss):
        raise diverged(f"the training loss became {loss}", S, it, args)
    S.scaler.unscale_(S.optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(S.model.parameters(), args.grad_clip or float("inf")).item()
    if not math.isfinite(grad_norm) and not S.scaler.is_enabled():  # (a GradScaler skips such steps)
        raise diverged(f"the gradient norm became {grad_norm}", S, it, args)
    S.scaler.step(S.optimizer)
    S.scaler.update()
    S.optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def diverged(what, S, it, args):
    return TrainingDiverged(f"{what} at stage {S.name!r}, step {it}. The last good checkpoint is {args.out}/ckpt.pt "
                            "(kept unchanged). Lower --lr, raise --warmup-iters, or use --grad-clip; then rerun with "
                            "--resume.")


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


def train_stage(S, args, env, log, save, step_offset):
    """The loop of one stage, from its first (or resumed) step: the learning rate, ProRes' alpha, one update
    (train_step), the log; every --eval-interval steps an evaluation, the checkpoint (save) and --patience's
    rule; a Ctrl-C or SIGTERM ends it after the step in flight, checkpointed (or, past --stop-grace, without that
    step: the last checkpoint kept). Returns the last evaluation."""
    last_eval, t0, where = None, time.time(), dict(stage=S.name, stage_index=S.index)
    bar = tqdm(total=S.iters, initial=S.start_iter, desc=S.name, disable=not env.master or args.no_progress,
               dynamic_ncols=True)
    with CtrlC(active=env.world == 1, grace=args.stop_grace, ckpt=Path(args.out) / "ckpt.pt") as ctrl_c, bar:
        for it in range(S.start_iter, S.iters):
            lr = lr_at(it, S.iters, args)
            for group in S.optimizer.param_groups:
                group["lr"] = lr
            if S.prores is not None:
                S.prores.update(step_offset + it)       # alpha(l, t), t = updates done so far (prores.py)
            loss, grad_norm = train_step(S, args, env, it)
            done = it + 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}", refresh=False)
            if done % args.log_interval == 0 or done == S.iters:
                tok_s = S.tokens_per_iter * args.log_interval / max(time.time() - t0, 1e-9)
                log.write(dict(event="train", **where, iter=done, loss=loss, lr=lr, grad_norm=grad_norm, tok_s=tok_s))
                t0 = time.time()
            if done % args.eval_interval == 0 or done == S.iters:
                last_eval = evaluate(S, args, env)
                named = {k if k in ("accuracy", "act_rms") else f"{k}_loss": v for k, v in last_eval.items()}
                log.write(dict(event="eval", **where, iter=done, **named))
                stop = plateaued(S.plateau, last_eval["val"], done, S.iters, args)
                save(S, done, S.index)
                if stop:
                    if env.master:
                        print(f"\n{S.name}: no improvement by more than {args.min_delta:g} in {args.patience} "
                              f"evaluations: stopped at step {done} (best val loss {S.plateau['best']:.4f})")
                    break
            if ctrl_c.stop_requested():  # the step is done: save it, then stop
                if done % args.eval_interval and done != S.iters:
                    save(S, done, S.index)
                raise Interrupted(f"step {done} of stage {S.index + 1}/{len(args.stages.split(','))} ({S.name})",
                                  Path(args.out) / "ckpt.pt", ctrl_c.signum)
    return last_eval


def plateaued(p, val, done, iters, args):
    """--patience: whether a stage of `iters` steps stops at step `done`, after --patience evaluations none of
    which improved the best validation loss by more than --min-delta (p: the stage's record of them)."""
    if val < p["best"] - args.min_delta:
        p["best"], p["bad_evals"] = val, 0
    else:
        p["bad_evals"] += 1
    if args.patience and p["bad_evals"] >= args.patience and done < iters:
        p["stopped_at"] = done
    return bool(p["stopped_at"])


def train_curriculum(args, env, out):
    """The run itself, in the claimed folder: each stage set up, trained, evaluated, saved."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    stages = args.stages.split(",")
    resume, summaries, prev = open_run(args, out, stages, env)
    whole_run = args.prores and args.prores_scope == "run" and args.prores_T == "auto"  # one T from the run's steps
    prepared = prepare_stages(args, env, stages, 0 if whole_run or resume is None else resume["stage_index"])
    prores_T_run = max(1, round(sum(p.iters for p in prepared.values()) / (2 * args.n_layer))) if whole_run else None
    t_start, seconds_before = time.time(), (resume or {}).get("seconds", 0.0)  # earlier parts of a resumed run
    log = MetricsLog(out / "metrics.jsonl", resume, env.master)
    if resume is not None:
        log.open()  # its log trimmed to the checkpoint (a damaged line said) before any step

    def save(S, it, stage_index):  # OUT/ckpt.pt, rank 0: what --resume continues from
        if env.master:
            log.open()  # (a resumed run's log is trimmed to its checkpoint before a newer one is saved)
            save_run_checkpoint(out / "ckpt.pt", run_state(S, it, stage_index, stages, summaries, args,
                                                           seconds_before + time.time() - t_start))

    S = None
    for si, name in enumerate(stages):
        if resume is not None and si < resume["stage_index"]:
            continue
        S = setup_stage(args, env, si, name, prepared[si], prev, resume, prores_T_run)
        if env.master:
            print(summary.stage_banner(S, args, si, len(stages), env.device))
        S.model.train()
        step_offset = sum(s["iters"] for s in summaries) if args.prores_scope == "run" else 0
        last_eval = train_stage(S, args, env, log, save, step_offset)
        if last_eval is None:  # a resumed stage that had already finished its steps
            last_eval = evaluate(S, args, env)
        summaries.append(summary.stage_summary(S, last_eval, env.master))
        log.write(dict(event="stage_end", stage_index=si, **summaries[-1]))
        prev = {"model": {k: v.detach().cpu() for k, v in S.model.state_dict().items()},
                "model_config": model_config(S.model.config), "stage": name,
                "tokenizer": S.corpus.info.get("tokenizer"), "vocab": S.corpus.vocab_size,
                "objective": S.objective.name, "mask_id": S.corpus.vocab_size if S.objective.extra_tokens else None}
        if env.master:
            save_run_checkpoint(stage_file(out, si, name), prev)
            summary.print_table([summaries[-1]])  # this stage's row, as it ends
        # one atomic write moves the run on: the next stage at step 0 (stage_index == number
        # of stages: the run is finished), with this stage's summary recorded
        save(S, 0, si + 1)

    model = S.model if S is not None else load_model(stage_file(out, len(stages) - 1, stages[-1]))[0]
    result = {"stages": summaries, "params": model.get_num_params(),
              "params_total": model.get_num_params(non_embedding=False),
              "seconds": seconds_before + time.time() - t_start, "args": vars(args)}
    if env.master:
        log.open()  # (a resumed run that had finished: its log as it was)
        summary.finish(out, result, stages, S.corpus.info if S is not None else None, args)
        log.close()
    return result


def run(args, inner=False):
    """Train the curriculum into args.out; returns the summary dict. Rank 0 holds the folder's lock from start
    to end, however the run ends; a run that fails before it has written anything leaves the folder as it found
    it (run_folder.claimed). inner: a --baseline arm, run inside another run (which ends the process group)."""
    env = setup_distributed(args)
    out = Path(args.out)
    check_inputs(args, env)  # a usable cache folder; --dtype float16 on a CPU warns
    with claimed(args, env, out):
        result = train_curriculum(args, env, out)
    result = with_baseline(args, env, out, result, run) if args.baseline else result
    if env.world > 1 and not inner:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def main(argv=None):
    """train.py: run, with a UserError (a full disk included) as one line and exit 2 (--verbose: its details
    below), and Ctrl-C or SIGTERM (`kill PID`) as a line saying how to resume, exit 130 or 143 (128 + the signal)."""
    args = parse_args(argv)
    with sigterm_stops():
        try:
            run(args)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            if args.verbose and e.details:
                print(e.details, file=sys.stderr)
            sys.exit(2)
        except OSError as e:
            if not no_space(e):
                raise
            print(f"error: no space left on the disk{' of ' + str(e.filename) if e.filename else ''}: free some "
                  "space, then run the same command with --resume to continue", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt as e:
            sys.exit(exit_code(e, args.out))


if __name__ == "__main__":
    main()
