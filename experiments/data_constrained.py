"""
Data-constrained grid: AR with a tuned strong weight decay vs + MIR, and the masked-diffusion baseline, many epochs on fixed unique data; the scaling laws fitted to it.
Xu et al., arXiv 2606.06888 (github.com/yixinw-lab/dc_pretrain): MIR lowers the validation loss at every size (more at larger sizes) and is worth ~1.3x unique data; SoftQ fits and extrapolates best; strong decay tuned for AR closes most of the AR-dLLM gap.

    python experiments/data_constrained.py --plan          # the phases, their runs, the estimated time
    python experiments/data_constrained.py --quick         # the pipeline end to end, minutes
    python experiments/data_constrained.py                 # the default (--preset authors), 4.5 h measured on 2 cores
    python experiments/data_constrained.py --preset earlier  # the earlier default (described below)
    python experiments/data_constrained.py --report-only   # rebuild the report from finished runs
    python experiments/data_constrained.py --report-only --out experiments/results/data_constrained
                                                           # ... or from report.json alone (runs gone)

The default, --preset authors: the authors' baseline in a regime where the law can fan out.
- Their baseline: dropout 0.1 (dc_pretrain dcp/model.py:95; dcp/train4_diffusionauxiliary_impl.py:108) on
  the attention block's output projection only (dcp/model.py:135, 149: no dropout on the attention
  probabilities, the MLP or the embeddings), and an untied LM head (dcp/model.py:194, its own Linear)
  that is weight-decayed (their setup_optimizer, dcp/train4_diffusionauxiliary_impl.py:314-333, decays
  everything but embeddings, norms and biases; ours, model.configure_optimizers, puts an untied
  lm_head.weight in the decayed group): --dropout 0.1 --dropout-at attn-out --no-tie on every run, in
  report.json `settings` (dropout, dropout_at, tie). Decays 0.1-3.2 (theirs 0.4-3.2 by size,
  scripts/all5models_baseline.sh:21-25), 2 sweep seeds, the decay with the lowest MEAN chosen, shown
  beside the spread of the means and the seed std.
- Phase 0, the scan (experiments/lib/data_constrained_scan.py, its rule there): AR at decay 0.1, seed 0,
  sizes L2d32 .. L6d128 x U0 in 32k, 64k, 128k x 16 and 32 epochs, and MDLM (32 epochs) at the smallest
  size; it keeps the sizes >= 0.3 nats below ln(unigram perplexity) at U0 and needs the two largest to
  overfit U0 (validation - training >= 0.3 nats) and MDLM >= 0.1 nats below the unigram level; the grid
  is then U0, 2 U0, ... 512k (the music stage has 521k training tokens) at the chosen epochs; the sweep
  runs at U0 (where regularisation matters most; its runs are grid cells). --grid-hours (4) bounds the
  sweep + grid at STEP_MS: the largest sizes, then budgets, are left out until it fits (on this EPYC the
  scan qualified 5 sizes x 32k-512k x 32 epochs, ~14 h; the limit keeps L2d32-L4d96 x 32k-256k, ~3.6 h).
  No qualifying candidate is a one-line error (--scan-fallback takes the closest; --quick does).
- Music, not prose: prose at these sizes sits at the unigram level (measured below) and its 50k-row head
  costs 2-4x a music step; on music the earlier default's models were 0.3-1.4 nats below ln(46) = 3.83.
- Methods wd, wd+mir (2 seeds each at every size), mdlm-tuned (MDLM at the AR-tuned decay) and
  mdlm-strong (MDLM at --mdlm-strong-decay 3.2), MDLM 32 epochs on the 2 smallest budgets (long enough
  to leave the unigram level, the scan checks it at U0; the report checks every run).
- Report additions (experiments/lib/data_constrained_authors.py): the regime check, the scan table, the
  sweep by mean, a top-level `fan_out` (the wd slope test with a 95% bootstrap CI), MIR's multiplier with
  its bootstrap CI, MDLM strong vs tuned paired by cell, and `front_table` (each claim in one short row:
  RESULTS.md and the README show it).
- Time (--plan, STEP_MS below, measured on a 2-core AMD EPYC, +-50%; after the first runs --plan also
  scales the rest by their measured pace): see `--plan`.

The rest of this docstring describes the phases and the earlier default (--preset earlier:
dropout 0, tied head, one sweep seed, no scan; experiments/results/data_constrained-earlier was made with it).

Phases (every run is train.run in its own folder OUT/runs/<name>/, skipped when finished, resumed
from its last checkpoint when interrupted: experiments.lib.common.run_sweep; a run's name is its
configuration, e.g. `mir-L4d64-U32000-wd1.6-lr0.003-s0`, so two phases asking for the same
configuration share one run):
1. weight-decay sweep per size: AR, one seed, at the sweep budget (default the middle U) and the
   grid's epochs, decays --decays (x learning rates --lrs); the lowest full-validation loss gives
   the size's "strong" decay (and lr), used by every method of that size. The sweep's runs are
   grid cells too (its best run is the `wd` cell at that U; its 0.1 run the `ar-weak` cell).
2. the grid: sizes x budgets U x methods, --epochs passes over U, seeds 0..--seeds-1 for the
   --seeded-sizes smallest sizes (wd and wd+mir: the cells whose differences are smallest), one
   seed elsewhere. Methods: `wd` (AR, strong decay), `wd+mir` (AR + MIR at the same decay, lambda
   0.4, ratio 0..0.5, keep-first 8: the paper's), `ar-weak` (AR, decay 0.1 = train.py's default),
   `mdlm-weak` and `mdlm-strong` (masked diffusion at 0.1 and at the AR-tuned decay; same tokens
   seen, same batches; its loss is the NLL bound).
3. evaluation: every final checkpoint on the WHOLE validation stream in non-overlapping windows
   of --block-size (AR: per-token cross-entropy of every target; MDLM: diffusion.MDLM's bound with
   its fixed levels and masks, the same masks for every run), cached in the run folder
   (experiments/lib/evaluate.evaluate_run). This, not train.py's sampled validation batches, is
   the loss in runs.csv: deterministic and identical in coverage for every run, so cells differ
   only by their training.
4. analysis (experiments/lib/data_constrained_report.py): collect (from the run folders: the
   losses, every law of scaling.py per method on the seed-averaged cells, the per-token analysis
   of lib/data_constrained_tokens.py), then render (from those records alone: runs.csv
   (N,U,D,loss,method,seed; N = non-embedding parameters, the papers' convention; the embedding
   is 161 x d here, so total parameters would barely differ), MIR's gain per cell, its
   effective-data multiplier under the baseline's SoftQ fit, AR vs MDLM, each claim of the paper
   read by the reading rule, report.md / report.json / PNGs). report.json keeps the records, so
   --report-only where OUT/runs is gone rebuilds the same report byte for byte; OUT/provenance.json
   records every invocation that trained (commit, command, hardware, wall and CPU time).

Choices (measured here; each is a flag):
- corpus: `music` (the music21 corpus, 160 event tokens, 521k training tokens). The prose stage
  was measured first (U = 64k, 8 epochs, 250 steps of 16 x 128 tokens, decay 0.1): validation
  loss 7.48 (L2 d16), 7.40 (L2 d32), 7.30 (L4 d64) nats for N = 6k-200k non-embedding parameters
  (0.8M-3.4M with the 50k-row embedding), against the unigram entropy of the validation text,
  ln 1619 = 7.39: every model sits at the unigram level, N moves the loss by 0.2 nats over 1.5
  decades, there is no surface for a law to describe, and each run took 200-450 s (the head)
  where a music run of the same steps took 41-122 s. On music the models are far above the
  unigram level and N and U each move the loss by most of a nat.
- subset: for music, U tokens = U / (block+1) whole chunks drawn uniformly from the whole training
  stream (--music-chunks, --data-seed 0: the same data for every method and seed), not the first
  U tokens: the stream is ordered by file path, so its first 64k tokens are all Bach chorales
  while validation spans four composers (L4 d64, U = 16k, 32 epochs: first-U 2.59 nats, random
  chunks 2.38). The budgets are independent samples (not nested). Other stages: the first U
  tokens (--subset first).
- sizes L2 d32, L3 d48, L4 d64, L4 d96 (4 heads; N = 25k, 85k, 200k, 448k: 1.25 decades);
  U = 8k, 16k, 32k, 64k tokens (8x); 16 epochs (the paper's 16-32); batch 16 x 128 tokens; lr 3e-3
  cosine to 3e-4 with 5% warmup for every size (at L4 d64, U = 16k, 32 epochs, lr 1e-2 was
  0.07-0.15 nats worse than 3e-3; --lrs sweeps it jointly with the decay); decays 0.1, 0.4, 0.8,
  1.6, 3.2 (the authors' 0.4-3.2 and the weak default; AdamW's decay skips embeddings, norms and
  biases: model.configure_optimizers); 3 seeds for wd and wd+mir at every size (MIR's gain is
  the paper's headline and is small), 1 seed for ar-weak and the MDLM runs.
Time: --quick 3.5-4 min here with the machine shared (56 runs; load ~4), 77 s on 2 quiet cores
(2026-11-30, corpora cached). Measured default (2026-11-30, 2 quiet cores): 135 runs, 26.4 min wall
for training and evaluation, ~1 min of fits and report. The default is 156 runs (20 sweep, 136 grid; fewer when a size
prefers the weak decay): measured per step for each (objective, size) from runs with the default
flags (U = 32k, 4 epochs, 2 jobs) on this shared machine (load average ~5 from other users):
AR 112-227 ms, MIR 203-514 ms, MDLM 146-383 ms a step, giving ~77 min with jobs=2 here; the same
steps measured alone run 2-2.4x faster than under that load, so ~40-50 min on 2 quiet cores,
plus ~3 min of evaluation and fits.
"""

import argparse
import copy
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

from flags import ArgumentParser, parse_args as train_parse_args  # noqa: E402 (one-line errors, like train.py)

import torch  # noqa: E402

from batches import load_corpus  # noqa: E402
from data.common import UserError  # noqa: E402
from experiments.lib import data_constrained_report as rep  # noqa: E402
from experiments.lib import data_constrained_scan as sc  # noqa: E402
from experiments.lib.common import (Provenance, Run, add_sweep_args, is_finished, main_guard, pace_line,  # noqa: E402
                                    read_summary, run_sweep)
from experiments.lib.evaluate import evaluate_run, evaluate_runs  # noqa: E402
from model import DROPOUT_AT  # noqa: E402

METHODS = ("wd", "wd+mir", "ar-weak", "mdlm-weak", "mdlm-strong", "mdlm-tuned")
# method -> (objective of the run name: ar | mir | mdlm, which decay: strong (the AR-tuned) | weak | fixed)
METHOD_RUN = {"wd": ("ar", "strong"), "wd+mir": ("mir", "strong"), "ar-weak": ("ar", "weak"),
              "mdlm-weak": ("mdlm", "weak"), "mdlm-strong": ("mdlm", "strong"), "mdlm-tuned": ("mdlm", "strong")}
# the authors' baseline (the default): dropout 0.1, untied decayed head, a scan for the regime, 2 sweep seeds
AUTHORS = dict(sizes="L2d32,L3d48,L4d64,L4d96", budgets="64000,128000,256000,512000", epochs=16, seeds=2,
               seeded_sizes=0, decays="0.1,0.4,0.8,1.6,3.2", batch_size=16, block_size=128, dropout=0.1, tie=False,
               dropout_at="attn-out", sweep_seeds=2, scan=True, scan_sizes="L2d32,L3d48,L4d64,L4d96,L6d128", scan_budgets="32000,64000,128000",
               scan_epochs="16,32", max_budget=512000, grid_hours=4.0, methods="wd,wd+mir,mdlm-tuned,mdlm-strong",
               mdlm_strong_decay=3.2, mdlm_epochs=32, mdlm_budgets=2, scan_fallback=False)
AUTHORS_QUICK = dict(AUTHORS, sizes="L1d16,L2d24,L2d32", budgets="4000,8000,16000", epochs=4, seeds=2,
                     decays="0.1,1.6", block_size=64, scan_sizes="L1d16,L2d24,L2d32", scan_budgets="4000,8000",
                     scan_epochs="4", max_budget=16000, mdlm_epochs=8, mdlm_budgets=1, scan_fallback=True)
# the earlier default (experiments/results/data_constrained-earlier was made with it): no dropout, tied head
EARLIER = dict(sizes="L2d32,L3d48,L4d64,L4d96", budgets="8000,16000,32000,64000", epochs=16, seeds=3,
               seeded_sizes=0, decays="0.1,0.4,0.8,1.6,3.2", batch_size=16, block_size=128, dropout=0.0, tie=True,
               dropout_at="all", sweep_seeds=1, scan=False, methods="wd,wd+mir,ar-weak,mdlm-weak,mdlm-strong", mdlm_strong_decay=None,
               mdlm_epochs=None, mdlm_budgets=0, scan_fallback=False, scan_sizes=None, scan_budgets=None,
               scan_epochs=None, max_budget=None, grid_hours=None)
EARLIER_QUICK = dict(EARLIER, sizes="L1d16,L2d24,L2d32,L3d48", budgets="4000,8000,16000", epochs=4, seeds=2,
                     seeded_sizes=1, decays="0.1,1.6", block_size=64)
PRESETS = {"authors": (AUTHORS, AUTHORS_QUICK), "earlier": (EARLIER, EARLIER_QUICK)}
DEFAULTS, QUICK = EARLIER, EARLIER_QUICK  # the earlier names (its docstring's grid)
SCAN_RULES = dict(margin=0.3, overfit_gap=0.3, mdlm_margin=0.1, min_sizes=3, min_budgets=4)
# ms per optimizer step, one thread, two jobs on 2 cores: the authors' preset's scan runs on a 2-core AVX2
# AMD EPYC (2026-12-02; whole runs, startup and evaluations included: 52-57 ms at N = 31k, 132-141 at 210k,
# 221-226 at 463k, 497-508 at 1.2M): AR ~ 50 + N / 2,700; MIR ~2x, MDLM ~1.5x (the earlier default's ratios)
STEP_MS = dict(ar=lambda n: 50 + n / 2700, mir=lambda n: 2 * (50 + n / 2700), mdlm=lambda n: 1.5 * (50 + n / 2700))


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_args(p, "out/data_constrained")
    p.add_argument("--preset", choices=tuple(PRESETS), default="authors",
                   help="authors (default): the authors' baseline (dropout 0.1, untied decayed head), a scan for the "
                        "regime, 2 sweep seeds; earlier: the earlier default (dropout 0, tied head; "
                        "experiments/results/data_constrained-earlier)")
    p.add_argument("--plan", action="store_true", help="print the phases, their runs and the estimated time; train nothing")
    p.add_argument("--dropout", type=float, default=None, help="dropout of every run (authors 0.1, earlier 0)")
    p.add_argument("--dropout-at", default=None, choices=tuple(DROPOUT_AT),
                   help="where the dropout applies (train.py --dropout-at; authors attn-out: only the attention "
                        "block's output projection, as their model)")
    p.add_argument("--tie", dest="tie", action="store_const", const=True, default=None,
                   help="tie the LM head to the embedding (the earlier preset)")
    p.add_argument("--no-tie", dest="tie", action="store_const", const=False,
                   help="an untied, weight-decayed LM head (the authors' preset)")
    p.add_argument("--sweep-seeds", type=int, default=None, help="seeds of the decay sweep (authors 2, earlier 1)")
    g = p.add_argument_group("phase 0: the scan (authors preset)")
    g.add_argument("--no-scan", dest="scan", action="store_const", const=False, default=None,
                   help="no scan: the grid is --sizes x --budgets x --epochs")
    g.add_argument("--scan-sizes", default=None, help=f"candidate sizes (default {AUTHORS['scan_sizes']})")
    g.add_argument("--scan-budgets", default=None, help=f"candidate smallest budgets U0 (default {AUTHORS['scan_budgets']})")
    g.add_argument("--scan-epochs", default=None, help=f"candidate epochs (default {AUTHORS['scan_epochs']})")
    g.add_argument("--max-budget", type=int, default=None,
                   help=f"the grid's budgets double from U0 up to this (default {AUTHORS['max_budget']:,})")
    g.add_argument("--grid-hours", type=float, default=None,
                   help=f"the time limit of the sweep + grid at the scan's choice, in hours of two 1-thread jobs "
                        f"(STEP_MS): the largest sizes, then budgets, are dropped until it fits (default "
                        f"{AUTHORS['grid_hours']:g})")
    g.add_argument("--scan-fallback", action="store_const", const=True, default=None,
                   help="when no candidate qualifies, use the closest (default: an error; on with --quick)")
    p.add_argument("--mdlm-strong-decay", type=float, default=None,
                   help="mdlm-strong's fixed decay (authors 3.2; earlier: the AR-tuned decay)")
    p.add_argument("--mdlm-epochs", type=float, default=None, help="MDLM's epochs (authors 32; earlier: the AR epochs)")
    p.add_argument("--mdlm-budgets", type=int, default=None,
                   help="MDLM on the N smallest budgets only (authors 2; 0 = every budget)")
    p.add_argument("--stage", default="music",
                   help="the corpus (a train.py stage name; default: %(default)s, see the docstring for why)")
    p.add_argument("--subset", choices=("auto", "chunks", "first"), default="auto",
                   help="how U unique tokens are chosen: chunks = U/(block+1) random whole chunks of the stream "
                        "(music stages only), first = the first U tokens; auto (default): chunks for music")
    p.add_argument("--sizes", default=None,
                   help=f"model sizes, L<layers>d<width>[h<heads>] comma-separated (default {DEFAULTS['sizes']}; "
                        f"quick {QUICK['sizes']}; 4 heads unless given)")
    p.add_argument("--budgets", default=None,
                   help=f"unique-token budgets U (default {DEFAULTS['budgets']}; quick {QUICK['budgets']})")
    p.add_argument("--epochs", type=float, default=None,
                   help=f"passes over U per run (default {DEFAULTS['epochs']}; quick {QUICK['epochs']})")
    p.add_argument("--methods", default=None,
                   help=f"methods of the grid, of {', '.join(METHODS)} (authors {AUTHORS['methods']}; earlier "
                        f"{EARLIER['methods']}); wd is always run (the sweep)")
    p.add_argument("--seeds", type=int, default=None,
                   help=f"seeds 0..N-1 for wd and wd+mir in the smallest --seeded-sizes sizes "
                        f"(default {DEFAULTS['seeds']}; quick {QUICK['seeds']}); other cells: seed 0")
    p.add_argument("--seeded-sizes", type=int, default=None,
                   help=f"how many of the smallest sizes get --seeds seeds (default {DEFAULTS['seeded_sizes']}; "
                        f"quick {QUICK['seeded_sizes']}; 0 = every size)")
    p.add_argument("--decays", default=None,
                   help=f"weight decays of the per-size sweep (default {DEFAULTS['decays']}; quick {QUICK['decays']})")
    p.add_argument("--lrs", default="3e-3",
                   help="learning rates of the sweep, tuned jointly with the decay (default: %(default)s; "
                        "min lr = lr / 10)")
    p.add_argument("--weak-decay", type=float, default=0.1, help="the weak decay of ar-weak, mdlm-weak (default: %(default)s)")
    p.add_argument("--sweep-budget", type=float, default=None, help="U of the decay sweep (default: the middle budget)")
    p.add_argument("--warmup-frac", type=float, default=0.05,
                   help="lr warmup as a fraction of each run's steps (default: %(default)s; the authors' 1%%)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step (default 16)")
    p.add_argument("--block-size", type=int, default=None, help="context length (default 128; quick 64)")
    p.add_argument("--mir-lambda", type=float, default=0.4, help="MIR's lambda (default: %(default)s, the paper's)")
    p.add_argument("--mir-ratio", default="0.0,0.5", help="MIR's mask-ratio range (default: %(default)s)")
    p.add_argument("--mir-keep-first", type=int, default=8, help="MIR's unmasked prefix (default: %(default)s)")
    p.add_argument("--laws", default=None, help="laws to fit (default: every law of scaling.py)")
    p.add_argument("--fit-methods", default=None,
                   help="methods whose runs the laws are fitted to (default: every method of the grid)")
    p.add_argument("--top-tokens", type=int, default=12, help="tokens listed in the per-token analysis")
    p.add_argument("--train-args", default="",
                   help="extra train.py flags for every run, one string (e.g. \"--music-composers all\")")
    a = p.parse_args(argv)
    base = PRESETS[a.preset][1 if a.quick else 0]
    for k, v in base.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.out = Path(a.out or ("out/data_constrained-quick" if a.quick else "out/data_constrained"))
    try:
        a.sizes = [parse_size(s) for s in a.sizes.split(",")]
        a.budgets = sorted(int(float(u)) for u in str(a.budgets).split(","))
        a.decays = [float(d) for d in str(a.decays).split(",")]
        a.lrs = [float(x) for x in a.lrs.split(",")]
        if a.scan:
            a.scan_sizes = [parse_size(s) for s in a.scan_sizes.split(",")]
            a.scan_budgets = sorted(int(float(u)) for u in str(a.scan_budgets).split(","))
            a.scan_epochs = sorted(float(e) for e in str(a.scan_epochs).split(","))
    except ValueError as e:
        p.error(str(e))
    a.methods = [m.strip() for m in a.methods.split(",")]
    bad = [m for m in a.methods if m not in METHODS]
    if bad:
        p.error(f"--methods: unknown {bad}; choose from {', '.join(METHODS)}")
    if "wd" not in a.methods:
        a.methods.insert(0, "wd")
    a.fit_methods = [m for m in (a.fit_methods.split(",") if a.fit_methods else a.methods) if m in a.methods]
    if a.laws:
        import scaling
        bad = [law for law in a.laws.split(",") if law not in scaling.LAWS]
        if bad:
            p.error(f"--laws: unknown {bad}; choose from {', '.join(scaling.LAWS)}")
    if len(a.budgets) < 2 or len(a.sizes) < 2:
        p.error("give at least 2 sizes and 2 budgets (laws and fan-out need both axes)")
    for flag in ("seeds", "epochs", "batch_size", "block_size", "jobs", "sweep_seeds"):
        if getattr(a, flag, None) is not None and getattr(a, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive, got {getattr(a, flag)}")
    if any(u <= 0 for u in a.budgets) or any(x <= 0 for x in a.decays + a.lrs):
        p.error("--budgets, --decays and --lrs must be positive")
    if a.dropout < 0 or a.dropout >= 1:
        p.error(f"--dropout must be in [0, 1), got {a.dropout}")
    a.mdlm_epochs = a.mdlm_epochs or a.epochs
    if a.scan:
        a.sizes, a.budgets, a.epochs = a.scan_sizes, a.scan_budgets, a.scan_epochs[0]  # until the scan chooses
    if a.preset == "authors" and a.sweep_budget is None:
        a._sweep_at_u0 = True  # the sweep runs at the smallest budget (U0), where regularisation matters most
    a.sweep_budget = int(a.sweep_budget or (a.budgets[0] if a.preset == "authors" else a.budgets[len(a.budgets) // 2]))
    if a.sweep_budget not in a.budgets and not a.scan:
        p.error(f"--sweep-budget {a.sweep_budget} must be one of --budgets {a.budgets}")
    a.seeded_sizes = a.seeded_sizes or len(a.sizes)
    if a.subset == "auto":
        a.subset = "chunks" if a.stage.startswith("music") else "first"
    if a.subset == "chunks" and not a.stage.startswith("music"):
        p.error("--subset chunks needs a music stage (it uses --music-chunks); use --subset first")
    return a


def parse_size(s):
    """'L4d64' or 'L4d64h8' -> (label, layers, width, heads)."""
    import re
    m = re.fullmatch(r"L(\d+)d(\d+)(?:h(\d+))?", s.strip())
    if not m:
        raise ValueError(f"--sizes: {s!r} is not L<layers>d<width>[h<heads>], e.g. L4d64")
    L, d, h = int(m[1]), int(m[2]), int(m[3] or 4)
    if d % h:
        raise ValueError(f"--sizes: width {d} is not divisible by {h} heads in {s!r}")
    return s.strip(), L, d, h


# ---------------------------------------------------------------------------------------------
# runs

def run_name(obj, size, U, wd, lr, seed, tag=""):
    return f"{obj}-{size[0]}-U{U}-wd{wd:g}-lr{lr:g}-s{seed}{tag}"


def run_tag(a, epochs):
    """The part of a run's name beyond the earlier preset's: epochs, dropout, an untied head
    (empty for the earlier preset's runs, whose names stay as they were)."""
    if a.preset == "earlier":
        return ""
    return (f"-e{epochs:g}-do{a.dropout:g}" + ("" if a.dropout_at == "all" else f"-{a.dropout_at.replace('-', '')}")
            + ("" if a.tie else "-untied"))


def train_argv(a, obj, size, U, wd, lr, seed, epochs=None):
    """train.py flags of one run (without --out)."""
    _, L, d, h = size
    T, B = a.block_size, a.batch_size
    epochs = epochs or a.epochs
    steps = math.ceil(epochs * U / (B * T))
    chunks = U // (T + 1) if a.subset == "chunks" else None  # whole chunks drawn across the stream
    argv = ["--stages", a.stage, "--n-layer", L, "--n-embd", d, "--n-head", h, "--block-size", T,
            "--batch-size", B, "--epochs", f"{epochs:g}", "--unique-tokens", chunks * (T + 1) if chunks else U,
            "--lr", f"{lr:g}", "--min-lr", f"{lr / 10:g}", "--warmup-iters", max(1, round(a.warmup_frac * steps)),
            "--weight-decay", f"{wd:g}", "--seed", seed, "--data-seed", 0,
            # train.py's own evaluation only checkpoints and logs (the loss we use is evaluate_run's); the
            # authors' preset also logs the training split (the scan's overfit = val - train)
            "--eval-interval", max(1, min(250, steps)), "--eval-iters", 4,
            "--eval-splits", "val" if a.preset == "earlier" else "train,val", "--log-interval", 10]
    if a.preset != "earlier":
        argv += ["--dropout", f"{a.dropout:g}", "--dropout-at", a.dropout_at] + ([] if a.tie else ["--no-tie"])
    if chunks:
        argv += ["--music-chunks", chunks]
    if obj == "mir":
        argv += ["--mir", "--mir-lambda", f"{a.mir_lambda:g}", "--mir-ratio", a.mir_ratio,
                 "--mir-keep-first", a.mir_keep_first]
    elif obj == "mdlm":
        argv += ["--objective", "mdlm"]
    argv += a.train_args.split()
    return [str(x) for x in argv]


def make_run(a, obj, size, U, wd, lr, seed, epochs=None, **meta):
    epochs = epochs or (a.mdlm_epochs if obj == "mdlm" else a.epochs)
    name = run_name(obj, size, U, wd, lr, seed, run_tag(a, epochs))
    return Run(name, a.out / "runs" / name, train_argv(a, obj, size, U, wd, lr, seed, epochs),
               dict(obj=obj, size=size[0], U=U, wd=wd, lr=lr, seed=seed, **meta))


def scan_runs(a):
    """Phase 0: AR at the weak decay, seed 0, every candidate size x U0 x epochs; MDLM at the
    smallest size, every U0, its epochs (experiments/lib/data_constrained_scan.py)."""
    lr = a.lrs[0]
    runs = [make_run(a, "ar", size, U, a.weak_decay, lr, 0, epochs=e, phase="scan", epochs_asked=e)
            for e in a.scan_epochs for U in a.scan_budgets for size in a.scan_sizes]
    return runs + [make_run(a, "mdlm", a.scan_sizes[0], U, a.weak_decay, lr, 0, phase="scan",
                            epochs_asked=a.mdlm_epochs) for U in a.scan_budgets]


def scan_record(r):
    """A scan run as choose_regime reads it (None while unfinished)."""
    s = read_summary(r.folder)
    if s is None:
        return None
    st = s["stages"][0]
    return dict(obj=r.meta["obj"], size=r.meta["size"], U=r.meta["U"], epochs=r.meta["epochs_asked"], name=r.name,
                loss=val_loss(r), train_loss=st.get("train_loss"), unigram_val_ppl=st.get("unigram_val_ppl"),
                N=s["params"], seconds=s["seconds"])


def choose(a, runs):
    """Read the finished scan (choose_regime), set a.sizes, a.budgets, a.epochs (and the sweep's
    budget) to its choice and return the scan's record for the report."""
    recs = [scan_record(r) for r in runs]
    if any(r is None for r in recs):
        raise UserError(f"the scan has unfinished runs in {a.out / 'runs'}; rerun without --report-only")
    labels = [s[0] for s in a.scan_sizes]
    fits = None if not a.grid_hours else \
        (lambda e, u0, kept, budgets: grid_hours(a, e, u0, kept, budgets) <= a.grid_hours)
    scan = sc.choose_regime(recs, labels, SCAN_RULES, a.max_budget, fits)
    scan.update(rules=SCAN_RULES, runs=recs, fallback=False)
    if scan["choice"] is None:
        c = sc.closest(scan)
        note = f"{c['epochs']:g} epochs, U0 = {c['U0']:,}: {c['why']}"
        if not a.scan_fallback:
            raise UserError(f"the scan found no regime where the law can fan out (closest: {note}); widen "
                            "--scan-sizes / --scan-budgets / --scan-epochs, or --scan-fallback")
        scan.update(choice=(c["epochs"], c["U0"]), sizes=c["kept"] or labels, fallback=True, fallback_note=note)
    e, u0 = scan["choice"]
    a.sizes = [s for s in a.scan_sizes if s[0] in scan["sizes"]]
    a.epochs, a.budgets = e, scan.get("budgets") or sc.grid_budgets(u0, a.max_budget)
    if getattr(a, "_sweep_at_u0", False):
        a.sweep_budget = u0
    scan["budgets"] = a.budgets
    if a.grid_hours:
        scan["grid_hours"] = dict(limit=a.grid_hours, estimate=grid_hours(a, e, u0, scan["sizes"], a.budgets))
    return scan


def grid_hours(a, epochs, u0, sizes, budgets):
    """Estimated hours (STEP_MS, two jobs at a time) of the decay sweep and the grid at one scan
    choice: every run, finished or not, so that the choice follows from the scan's records alone."""
    b = copy.copy(a)
    b.sizes, b.epochs, b.budgets = [s for s in a.scan_sizes if s[0] in sizes], epochs, list(budgets)
    if getattr(a, "_sweep_at_u0", False):
        b.sweep_budget = u0
    middle = {s[0]: (b.decays[len(b.decays) // 2], b.lrs[0]) for s in b.sizes}
    return seconds_of(b, unique(sweep_runs(b) + grid_runs(b, middle))) / 2 / 3600


def sweep_runs(a):
    return [make_run(a, "ar", size, a.sweep_budget, wd, lr, seed, phase="sweep")
            for size in a.sizes for lr in a.lrs for wd in a.decays for seed in range(a.sweep_seeds)]


def pick_strong(a, sweep):
    """{size label: (wd, lr)} with the lowest full-validation loss in the sweep, averaged over the
    sweep's seeds (the mean, not the best seed); None while a size's sweep is unfinished."""
    best = {}
    for size in a.sizes:
        by = {}
        for r in sweep:
            if r.meta["size"] == size[0]:
                by.setdefault((r.meta["wd"], r.meta["lr"]), []).append(val_loss(r))
        if any(v is None for vs in by.values() for v in vs):
            best[size[0]] = None
            continue
        key, v = min(((k, sum(vs) / len(vs)) for k, vs in by.items()), key=lambda kv: kv[1])
        best[size[0]] = key if math.isfinite(v) else None
    return best


def method_decay(a, method, strong_wd):
    obj, which = METHOD_RUN[method]
    if method == "mdlm-strong" and a.mdlm_strong_decay is not None:
        return a.mdlm_strong_decay
    return strong_wd if which == "strong" else a.weak_decay


def grid_runs(a, strong):
    """Every (method, size, U, seed) run of the grid, as Runs with meta['method']; a
    configuration asked for by two methods is one Run listed under each. MDLM runs only at the
    --mdlm-budgets smallest budgets (0: every budget)."""
    runs = []
    mdlm_us = a.budgets[:a.mdlm_budgets] if a.mdlm_budgets else a.budgets
    for i, size in enumerate(a.sizes):
        wd_s, lr = strong[size[0]]
        for U in a.budgets:
            for method in a.methods:
                obj, which = METHOD_RUN[method]
                if obj == "mdlm" and U not in mdlm_us:
                    continue
                seeds = a.seeds if method in ("wd", "wd+mir") and i < a.seeded_sizes else 1
                for seed in range(seeds):
                    runs.append(make_run(a, obj, size, U, method_decay(a, method, wd_s), lr, seed,
                                         method=method, phase="grid"))
    return runs


def check_budgets(a):
    """A budget larger than the corpus is a one-line error before anything is trained."""
    args = train_parse_args(["--stages", a.stage, "--block-size", str(a.block_size)] + a.train_args.split())
    n = len(load_corpus(a.stage, args).train)
    unit = a.block_size + 1 if a.subset == "chunks" else 1
    for U in a.budgets + ([a.max_budget] if a.scan else []):
        if U // unit < 1 or U // unit * unit > n // unit * unit:
            raise UserError(f"--budgets {U:,}: stage {a.stage!r} has {n:,} training tokens"
                            + (f" ({n // unit:,} chunks of {unit})" if unit > 1 else "")
                            + f"; choose budgets between {unit} and {n // unit * unit:,}")


def unique(runs):
    seen, out = set(), []
    for r in runs:
        if r.name not in seen:
            seen.add(r.name)
            out.append(r)
    return out


def val_loss(run):
    """The run's full-validation loss (evaluated now if needed); inf if it diverged, None if unfinished."""
    if (run.folder / "diverged.json").exists():
        return math.inf
    e = evaluate_run(run.folder)
    return None if e is None else e["loss"]


def non_embedding(size, vocab=161, tie=False):
    """N of a size, about: 12 L d^2 (attention and MLP) + the head's vocab x d when untied."""
    _, L, d, _ = size
    return 12 * L * d * d + (0 if tie else vocab * d)


def seconds_of(a, runs):
    """Estimated training seconds of runs (STEP_MS per step; one job's share of 2 cores)."""
    total = 0.0
    for r in unique(runs):
        size = next(s for s in a.sizes + (a.scan_sizes or []) if s[0] == r.meta["size"])
        steps = math.ceil(float(r.argv[r.argv.index("--epochs") + 1]) * r.meta["U"] / (a.batch_size * a.block_size))
        total += steps * STEP_MS[r.meta["obj"]](non_embedding(size, tie=a.tie)) / 1000
    return total


def plan(a):
    """The phases, their runs and the estimated wall time (two jobs at a time). Before the scan has
    finished, the grid is estimated at the preset's expected choice (--sizes, --budgets, the
    smallest --scan-epochs); after it, at the scan's choice."""
    lines, total, seen = [], 0.0, []
    if a.scan:
        runs = scan_runs(a)
        t = seconds_of(a, runs) / a.jobs
        lines.append(f"phase 0, scan: {len(runs)} runs, ~{t / 3600:.1f} h")
        total, seen = total + t, runs
        if all(is_finished(r.folder) for r in runs):
            choose(a, runs)
        else:
            base = PRESETS[a.preset][1 if a.quick else 0]
            a.sizes = [parse_size(s) for s in base["sizes"].split(",")]
            a.budgets = [int(u) for u in base["budgets"].split(",")]
            a.sweep_budget = a.budgets[0] if getattr(a, "_sweep_at_u0", False) else a.sweep_budget
            lines.append(f"  (grid estimated at sizes {base['sizes']}, budgets {base['budgets']}, {a.epochs:g} epochs: "
                         "the scan has not finished)")
    sweep = [r for r in sweep_runs(a) if r.name not in {s.name for s in seen}]
    t = seconds_of(a, sweep) / a.jobs
    lines.append(f"phase 1, decay sweep: {len(sweep)} runs ({a.sweep_seeds} seeds x {len(a.decays)} decays x "
                 f"{len(a.sizes)} sizes at U = {a.sweep_budget:,}), ~{t / 3600:.1f} h")
    total += t
    grid = [r for r in unique(grid_runs(a, {s[0]: (a.decays[len(a.decays) // 2], a.lrs[0]) for s in a.sizes}))
            if r.name not in {s.name for s in seen + sweep}]
    t = seconds_of(a, grid) / a.jobs
    lines.append(f"phase 2, grid: {len(grid)} runs beyond the sweep's ({', '.join(a.methods)}), ~{t / 3600:.1f} h")
    total += t
    lines.append(f"in all ~{total / 3600:.1f} h of training on 2 quiet cores (STEP_MS, measured on a 2-core "
                 "AMD EPYC; +-50%), plus minutes of evaluation and fits")
    every = unique(seen + sweep + grid)
    todo = [r for r in every if not is_finished(r.folder)]
    measured = pace_line(every, lambda r: seconds_of(a, [r]), seconds_of(a, todo), a.jobs)
    return "\n".join(lines + ([measured] if measured else []))


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(a.threads or os.cpu_count() or 1)  # this process only evaluates; runs set their own
    try:
        experiment(a)
    finally:
        torch.set_num_threads(threads)


def experiment(a):
    """The four phases of the module docstring; --report-only where the run folders are gone
    renders the records of OUT/report.json."""
    if a.plan:
        print(plan(a))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if a.report_only and not any(is_finished(f) for f in (a.out / "runs").glob("*")):
        records = rep.read_records(a.out)
        if records is None:
            raise UserError(f"no finished runs in {a.out / 'runs'} and no {a.out / 'report.json'}: "
                            "run without --report-only first")
    else:
        records = train_and_collect(a)
    print("== phase 4: report", flush=True)
    text = rep.render(records, a.out)
    print("\n" + text)
    print(f"\nwrote {a.out / 'report.md'}, report.json, runs.csv and the PNGs ({time.time() - t0:.0f} s in all)")


def train_phase(a, runs, title):
    """Train a phase's unfinished runs (not with --report-only), then evaluate every one of them on
    the whole validation split; returns how many were trained now."""
    trained = 0
    if not a.report_only:
        print(title, flush=True)
        trained = len(run_sweep(runs, jobs=a.jobs, threads=a.threads))
    evaluate_runs([r.folder for r in runs], a.jobs, a.threads)
    return trained


def train_and_collect(a):
    """Phases 1-3 (training skipped with --report-only) and the records of phase 4 (the fits)."""
    check_budgets(a)
    prov, trained = (None if a.report_only else Provenance(a.out)), 0
    scan = None
    if a.scan:
        runs = scan_runs(a)
        trained += train_phase(a, runs, f"== phase 0: the scan, {len(runs)} runs")
        scan = choose(a, runs)
        print(f"  chosen: {a.epochs:g} epochs, sizes {', '.join(s[0] for s in a.sizes)}, budgets "
              f"{', '.join(f'{u:,}' for u in a.budgets)}" + (" (fallback: no candidate qualified)" if scan["fallback"] else ""))
    sweep = sweep_runs(a)
    trained += train_phase(a, sweep, f"== phase 1: weight-decay sweep, {len(sweep)} runs (U = {a.sweep_budget:,}, "
                           f"{a.epochs:g} epochs)")
    strong = pick_strong(a, sweep)
    missing = [s for s, v in strong.items() if v is None]
    if missing:
        raise UserError(f"the decay sweep of size(s) {missing} has unfinished or diverged runs in {a.out / 'runs'}; "
                        "rerun without --report-only (diverged runs: lower --lrs or drop that decay)")
    for size, (wd, lr) in strong.items():
        print(f"  {size}: strong decay {wd:g} (lr {lr:g})")
    grid = grid_runs(a, strong)
    todo = [r for r in unique(grid) if not any(r.name == s.name for s in sweep)]
    if not a.report_only:
        print(f"== phase 2: the grid, {len(unique(grid))} runs ({len(unique(grid)) - len(todo)} shared with the "
              f"sweep): {len(a.sizes)} sizes x {len(a.budgets)} budgets x {', '.join(a.methods)}", flush=True)
        trained += len(run_sweep(todo, jobs=a.jobs, threads=a.threads))
    print("== phase 3: full-validation evaluation of every final checkpoint", flush=True)
    evaluate_runs([r.folder for r in grid], a.jobs, a.threads)
    if prov:
        prov.finish(runs_trained=trained)  # wall and CPU time of training and evaluation, kept across resumptions
    print("== the law fits and the per-token analysis", flush=True)
    return rep.collect(a, sweep, grid, strong, scan)


if __name__ == "__main__":
    main_guard(main)
