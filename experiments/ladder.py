"""The ladder (arXiv 2604.21265, "Listen and Chant Before You Read"): music -> poetry -> prose, against random init.
And against its other controls, over seeds and widths; the claims it tests: experiments/lib/ladder_claims.py.

    python experiments/ladder.py                   # the default (--preset contributions): the six contributions
    python experiments/ladder.py --quick           # a smoke version in minutes: every condition at d16, 2 seeds
    python experiments/ladder.py --preset subset   # 4 conditions at d 16/32/64 on the first 65,536 prose tokens
    python experiments/ladder.py --preset headline # train.py's headline command as typed (HEADLINE_ARMS), 5 seeds
    python experiments/ladder.py --preset proportions  # a small pre-training share (~15% of the prose), 5 seeds
    python experiments/ladder.py --preset scarcity # prose scarce: the ladder vs prose repeated (lib/ladder_scarcity.py)
    python experiments/ladder.py --preset full     # every condition, d 16/32/64, 5 seeds
    python experiments/ladder.py --preset paper --plan  # the paper's scale for a GPU (WikiText-103, MAESTRO 12k/36k)
    python experiments/ladder.py --report-only --out experiments/results/ladder   # rebuild from report.json

Each pre-training stage is a train.py run once per (width, seed), each prose stage a run from it (--init-from; one
music run of 3N chunks serves music, volume-large, the ablations and the ladder's poetry), in waves (finished runs
skipped); a prose run is stage 0 of its own run (at one seed every condition sees the same batches), evaluated each
epoch; the long pair's until --patience epochs bring no new best (at most --long-epochs), its ppl_final the best."""

import math
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: train, model, data

from flags import parse_args as train_flags  # noqa: E402
from checkpoint import stage_file  # noqa: E402
from experiments.lib import common, ladder_music, ladder_report, ladder_scarcity  # noqa: E402
from experiments.lib.ladder_headline_claims import HEADLINE_ARMS, HEADLINE_SEEDS  # noqa: E402
from experiments.lib.common import Run, UserError, positive_int as POS  # noqa: E402

# condition -> (pre-training run key or None, prose run key, --transfer of the prose run, prose budget)
CONDITIONS = {
    "random": (None, "random", None, "epochs"),                  # prose only: the baseline
    "music": ("musicL", "musicL", None, "epochs"),               # music (3N chunks) -> prose
    "ladder": ("ladder", "ladder", None, "epochs"),              # music -> poetry -> prose
    "poetry": ("poetry", "poetry", None, "epochs"),              # poetry -> prose
    "synthetic": ("synth-ladder", "synth-ladder", None, "epochs"),  # synthetic music -> poetry -> prose
    "compute-matched": (None, "matched", None, "matched"),       # prose only, as many steps as the whole ladder
    "volume-small": ("musicS", "musicS", None, "epochs"),        # music on N chunks -> prose
    "volume-large": ("musicL", "musicL", None, "epochs"),        # = music
    "volume-small-synthetic": ("synthS", "synthS", None, "epochs"),
    "volume-large-synthetic": ("synthL", "synthL", None, "epochs"),
    "ablation-attn": ("musicL", "musicL-attn", "attn", "epochs"),  # music -> prose, one group transferred
    "ablation-mlp": ("musicL", "musicL-mlp", "mlp", "epochs"),
    "ablation-norm": ("musicL", "musicL-norm", "norm", "epochs"),
    "ablation-embed": ("ladder", "ladder-fresh-embed", "attn,mlp,norm,pos", "epochs"),  # poetry's embeddings fresh
    "long-random": (None, "long-random", None, "long"),          # the long pair: prose to a plateau
    "long-ladder": ("ladder", "long-ladder", None, "long")}
PRETRAIN = {  # pre-training run key -> (stage flag, music chunks in units of N or None, --init-from key, steps flag)
    "musicL": ("music_stage", 3, None, "music_steps"), "musicS": ("music_stage", 1, None, "music_steps"),
    "synthL": ("synthetic_stage", 3, None, "music_steps"), "synthS": ("synthetic_stage", 1, None, "music_steps"),
    "poetry": ("poetry_stage", None, None, "poetry_steps"), "ladder": ("poetry_stage", None, "musicL", "poetry_steps"),
    "synth-ladder": ("poetry_stage", None, "synthL", "poetry_steps")}
CAPACITY = ("volume-small", "volume-large")  # also run at --capacity-widths
HEADLINE = ("random", "music", "ladder")     # --headline-seeds seeds at --widths
SETTINGS = dict(batch_size=8, block_size=128, n_layer=4, n_head=4, lr=3e-3, warmup_iters=20, prose_tokens=65536,
                prose_epochs=5, music_steps=400, poetry_steps=200, music_chunks=1340, eval_iters=24,
                pre_eval_iters=10, long_width=64, long_epochs=30, patience=3, prose="wiki-leads", music_dir=None,
                capacity_widths="", headline_seeds=0, min_delta=0.0, long_schedule="cosine")
PRESETS = {"contributions": dict(conditions=",".join(c for c in CONDITIONS if c not in ("poetry", "volume-small-"
                                  "synthetic")), widths="16", capacity_widths="32,64", seeds=3, headline_seeds=5,
                                  batch_size=16, prose_tokens=655360, prose_epochs=2, music_steps=600,
                                  poetry_steps=600, music_chunks=1346, long_epochs=10, patience=1),
           "subset": dict(conditions="random,music,ladder,compute-matched", widths="16,32,64", seeds=3),
           "headline": dict(seeds=5),  # train.py's headline command as typed, at its defaults, seed 1337 + k
           # pre-training ~15% of the prose seen (at the paper's ~5% music and poetry end above their unigram at d16)
           "proportions": dict(conditions="random,music,ladder,compute-matched,long-random,long-ladder", widths="16",
                               seeds=5, batch_size=16, prose_tokens=0, prose_epochs=5, music_steps=120, poetry_steps=240,
                               music_chunks=320, long_width=16, long_epochs=40, patience=2, min_delta=0.005,
                               long_schedule="constant"),
           "scarcity": dict(conditions="random,ladder,compute-matched", widths="16,64", seeds=3, batch_size=16,
                            prose_tokens=0, music_steps=400, poetry_steps=400, music_chunks=1340, prose_steps=400,
                            scan_tokens="61440,245760,0", eval_every=50, eval_iters=10)}
PRESETS["full"] = dict(PRESETS["contributions"], conditions="all", widths="16,32,64", seeds=5)
PRESETS["paper"] = dict(PRESETS["full"], prose="wikitext103", prose_tokens=0, batch_size=32, music_dir="maestro",
                        music_chunks=12000, music_steps=2250, poetry_steps=5000, prose_epochs=5, eval_iters=200,
                        pre_eval_iters=50, long_epochs=30, patience=3)  # the paper's scale, for a GPU
QUICK = dict(conditions="all", widths="16", capacity_widths="32", seeds=2, headline_seeds=0, batch_size=4,
             block_size=64, prose_tokens=2048, prose_epochs=2, music_steps=16, poetry_steps=8, music_chunks=200,
             eval_iters=4, pre_eval_iters=2, warmup_iters=4, long_width=16, long_epochs=6, patience=1)
APPROX_TRAIN_TOKENS = {"wikitext103": 124_000_000, "wikitext2": 2_400_000, "wiki-leads": 990_088}  # for --plan
# the plan's cost model: 1-thread CPU seconds per 1,000 training tokens by width (text: the GPT-2 head; music: 160)
CPU_S_PER_KTOK = {"text": {16: 0.17, 32: 0.19, 64: 0.30}, "music": {16: 0.024, 32: 0.033, 64: 0.043}}
EVAL_FRACTION, RUN_OVERHEAD_S = 0.5, 4.0  # an evaluation token's cost / a training token's; a run's fixed seconds
FLAGS = [  # (flag, type, help[, default]); without a default, unset flags take the preset's (SETTINGS, PRESETS)
    ("conditions", str, f"comma-separated or 'all': {', '.join(CONDITIONS)}"), ("seeds", POS, "seeds 0..N-1 a cell"),
    ("widths", str, "d_model of every condition, e.g. 16,32,64"), ("capacity-widths", str, "more widths for the "
     "volume pair ('' = none)"), ("headline-seeds", int, f"seeds of {', '.join(HEADLINE)} at --widths (0: --seeds)"),
    ("more-seeds", str, "more seeds for some cells: COND[@WIDTH]=N,... (--reuse takes the rest)", ""),
    ("prose-tokens", int, "the first U prose training tokens, whole steps (0 = all)"), ("prose-epochs", POS, ""),
    ("music-steps", POS, "steps of every music stage"), ("poetry-steps", POS, "steps of every poetry stage"),
    ("music-chunks", POS, "N: volume-small N chunks, every other music stage 3N"), ("long-width", POS, ""),
    ("long-epochs", POS, "most prose epochs of the long pair"), ("patience", POS, "the long pair's --patience"),
    ("min-delta", float, "the long pair's --min-delta: an epoch improves only by more than this (nats)"),
    ("long-schedule", str, "the long pair's lr: cosine (over --long-epochs) or constant (a plateau --patience sees)"),
    ("eval-iters", POS, "batches per prose evaluation"), ("pre-eval-iters", POS, "batches of a pre-training eval"),
    ("batch-size", POS, ""), ("block-size", POS, ""), ("n-layer", POS, ""), ("n-head", POS, ""), ("lr", float, ""),
    ("warmup-iters", int, ""), ("prose", str, "train.py --prose: wiki-leads, wikitext2, wikitext103"),
    ("music-dir", str, "train.py --music-dir (default: the offline music21 corpus)"), ("data-seed", int, "", 0),
    ("prose-stage", str, "stage names (text:PATH: a folder)", "prose"), ("poetry-stage", str, "", "poetry"),
    ("music-stage", str, "", "music"), ("synthetic-stage", str, "", "music-synthetic"),
    ("synthetic-tokens", int, "", 600_000), ("device", str, "", "auto"), ("scan-tokens", str, "scarcity: U values "
     "(0: all)"), ("prose-steps", POS, "scarcity: at every U"), ("eval-every", POS, "scarcity: steps between evals")]


def parse_args(argv=None):
    p = common.sweep_parser(__doc__, "out/ladder", FLAGS, choices=sorted(PRESETS), default="contributions",
                            help="PRESETS, as the docstring of experiments/ladder.py says (default contributions)")
    a = p.parse_args(argv)
    preset = {**SETTINGS, **PRESETS[a.preset], **(QUICK if a.quick else {})}
    vars(a).update({k: v for k, v in preset.items() if getattr(a, k, None) is None})
    a.out = Path(a.out or "out/ladder" + ("-quick" if a.quick else "" if a.preset == "contributions" else
                                          f"-{a.preset}")).resolve()
    if a.preset == "headline":  # (report.json keeps the arms and train.py's defaults they ran at)
        a.reuse and p.error("--reuse reads another preset's results; --preset headline resumes from its --out alone")
        d = vars(train_flags([]))
        return setattr(a, "budget", {k: d[k] for k in ("iters", "batch_size", "block_size", "n_layer", "n_embd",
                                                       "lr")}) or setattr(a, "conditions", dict(HEADLINE_ARMS)) or a
    names = list(CONDITIONS) if a.conditions == "all" else [c.strip() for c in a.conditions.split(",") if c.strip()]
    if set(names) - set(CONDITIONS):
        p.error(f"unknown condition(s) {sorted(set(names) - set(CONDITIONS))}; choose from: {', '.join(CONDITIONS)}")
    names += [ladder_report.baseline(c) for c in names]  # every condition is compared with its baseline
    a.conditions = [c for c in CONDITIONS if c in names]
    try:
        a.widths = [int(w) for w in str(a.widths).split(",")]
        a.capacity_widths = [int(w) for w in str(a.capacity_widths).split(",") if w.strip()]
    except ValueError:
        p.error(f"--widths {a.widths!r} / --capacity-widths {a.capacity_widths!r}: give whole numbers, e.g. 16,32,64")
    more = [re.fullmatch(r"([\w-]+)(?:@(\d+))?=(\d+)", x.strip()) for x in a.more_seeds.split(",") if x.strip()]
    if not all(m and m[1] in a.conditions for m in more):
        p.error(f"--more-seeds {a.more_seeds!r}: give COND[@WIDTH]=N,... of the conditions run: {', '.join(a.conditions)}")
    a._more = {(m[1], int(m[2]) if m[2] else None): int(m[3]) for m in more}  # {(condition, width or None): seeds}
    a.long_schedule in ("cosine", "constant") or p.error(f"--long-schedule {a.long_schedule!r}: cosine or constant")
    if a.headline_seeds < 0 or a.prose_tokens < 0 or min(a.widths + a.capacity_widths) <= 0 or any(
            w % a.n_head for w in a.widths + a.capacity_widths + [a.long_width]):
        p.error(f"--headline-seeds and --prose-tokens must be >= 0, widths positive multiples of --n-head {a.n_head}")
    a._reused = ladder_report.reused(a, SETTINGS)
    return a


def steps_per_epoch(a):
    """(prose steps per epoch, the unique prose tokens U or None for the whole corpus)."""
    per_step = a.batch_size * a.block_size
    if a.prose_tokens:
        spe = max(1, round(a.prose_tokens / per_step))
        return spe, spe * per_step
    if getattr(a, "_prose_train_tokens", None) is None and getattr(a, "plan", False) and a.prose_stage == "prose":
        a._prose_train_tokens = APPROX_TRAIN_TOKENS.get(a.prose, APPROX_TRAIN_TOKENS["wiki-leads"])  # not loaded
    elif getattr(a, "_prose_train_tokens", None) is None:
        import data
        try:
            a._prose_train_tokens = len(data.load(a.prose_stage, prose=a.prose, block_size=a.block_size).train)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(f"prose stage {a.prose_stage!r}: {e}") from None
    return -(-a._prose_train_tokens // per_step), None


def ladder_steps(a):
    """Optimizer steps of the whole ladder (music + poetry + prose): the compute-matched budget."""
    return a.music_steps + a.poetry_steps + a.prose_epochs * steps_per_epoch(a)[0]


def checkpoint_of(a, run):
    return stage_file(run.folder, 0, run.meta["stage"])


def make_run(a, name, stage, steps, spe, evals, eval_iters, width, seed, parent, kind, more):
    """One train.py run: a stage of `steps` steps evaluated every `spe`, from `parent`'s checkpoint if given."""
    argv = ["--stages", stage, "--iters", steps, "--eval-interval", spe, "--eval-iters", eval_iters, "--eval-splits",
            "val", "--n-layer", a.n_layer, "--n-head", a.n_head, "--n-embd", width, "--block-size", a.block_size,
            "--batch-size", a.batch_size, "--lr", a.lr, "--warmup-iters", a.warmup_iters, "--seed", seed,
            "--data-seed", a.data_seed, "--prose", a.prose, "--synthetic-tokens", a.synthetic_tokens, "--device",
            a.device, "--log-interval", 10] + (["--music-dir", a.music_dir] if a.music_dir else []) + more + (
            ["--init-from", checkpoint_of(a, parent)] if parent else [])
    return Run(name, a.out / "runs" / name, [str(x) for x in argv], dict(kind=kind, stage=stage, steps=steps,
               evals=evals, spe=spe, deps=[parent.name] if parent else [], eval_iters=eval_iters, width=width))


def pre_run(a, key, width, seed):
    """The pre-training run `key` at (width, seed): one stage, evaluated once at its end."""
    stage_flag, mult, init, steps_flag = PRETRAIN[key]
    steps, parent = getattr(a, steps_flag), init and pre_run(a, init, width, seed)
    return make_run(a, f"pre-{key}-d{width}-s{seed}", getattr(a, stage_flag), steps, steps, 1, a.pre_eval_iters,
                    width, seed, parent, "text" if stage_flag == "poetry_stage" else "music",
                    ["--music-chunks", mult * a.music_chunks] if mult else [])


def prose_run(a, condition, width, seed):
    pre, key, groups, budget = CONDITIONS[condition]
    spe, unique = steps_per_epoch(a)
    steps = {"epochs": a.prose_epochs * spe, "matched": ladder_steps(a), "long": a.long_epochs * spe}[budget]
    more = (["--unique-tokens", unique] if unique else []) + (["--transfer", groups] if groups else [])
    long = ["--patience", a.patience] + (["--min-delta", a.min_delta] if a.min_delta else []) + (
        ["--schedule", "constant"] if a.long_schedule == "constant" else [])
    return make_run(a, f"prose-{key}-d{width}-s{seed}", a.prose_stage, steps, spe, -(-steps // spe), a.eval_iters,
                    width, seed, pre and pre_run(a, pre, width, seed), "text", more + long * (budget == "long"))


def cells(a):
    """(condition, width, seed) of every result the report has, seed-major: the long pair at --long-width,
    the capacity pair also at --capacity-widths; the headline rows --headline-seeds seeds at --widths; --more-seeds."""
    out, more = [], getattr(a, "_more", {})
    for seed in range(max([a.seeds, a.headline_seeds, *more.values()])):
        for c in a.conditions:
            ws = [a.long_width] if CONDITIONS[c][3] == "long" else sorted(
                set(a.widths) | set(a.capacity_widths)) if c in CAPACITY else a.widths
            out += [(c, w, seed) for w in ws if seed < max(max(a.seeds, a.headline_seeds) if c in HEADLINE and w in
                                                           a.widths else a.seeds, more.get((c, w), more.get((c, None), 0)))]
    return out


def chain(a, condition, width, seed):
    """The runs a result depends on, first to last (pre-training from scratch, continuations, the prose run)."""
    runs, key = [prose_run(a, condition, width, seed)], CONDITIONS[condition][0]
    while key:
        runs.insert(0, pre_run(a, key, width, seed))
        key = PRETRAIN[key][2]
    return runs


def plan(a):
    """{name: Run} of every run needed, each with meta["wave"] (1 + its dependency's) and meta["cpu_s"]."""
    if a.preset == "headline":  # cpu_s: 1-thread seconds measured per 400 prose steps, 125 more a stage before it
        return {f"{c}-s{s}": Run(f"{c}-s{s}", a.out / "runs" / f"{c}-s{s}", f"--stages {v} --seed {1337+s}".split(),
                                 dict(condition=c, seed=1337 + s, wave=1, deps=[], kind="text", stage=v.split()[0],
                                      steps=it * (1 + v.count(",")), cpu_s=it / 2 + 125 * v.count(",")))
                for c, v in HEADLINE_ARMS.items() for s in range(min(a.seeds, HEADLINE_SEEDS.get(c, a.seeds)))
                for it in [int(train_flags(f"--stages {v}".split()).iters)]}
    runs = {}
    for runs_of_a_cell in ladder_scarcity.chains(a, make_run, pre_run) if a.preset == "scarcity" else (
            chain(a, c, w, s)[:-1 if (c, w, s) in a._reused else None] for c, w, s in cells(a)):  # (reused: no prose)
        for r in runs_of_a_cell:
            r.meta.setdefault("wave", 1 + (runs[r.meta["deps"][0]].meta["wave"] if r.meta["deps"] else 0))
            r.meta["cpu_s"] = cpu_seconds(a, r.meta["kind"], r.meta["width"], r.meta["steps"],
                                          r.meta["evals"] * r.meta["eval_iters"])
            runs.setdefault(r.name, r)
    return runs


def cpu_seconds(a, kind, width, steps, eval_batches):
    """The plan's cost model: a run's 1-thread CPU seconds (CPU_S_PER_KTOK, linear in the width beyond it)."""
    t, tok = CPU_S_PER_KTOK[kind], a.batch_size * a.block_size
    per = t[max(t)] * width / max(t) if width > max(t) else float(np.interp(width, sorted(t), [t[x] for x in sorted(t)]))
    return RUN_OVERHEAD_S + per * tok * (steps + EVAL_FRACTION * eval_batches) / 1000


def long_pair_cost(a, width=64, seeds=3):
    """The long pair's CPU-hours at the cap at WIDTH x SEEDS, pre-training included (None where it runs there)."""
    if a.long_width == width or not any(c.startswith("long-") for c in a.conditions):
        return None
    spe, _ = steps_per_epoch(a)
    prose = cpu_seconds(a, "text", width, a.long_epochs * spe, a.long_epochs * a.eval_iters)
    pre = cpu_seconds(a, "music", width, a.music_steps, a.pre_eval_iters) + cpu_seconds(
        a, "text", width, a.poetry_steps, a.pre_eval_iters)
    return {"width": width, "seeds": seeds, "cpu_hours": round(seeds * (2 * prose + pre) / 3600, 1)}


def print_plan(a, runs):
    jobs = max(1, min(a.jobs, os.cpu_count() or 1))
    if a.preset not in ("headline", "scarcity"):  # (theirs: the runs below say it)
        spe, unique = steps_per_epoch(a)
        print(f"ladder plan: {', '.join(a.conditions)}; widths {a.widths}; seeds 0..{a.seeds - 1}; out {a.out}\nprose: "
              f"{'first ' + format(unique, ',') + ' tokens' if unique else 'the whole corpus'} of {a.prose_stage} "
              f"({a.prose}), {a.prose_epochs} epochs of {spe} steps x {a.batch_size} x {a.block_size}; music "
              f"{a.music_steps} steps on {a.music_chunks} / {3 * a.music_chunks} chunks; poetry {a.poetry_steps} steps"
              f"; compute-matched {ladder_steps(a)} steps; long pair d{a.long_width}, <= {a.long_epochs} epochs "
              f"({a.long_schedule} lr)")
    for wave in sorted({r.meta["wave"] for r in runs.values()}):
        rs = sorted((r for r in runs.values() if r.meta["wave"] == wave), key=lambda r: -r.meta["cpu_s"])
        print(f"\nwave {wave}: {len(rs)} runs, ~{sum(r.meta['cpu_s'] for r in rs) / 60:.1f} CPU-min")
        for r in rs:
            print(f"  {r.name:<34} {r.meta['stage']:<16} {r.meta['steps']:>7} steps  ~{r.meta['cpu_s']:>7.0f} s"
                  f"{'  (done)' if common.is_finished(r.folder) else ''}")
    todo = sum(r.meta["cpu_s"] for r in runs.values() if not common.is_finished(r.folder))
    print(f"\n{len(runs)} runs, ~{sum(r.meta['cpu_s'] for r in runs.values()) / 60:.0f} CPU-min in all "
          f"({todo / 60:.0f} still to run); estimated wall time with --jobs {a.jobs} on quiet cores: "
          f"~{todo / jobs / 60:.0f} min (1-thread CPU costs of a CPU with bf16; a GPU run is not estimated)")
    print(common.pace_line(runs.values(), lambda r: r.meta["cpu_s"], todo, jobs) or "(no finished run yet)")
    return todo / jobs


def run_waves(a, runs, sweep):
    """Unless --report-only: print the plan, check the music, train each wave (not a diverged run's dependents)."""
    if a.report_only:
        return runs
    print_plan(a, runs)
    ladder_music.check_music_chunks(a, runs)
    waves = common.group(sorted(runs.values(), key=lambda r: (r.meta["wave"], r.meta.get("order", 0),
                                                              -r.meta["cpu_s"])), lambda r: r.meta["wave"])
    for wave, rs in waves.items():
        ok = [r for r in rs if not any((a.out / "runs" / d / "diverged.json").exists() for d in r.meta["deps"])]
        print(f"\n== wave {wave}/{len(waves)}: {len(ok)} runs ({len(rs) - len(ok)} skipped: pre-training diverged)")
        sweep(ok)
    return runs


def read_record(c, w, s, runs):
    """(record, details) of one result, or (None, why) when a run of its chain is unfinished or diverged."""
    for r in (r for r in runs if not (r.folder / "summary.json").exists()):
        return None, f"diverged ({r.name})" if (r.folder / "diverged.json").exists() else "not run"
    sums, long = [common.read_summary(r.folder) for r in runs], CONDITIONS[c][3] == "long"
    prose, spe = sums[-1]["stages"][0], runs[-1].meta["spe"]
    evals = sorted((e["iter"], e["val_loss"]) for e in common.read_events(runs[-1].folder, "eval")
                   if e.get("stage_index") == 0)
    first = [v for it, v in evals if it == spe]
    rec = {"condition": c, "width": w, "seed": s, "ppl_first_epoch": math.exp(first[0]) if first else float("nan"),
           "ppl_final": math.exp(prose["best_val_loss"] if long else prose["val_loss"]),
           "ppl_best": math.exp(min(v for _, v in evals)) if evals else float("nan"),
           "stopped_early": bool(prose["stopped_early"]), "steps": sum(t["iters"] for sm in sums for t in sm["stages"]),
           "tokens": sum(t["tokens"] for sm in sums for t in sm["stages"]),
           "seconds": round(sum(sm["seconds"] for sm in sums), 1)}
    if long:  # how far from a plateau the run ended: its last epoch's change of perplexity, and what stopped it
        rec["last_epoch_change"] = math.exp(evals[-1][1] - evals[-2][1]) - 1 if len(evals) > 1 else float("nan")
        rec["stop_reason"] = (f"stopping rule, after epoch {prose['iters'] / spe:g}" if prose["stopped_early"] else
                              f"cap: {runs[-1].meta['evals']} epochs")
    return rec, {"chain": [r.name for r in runs], "prose_steps": prose["iters"], "steps_per_epoch": spe,
                 "prose_unique_tokens": prose["unique_tokens"], "stopped_early": prose["stopped_early"],
                 "unigram_val_ppl": prose.get("unigram_val_ppl"), "curve": [[it / spe, math.exp(v)] for it, v in evals]}


def collect(a, runs):
    """(data, details): the records, the missing results, the sweep's facts and the prose unigram perplexity."""
    records, details, missing = [], {}, []
    for c, w, s in cells(a):
        rec, det = a._reused.get((c, w, s)) or read_record(c, w, s, chain(a, c, w, s))
        if rec is None:
            missing.append([c, w, s, det])
        else:
            records.append(rec)
            details[f"{c}/d{w}/s{s}"] = det
    done, (spe, unique) = [r for r in runs.values() if (r.folder / "summary.json").exists()], steps_per_epoch(a)
    facts = {"n_runs": len(done), "train_min": sum(common.read_summary(r.folder)["seconds"] for r in done) / 60,
             "spe": spe, "ladder_steps": ladder_steps(a),
             **({"reused": [len(a._reused), str(a.reuse)]} if a._reused else {}),
             "prose_desc": (f"the first {unique:,} training tokens of {a.prose_stage}"
                            + (f" ({a.prose})" if a.prose_stage == "prose" else "")) if unique else
             f"the whole {a.prose_stage} training split ({a.prose})", "long_pair_elsewhere": long_pair_cost(a)}
    pre = [(r.name.rsplit("-s", 1)[0][4:], r.meta, common.read_summary(r.folder)["stages"][0]) for r in done
           if r.name.startswith("pre-")]  # what each pre-training run learnt: its val ppl, its data's unigram ppl
    facts["pretrain"] = {k: {"stage": PRETRAIN[k.rsplit("-d", 1)[0]][0].removesuffix("_stage"), "steps": m["steps"],
                             "val_ppl": [x["val_ppl"] for k2, _, x in pre if k2 == k],
                             "unigram_ppl": t.get("unigram_val_ppl")} for k, m, t in pre}
    if a.preset == "contributions":  # music.png: a real piece beside one sampled from the d16 music run
        facts["music_train_chunks"] = len(ladder_music.music_corpus(a).train) // (a.block_size + 1)
        ladder_music.real_and_sampled(a, checkpoint_of(a, pre_run(a, "musicL", min(a.widths), 0)), a.out / "music.png")
    uni = {d["unigram_val_ppl"] for d in details.values() if d.get("unigram_val_ppl") is not None}
    return {"runs": records, "missing": missing, "facts": facts,
            "prose_unigram_ppl": uni.pop() if len(uni) == 1 else None}, details


def main(argv=None):
    common.experiment_main(parse_args(argv), argv, plan=plan, show_plan=print_plan, train=run_waves,
                           rebuild=ladder_report.rebuild, render=lambda a, runs, prov: (
        ladder_report.render_headline(a, *ladder_report.headline_records(a, runs), a.out, prov)
        if a.preset == "headline" else ladder_scarcity.render(a, *ladder_scarcity.records(a, runs), a.out, prov)
        if a.preset == "scarcity" else ladder_report.render(a, *collect(a, runs), a.out, prov)),
        wrote="\n{text}\nwrote {out}/report.md, report.json, details.json, the PNGs ({s:.0f} s)")


if __name__ == "__main__":
    common.main_guard(main)
