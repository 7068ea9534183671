"""
The ladder paper's table: music -> poetry -> prose against random init and its controls, over seeds and widths.
arXiv 2604.21265 ("Listen and Chant Before You Read"): music then poetry before prose lowers prose perplexity
(349.0 ladder vs 373.2 music only vs 423.0 random init, p < 0.001); music alone is 26% lower after the first
prose epoch and 11.8% after convergence.

    python experiments/ladder.py --plan            # the default's runs and estimated time (~3.5 h measured; below)
    python experiments/ladder.py                   # the default: --preset contributions, the six contributions
    python experiments/ladder.py --quick           # its smoke version, a few minutes: every condition, d16, 2 seeds
    python experiments/ladder.py --preset subset   # the earlier default (65,536 prose tokens; ~55 min)
    python experiments/ladder.py --full            # every condition, d 16/32/64, 5 seeds (~12-17 h on a CPU)
    python experiments/ladder.py --paper --plan    # the GPU preset (WikiText-103, MAESTRO), printed, not run
    python experiments/ladder.py --report-only     # rebuild report.md / report.json / PNGs from finished runs
    python experiments/ladder.py --report-only --out experiments/results/ladder   # from report.json alone

The default, --preset contributions: each of the paper's six contributions beside its own number
(experiments/lib/ladder_contributions.py): 1. music vs random (26% after the first epoch, 11.8% at the end);
2. real music at N chunks vs synthetic at 3N (the same ceiling with a third of the data); 3. poetry after music
is additive (ladder 17.5% below random; compute-matched still 5.0% behind the ladder); 4. the mechanism is
orthogonal (music's attention / MLP alone; the ladder with its poetry-trained embeddings re-initialised);
5. capacity-dependent volume (N vs 3N: -3.1% / +3.3% / +6.1% at d16 / 32 / 64); 6. the gap at the plateau (d64,
5.5%). Conditions random, music, ladder, synthetic, compute-matched, volume-small, volume-large (= music's runs),
volume-large-synthetic, ablation-attn/-mlp/-norm, ablation-embed at d16; volume-small / volume-large also at
--capacity-widths 32, 64; long-random / long-ladder at d64; 3 seeds, 5 for the headline rows random, music,
ladder at d16 (--headline-seeds 5: 12 runs more, ~31 CPU-min by the estimate).
Prose: the first 655,360 training tokens of wiki-leads (two thirds of its 990,088; 320 steps of 16 x 128 per
epoch), 2 epochs; music and poetry 600 steps each at 16 x 128, as the reference run of this code at d16 (the
whole prose for 2 epochs: random 779 after epoch 1, well below the unigram 2,295; music -13.6%, ladder -27.5%).
Two thirds rather than all of it keeps the default near 3 h; the compute-matched control then repeats the
prose 1,840 / 320 = 5.75 times (the 65,536-token subset was repeated 14 times and overfitted by +166% at d16;
report.json's `checks` say whether this one does). Long pair: at most 10 epochs, patience 1 evaluation
(at a cap of 3 both d64 runs were still falling ~11% an epoch; at 10 they end flat, the last epoch -0.4% on
average, though still at the cap rather than stopped by --patience).
Music volume: the paper's 12k vs 36k MAESTRO chunks keep their 1 : 3 ratio on the offline music21 corpus,
which holds 4,038 training chunks of 129 tokens: 3N = 4,038 (all of it), N = 1,346; 600 steps x 16 chunks =
9,600 draws, 2.4 passes over 3N and 7.1 over N (the paper: 2 passes over 36k). `--plan` estimates 91 runs,
~510 CPU-min = ~255 min with --jobs 2 on 2 quiet cores from the per-token costs. Measured on a 2-core AMD
EPYC with bf16 instructions (experiments/results/ladder): 154 min wall (300 CPU-min) with the long pair at a
3-epoch cap (0.8x its estimate), then its six runs again at the 10-epoch cap, 93 min with --jobs 3: ~3.5 h
for the default from scratch. Those costs assume a CPU with bf16 instructions (the fused head in bf16, README "Speed");
where the head runs in fp32 a prose step takes ~3x as long (a 2-core AVX2 CPU: ~1.1 s a d16 step of 2,048
tokens, two runs at a time, against ~0.35 s), so expect several hours there, over several sessions, each
resuming the finished runs. After the first runs --plan prints the pace measured on the machine itself
(common.pace_line).
The report adds to the table below: `contributions` (each with its claims, Welch test, the paired test by
seed as a second reading, and a combined verdict), `checks` (random's first epoch below `prose_unigram_ppl`,
the compute-matched control within 5% of its best epoch, the long pair at a plateau) and music.png (a real
piece of the music stage beside one sampled from the d16 music run, as piano rolls).

Conditions (--conditions; the baseline each compares with is added automatically):
  random                  prose only (the baseline)
  music                   music -> prose (transfer attn, mlp, norm: the paper's default across vocabularies)
  ladder                  music -> poetry -> prose (poetry -> prose copies everything: same tokenizer)
  poetry                  poetry -> prose
  synthetic               synthetic music -> poetry -> prose (stage music-synthetic, same 160-token vocabulary)
  compute-matched         prose only, for as many optimizer steps as the whole ladder (music+poetry+prose)
  volume-small/-large     music (N / 3N chunks) -> prose; volume-large is the `music` condition's run
  volume-small-synthetic, volume-large-synthetic   the same with synthetic music
  ablation-attn/-mlp/-norm   music -> prose transferring only that group
  ablation-embed          the ladder with the poetry-trained token embedding (= the tied LM head) re-initialised
                          before prose: the prose run transfers attn,mlp,norm,pos from the poetry checkpoint
  long-random, long-ladder   the long-run pair at --long-width: prose until the validation loss stops improving
                          (--patience evaluations, one per prose epoch, at most --long-epochs epochs)

How the runs are shared (saves most of the CPU): every pre-training stage is its own train.py run, once per
(width, seed), and each prose stage is a separate run that starts from it with --init-from. So one music run
(3N chunks) serves music, volume-large, the three ablations and the ladder's poetry stage; one poetry
continuation serves ladder, ablation-embed and long-ladder; one synthetic 3N music run serves synthetic and
volume-large-synthetic. The sweep runs in waves (pre-training from scratch, then continuations, then the prose
runs that need them), each wave through experiments.lib.common.run_sweep (--jobs runs at a time), longest first.
Every prose run is stage 0 of its own run, so at one seed every condition sees the same prose batches in the same
order (train.py keys them by --seed and stage index), and every run, whatever its seed, is evaluated on the same
validation windows (keyed by --data-seed); evaluations measure the validation split only (--eval-splits val).

Budgets of --preset subset, the earlier default (our choices; each is a flag). The paper counts prose EPOCHS:
- prose: a fixed subset, the first --prose-tokens training tokens of the prose stage (65,536 = 64 steps of
  8 x 128 tokens; --unique-tokens in train.py; the same subset for every run), trained for --prose-epochs (5)
  epochs with an evaluation at the end of every epoch (--eval-interval = steps per epoch), so ppl_first_epoch is
  exactly after the first epoch and ppl_final after the last (both presets). --eval-iters 24 batches per
  evaluation (random validation windows, the same windows for every condition at one seed).
- music: --music-steps (400) steps of 8 x 128 tokens on --music-chunks N (1,340) or 3N (4,020) chunks of 129
  tokens. The step count is the same for N and 3N (the volume conditions differ in unique data only).
  The `music` condition uses the 3N chunks (it is volume-large).
- poetry: --poetry-steps (200) steps of 8 x 128 tokens of the Gutenberg Poetry corpus, no repetition (the
  paper gives no poetry budget).
- compute-matched: music + poetry + prose steps of the ladder (400 + 200 + 320 = 920 prose steps, ~14 epochs
  of the same subset), evaluated every epoch too.
- long-run pair: cosine over at most --long-epochs (30) epochs, stopped by train.py --patience (3 epochs
  without a new best validation loss); ppl_final is the best validation perplexity (the plateau), and the
  long pair is compared with long-random, not random.
- model (both presets): 4 layers, 4 heads, context 128, widths d in {16, 32, 64} (non-embedding params
  12.5k-200k; the paper's "up to ~400K"), AdamW lr 3e-3, 20 warmup steps then cosine to 3e-4 in every stage,
  weight decay 0.1. Seeds vary init and batch order; --data-seed (0) fixes the data (music chunk selection,
  synthetic music).
- its conditions: random, music, ladder, compute-matched at d = 16, 32, 64, 3 seeds; 54 runs, ~88 CPU-min by
  --plan (CPU_S_PER_KTOK below, measured with 1-thread runs and process_time). Checked against whole runs
  (CPU time of `--jobs 1 --threads 1` sweeps): random prose d64 133 s measured vs 137 s estimated.

--full: every condition, d 16/32/64, 5 seeds over the default's budgets (310 runs; out/ladder, so it reuses the
default's finished runs, the same flags); `--preset subset --full` the same over the subset's budgets. `--quick`:
every condition at d16 (volume pair also d32), 2 seeds, tiny budgets: 52 runs, minutes.

--paper (a GPU; `--paper --plan` prints it): WikiText-103 in full through train.py --prose wikitext103 (the
official archive, downloaded; no --unique-tokens), 5 prose epochs at batch 32 x 128, MAESTRO v3 (--music-dir
maestro, downloaded) with N = 12,000 vs 3N = 36,000 chunks, music 2,250 steps (2 epochs of 36k chunks), poetry
5,000 steps, every condition, d 16/32/64, 5 seeds, 200 evaluation batches; out/ladder-paper: 310 runs, a prose
run ~151k steps of 4,096 tokens (WikiText-103 ~124M GPT-2 tokens, approximated until prepared); the plan's CPU
estimate does not apply to a GPU.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

from flags import ArgumentParser  # noqa: E402 (one-line errors, like train.py)

from checkpoint import stage_file  # noqa: E402
from data.common import UserError  # noqa: E402
from experiments.lib import common  # noqa: E402
from experiments.lib.common import Run  # noqa: E402
from experiments.lib.ladder_conditions import (BASELINE, CONDITIONS, ladder_steps,  # noqa: E402,F401
                                               steps_per_epoch)

# pre-training run key -> (stage flag, music chunks as a multiple of N or None, --init-from run key, steps flag)
PRETRAIN = {
    "musicL": ("music_stage", 3, None, "music_steps"),
    "musicS": ("music_stage", 1, None, "music_steps"),
    "synthL": ("synthetic_stage", 3, None, "music_steps"),
    "synthS": ("synthetic_stage", 1, None, "music_steps"),
    "poetry": ("poetry_stage", None, None, "poetry_steps"),
    "ladder": ("poetry_stage", None, "musicL", "poetry_steps"),
    "synth-ladder": ("poetry_stage", None, "synthL", "poetry_steps"),
}
# the earlier default (--preset subset): four conditions at d 16/32/64 on the first 65,536 prose tokens, 5 epochs
DEFAULT = dict(conditions="random,music,ladder,compute-matched", widths="16,32,64", seeds=3)
# the six contributions (--preset contributions, the default): every condition they need at d16 on two thirds of
# the prose; volume-small / volume-large also at CAPACITY_WIDTHS; the long pair at --long-width; headline rows 5 seeds
SIX = ("random,music,ladder,synthetic,compute-matched,volume-small,volume-large,volume-large-synthetic,"
       "ablation-attn,ablation-mlp,ablation-norm,ablation-embed,long-random,long-ladder")
CONTRIBUTIONS = dict(conditions=SIX, widths="16", capacity_widths="32,64", seeds=3, headline_seeds=5,
                     batch_size=16, prose_tokens=655360, prose_epochs=2, music_steps=600, poetry_steps=600,
                     music_chunks=1346, eval_iters=24, pre_eval_iters=10, long_width=64, long_epochs=10, patience=1)
PRESETS = {"contributions": CONTRIBUTIONS, "subset": DEFAULT}
CAPACITY = ("volume-small", "volume-large")  # the contribution about capacity: also run at --capacity-widths
HEADLINE = ("random", "music", "ladder")     # the headline rows: --headline-seeds seeds at --widths
FULL = dict(conditions="all", widths="16,32,64", seeds=5)
QUICK = dict(conditions="all", widths="16", capacity_widths="32", seeds=2, headline_seeds=0, batch_size=4,
             block_size=64, prose_tokens=2048, prose_epochs=2, music_steps=16, poetry_steps=8, music_chunks=200,
             eval_iters=4, pre_eval_iters=2, warmup_iters=4, long_width=16, long_epochs=6, patience=1)
# the paper's scale, for a GPU: WikiText-103 in full, MAESTRO (12k vs 36k chunks), every condition
PAPER = dict(conditions="all", widths="16,32,64", seeds=5, prose="wikitext103", prose_tokens=0, batch_size=32,
             music_dir="maestro", music_chunks=12000, music_steps=2250, poetry_steps=5000, prose_epochs=5, eval_iters=200,
             pre_eval_iters=50, long_epochs=30, patience=3)
SETTINGS = dict(batch_size=8, block_size=128, n_layer=4, n_head=4, lr=3e-3, warmup_iters=20, prose_tokens=65536,
                prose_epochs=5, music_steps=400, poetry_steps=200, music_chunks=1340, eval_iters=24,
                pre_eval_iters=10, long_width=64, long_epochs=30, patience=3, prose="wiki-leads", music_dir=None,
                capacity_widths="", headline_seeds=0)
# 1-thread CPU seconds per 1,000 training tokens (forward + backward + AdamW), measured with process_time on this
# 2-core AMD EPYC (avx512_bf16), batch 8 x 128, 4 layers: text = the 50,257-token GPT-2 head, music = 160 tokens.
# (45 - 5 steps differenced; d32 music interpolated). Under load the CPU time of a 1-thread run is what a
# --jobs 2 sweep gets on 2 quiet cores; 2 threads in one process run ~1.4x slower per core (README, "Speed").
CPU_S_PER_KTOK = {"text": {16: 0.17, 32: 0.19, 64: 0.30}, "music": {16: 0.024, 32: 0.033, 64: 0.043}}
EVAL_FRACTION = 0.5      # an evaluation token (train + val splits, no backward) relative to a training token
RUN_OVERHEAD_S = 4.0     # corpus memory-mapping, model build, checkpoints, per run (CPU seconds)
# a whole sweep's wall time over the estimate from the costs above: the reference run (random, music, ladder at d16,
# batch 16 x 128, the whole prose for 2 epochs, music and poetry 600 steps, 3 seeds, --jobs 2) took 43 min for 15
# runs where --plan says ~32 (evaluation, checkpoints, the two runs of a pair competing for memory bandwidth)
REFERENCE_FACTOR = 43 / 32


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[1], epilog=__doc__.split("\n", 2)[2],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_sweep_args(p, "out/ladder")
    p.add_argument("--full", action="store_true",
                   help=f"the full CPU grid: every condition, widths {FULL['widths']}, {FULL['seeds']} seeds")
    p.add_argument("--paper", action="store_true",
                   help="the paper's scale for a GPU: --prose wikitext103 in full, MAESTRO music (--music-dir "
                        "maestro, 12k vs 36k chunks), every condition, widths 16,32,64, 5 seeds, batch 32")
    p.add_argument("--plan", action="store_true", help="print the runs and the estimated time; train nothing")
    p.add_argument("--preset", choices=sorted(PRESETS), default="contributions",
                   help="contributions (default): the paper's six contributions on the whole prose, d16 (+ d32/d64 "
                        "for the volume pair, d64 for the long pair); subset: the earlier default (first 65,536 "
                        "prose tokens, 4 conditions at d 16/32/64); --quick / --full / --paper set budgets over it")
    p.add_argument("--conditions", default=None,
                   help=f"comma-separated, or 'all' (default: the preset's); one of: {', '.join(CONDITIONS)}")
    p.add_argument("--widths", default=None, help="comma-separated d_model values of every condition (default: the "
                                                  f"preset's; contributions {CONTRIBUTIONS['widths']})")
    p.add_argument("--capacity-widths", default=None,
                   help=f"more widths for {' and '.join(CAPACITY)} only, the capacity contribution (contributions: "
                        f"{CONTRIBUTIONS['capacity_widths']}; '' = none)")
    p.add_argument("--seeds", type=int, default=None, help=f"seeds 0..N-1 per cell (default {CONTRIBUTIONS['seeds']})")
    p.add_argument("--headline-seeds", type=int, default=None,
                   help=f"seeds of the headline rows ({', '.join(HEADLINE)}) at --widths when more than --seeds "
                        f"(contributions: {CONTRIBUTIONS['headline_seeds']}; 0 = --seeds)")
    p.add_argument("--data-seed", type=int, default=0, help="train.py --data-seed for every run (default 0)")
    g = p.add_argument_group("budgets (each preset's in the module docstring; --quick and --paper set their own)")
    g.add_argument("--prose-tokens", type=int, default=None,
                   help="the prose subset: the first U training tokens, rounded to whole steps "
                        "(contributions 655360, subset 65536; 0 = all)")
    g.add_argument("--prose-epochs", type=int, default=None, help="prose epochs (contributions 2, subset 5 as the paper)")
    g.add_argument("--music-steps", type=int, default=None,
                   help="steps of every music stage, real and synthetic (contributions 600, subset 400)")
    g.add_argument("--poetry-steps", type=int, default=None, help="steps of every poetry stage (contributions 600, subset 200)")
    g.add_argument("--music-chunks", type=int, default=None,
                   help="N: volume-small uses N chunks, every other music stage 3N (contributions 1346, subset 1340; 3N <= 4,038)")
    g.add_argument("--long-width", type=int, default=None, help="width of the long-run pair (default 64)")
    g.add_argument("--long-epochs", type=int, default=None, help="most prose epochs of the long-run pair (contributions 3, subset 30)")
    g.add_argument("--patience", type=int, default=None,
                   help="long-run pair: stop after this many epochs without a new best val loss (contributions 1, subset 3)")
    g.add_argument("--eval-iters", type=int, default=None, help="batches per prose evaluation (default 24)")
    g.add_argument("--pre-eval-iters", type=int, default=None,
                   help="batches of the pre-training stages' one evaluation (default 10)")
    g = p.add_argument_group("model and optimization (every stage)")
    for flag, kind in (("batch-size", int), ("block-size", int), ("n-layer", int), ("n-head", int), ("lr", float),
                       ("warmup-iters", int)):
        g.add_argument(f"--{flag}", type=kind, default=None,
                       help=f"train.py --{flag} (default {CONTRIBUTIONS.get(flag.replace('-', '_'), SETTINGS[flag.replace('-', '_')])})")
    g = p.add_argument_group("data (stage names; tests point them at small offline corpora)")
    g.add_argument("--prose", default=None, help="train.py --prose: wiki-leads (default), wikitext2, wikitext103")
    g.add_argument("--prose-stage", default="prose", help="stage name of the prose runs (default prose)")
    g.add_argument("--poetry-stage", default="poetry", help="stage name of the poetry stages (default poetry)")
    g.add_argument("--music-stage", default="music", help="stage name of the real music (default music)")
    g.add_argument("--synthetic-stage", default="music-synthetic",
                   help="the synthetic control (default music-synthetic)")
    g.add_argument("--synthetic-tokens", type=int, default=600_000,
                   help="train.py --synthetic-tokens (default 600000)")
    g.add_argument("--music-dir", default=None, help="train.py --music-dir (default: the offline music21 corpus)")
    g.add_argument("--device", default="auto", help="train.py --device (default auto)")
    a = p.parse_args(argv)
    if sum((a.quick, a.full, a.paper)) > 1:
        p.error("give at most one of --quick, --full, --paper")
    preset = {**SETTINGS, **PRESETS[a.preset], **(QUICK if a.quick else FULL if a.full else PAPER if a.paper else {})}
    for k, v in preset.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    a.out = Path(a.out or ("out/ladder-quick" if a.quick else "out/ladder-paper" if a.paper else "out/ladder"))
    a.out = a.out.resolve()  # --init-from paths in the runs' flags are absolute: the same from any folder
    names = list(CONDITIONS) if a.conditions == "all" else [c.strip() for c in a.conditions.split(",") if c.strip()]
    bad = [c for c in names if c not in CONDITIONS]
    if bad:
        p.error(f"unknown condition(s) {bad}; choose from: {', '.join(CONDITIONS)} or 'all'")
    for c in list(names):  # every condition is compared with its baseline
        if BASELINE.get(c, "random") not in names:
            names.insert(0, BASELINE.get(c, "random"))
    a.conditions = [c for c in CONDITIONS if c in names]
    try:
        a.widths = [int(w) for w in str(a.widths).split(",")]
        a.capacity_widths = [int(w) for w in str(a.capacity_widths).split(",") if w.strip()]
    except ValueError:
        p.error(f"--widths {a.widths!r} / --capacity-widths {a.capacity_widths!r}: give comma-separated whole "
                "numbers, e.g. 16,32,64")
    if a.headline_seeds < 0:
        p.error("--headline-seeds must be >= 0")
    for flag in ("seeds", "prose_epochs", "music_steps", "poetry_steps", "music_chunks", "long_epochs", "patience",
                 "eval_iters", "pre_eval_iters", "batch_size", "block_size", "long_width"):
        if getattr(a, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    if min(a.widths + a.capacity_widths) <= 0 or a.prose_tokens < 0 or any(
            w % a.n_head for w in a.widths + a.capacity_widths + [a.long_width]):
        p.error(f"widths must be positive multiples of --n-head {a.n_head}; --prose-tokens >= 0")
    return a


# ---------------------------------------------------------------------------------------------
# the plan: which runs, with which flags, in which wave

def common_argv(a, width, seed):
    argv = ["--n-layer", a.n_layer, "--n-head", a.n_head, "--n-embd", width, "--block-size", a.block_size,
            "--batch-size", a.batch_size, "--lr", a.lr, "--warmup-iters", a.warmup_iters, "--seed", seed,
            "--data-seed", a.data_seed, "--prose", a.prose, "--synthetic-tokens", a.synthetic_tokens,
            "--device", a.device, "--log-interval", 10]
    argv += ["--music-dir", a.music_dir] if a.music_dir else []
    return [str(x) for x in argv]


def pre_run(a, key, width, seed):
    """The pre-training run `key` at (width, seed): one stage, evaluated once at its end."""
    stage_flag, mult, init, steps_flag = PRETRAIN[key]
    stage, steps = getattr(a, stage_flag), getattr(a, steps_flag)
    name = f"pre-{key}-d{width}-s{seed}"
    argv = ["--stages", stage, "--iters", str(steps), "--eval-interval", str(steps),
            "--eval-iters", str(a.pre_eval_iters), "--eval-splits", "val"] + common_argv(a, width, seed)
    if mult:
        argv += ["--music-chunks", str(mult * a.music_chunks)]
    deps = []
    if init:
        parent = pre_run(a, init, width, seed)
        argv += ["--init-from", str(checkpoint_of(a, parent))]
        deps = [parent.name]
    kind = "text" if stage_flag == "poetry_stage" else "music"
    return Run(name, a.out / "runs" / name, argv, dict(kind=kind, stage=stage, steps=steps, deps=deps,
                                                      evals=1, eval_iters=a.pre_eval_iters, width=width))


def checkpoint_of(a, run):
    return stage_file(run.folder, 0, run.meta["stage"])


def prose_run(a, condition, width, seed):
    pre, key, groups, budget = CONDITIONS[condition]
    spe, unique = steps_per_epoch(a)
    steps = {"epochs": a.prose_epochs * spe, "matched": ladder_steps(a), "long": a.long_epochs * spe}[budget]
    name = f"prose-{key}-d{width}-s{seed}"
    argv = ["--stages", a.prose_stage, "--iters", str(steps), "--eval-interval", str(spe),
            "--eval-iters", str(a.eval_iters), "--eval-splits", "val"] + common_argv(a, width, seed)
    argv += ["--unique-tokens", str(unique)] if unique else []
    argv += ["--patience", str(a.patience)] if budget == "long" else []
    deps = []
    if pre:
        parent = pre_run(a, pre, width, seed)
        argv += ["--init-from", str(checkpoint_of(a, parent))]
        deps = [parent.name]
    if groups:
        argv += ["--transfer", groups]
    return Run(name, a.out / "runs" / name, argv, dict(kind="text", stage=a.prose_stage, steps=steps, deps=deps,
                                                      evals=-(-steps // spe), eval_iters=a.eval_iters,
                                                      width=width, spe=spe))


def condition_widths(a, c):
    """The widths condition c runs at: --long-width for the long pair; --widths, and for the capacity
    contribution's pair (volume-small, volume-large) --capacity-widths too."""
    if CONDITIONS[c][3] == "long":
        return [a.long_width]
    return sorted(set(a.widths) | set(a.capacity_widths)) if c in CAPACITY else list(a.widths)


def condition_seeds(a, c, w):
    """How many seeds (0..n-1) the cell (c, w) has: --headline-seeds for the headline rows at --widths,
    else --seeds."""
    return max(a.seeds, a.headline_seeds) if c in HEADLINE and w in a.widths else a.seeds


def cells(a):
    """(condition, width, seed) of every result the report has, seed-major."""
    out = []
    for seed in range(max(a.seeds, a.headline_seeds)):
        for c in a.conditions:
            out += [(c, w, seed) for w in condition_widths(a, c) if seed < condition_seeds(a, c, w)]
    return out


def chain(a, condition, width, seed):
    """The runs a result depends on, first to last (pre-training from scratch, continuations, the prose run)."""
    runs, key = [prose_run(a, condition, width, seed)], CONDITIONS[condition][0]
    while key:
        runs.insert(0, pre_run(a, key, width, seed))
        key = PRETRAIN[key][2]
    return runs


def plan(a):
    """{name: Run} of every run needed, each with meta["wave"] (1 + its dependency's wave)."""
    runs = {}
    for c, w, s in cells(a):
        for r in chain(a, c, w, s):
            r.meta["wave"] = 1 + (runs[r.meta["deps"][0]].meta["wave"] if r.meta["deps"] else 0)
            runs.setdefault(r.name, r)
    for r in runs.values():
        r.meta["cpu_s"] = estimate_cpu(a, r)
    return runs


def estimate_cpu(a, r):
    """1-thread CPU seconds of a run from CPU_S_PER_KTOK (linear in width between the measured ones)."""
    table = CPU_S_PER_KTOK[r.meta["kind"]]
    ws = sorted(table)
    w = min(max(r.meta["width"], ws[0]), ws[-1] * 4)
    lo = max([x for x in ws if x <= w] or [ws[0]])
    hi = min([x for x in ws if x >= w] or [ws[-1]])
    per = table[lo] if hi == lo else table[lo] + (table[hi] - table[lo]) * (w - lo) / (hi - lo)
    if w > ws[-1]:
        per = table[ws[-1]] * w / ws[-1]
    tok = a.batch_size * a.block_size
    train_tok = r.meta["steps"] * tok
    eval_tok = r.meta["evals"] * r.meta["eval_iters"] * tok  # the validation split only (--eval-splits val)
    return RUN_OVERHEAD_S + per * (train_tok + EVAL_FRACTION * eval_tok) / 1000


def print_plan(a, runs):
    spe, unique = steps_per_epoch(a)
    jobs = max(1, min(a.jobs, os.cpu_count() or 1))
    total = sum(r.meta["cpu_s"] for r in runs.values())
    print(f"ladder plan: conditions {', '.join(a.conditions)}; widths {a.widths}; seeds 0..{a.seeds - 1}; "
          f"out {a.out}")
    print(f"prose: {'first ' + format(unique, ',') + ' tokens' if unique else 'the whole corpus'} of "
          f"{a.prose_stage} ({a.prose}), {spe} steps of {a.batch_size} x {a.block_size} tokens per epoch, "
          f"{a.prose_epochs} epochs; music {a.music_steps} steps on {a.music_chunks} / {3 * a.music_chunks} chunks; "
          f"poetry {a.poetry_steps} steps; compute-matched {ladder_steps(a)} prose steps; long pair at d"
          f"{a.long_width}: <= {a.long_epochs} epochs, patience {a.patience}")
    for wave in sorted({r.meta["wave"] for r in runs.values()}):
        rs = [r for r in runs.values() if r.meta["wave"] == wave]
        print(f"\nwave {wave}: {len(rs)} runs, ~{sum(r.meta['cpu_s'] for r in rs) / 60:.1f} CPU-min")
        for r in sorted(rs, key=lambda r: -r.meta["cpu_s"]):
            print(f"  {r.name:<34} {r.meta['stage']:<16} {r.meta['steps']:>7} steps  ~{r.meta['cpu_s']:>7.0f} s"
                  f"{'  (done)' if common.is_finished(r.folder) else ''}")
    todo = sum(r.meta["cpu_s"] for r in runs.values() if not common.is_finished(r.folder))
    print(f"\n{len(runs)} runs, ~{total / 60:.0f} CPU-min in all ({todo / 60:.0f} still to run); estimated wall "
          f"time with --jobs {a.jobs} on 2 quiet cores: ~{todo / jobs / 60:.0f} min (CPU costs measured here, "
          f"1 thread per run), ~{REFERENCE_FACTOR * todo / jobs / 60:.0f} min as the reference run went "
          f"({REFERENCE_FACTOR:.2f}x its estimate); a shared machine is up to ~2x slower; a GPU run is not estimated")
    measured = common.pace_line(runs.values(), lambda r: r.meta["cpu_s"], todo, jobs)
    if measured:
        print(measured)
    return todo / jobs


def check_music_chunks(a, runs):
    """Before anything trains: every music stage of the plan holds 3N chunks (else one clear error)."""
    import data
    stages = {r.meta["stage"] for r in runs.values() if r.meta["kind"] == "music"}
    for stage in stages:
        try:
            n = len(data.load(stage, music_dir=a.music_dir, synthetic_tokens=a.synthetic_tokens,
                              block_size=a.block_size, seed=a.data_seed).train) // (a.block_size + 1)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(f"stage {stage!r}: {e}") from None
        if n < 3 * a.music_chunks:
            raise UserError(f"stage {stage!r} has {n:,} training chunks of {a.block_size + 1} tokens; --music-chunks "
                            f"{a.music_chunks} needs 3N = {3 * a.music_chunks:,}: lower --music-chunks (at most "
                            f"{n // 3:,})")


def run_waves(a, runs):
    """Train every wave in turn; returns how many runs were trained now."""
    waves = sorted({r.meta["wave"] for r in runs.values()})
    trained = 0
    for wave in waves:
        rs = sorted((r for r in runs.values() if r.meta["wave"] == wave), key=lambda r: -r.meta["cpu_s"])
        print(f"\n== wave {wave}/{len(waves)}: {len(rs)} runs (~{sum(r.meta['cpu_s'] for r in rs) / 60:.0f} CPU-min)",
              flush=True)
        blocked = [r for r in rs if any((a.out / "runs" / d / "diverged.json").exists() for d in r.meta["deps"])]
        if blocked:  # a divergence is a finding (the report lists it), not a reason to stop the sweep
            print(f"skipped {len(blocked)} run(s) whose pre-training diverged: {[r.name for r in blocked]}")
        trained += len(common.run_sweep([r for r in rs if r not in blocked], jobs=a.jobs, threads=a.threads))
    return trained


def music_figure(a, data):
    """The contributions report's music facts: the corpus's training chunks, and music.png (a real piece
    beside one sampled from the music run at the smallest width, seed 0) when that run has finished."""
    from experiments.lib import ladder_music, ladder_report
    data["facts"]["music_train_chunks"] = ladder_music.train_chunks(a)
    run = pre_run(a, "musicL", min(a.widths), 0)
    ladder_music.real_and_sampled(a, checkpoint_of(a, run), a.out / ladder_report.MUSIC_FIGURE)


def main(argv=None):
    from experiments.lib import ladder_report
    a = parse_args(argv)
    t0 = time.time()
    if a.plan:
        print_plan(a, plan(a))
        return
    if a.report_only and ladder_report.stored_only(a.out):  # a copy of a report without its run folders
        print(f"no run folders in {a.out}: rebuilding from its report.json (the flags it was made with)")
        text = ladder_report.rebuild(a.out)
    else:
        runs = plan(a)
        a.out.mkdir(parents=True, exist_ok=True)
        if a.report_only:
            provenance = common.kept_provenance(a.out)
        else:
            prov = common.Provenance(a.out, argv)
            print_plan(a, runs)
            check_music_chunks(a, runs)
            provenance = prov.finish(runs_trained=run_waves(a, runs))
        data, details = ladder_report.collect(a, runs, {cell: chain(a, *cell) for cell in cells(a)})
        if ladder_report.is_contributions(a):
            music_figure(a, data)
        text = ladder_report.render(a, data, details, a.out, provenance)
    print("\n" + text)
    print(f"\nwrote {a.out / 'report.md'}, report.json, details.json and the PNGs ({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    common.main_guard(main)
