"""ProRes at depth: Pre-LN and Post-LN (and other placements) with and without progressive residual warmup.
Chen et al., arXiv 2603.05369: each residual branch of layer l is scaled by alpha(l, t) = min(t / (T l), 1)
(prores.py, train.py --prores), which should lower the loss and keep deep models stable where Pre-LN degrades.

    python experiments/prores.py                    # breakdown: pre/post x {base, ProRes}, L 8/48/96, 3 seeds
    python experiments/prores.py --quick            # the pipeline on a tiny grid, 1 seed
    python experiments/prores.py --preset depth     # an lr x depth scan of the baselines, then 5 placements there
    python experiments/prores.py --preset pilot     # T = 100 steps a layer, 10,000 steps, L 8 / 48, 3 seeds
    python experiments/prores.py --preset warmup    # the breakdown's Post-LN baselines, a 200-step lr warm-up
    python experiments/prores.py --report-only --out experiments/results/prores   # rebuild from report.json

Presets (PRESETS; --set changes any entry) are every setting of every run: each placement in --norms, baseline and
+ ProRes (`arms`), at each depth, seeds 0..N-1 (a seed's arms share initial weights and batches: paired); ProRes' ramp
as lib/prores_runs.prores_T (the authors' T L = 48k of 100k steps at 48-96 layers). As their code, dandingsky/ProRes:
N(0, 0.02) init (modeling_llama.py:540; DeepNorm: init_of), AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, WSD with 2%
warm-up, a linear decay to 0 over the last 10% (training_utils.py:75-110); `music`: compute in depth, not an LM head."""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

from experiments.lib import prores_report as rep  # noqa: E402
from experiments.lib.common import (UserError, experiment_main, inherit_invocations, is_finished,  # noqa: E402
                                    kept_records, main_guard, pace_line, reused_report, sweep_parser)
from experiments.lib.prores_runs import ARMS, measure_runs, scan_runs, train_argv  # noqa: E402
import model  # noqa: E402

COMMON = dict(stage="music", n_embd=32, n_head=4, batch_size=16, block_size=64, init="plain", schedule="wsd",
              warmup_frac=0.02, decay_frac=0.1, min_lr=0.0, ramp_frac=0.5, prores_T=None, prores_schedule="linear",
              eval_iters=10, spike_window=20, loss_spike_pct=10.0, loss_spike_mads=None, grad_spike_x=3.0,
              stuck_margin=0.1, margin=0.1, auto_min_lr=2e-3, scan=False, scan_lrs=[1e-3, 2e-3, 4e-3, 8e-3],
              scan_depths=[8, 24, 48, 96], scan_norms=["pre", "post"], scan_iters=0, arms=["base", "prores"], train_args=[])
QUICK = dict(iters=60, depths=[4, 16], seeds=1, eval_iters=4, evals=2)
PRESETS = {  # "quick": the entries --quick replaces
    "breakdown": dict(COMMON, lr=4e-3, depths=[8, 48, 96], norms=["pre", "post"], iters=1000, seeds=3, evals=10,
                      quick=QUICK),
    "depth": dict(COMMON, scan=True, lr="auto", depths="auto", iters=200,
                  norms=["pre", "post", "sandwich", "deepnorm", "lns-init"], seeds=3, evals=4,
                  quick=dict(iters=60, scan_lrs=[2e-3, 8e-3], scan_depths=[4, 16], seeds=1, eval_iters=4, evals=2)),
    # the paper's steps a layer (T >= 100; theirs 500-1,000) and a run long enough to end flat after the ramp; a
    # 1,024-token batch's loss alone moves > 10% a step, so a loss spike is counted above the run's own noise
    "pilot": dict(COMMON, lr=8e-3, depths=[8, 48], norms=["pre", "post"], iters=10_000, seeds=3, evals=40,
                  prores_T=100, loss_spike_mads=6.0, quick=dict(QUICK, prores_T=2))}
# the breakdown's Post-LN baselines with a warm-up of 200 steps instead of 20: is its stall the warm-up's?
PRESETS["warmup"] = dict(PRESETS["breakdown"], norms=["post"], warmup_frac=0.2, arms=["base"])
FLAGS = [("seeds", int, "seeds 0..N-1 per condition"), ("iters", int, "steps per measurement run"),  # unset: the preset's
         ("lr", str, "peak lr, or 'auto' (from the scan)"), ("depths", str, "layer counts, or 'auto' (from the scan)"),
         ("norms", str, f"norm placements, from {', '.join(model.NORMS)}"), ("stage", str, "train.py stage"),
         ("train-args", str, "extra train.py flags for every run, one string")]
MS_PER_LAYER_STEP, START_S = 7.0, 4.0  # CPU time of a 1-thread run of width 32 (2-core EPYC), +-30%


def numbers(text, kind):
    return text if text in ("auto", None) or isinstance(text, (list, float)) else [kind(x) for x in text.split(",")]


def parse_args(argv=None):
    p = sweep_parser(__doc__, "out/prores", FLAGS, default="breakdown", choices=sorted(PRESETS), help="default: breakdown")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="any other preset entry, the value in JSON: n_embd=64 scan_lrs=[1e-3,4e-3]")
    a = p.parse_args(argv)
    preset = dict(PRESETS[a.preset])
    preset.update(preset.pop("quick") if a.quick else {})
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in preset:
            raise UserError(f"--set {kv}: no preset entry {k!r}; entries: {', '.join(sorted(preset))}")
        try:
            preset[k] = json.loads(v)
        except ValueError:
            preset[k] = v
    vars(a).update({k: v for k, v in preset.items() if getattr(a, k, None) is None})
    a.out = Path(a.out or f"out/prores{'-quick' * a.quick}{'' if a.preset == 'breakdown' else '-' + a.preset}")
    try:
        a.lr, a.depths = (a.lr if a.lr == "auto" else float(a.lr)), numbers(a.depths, int)
        a.scan_lrs, a.scan_depths = sorted(numbers(a.scan_lrs, float)), sorted(numbers(a.scan_depths, int))
    except ValueError as e:
        raise UserError(f"--lr and --depths take numbers (or auto): {e}") from None
    a.norms = a.norms.split(",") if isinstance(a.norms, str) else a.norms
    a.train_args = a.train_args.split() if isinstance(a.train_args, str) else a.train_args
    if bad := [n for n in a.norms + a.scan_norms if n not in model.NORMS]:
        raise UserError(f"unknown norm placement(s) {bad}; choose from {', '.join(model.NORMS)}")
    if not isinstance(a.arms, list) or not a.arms or set(a.arms) - set(ARMS) or len(set(a.arms)) < len(a.arms):
        raise UserError(f"--set arms={a.arms}: give a list of distinct arms from {list(ARMS)}, e.g. arms=[\"base\"]")
    if not a.scan and "auto" in (a.lr, a.depths):
        raise UserError("without the scan, give --lr and --depths as numbers (auto chooses them from the scan)")
    if a.seeds < 1 or a.iters < 1 or min(a.scan_depths + ([] if a.depths == "auto" else a.depths)) < 1:
        raise UserError("depths, --seeds and --iters must be positive")
    a.depths = a.depths if a.depths == "auto" else sorted(a.depths)
    a.scan_iters = a.scan_iters or a.iters
    return a


def choose(a, scan):
    """(lr*, [L*], lines) from the scan: the smallest lr >= auto_min_lr where a baseline degrades with depth (final val
    loss `margin` above its own at the shallowest depth, or failed); L*: each baseline's first depth in trouble."""
    by, L0, lines = {(r["norm"], r["lr"], r["depth"]): r for r in scan}, a.scan_depths[0], []
    for lr in [x for x in a.scan_lrs if x >= a.auto_min_lr - 1e-12]:
        hits = set()
        for norm in a.scan_norms:
            ref, name = by.get((norm, lr, L0)), f"lr {lr:g}, {rep.label(norm, False)}"
            if ref is None or ref["failed"]:
                lines.append(f"{name}: " + (f"the L={L0} reference has not run" if ref is None else
                                            f"fails already at L={L0}: nothing to locate with depth"))
                continue
            trouble = next((r for r in (by.get((norm, lr, d)) for d in a.scan_depths[1:]) if r and (
                r["failed"] or r["val_loss"] > ref["val_loss"] + a.margin)), None)
            if trouble:
                hits.add(trouble["depth"])
                lines.append(f"{name}: {ref['val_loss']:.3f} at L={L0}, " + ("failed" if trouble["failed"] else
                             f"{trouble['val_loss']:.3f}") + f" at L={trouble['depth']} (seed 0; margin {a.margin:g})")
            else:
                lines.append(f"{name}: no depth above L={L0}'s loss by more than the {a.margin:g} margin")
        if hits:
            return lr, sorted(hits), lines + [f"chosen: lr* = {lr:g}, L* = {', '.join(map(str, sorted(hits)))}"]
    return max(a.scan_lrs), [a.scan_depths[-1]], lines + [
        f"no baseline in trouble with depth at any lr >= {a.auto_min_lr:g}: the largest scan lr and depth"]


def measurement_point(a, scan):
    """(lr, depths, lines): the flags' values, or the choice from the scan where they are auto."""
    if "auto" not in (a.lr, a.depths):
        return a.lr, a.depths, []
    lr, ds, lines = choose(a, [r for r in scan if r])
    return (lr if a.lr == "auto" else a.lr), (sorted({a.scan_depths[0], *ds}) if a.depths == "auto" else a.depths), lines


def reused(a, runs):
    """{name: record} of the RUNS --reuse DIR's report holds (else those OUT's took from one) with their train.py flags
    (its argv, else rebuilt from its settings) and stuck margin, spikes recounted by this rule."""
    old = reused_report(a.reuse) if a.reuse else kept_records(a.out, rep.RECORD_KEYS) or {"runs": []}
    if old["runs"] and old.get("spike_definition") is None:
        raise UserError(f"--reuse {a.reuse}: not a report of experiments/prores.py (e.g. experiments/results/prores)")
    was, rule = argparse.Namespace(**{**COMMON, **(old.get("settings") or {})}), rep.spike_definition(a)
    recs = {r["name"]: r for r in old["runs"] if (a.reuse or r.get("reused")) and was.stuck_margin == a.stuck_margin
            and ("loss" in r or old["spike_definition"] == rule)}
    return {r.name: dict(o, reused=o.get("reused") or a.reuse, **rep.spikes(a, o)) for r in runs if (o := recs.get(r.name))
            and list(map(str, r.argv)) == (o.get("argv") or [str(x) for x in train_argv(was, *map(o.get, (
                "norm", "prores", "depth", "lr", "seed", "iters")))])}


def plan(a):
    """Print the runs of each phase and the estimated time (the measurement's after the scan where auto)."""
    cpu_s = lambda r: START_S + MS_PER_LAYER_STEP * r.meta["depth"] * r.meta["iters"] / 1000  # noqa: E731
    phases = [("scan", scan_runs(a))] if a.scan else []
    phases += [("measurement", measure_runs(a, a.lr, a.depths))] if "auto" not in (a.lr, a.depths) else []
    for name, runs in phases:
        old = reused(a, runs) if name == "measurement" else {}
        todo = [r for r in runs if not is_finished(r.folder) and r.name not in old]
        print("\n".join(f"  {r.name:<36} {r.meta.get('iters', '')} steps  ~{cpu_s(r) / 60:5.1f} min" for r in runs))
        print(f"{name}: {len(runs)} runs ({len(runs) - len(todo)} finished), ~{sum(map(cpu_s, todo)) / 60 / a.jobs:.0f}"
              f" min with --jobs {a.jobs}")
        print("  " + (pace_line(runs, cpu_s, sum(map(cpu_s, todo)), a.jobs) or "no finished run to measure the pace"))
    if not phases or phases[-1][0] == "scan":
        print(f"measurement: at the point the scan picks, {len(a.norms) * len(a.arms) * a.seeds} runs per depth")


def train(a, _, sweep):
    """The scan, the measurement point it picks and its runs trained but those --reuse takes (none with --report-only);
    returns how to read the records once the invocation is recorded (no finished run: OUT/report.json's)."""
    if a.report_only and not a.reuse and not any(is_finished(f) for f in (a.out / "runs").glob("*")):
        return lambda: kept_records(a.out, rep.RECORD_KEYS, "run without --report-only first")
    scan = scan_runs(a) if a.scan else []
    if not a.report_only:  # the corpus is prepared (or its problem reported) once, before any worker starts
        rep.Data().load((scan or measure_runs(a, a.lr, a.depths))[0])
    sweep(scan)
    point = measurement_point(a, scan_recs := rep.analyse(a, scan))
    meas = measure_runs(a, *point[:2])
    if (old := reused(a, meas)) and a.reuse:  # the invocations that made them come first
        inherit_invocations(a.out, reused_report(a.reuse))
    sweep([r for r in meas if r.name not in old])
    return lambda: rep.collect(a, scan_recs, [x or old.get(r.name) for r, x in zip(meas, rep.analyse(a, meas))], point)


def main(argv=None):
    experiment_main(parse_args(argv), argv, show_plan=lambda a, _: plan(a), train=train, inherit=False,
                    render=lambda a, records, _: rep.render(records(), a.out),
                    wrote="{text}\n\nwrote {out}/report.md, report.json and the PNGs")


if __name__ == "__main__":
    main_guard(main)
