"""Data-constrained pre-training (Xu et al., arXiv 2606.06888; github.com/yixinw-lab/dc_pretrain): many epochs over U
unique tokens of music; AR with a tuned strong weight decay (wd) against the same + MIR (wd+mir) and masked diffusion
(MDLM) on a grid of sizes x budgets, scaling.py's laws fitted to it; the claims: lib/data_constrained_claims.py.

    python experiments/data_constrained.py [--quick]       # the default (--preset authors): hours [minutes]
    python experiments/data_constrained.py --preset earlier  # the grid of experiments/results/data_constrained-earlier
    python experiments/data_constrained.py --report-only --out DIR  # rebuild from DIR/runs, or DIR/report.json alone
    python experiments/data_constrained.py --reuse experiments/results/data_constrained  # train only what it lacks

Phases of train.py runs in OUT/runs: 0. (authors) the scan (lib/data_constrained_scan.py) chooses sizes, budgets,
epochs; 1. the decay sweep per size at U0 (the lowest mean loss is the size's strong decay); 2. the grid, sizes x
budgets x methods (METHOD_RUN); 3-4. every final checkpoint on the whole validation split (evaluate.py), the report.
The authors' baseline (dcp/model.py:95, :135-149, :194; dcp/train4_diffusionauxiliary_impl.py:314-333): dropout 0.1
on the attention output only, an untied decayed head, decays 0.4-3.2 (scripts/all5models_baseline.sh:21-25). MIR:
lambda 0.4, mask ratio U[0, 0.5], the first 8 positions kept. Their MDLM: lr 2e-4 (ddc_72M_largewd.sh:17), their AR
from 257M up 1e-3 (all5models_baseline.sh:23-25): ours at AR lr x 0.2, 256 epochs (theirs 500-800, :14), smallest U."""

import copy
import math
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

import torch  # noqa: E402

from batches import keep_unique_tokens, load_corpus  # noqa: E402
from experiments.lib import data_constrained_report as rep, data_constrained_scan as sc  # noqa: E402
from experiments.lib.common import (Run, UserError, experiment_main, group, is_finished, kept_records,  # noqa: E402
                                    main_guard, pace_line, read_summary, reused_report, sweep_parser)
from evaluate import evaluate_run, evaluate_runs  # noqa: E402
from flags import parse_args as train_parse_args  # noqa: E402

# method -> (objective: ar | mir | mdlm, decay: strong = the size's AR-tuned one | weak)
METHOD_RUN = {"wd": ("ar", "strong"), "wd+mir": ("mir", "strong"), "ar-weak": ("ar", "weak"),
              "mdlm-weak": ("mdlm", "weak"), "mdlm-strong": ("mdlm", "strong"), "mdlm-tuned": ("mdlm", "strong")}
# the paper's constants (MIR, warmup, the weak decay) and what every preset shares unless it says otherwise
COMMON = dict(lrs="3e-3", weak_decay=0.1, warmup_frac=0.05, mir_lambda=0.4, mir_ratio="0.0,0.5", mir_keep_first=8,
              stage="music", laws=None, train_args="", batch_size=16, block_size=128, decays="0.1,0.4,0.8,1.6,3.2",
              sizes="L2d32,L3d48,L4d64,L4d96", sweep_budget=None, scan=False, scan_fallback=False, mdlm_strong_decay=None,
              mdlm_epochs=None, mdlm_budgets=0, grid_hours=None, scan_sizes=None, max_budget=None, mdlm_lr_ratio=1.0,
              mdlm_seeds=1, seeds_small_u=None, small_u=0)
# the authors' baseline (default). seeds_small_u, a power rule: 16 pairs a size give its paired test 67-96% power
# at the gain and spread 2 seeds showed at U <= 64k (-0.03 nats, sd 0.03-0.05); the scan picks sizes, budgets, epochs
AUTHORS = dict(COMMON, budgets="64000,128000,256000,512000", epochs=16, seeds=2, dropout=0.1, dropout_at="attn-out",
               tie=False, sweep_seeds=2, scan=True, scan_sizes="L2d32,L3d48,L4d64,L4d96,L6d128",
               scan_budgets="32000,64000,128000", scan_epochs="16,32", max_budget=512000, grid_hours=4.0,
               methods="wd,wd+mir,mdlm-weak,mdlm-tuned", mdlm_strong_decay=3.2, mdlm_epochs=256, mdlm_budgets=1,
               mdlm_lr_ratio=0.2, mdlm_seeds=3, seeds_small_u=8, small_u=64000)
# the earlier default (experiments/results/data_constrained-earlier): no dropout, a tied head, MDLM at 0.1 and tuned
EARLIER = dict(COMMON, budgets="8000,16000,32000,64000", epochs=16, seeds=3, dropout=0.0, dropout_at="all", tie=True,
               sweep_seeds=1, methods="wd,wd+mir,ar-weak,mdlm-weak,mdlm-strong", sweep_budget=32000)
QUICK = dict(sizes="L1d16,L2d24,L2d32", budgets="4000,8000,16000", epochs=4, decays="0.1,1.6", block_size=64)
PRESETS = {"authors": (AUTHORS, dict(AUTHORS, **QUICK, scan_sizes="L1d16,L2d24,L2d32", scan_budgets="4000,8000",
                                     scan_epochs="4", max_budget=16000, mdlm_epochs=8, mdlm_seeds=2, seeds_small_u=3,
                                     small_u=4000, scan_fallback=True, grid_hours=0.25)),
           "earlier": (EARLIER, dict(EARLIER, **QUICK, seeds=2, sweep_budget=8000))}  # (the preset, its --quick)
SCAN_RULES = dict(margin=0.3, overfit_gap=0.3, mdlm_margin=0.1, min_sizes=3, min_budgets=4)
# ms per optimizer step, one thread, two jobs on a 2-core AMD EPYC: AR ~ 50 + N / 2,700; MIR ~2x, MDLM ~1.5x
STEP_MS = dict(ar=lambda n: 50 + n / 2700, mir=lambda n: 2 * (50 + n / 2700), mdlm=lambda n: 1.5 * (50 + n / 2700))
FLAGS = [("sizes", str, "model sizes, L<layers>d<width>[h<heads>]"), ("budgets", str, "budgets U (without the scan)"),
         ("epochs", float, "passes over U"), ("methods", str, f"of {', '.join(METHOD_RUN)}"), ("stage", str, "corpus"),
         ("seeds", int, "seeds of wd and wd+mir"), ("decays", str, "decays of the sweep"), ("laws", str, "laws to fit"),
         ("train-args", str, "extra train.py flags, one string")]  # unset: the preset's
SAME = ("stage", "subset", "block_size", "batch_size", "warmup_frac", "mir_lambda", "mir_ratio", "mir_keep_first",
        "dropout", "dropout_at", "tie", "train_args")  # what a run's name does not say: to be the same for --reuse


def parse_args(argv=None):
    p = sweep_parser(__doc__, "out/data_constrained", FLAGS, choices=tuple(PRESETS), default="authors",
                     help="PRESETS: authors (default), earlier")
    a = p.parse_args(argv)
    vars(a).update({k: v for k, v in PRESETS[a.preset][a.quick].items() if getattr(a, k, None) is None})
    a.out = Path(a.out or ("out/data_constrained-quick" if a.quick else "out/data_constrained"))
    floats = lambda s: [float(x) for x in str(s).split(",")]  # noqa: E731 (a ValueError: the parser's one line)
    try:
        a.sizes, a.decays, a.lrs = [parse_size(s) for s in a.sizes.split(",")], floats(a.decays), floats(a.lrs)
        a.budgets = sorted(int(u) for u in floats(a.budgets))
        if a.scan:
            a.scan_sizes = [parse_size(s) for s in a.scan_sizes.split(",")]
            a.scan_budgets, a.scan_epochs = sorted(int(u) for u in floats(a.scan_budgets)), sorted(floats(a.scan_epochs))
    except ValueError as e:
        p.error(str(e))
    a.methods = ["wd"] * ("wd" not in a.methods.split(",")) + [m.strip() for m in a.methods.split(",")]
    import scaling
    for bad, what in [([m for m in a.methods if m not in METHOD_RUN], "--methods: unknown"),
                      ([x for x in (a.laws or "").split(",") if x and x not in scaling.LAWS], "--laws: unknown"),
                      ([k for k in ("seeds", "epochs") if getattr(a, k) <= 0], "must be positive:"),
                      ([x for x in a.budgets + a.decays if x <= 0], "--budgets, --decays must be positive:"),
                      (["sizes, budgets"] if min(len(a.budgets), len(a.sizes)) < 2 else [], "give at least 2 of each:")]:
        if bad:
            p.error(f"{what} {', '.join(map(str, bad))}")
    a.mdlm_epochs, a.subset = a.mdlm_epochs or a.epochs, "chunks" if a.stage.startswith("music") else "first"
    if a.scan:
        a.sizes, a.budgets, a.epochs = a.scan_sizes, a.scan_budgets, a.scan_epochs[0]  # until the scan chooses
    a._old, a._reused = reused(a.reuse, a) if a.reuse else ({}, {})
    return a


def reused(folder, a):
    """DIR's report.json and {name: record} of the scan, sweep and grid runs it holds finished (its SAME settings ours)."""
    old = reused_report(folder)
    if bad := [f"{k} {old['settings'].get(k)!r} (here {getattr(a, k)!r})" for k in SAME
               if old["settings"].get(k) != getattr(a, k)]:
        raise UserError(f"--reuse {folder}: its runs were made with other settings ({', '.join(bad)}); give a report "
                        "made with these settings, or drop --reuse")
    return old, {r["name"]: r for r in (old.get("scan") or {}).get("runs", []) + old["sweep"] + old["runs"]
                 if r.get("status", "done") == "done" and r.get("loss") is not None}


def parse_size(s):
    """'L4d64' or 'L4d64h8' -> (label, layers, width, heads)."""
    m = re.fullmatch(r"L(\d+)d(\d+)(?:h(\d+))?", s.strip())
    if not m or int(m[2]) % int(m[3] or 4):
        raise ValueError(f"--sizes: {s!r} is not L<layers>d<width>[h<heads>] with heads dividing width, e.g. L4d64")
    return s.strip(), int(m[1]), int(m[2]), int(m[3] or 4)


def make_run(a, obj, size, U, wd, lr, seed, epochs=None, **meta):
    """One train.py run; its name is its configuration."""
    (label, L, d, h), T, B = size, a.block_size, a.batch_size
    epochs = epochs or (a.mdlm_epochs if obj == "mdlm" else a.epochs)
    steps, chunks = math.ceil(epochs * U / (B * T)), U // (T + 1) if a.subset == "chunks" else None
    name = (f"{obj}-{label}-U{U}-wd{wd:g}-lr{lr:g}-s{seed}-e{epochs:g}-do{a.dropout:g}"
            + ("" if a.dropout_at == "all" else f"-{a.dropout_at.replace('-', '')}") + ("" if a.tie else "-untied"))
    argv = ["--stages", a.stage, "--n-layer", L, "--n-embd", d, "--n-head", h, "--block-size", T, "--batch-size", B,
            "--epochs", f"{epochs:g}", "--unique-tokens", chunks * (T + 1) if chunks else U, "--lr", f"{lr:g}",
            "--min-lr", f"{lr / 10:g}", "--warmup-iters", max(1, round(a.warmup_frac * steps)), "--weight-decay",
            f"{wd:g}", "--seed", seed, "--data-seed", 0, "--eval-interval", max(1, min(250, steps)), "--eval-iters", 4,
            "--eval-splits", "train,val", "--log-interval", 10, "--dropout", f"{a.dropout:g}", "--dropout-at", a.dropout_at]
    argv += ([] if a.tie else ["--no-tie"]) + (["--music-chunks", chunks] if chunks else []) + {
        "mir": ["--mir", "--mir-lambda", f"{a.mir_lambda:g}", "--mir-ratio", a.mir_ratio, "--mir-keep-first",
                a.mir_keep_first], "mdlm": ["--objective", "mdlm"]}.get(obj, []) + a.train_args.split()
    return Run(name, a.out / "runs" / name, list(map(str, argv)),
               dict(obj=obj, size=label, U=U, wd=wd, lr=lr, seed=seed, **meta))


def scan_runs(a):
    """Phase 0: AR at the weak decay, seed 0, every candidate size x U0 x epochs; MDLM at the smallest size."""
    return [make_run(a, obj, size, U, a.weak_decay, a.lrs[0], 0, epochs=e, phase="scan", epochs_asked=e) for obj, e, size, U
            in [("ar", e, size, U) for e in a.scan_epochs for U in a.scan_budgets for size in a.scan_sizes]
            + [("mdlm", a.scan_epochs[-1], a.scan_sizes[0], U) for U in a.scan_budgets]]


def choose(a, runs):
    """Read the finished scan, set a.sizes, a.budgets, a.epochs to its choice; returns its record for the report."""
    if not all(r.name in a._reused or read_summary(r.folder) for r in runs):
        raise UserError(f"the scan has unfinished runs in {a.out / 'runs'}; rerun without --report-only (or with its --reuse)")
    keys = ("loss", "train_loss", "N", "unigram_val_ppl", "seconds")
    recs = [dict(obj=r.meta["obj"], size=r.meta["size"], U=r.meta["U"], epochs=r.meta["epochs_asked"], name=r.name,
                 **({k: o[k] for k in keys} if (o := a._reused.get(r.name)) else dict(zip(keys, (
                     val_loss(a, r), st.get("train_loss"), s["params"], st.get("unigram_val_ppl"), s["seconds"])))))
            for r in runs for s in [read_summary(r.folder)] for st in [(s or {"stages": [{}]})["stages"][0]]]
    fits = (lambda e, u0, kept, budgets: grid_hours(a, e, kept, budgets) <= a.grid_hours) if a.grid_hours else None
    scan = dict(sc.choose_regime(recs, [s[0] for s in a.scan_sizes], SCAN_RULES, a.max_budget, fits), rules=SCAN_RULES,
                runs=recs, fallback=False)
    if scan["choice"] is None:
        c = sc.closest(scan)
        note = f"{c['epochs']:g} epochs, U0 = {c['U0']:,}: {c['why']}"
        if not a.scan_fallback:
            raise UserError(f"the scan found no regime where the law can fan out (closest: {note}); widen the "
                            "preset's scan_sizes / scan_budgets / scan_epochs, or set scan_fallback")
        scan.update(choice=(c["epochs"], c["U0"]), sizes=c["kept"] or [s[0] for s in a.scan_sizes], fallback=True,
                    fallback_note=note)
    (a.epochs, u0), a.sizes = scan["choice"], [s for s in a.scan_sizes if s[0] in scan["sizes"]]
    a.budgets = scan["budgets"] = scan.get("budgets") or sc.grid_budgets(u0, a.max_budget)
    if a.grid_hours:
        scan["grid_hours"] = dict(limit=a.grid_hours, estimate=grid_hours(a, a.epochs, scan["sizes"], a.budgets))
    return scan


def grid_hours(a, epochs, sizes, budgets):
    """Estimated hours (STEP_MS, two jobs) of the sweep and AR grid at `seeds` seeds of a scan choice (MDLM: on top)."""
    b = copy.copy(a)
    b.sizes, b.epochs, b.budgets = [s for s in a.scan_sizes if s[0] in sizes], epochs, list(budgets)
    b.methods, b.seeds_small_u = [m for m in a.methods if METHOD_RUN[m][0] != "mdlm"], None
    return seconds_of(b, unique(sweep_runs(b) + grid_runs(b, None))) / 2 / 3600


def sweep_runs(a):
    return [make_run(a, "ar", size, int(a.sweep_budget or a.budgets[0]), wd, lr, seed, phase="sweep")  # U0 by default
            for size in a.sizes for lr in a.lrs for wd in a.decays for seed in range(a.sweep_seeds)]


def pick_strong(a, sweep):
    """{size: (wd, lr)} of the lowest mean full-validation loss over the sweep's seeds; None while unfinished."""
    best = {}
    for size, *_ in a.sizes:
        by = {k: [val_loss(a, r) for r in rs] for k, rs in group((r for r in sweep if r.meta["size"] == size),
                                                                  lambda r: (r.meta["wd"], r.meta["lr"])).items()}
        means = {k: sum(v) / len(v) for k, v in by.items() if None not in v}
        best[size] = min(means, key=means.get) if len(means) == len(by) and math.isfinite(min(means.values())) else None
    return best


def grid_runs(a, strong):
    """Every (method, size, U, seed) run of the grid; a configuration two methods ask for is one Run under each."""
    strong = strong or {s[0]: (a.decays[len(a.decays) // 2], a.lrs[0]) for s in a.sizes}  # None: placeholders
    mdlm_us = a.budgets[:a.mdlm_budgets] if a.mdlm_budgets else a.budgets
    decay = lambda m, size: (a.mdlm_strong_decay if m == "mdlm-strong" and a.mdlm_strong_decay else  # noqa: E731
                             strong[size][0] if METHOD_RUN[m][1] == "strong" else a.weak_decay)
    seeds = lambda m, U: (a.mdlm_seeds if METHOD_RUN[m][0] == "mdlm" else 1 if m not in ("wd", "wd+mir") else  # noqa
                          a.seeds_small_u if a.seeds_small_u and U <= a.small_u else a.seeds)
    lr = lambda m, size: float(f"{strong[size][1] * (a.mdlm_lr_ratio if METHOD_RUN[m][0] == 'mdlm' else 1):.6g}")  # noqa
    return [make_run(a, METHOD_RUN[m][0], size, U, decay(m, size[0]), lr(m, size[0]), seed, method=m, phase="grid")
            for size in a.sizes for U in a.budgets for m in a.methods if METHOD_RUN[m][0] != "mdlm" or U in mdlm_us
            for seed in range(seeds(m, U))]


def check_budgets(a):
    """A budget beyond the corpus is a one-line error before any training; the scan's max_budget is lowered to it."""
    corpus = load_corpus(a.stage, train_parse_args(["--stages", a.stage, "--block-size", str(a.block_size)]
                                                   + a.train_args.split()))
    for U in a.budgets + (a.scan_budgets if a.scan else []):
        keep_unique_tokens(copy.copy(corpus), U)
    unit = a.block_size + 1 if a.subset == "chunks" else 1
    if a.scan and (a.max_budget or math.inf) > (whole := len(corpus.train) // unit * unit):
        if a.max_budget:
            print(f"  max_budget {a.max_budget:,} > the {whole:,} training tokens of {a.stage!r}: the grid stops there")
        a.max_budget = whole


def unique(runs):
    return list({r.name: r for r in runs}.values())  # one Run per name (two methods may ask for the same run)


def val_loss(a, run):
    """The run's full-validation loss (--reuse's, or evaluated now if needed); inf if it diverged, None if unfinished."""
    if (o := a._reused.get(run.name)) or (run.folder / "diverged.json").exists():
        return o["loss"] if o else math.inf
    return (e := evaluate_run(run.folder)) and e["loss"]


def seconds_of(a, runs):
    """Estimated training seconds (STEP_MS; N ~ 12 L d^2 + the untied head's 161 d)."""
    shape = {s[0]: s[1:3] for s in a.sizes + (a.scan_sizes if a.scan else [])}
    return sum(math.ceil(float(r.argv[r.argv.index("--epochs") + 1]) * r.meta["U"] / (a.batch_size * a.block_size))
               * STEP_MS[r.meta["obj"]](12 * L * d * d + (0 if a.tie else 161 * d)) / 1000
               for r in unique(runs) for L, d in [shape[r.meta["size"]]])


def plan(a):
    """The phases, their runs (those --reuse takes apart) and the others' estimated wall time (STEP_MS); the sweep and
    grid a scan will choose are bounded by --grid-hours; the grid's decays are placeholders until the sweep has run."""
    seen, lines = [], []

    def phase(title, runs):  # its line; whether every run of it is finished or reused
        runs = [r for r in unique(runs) if r.name not in {s.name for s in seen}]
        rest = [r for r in runs if r.name not in a._reused]
        lines.append(f"{title}: {len(runs)} runs" + (f", {len(runs) - len(rest)} of them reused" if len(rest) < len(runs)
                     else "") + f", {len(rest)} to train: ~{seconds_of(a, rest) / a.jobs / 3600:.1f} h")
        seen.extend(runs)
        return all(is_finished(r.folder) or r.name in a._reused for r in runs)
    if not a.scan or phase("phase 0, scan", scan_runs(a)):
        choose(a, seen) if a.scan else None
        strong = pick_strong(a, sweep) if phase("phase 1, decay sweep", sweep := sweep_runs(a)) else {0: None}
        phase("phase 2, grid", grid_runs(a, None if None in strong.values() else strong))
    else:
        lines.append(f"phases 1-2, the sweep and grid the scan chooses: at most ~{a.grid_hours:g} h (grid_hours)")
    lines.append("(STEP_MS, measured on a 2-core AMD EPYC, +-50%; plus minutes of evaluation and fits)")
    todo = [r for r in seen if not is_finished(r.folder) and r.name not in a._reused]
    measured = pace_line(seen, lambda r: seconds_of(a, [r]), seconds_of(a, todo), a.jobs)
    return "\n".join(lines + ([measured] if measured else []))


def main(argv=None):
    a, threads = parse_args(argv), torch.get_num_threads()
    torch.set_num_threads(a.threads or os.cpu_count() or 1)  # this process only evaluates; runs set their own
    try:
        experiment_main(a, argv, show_plan=lambda a, _: check_budgets(a) or print(plan(a)), train=train_and_collect,
                        render=lambda a, records, _: rep.render(records(), a.out),
                        wrote="== phase 4: report\n\n{text}\nwrote {out}: report.md, report.json, PNGs")
    finally:
        torch.set_num_threads(threads)


def train_phase(a, train, runs, title):
    """Train a phase's unfinished runs --reuse does not take (train: nothing with --report-only), evaluate them."""
    print(title, flush=True)
    runs = [r for r in runs if r.name not in a._reused]
    train(runs)
    evaluate_runs([r.folder for r in runs], a.jobs, a.threads)


def train_and_collect(a, _, train):
    """Phases 0-3 (train: nothing with --report-only); returns how to read phase 4's records, once it is recorded."""
    if a.report_only and not any(is_finished(f) for f in (a.out / "runs").glob("*")):
        return lambda: kept_records(a.out, rep.RECORD_KEYS, "drop --report-only")
    check_budgets(a)
    scan = None
    if a.scan:
        train_phase(a, train, scan_runs(a), "== phase 0: the scan")
        scan = choose(a, scan_runs(a))
        print(f"  chosen: {a.epochs:g} epochs, sizes {', '.join(s[0] for s in a.sizes)}, budgets {a.budgets}")
    a.sweep_budget = int(a.sweep_budget or a.budgets[0])
    train_phase(a, train, sweep := sweep_runs(a), f"== phase 1: the decay sweep, {len(sweep)} runs")
    if None in (strong := pick_strong(a, sweep)).values():
        raise UserError(f"the decay sweep of size(s) {[s for s, v in strong.items() if v is None]} has unfinished or "
                        f"diverged runs in {a.out / 'runs'}; rerun without --report-only (diverged: lower the lrs)")
    grid, done = grid_runs(a, strong), {s.name for s in sweep}
    todo = [r for r in unique(grid) if r.name not in done]
    train_phase(a, train, todo, f"== phases 2-3: the grid, {len(todo)} runs beyond the sweep's")
    return lambda: rep.collect(a, sweep, grid, strong, scan)


if __name__ == "__main__":
    main_guard(main)
