"""
ProRes depth experiment: deep Pre-LN and Post-LN baselines where they break, with and without ProRes (an lr x depth scan found the point).
Chen et al., arXiv 2603.05369: progressive residual warmup alpha(l, t) = min(t / (T * l), 1) keeps deep models stable where Pre-LN degrades.

    python experiments/prores.py                       # the default, preset breakdown (36 runs, ~2 h here)
    python experiments/prores.py --quick               # the pipeline on a tiny grid, 1 seed
    python experiments/prores.py --report-only         # rebuild report.md/json and the PNGs from finished runs
    python experiments/prores.py --preset depth        # the earlier default: the scan, then 5 placements (~47 min)
    python experiments/prores.py --preset prose-d32    # the sweep before that (prose, width 32, GPT-2 init, cosine)

Preset breakdown: Pre-LN and Post-LN, baseline and + ProRes, lr 4e-3, L = 8 / 48 / 96, 1,000 steps, 3 seeds,
no scan (the depth preset's 200-step scan at lr 4e-3: Pre-LN 2.35 / 2.49 / 3.60 nats at L = 8 / 48 / 96; Post-LN
stuck at the unigram loss at every depth, 8 included; at 8e-3 Pre-LN 2.45 / 3.09 / 3.57). An evaluation every 100 steps logs the residual stream's
RMS after each block (train.py's act_rms), so the report follows the activations over training and fits log
RMS against the layer (lib/prores_growth); lib/prores_breakdown reads where the baseline breaks and whether
ProRes prevents it. Its ramp: T = 62.5 / 10.4 / 5.2 steps a layer at L = 8 / 48 / 96 (--ramp-frac 0.5).
Time (wall, two runs at a time on the 2 cores): 96 layers 10 min (Pre-LN) and 17-18 min (Post-LN), 48 layers
3.5-4.5 min, 8 layers 0.5 min: seed 0's 12 runs took 38 min, so ~2 h for the 36.
The rest of this docstring describes the depth preset (its scan, the choice of the point, its timing).

The mechanism: prores.py (train.py --prores); the conditions: lib/prores_runs.py; the analysis and the
reading of every claim: lib/prores_report.py.

Every run is train.run(train.parse_args([...])) in OUT/runs/<name>/ through experiments.lib.common.run_sweep
(--jobs at a time, one thread each); a finished run (summary.json, or diverged.json: a divergence is a
finding) is skipped, an interrupted one resumes from its ckpt.pt. Runs are named
<norm>-<base|prores>-L<depth>-lr<lr>-i<steps>-s<seed>, so a run both phases need (same flags) is trained once.

Phase 1, scan: Pre-LN and Post-LN baselines (no ProRes), seed 0, every lr of --scan-lrs (1e-3, 2e-3, 4e-3,
8e-3) x every depth of --scan-depths (8, 24, 48, 96): 32 runs of --scan-iters steps (default: = --iters, so
the scan's runs at the chosen point are also the measurement's seed-0 Pre-LN and Post-LN baselines).
Phase 2, measurement: --norms (pre, post, sandwich, deepnorm, lns-init) x {baseline, + ProRes} x --seeds (3)
at one lr and the depths {shallowest scan depth (the reference)} + L*: 30 runs per depth (2 per depth from
the scan).
The choice (--lr auto, --depths auto; give numbers to override), computed from the finished scan:
  a run FAILS if it diverged or is STUCK: its final val loss is within --stuck-margin (0.1 nats) of the
  unigram loss ln(unigram val ppl) or above it (it learnt little more than token counts: plain-init models
  sit on that plateau for a while before they learn). For each baseline and lr, the run at the shallowest
  depth L0 is the reference; if it fails, that baseline fails at L0 already (no depth effect to locate:
  reported, not used). A deeper run is IN TROUBLE if it fails or its final val loss exceeds the reference's by
  more than --margin (0.1 nats: degraded with depth, well beyond the seed spread of a Pre-LN run here).
  lr* = the smallest scan lr >= --auto-min-lr (2e-3, the authors') at which some baseline is in trouble at some
  depth; L* = for each baseline in trouble at lr*, its shallowest depth in trouble (where it starts to degrade
  or fail; one or two depths). If there is none, lr* and L* are the largest scan lr and depth, and the report
  says that no trouble was found. This rule only places the measurement (one seed per scan cell); what the
  report calls an effect comes from the measurement's seeds, by the reading rule (lib/common.compare).

Settings and their sources (the authors' code, github.com/dandingsky/ProRes; cited by file:line):
- data: the `music` stage (160-token MIDI events, the music21 corpus: 521k training tokens, 28k validation)
  so that compute goes into depth, not into a 50k-row LM head; --stage changes it (tests: music-synthetic).
- model: width 32, 4 heads, context 64, batch 16 (1,024 tokens a step), 200 steps (~0.4 epoch). The
  authors' depth study: 71M parameters, width 512, 24-120 layers (configs/llama_71m_96L.json), LLaMA blocks
  with RMSNorm, 100k steps of 512 x 1,024 tokens; ours are GPT-2 blocks with LayerNorm.
- init: `--init plain` for every condition but one: N(0, 0.02) on every matrix, no depth scaling of the
  residual projections (peft_pretraining/modeling_llama.py:540 draws every Linear from
  config.initializer_range = 0.02; their depth-scaled variant is a separate norm type, scale_pre,
  modeling_llama.py:274). The exception is the DeepNorm baseline: `--init deepnet` (DeepNet's Xavier-normal
  init, gain (8L)^(-1/4) on v, attention-out and the MLP, 1 on q and k: modeling_llama.py:544-547), while
  DeepNorm + ProRes runs on `--init plain`, as theirs: their layers take the Xavier init only when NORM_TYPE
  is `deeppost` (modeling_llama.py:161-164, 193-198), not `deeppost_prores` (lib/prores_runs.init_of). The
  committed default runs (experiments/results/prores) predate this: both DeepNorm arms had the Xavier init.
- LNS: `lns-init`, the authors' variant (learnable norm weights that start at 1/sqrt(l),
  modeling_llama.py:289-293 and 308-313, lns and lns_prores): the ProRes paper's LNS baseline is this one,
  not the LNS paper's fixed output scale (`--norms` accepts `lns` too).
- optimiser: AdamW betas (0.9, 0.95) (torchrun_main.py:290), weight decay 0.1, clip 1.0
  (scripts/depth_scaling/run_71m_96L.sh): train.py's defaults.
- lr schedule: WSD, linear warmup over --warmup-frac (0.02: their 2,000 of 100,000 steps, run_71m_96L.sh), then
  constant, then linear decay to 0 over the last --decay-frac (0.1: get_scheculer's wsd_decay_ratio default,
  peft_pretraining/training_utils.py:15 and 75-110, which torchrun_main.py:324-330 does not override; decay to
  zero, min_lr_ratio unused). lr: theirs is 2e-3 at every depth (run_71m_*L.sh); we scan 1e-3 .. 8e-3.
- ProRes: linear schedule; layer l's ramp ends at step T * l, as theirs (torchrun_main.py:362-385: ends at
  linspace(P/L, P, L), P = prores_warmup_steps = T * L). Their P is 48k of 100k steps at 48 and 96 layers
  (T = 1000, 500; run_71m_48L.sh, run_71m_96L.sh), 24k at 24 layers, 60k at 120. Ours: T = max(1, round(
  --ramp-frac x steps / L, fractional where needed), --ramp-frac 0.5: at 200 steps T = 12.5, 4.1667, 2.0833,
  1.0417 at 8, 24, 48, 96 layers, so every ramp ends at step 100 of 200 (their 96-layer runs: 48k of 100k).
Metrics (lib/prores_report.py): final and best val loss (nats/token), loss spikes (a step whose training loss
exceeds the median of the previous 20 by more than 10%), gradient-norm spikes (pre-clipping norm > 3x the
median of the previous 20; ProRes raises the norm by design while layers switch on), the largest gradient norm
(and the largest after the lr warmup), divergences (NaN), stuck runs, and the per-layer activation norms: the
RMS of the residual stream after the embeddings and after each block, final weights, one fixed validation
batch, with its fits log RMS = a + b l and a + c log l (lib/prores_growth); runs that logged act_rms at their
evaluations add it over training, and the report the breakdown sections (lib/prores_breakdown). Every run of one seed sees the same batches (train.py draws them
from (seed, stage, step)), so a hard batch makes a loss spike in every condition of that seed alike.

Time (2 cores, jobs=2, one thread a run). Measured as CPU time of 1-thread runs of the default configuration
on this machine while it was shared (load average 4-8 on 2 cores, so wall times were 2-4x the CPU time):
6.5-8.3 ms per layer per step, evaluations included (200-step scan runs at lr 2e-3: 8 layers 16 s, 24 layers
34-38 s, 48 layers 66 s; 50-step runs: pre 96 layers 7.5 ms, sandwich + ProRes 96 8.3, deepnorm + ProRes 48
7.0, lns-init 24 7.8), plus ~4 s to start a run. So ~7 ms per layer-step: the scan is 176 layers x 4 lrs x 2
x 200 steps = 282k layer-steps (~2,100 CPU-s); the measurement trains 28 new runs per depth, (sum of its
depths) x 28 x 200 layer-steps: ~3,500 CPU-s for {8, 24, 48}, ~2,300 for {8, 48}, ~4,400 for {8, 96}, ~6,000
for {8, 48, 96}. Six of the scan's runs (lr 2e-3, 8-48 layers), run ahead, put the point at lr 2e-3, depths
{8, 24, 48} (Pre-LN 2.385 / 2.437 / 2.536 at 8 / 24 / 48 layers; Post-LN 3.183 / 3.593 / 3.737, stuck at
48): the default is then ~47 min on 2 quiet cores (+ ~1 min of analysis); other outcomes 28-70 min. The committed
default run took 15.8 min (scan) + ~29 min (measurement) of wall time, over two invocations (interrupted once
and resumed): OUT/provenance.json records every invocation, and the report sums them.
--quick: 205 s here (shared machine, load ~6).
--report-only rebuilds report.md, report.json and the PNGs from the run folders, or, where OUT/runs is gone,
from OUT/report.json alone (the records, curves included, are in it): byte-identical either way.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

from flags import ArgumentParser  # noqa: E402 (one-line errors, like train.py)

from experiments.lib import prores_report as rep  # noqa: E402
from experiments.lib.common import Provenance, add_sweep_args, is_finished, main_guard, run_sweep  # noqa: E402
from experiments.lib.prores_runs import fmt_lr, measure_runs, scan_runs  # noqa: E402
from data.common import UserError  # noqa: E402
import model  # noqa: E402

# Every setting a preset fixes; a flag given on the command line wins. "quick" entries replace the
# preset's values under --quick.
PRESETS = {
    # where the scan of the "depth" preset found the baselines break (200 steps, lr 4e-3: Pre-LN 2.35 / 2.49 /
    # 3.60 nats at L = 8 / 48 / 96; Post-LN stuck at every depth), in runs long enough for the ramp
    "breakdown": dict(stage="music", n_embd=32, n_head=4, batch_size=16, block_size=64, init="plain",
                      schedule="wsd", warmup_frac=0.02, decay_frac=0.1, min_lr=0.0, iters=1000, scan_iters=0,
                      scan=False, scan_lrs="1e-3,2e-3,4e-3,8e-3", scan_depths="8,24,48,96", scan_norms="pre,post",
                      lr="4e-3", depths="8,48,96", norms="pre,post", seeds=3, eval_iters=10, evals=10,
                      quick=dict(iters=60, depths="4,16", seeds=1, eval_iters=4, evals=2)),
    "depth": dict(stage="music", n_embd=32, n_head=4, batch_size=16, block_size=64, init="plain",
                  schedule="wsd", warmup_frac=0.02, decay_frac=0.1, min_lr=0.0, iters=200, scan_iters=0,
                  scan=True, scan_lrs="1e-3,2e-3,4e-3,8e-3", scan_depths="8,24,48,96", scan_norms="pre,post",
                  lr="auto", depths="auto", norms="pre,post,sandwich,deepnorm,lns-init", seeds=3,
                  eval_iters=10, evals=4,
                  quick=dict(iters=60, scan_lrs="2e-3,8e-3", scan_depths="4,16", seeds=1, eval_iters=4, evals=2)),
    # the sweep this script ran before issue 9 (README's old table: --depths 6,12,24 --seeds 2 --iters 300)
    "prose-d32": dict(stage="prose", n_embd=32, n_head=4, batch_size=8, block_size=64, init="gpt2",
                      schedule="cosine", warmup_frac=0.1, decay_frac=0.2, min_lr=3e-4, iters=400, scan_iters=0,
                      scan=False, scan_lrs="3e-3", scan_depths="6,12,24,48", scan_norms="pre,post",
                      lr="3e-3", depths="6,12,24,48", norms="pre,post", seeds=3, eval_iters=20, evals=4,
                      quick=dict(iters=30, depths="4,12", seeds=1, batch_size=4, eval_iters=5, evals=1)),
}


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_args(p, "out/prores")
    p.add_argument("--preset", default="breakdown", choices=sorted(PRESETS),
                   help="breakdown (default): Pre-LN and Post-LN with and without ProRes where the baselines break "
                        "(lr 4e-3, L = 8 / 48 / 96, 1,000 steps, 3 seeds, no scan); depth: the earlier default (scan "
                        "lr x depth, then five placements at the point it picks, 200 steps); prose-d32: the sweep "
                        "before that (prose, GPT-2 init, cosine, lr 3e-3); flags override a preset")
    g = p.add_argument_group("phase 1: the scan of baselines (seed 0)")
    g.add_argument("--no-scan", dest="scan", action="store_const", const=False, default=None,
                   help="skip the scan (then give --lr and --depths)")
    g.add_argument("--scan-lrs", default=None, help="comma-separated peak lrs (depth: 1e-3,2e-3,4e-3,8e-3)")
    g.add_argument("--scan-depths", default=None, help="comma-separated layer counts (depth: 8,24,48,96)")
    g.add_argument("--scan-norms", default=None, help="baselines scanned (depth: pre,post)")
    g.add_argument("--scan-iters", type=int, default=None,
                   help="steps per scan run (depth: 0 = --iters, so each scan run is also the measurement's "
                        "seed-0 baseline when the point falls on it)")
    g.add_argument("--margin", type=float, default=0.1,
                   help="a deeper baseline is degraded when its final val loss exceeds the shallowest "
                        "depth's by more than this (nats; default %(default)s)")
    g.add_argument("--stuck-margin", type=float, default=0.1,
                   help="a run is stuck (failed) when its final val loss is within this of the unigram loss, "
                        "or above it (nats; default %(default)s)")
    g.add_argument("--auto-min-lr", type=float, default=2e-3,
                   help="--lr auto picks among scan lrs >= this (default %(default)g, the authors')")
    g = p.add_argument_group("phase 2: the measurement")
    g.add_argument("--lr", default=None, help="peak lr, or 'auto' (from the scan; depth's default)")
    g.add_argument("--depths", default=None,
                   help="comma-separated layer counts, or 'auto' = {shallowest scan depth, L*} (depth's default)")
    g.add_argument("--norms", default=None,
                   help=f"norm placements, from {', '.join(model.NORMS)} (depth: pre,post,sandwich,deepnorm,lns-init)")
    g.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per condition (depth: 3; --quick 1)")
    g.add_argument("--iters", type=int, default=None, help="steps per measurement run (depth: 200)")
    g = p.add_argument_group("every run")
    g.add_argument("--stage", default=None, help="train.py stage name (depth: music; tests: music-synthetic)")
    g.add_argument("--n-embd", type=int, default=None, help="width (default 32)")
    g.add_argument("--n-head", type=int, default=None, help="attention heads (default 4)")
    g.add_argument("--batch-size", type=int, default=None, help="sequences per step (depth: 16; --quick 8)")
    g.add_argument("--block-size", type=int, default=None, help="context in tokens (default 64)")
    g.add_argument("--init", default=None, choices=("plain", "gpt2"),
                   help="every arm's init but the DeepNorm baseline's, which is deepnet (DeepNet's Xavier init), "
                        "as the authors' (depth: plain)")
    g.add_argument("--schedule", default=None, choices=("wsd", "cosine", "constant"), help="depth: wsd")
    g.add_argument("--warmup-frac", type=float, default=None, help="lr warmup, fraction of the run (depth: 0.02)")
    g.add_argument("--decay-frac", type=float, default=None, help="WSD decay, fraction of the run (depth: 0.1)")
    g.add_argument("--min-lr", type=float, default=None, help="final lr (depth: 0, as WSD in the authors' code)")
    g.add_argument("--ramp-frac", type=float, default=0.5,
                   help="ProRes: the deepest layer is fully on after this fraction of the run (sets T; default 0.5)")
    g.add_argument("--prores-T", type=int, default=None, help="one fixed T for every depth (overrides --ramp-frac)")
    g.add_argument("--prores-schedule", default="linear", help="ProRes schedule (prores.SCHEDULES; default linear)")
    g.add_argument("--eval-iters", type=int, default=None, help="batches per evaluation, train and val (depth: 10)")
    g.add_argument("--evals", type=int, default=None, help="evaluations per run (depth: 4)")
    g.add_argument("--train-args", default="",
                   help="extra train.py flags for every run, one string, e.g. '--synthetic-tokens 20000'")
    g = p.add_argument_group("spike definitions")
    g.add_argument("--spike-window", type=int, default=20, help="steps of the running median (default 20)")
    g.add_argument("--loss-spike-pct", type=float, default=10.0, help="loss spike: > median x (1 + pct/100)")
    g.add_argument("--grad-spike-x", type=float, default=3.0, help="gradient spike: > median x this")
    a = p.parse_args(argv)
    preset = dict(PRESETS[a.preset])
    quick = preset.pop("quick")
    if a.quick:
        preset.update(quick)
    for k, v in preset.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    a.out = Path(a.out or ("out/prores-quick" if a.quick else "out/prores") +
                 ("" if a.preset == "breakdown" or a.out else f"-{a.preset}"))
    try:
        a.scan_lrs = [float(x) for x in str(a.scan_lrs).split(",")]
        a.scan_depths = sorted(int(x) for x in str(a.scan_depths).split(","))
        a.lr = "auto" if a.lr == "auto" else float(a.lr)
        a.depths = "auto" if a.depths == "auto" else sorted(int(x) for x in str(a.depths).split(","))
    except ValueError as e:
        raise UserError(f"--scan-lrs/--scan-depths/--lr/--depths take comma-separated numbers: {e}") from None
    a.norms, a.scan_norms = a.norms.split(","), a.scan_norms.split(",")
    bad = [n for n in a.norms + a.scan_norms if n not in model.NORMS]
    if bad:
        raise UserError(f"unknown norm placement(s) {bad}; choose from {', '.join(model.NORMS)}")
    if "deepnorm" in a.norms + a.scan_norms and "deepnet" not in model.INITS and not a.report_only:
        raise UserError("the DeepNorm baseline needs `--init deepnet` (DeepNet's init), which this model.py "
                        f"does not have (model.INITS = {model.INITS}); leave deepnorm out of --norms")
    if not a.scan and "auto" in (a.lr, a.depths):
        raise UserError("--no-scan needs --lr and --depths as numbers (auto chooses them from the scan)")
    if min(a.scan_depths + ([] if a.depths == "auto" else a.depths)) < 1 or a.seeds < 1 or a.iters < 1:
        raise UserError("depths, --seeds and --iters must be positive")
    a.train_args = a.train_args.split()
    a.scan_iters = a.scan_iters or a.iters
    return a


# ---------------------------------------------------------------------------------------------
# the choice of lr and depth from the scan

def choose(a, scan):
    """(lr*, [L*], lines): the rule of the module docstring, applied to the scan's records: L* for
    each baseline in trouble at lr* (its shallowest depth in trouble); lines say, per lr and
    baseline, what the scan showed."""
    by = {(r["norm"], r["lr"], r["depth"]): r for r in scan}
    L0, lines = a.scan_depths[0], []
    for lr in sorted(a.scan_lrs):
        if lr < a.auto_min_lr - 1e-12:
            continue
        hits = []
        for norm in a.scan_norms:
            ref = by.get((norm, lr, L0))
            if ref is None:
                lines.append(f"lr {fmt_lr(lr)}, {rep.label(norm, False)}: the L={L0} reference has not run")
                continue
            if ref["failed"]:
                lines.append(f"lr {fmt_lr(lr)}, {rep.label(norm, False)}: fails already at L={L0} "
                             f"({rep.fail_word(ref)}): nothing to locate with depth")
                continue
            for d in a.scan_depths[1:]:
                r = by.get((norm, lr, d))
                if r is None:
                    continue
                if r["failed"]:
                    hits.append(d)
                    lines.append(f"lr {fmt_lr(lr)}, {rep.label(norm, False)}: fine at L={L0} "
                                 f"({ref['val_loss']:.3f}), {rep.fail_word(r)} at L={d}")
                    break
                if r["val_loss"] > ref["val_loss"] + a.margin:
                    hits.append(d)
                    lines.append(f"lr {fmt_lr(lr)}, {rep.label(norm, False)}: in trouble with depth by the "
                                 f"choice rule (seed 0): {ref['val_loss']:.3f} at L={L0}, {r['val_loss']:.3f} at "
                                 f"L={d}, more than the {a.margin:g} margin above")
                    break
            else:
                lines.append(f"lr {fmt_lr(lr)}, {rep.label(norm, False)}: no depth in "
                             f"{a.scan_depths[1:]} above L={L0}'s loss by more than the {a.margin:g} margin")
        if hits:
            hits = sorted(set(hits))
            return lr, hits, lines + [f"chosen: lr* = {fmt_lr(lr)} (the smallest lr >= {a.auto_min_lr:g} with "
                                      f"trouble), L* = {', '.join(map(str, hits))} (each baseline's shallowest "
                                      "depth in trouble)"]
    lr, d = max(a.scan_lrs), a.scan_depths[-1]
    return lr, [d], lines + [f"no baseline in trouble with depth at any lr >= {a.auto_min_lr:g}: "
                           f"measured at the largest scan lr ({fmt_lr(lr)}) and depth ({d})"]


def measurement_point(a, scan):
    """(lr, depths, lines): the flags' values, or the choice from the scan where they are auto."""
    lines = []
    lr, depths = a.lr, a.depths
    if "auto" in (lr, depths):
        done = [r for r in scan if r is not None]
        if len(done) < len(a.scan_lrs) * len(a.scan_depths) * len(a.scan_norms):
            lines.append(f"(the scan is incomplete: {len(done)} runs finished; the choice uses those)")
        lr_c, d_c, why = choose(a, done)
        lines += why
        if lr == "auto":
            lr = lr_c
        if depths == "auto":
            depths = sorted({a.scan_depths[0], *d_c})
    return lr, depths, lines


# ---------------------------------------------------------------------------------------------
# main

def sweep(a, runs, phase):
    """Train the phase's unfinished runs; returns how many were trained now."""
    print(f"\n== {phase}: {len(runs)} runs ==", flush=True)
    return len(run_sweep(runs, jobs=a.jobs, threads=a.threads))


def has_finished_runs(out):
    return any(is_finished(f) for f in (out / "runs").glob("*"))


def from_report_json(a):
    """--report-only where the run folders are gone: the flags and records of OUT/report.json."""
    records = rep.read_records(a.out)
    if records is None:
        raise UserError(f"no finished runs in {a.out / 'runs'} and no {a.out / 'report.json'}: "
                        "run without --report-only first")
    b = rep.settings_of(records, a.out)
    point = measurement_point(b, records["scan"])
    kept = records["measurement_point"]
    if (point[0], point[1]) != (kept["lr"], kept["depths"]):
        raise UserError(f"{a.out / 'report.json'}: its scan now gives lr {point[0]:g}, depths {point[1]}, but its "
                        f"runs were measured at lr {kept['lr']:g}, depths {kept['depths']}: rebuild it from the runs")
    return b, records["scan"], records["runs"], point


def main(argv=None):
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if a.report_only and not has_finished_runs(a.out):
        a, scan_recs, meas_recs, point = from_report_json(a)
    else:
        prov, trained = (None if a.report_only else Provenance(a.out)), 0
        scan = scan_runs(a) if a.scan else []
        if not a.report_only:  # the corpus is prepared (or its problem reported) once, before any worker starts
            rep.Data().load((scan or measure_runs(a, a.lr, a.depths))[0])
        if scan and not a.report_only:
            trained += sweep(a, scan, "scan")
        scan_recs = rep.analyse(a, scan)
        point = measurement_point(a, [r for r in scan_recs if r is not None])
        meas = measure_runs(a, *point[:2])
        if not a.report_only:
            trained += sweep(a, meas, "measurement")
            prov.finish(runs_trained=trained)
        meas_recs = rep.analyse(a, meas)
        if not any(r for r in scan_recs + meas_recs):
            raise UserError(f"no finished runs in {a.out / 'runs'}: run without --report-only first")
    lr, depths, why = point
    print("\n".join(["", "measurement point:"] + ["  " + w for w in why] +
                     [f"  lr {fmt_lr(lr)}, depths {depths}"]), flush=True)
    text = rep.render(rep.collect(a, scan_recs, meas_recs, point), a.out)
    print("\n" + text)
    print(f"\nwrote {a.out / 'report.md'}, report.json and the PNGs ({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    main_guard(main)
