"""
The ladder experiment's analysis and report (experiments/ladder.py runs the sweep): per-run numbers from the
finished runs, the table (mean +- std, improvement over the baseline, Welch's p), report.md with the paper's
numbers beside ours, report.json, details.json and the PNGs.
arXiv 2604.21265: prose perplexity 349.0 (ladder) vs 373.2 (music only) vs 423.0 (random init).

report.json is exactly {"runs": [...], "table": [...]} (the issue's shape): every number of the table
follows from `runs` (mean, sample std, n, improvement = 1 - mean / mean of the baseline at the same width,
p = scipy.stats.ttest_ind(equal_var=False) against the baseline's runs). Everything else (settings, curves
per epoch, the other comparisons, run chains) is in details.json.
"""

import json
import math
import time

from experiments.lib.common import write_text as common_write_text  # noqa: E402
from experiments.lib import common
from experiments.ladder import BASELINE, CONDITIONS, cells, chain

METRICS = ("ppl_first_epoch", "ppl_final")
CLAIM = ("music then poetry before prose lowers prose perplexity: 349.0 (ladder) vs 373.2 (music only) vs 423.0 "
         "(random init), p < 0.001, 26% lower after the first epoch; the advantage persists at convergence; a "
         "compute-matched prose-only control stays 5.0% behind the ladder (arXiv 2604.21265)")
# the paper's numbers (PAPERS.md section 1; 5 seeds, WikiText-103, MAESTRO, d in {16, 32, 64})
PAPER = {
    "random": "final 423.0",
    "music": "final 373.2 (11.8% below random)",
    "ladder": "final 349.0 (17.5% below random, p < 0.001); first epoch 26% below random",
    "compute-matched": "5.0% behind the ladder",
    "volume-small": "vs 36k real: d16 12k better by 3.1%; d32 36k better by 3.3%; d64 36k better by 6.1%",
    "volume-small-synthetic": "-",
    "volume-large-synthetic": "d16: 12k real beat 36k synthetic",
    "ablation-attn": "music helps attention/FFN",
    "ablation-mlp": "music helps attention/FFN",
    "ablation-embed": "poetry helps the embeddings; effects additive",
    "long-ladder": "at the plateau 5.5% below random at d64 (p = 0.017; 11.8% also quoted)",
}


def baseline(c):
    return BASELINE.get(c, "random")


# ---------------------------------------------------------------------------------------------
# numbers from the runs

def read_record(a, c, w, s):
    """One result (the issue's run record) and its details, or (None, why) when unfinished/diverged."""
    runs = chain(a, c, w, s)
    for r in runs:
        if (r.folder / "diverged.json").exists():
            return None, f"diverged ({r.name})"
        if not (r.folder / "summary.json").exists():
            return None, "not run"
    sums = [common.read_summary(r.folder) for r in runs]
    prose, spe = sums[-1]["stages"][0], runs[-1].meta["spe"]
    evals = sorted((e["iter"], e["val_loss"]) for e in common.read_events(runs[-1].folder, "eval")
                   if e.get("stage_index") == 0)
    first = [v for it, v in evals if it == spe]
    final = prose["best_val_loss"] if CONDITIONS[c][3] == "long" else prose["val_loss"]
    rec = {"condition": c, "width": w, "seed": s,
           "ppl_first_epoch": math.exp(first[0]) if first else float("nan"), "ppl_final": math.exp(final),
           "steps": sum(st["iters"] for sm in sums for st in sm["stages"]),
           "tokens": sum(st["tokens"] for sm in sums for st in sm["stages"]),
           "seconds": round(sum(sm["seconds"] for sm in sums), 1)}
    det = {"chain": [r.name for r in runs], "prose_steps": prose["iters"], "steps_per_epoch": spe,
           "prose_unique_tokens": prose["unique_tokens"], "stopped_early": prose["stopped_early"],
           "unigram_val_ppl": prose.get("unigram_val_ppl"),
           "curve": [[it / spe, math.exp(v)] for it, v in evals]}
    return rec, det


def collect(a):
    records, details, missing = [], {}, []
    for c, w, s in cells(a):
        rec, det = read_record(a, c, w, s)
        if rec is None:
            missing.append((c, w, s, det))
            continue
        records.append(rec)
        details[f"{c}/d{w}/s{s}"] = det
    return records, details, missing


def values(records, c, w, metric):
    return [r[metric] for r in records if r["condition"] == c and r["width"] == w]


def table(a, records):
    rows = []
    for c in a.conditions:
        for w in sorted({r["width"] for r in records if r["condition"] == c}):
            for metric in METRICS:
                xs, base = values(records, c, w, metric), values(records, baseline(c), w, metric)
                m, sd, n = common.mean_std(xs)
                bm = common.mean_std(base)[0]
                rows.append({"condition": c, "width": w, "metric": metric, "mean": m, "std": sd, "n": n,
                             "improvement_vs_random": (1 - m / bm) if base and math.isfinite(bm) else None,
                             "p_vs_random": None if c == baseline(c) else common.welch_p(xs, base)})
    return rows


def compare(records, x, y, w, metric="ppl_final"):
    """x against y at width w: gain = 1 - mean(x) / mean(y) (> 0: x has the lower perplexity), Welch p."""
    a, b = values(records, x, w, metric), values(records, y, w, metric)
    if not a or not b:
        return None
    ma, mb = common.mean_std(a)[0], common.mean_std(b)[0]
    return {"x": x, "y": y, "width": w, "metric": metric, "mean_x": ma, "mean_y": mb, "n_x": len(a),
            "n_y": len(b), "gain": 1 - ma / mb, "p": common.welch_p(a, b)}


COMPARISONS = [  # (x, y, what it tests)
    ("ladder", "compute-matched", "the ladder against prose-only for the same number of optimizer steps"),
    ("ladder", "music", "what poetry adds after music"),
    ("music", "random", "music alone"),
    ("poetry", "random", "poetry alone"),
    ("ladder", "synthetic", "real music against synthetic music, both followed by poetry"),
    ("volume-large", "volume-small", "3N against N real music chunks (paper: d16 -3.1%, d32 +3.3%, d64 +6.1%)"),
    ("volume-large-synthetic", "volume-small-synthetic", "3N against N synthetic chunks"),
    ("volume-small", "volume-large-synthetic", "N real chunks against 3N synthetic (paper: real 12k wins at d16)"),
    ("ablation-attn", "random", "music's attention alone"),
    ("ablation-mlp", "random", "music's MLP alone"),
    ("ablation-norm", "random", "music's norms alone"),
    ("music", "ablation-attn", "attn+mlp+norm against attention alone"),
    ("ladder", "ablation-embed", "the poetry-trained embeddings (ladder against the ladder with them re-initialised)"),
    ("long-ladder", "long-random", "at the plateau (best validation perplexity, --patience)"),
]


def comparisons(a, records):
    out = []
    for x, y, what in COMPARISONS:
        for w in sorted({r["width"] for r in records}):
            for metric in METRICS:
                c = compare(records, x, y, w, metric)
                if c:
                    out.append(dict(c, what=what))
    return out


# ---------------------------------------------------------------------------------------------
# report.md

def fmt_p(p):
    return "-" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_pct(x):
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def ppl(records, c, w, metric):
    return common.fmt_mean_std(values(records, c, w, metric), "{:.1f}")


def results_table(a, records, rows):
    idx = {(r["condition"], r["width"], r["metric"]): r for r in rows}
    lines = ["| condition | d | ppl first epoch | ppl final | vs baseline: first / final | p first / final | n | paper |",
             "|---|---|---|---|---|---|---|---|"]
    for c in a.conditions:
        for w in sorted({r["width"] for r in records if r["condition"] == c}):
            f, z = idx[(c, w, "ppl_first_epoch")], idx[(c, w, "ppl_final")]
            lines.append(f"| {c} | {w} | {ppl(records, c, w, 'ppl_first_epoch')} | {ppl(records, c, w, 'ppl_final')} | "
                         f"{fmt_pct(f['improvement_vs_random'])} / {fmt_pct(z['improvement_vs_random'])} | "
                         f"{fmt_p(f['p_vs_random'])} / {fmt_p(z['p_vs_random'])} | {z['n']} | {PAPER.get(c, '-')} |")
    return lines


def comparison_lines(comps):
    lines = ["| x | y | d | metric | x | y | gain of x (1 - x/y) | p (Welch) | what it tests |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in comps:
        lines.append(f"| {c['x']} | {c['y']} | {c['width']} | {c['metric']} | {c['mean_x']:.1f} | {c['mean_y']:.1f} | "
                     f"{fmt_pct(c['gain'])} | {fmt_p(c['p'])} | {c['what']} |")
    return lines


def verdict(a, records, comps):
    """Plain sentences: what our numbers say about each of the paper's claims."""
    def say(x, y, metric, claim):
        out = []
        for c in comps:
            if c["x"] == x and c["y"] == y and c["metric"] == metric:
                sig = "" if c["p"] is None else " (p = " + fmt_p(c["p"]) + (", significant at 0.05)" if c["p"] < 0.05
                                                                             else ", not significant at 0.05)")
                out.append(f"- {claim}, d{c['width']}: {x} {c['mean_x']:.1f} vs {y} {c['mean_y']:.1f}, "
                           f"{'lower' if c['gain'] > 0 else 'higher'} by {abs(100 * c['gain']):.1f}%{sig}.")
        return out
    lines = []  # ladder vs random, first epoch and final: from the records (it is in the table, not COMPARISONS)
    for w in sorted({r["width"] for r in records}):
        for metric, paper in (("ppl_first_epoch", "paper: 26% lower"), ("ppl_final", "paper: 17.5% lower")):
            c = compare(records, "ladder", "random", w, metric)
            if c:
                lines.append(f"- Ladder vs random, {metric}, d{w} ({paper}): {c['mean_x']:.1f} vs {c['mean_y']:.1f}, "
                             f"{fmt_pct(-c['gain'])} (p = {fmt_p(c['p'])}).")
    lines += say("music", "random", "ppl_final", "Music only vs random (paper: -11.8%)")
    lines += say("ladder", "music", "ppl_final", "Ladder vs music only (paper: 349.0 vs 373.2, -6.5%)")
    lines += say("ladder", "compute-matched", "ppl_final", "Ladder vs compute-matched (paper: the control 5.0% behind)")
    lines += say("volume-large", "volume-small", "ppl_final",
                 "3N vs N real chunks (paper: -3.1% / +3.3% / +6.1% gain of 3N at d16/32/64)")
    lines += say("long-ladder", "long-random", "ppl_final", "Long run at the plateau (paper: 5.5% at d64, p = 0.017)")
    return lines


def write_markdown(a, records, rows, comps, missing, facts):
    n_runs = facts["n_runs"]
    lines = [f"# The ladder: music -> poetry -> prose{' (--quick)' if a.quick else ''}", "",
             f"Paper's claim: {CLAIM}.", "",
             "## Setup (ours)", "",
             f"- Hardware: {common.hardware()}.",
             f"- Training time: {facts['train_min']:.1f} min summed over {n_runs} finished runs (train.run's "
             f"seconds; shared pre-training counted once); " + (
                 f"wall time of the sweep{'s (every invocation)' if facts['sweeps'] > 1 else ''}: "
                 f"{facts['wall_min']:.1f} min with --jobs {a.jobs}." if facts["sweeps"] else "wall time not recorded."),
             f"- Conditions: {', '.join(a.conditions)}; widths {a.widths}; seeds 0..{a.seeds - 1} (--seed; data fixed "
             f"by --data-seed {a.data_seed}); model {a.n_layer} layers, {a.n_head} heads, context {a.block_size}, batch "
             f"{a.batch_size}, AdamW lr {a.lr} (warmup {a.warmup_iters} steps, cosine to train.py's --min-lr) in every stage.",
             f"- Prose: {facts['prose_desc']}; {a.prose_epochs} epochs of {facts['spe']} steps, evaluated at the end of "
             f"every epoch on {a.eval_iters} batches ({a.eval_iters * a.batch_size * a.block_size:,} tokens) of "
             f"validation windows. Music: {a.music_steps} steps on {a.music_chunks:,} (N) or {3 * a.music_chunks:,} "
             f"(3N) chunks of {a.block_size + 1} tokens ({a.music_stage}; synthetic: {a.synthetic_stage}). Poetry: "
             f"{a.poetry_steps} steps ({a.poetry_stage}). Compute-matched: {facts['ladder_steps']} prose steps "
             f"(= music + poetry + prose steps of the ladder). Long-run pair: d{a.long_width}, at most "
             f"{a.long_epochs} epochs, patience {a.patience} epochs, ppl_final = best validation perplexity.",
             "- Transfer: music -> text copies attention, MLP and norms (token embedding, LM head and positions "
             "fresh); text -> text copies everything; ablations use --transfer as named.", "",
             "## Results (prose validation perplexity, mean ± std over seeds)", "",
             "'vs baseline' = 1 - mean / mean of the baseline at the same width (random; long-random for the long "
             "pair): positive = lower perplexity than the baseline. p: Welch's t-test against the baseline's runs.", ""]
    lines += results_table(a, records, rows) + [""]
    if comps:
        lines += ["## Comparisons", ""] + comparison_lines(comps) + [""]
    lines += ["## What our numbers say about the paper's claims", ""] + verdict(a, records, comps) + [""]
    lines += ["Where ours differ from the paper's, these differ: scale (4-layer models at d 16-64 as in the paper, "
              f"but {facts['prose_desc']} for {a.prose_epochs} epochs instead of WikiText-103's ~100M tokens, so the "
              "perplexities are far higher and the first epoch is a few dozen steps), data (music21 score-derived "
              "MIDI of Bach/Monteverdi/Haydn/Mozart instead of MAESTRO piano performances; N/3N chunks scaled to the "
              "offline corpus instead of 12k/36k; Wikipedia lead sections instead of WikiText-103) and budgets "
              f"(music {a.music_steps} and poetry {a.poetry_steps} steps, our choice: pre-training is large "
              "relative to our prose budget, unlike the paper's)." +
              (" This --quick run is a smoke test (tiny budgets, 2 seeds): it checks the pipeline, not the claims."
               if a.quick else ""), ""]
    if missing:
        lines += [f"Missing results ({len(missing)}): "
                  + ", ".join(f"{c} d{w} s{s} ({why})" for c, w, s, why in missing[:20])
                  + (" ..." if len(missing) > 20 else ""), ""]
    lines += ["## Paper's numbers", "", f"{CLAIM}. Data volume: at d=16, 12k real chunks beat 36k synthetic and 36k "
              "real (-3.1%); at d=32 36k wins (+3.3%), at d=64 (+6.1%). Mechanism: music helps attention/FFN, poetry "
              "the embeddings; additive.", "",
              "Figures: `curves.png` (prose validation perplexity per epoch, mean over seeds), `width.png` "
              "(improvement over random against width), `ablation.png` (final perplexity per condition, bars). "
              "Every run's numbers: `report.json`; settings, per-epoch curves and comparisons: `details.json`; the "
              "runs: `runs/`.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# figures

def plot_curves(a, details, path):
    plt = common.pyplot()
    widths = sorted({int(k.split("/d")[1].split("/")[0]) for k in details})
    fig, axes = plt.subplots(1, max(1, len(widths)), figsize=(5 * max(1, len(widths)), 4), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, w in zip(axes[0], widths):
        for i, c in enumerate(a.conditions):
            if c == "volume-large" and "music" in a.conditions:
                continue  # the same runs as `music`
            curves = [d["curve"] for k, d in details.items() if k.startswith(f"{c}/d{w}/")]
            if not curves:
                continue
            by_epoch = {}
            for cv in curves:
                for e, p in cv:
                    by_epoch.setdefault(round(e, 3), []).append(p)
            xs = sorted(by_epoch)
            ax.plot(xs, [sum(by_epoch[x]) / len(by_epoch[x]) for x in xs], marker=".", color=colors[i % 20],
                    label=c + (" (= volume-large)" if c == "music" and "volume-large" in a.conditions else ""),
                    ls="--" if CONDITIONS[c][3] != "epochs" else "-")
        ax.set_title(f"d = {w}")
        ax.set_xlabel("prose epoch")
        ax.set_ylabel("validation perplexity (mean over seeds)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, path)


def plot_width(a, rows, path):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    colors = plt.get_cmap("tab20").colors
    widths = sorted({r["width"] for r in rows})
    for ax, metric in zip(axes, METRICS):
        for i, c in enumerate(a.conditions):
            if c == "volume-large" and "music" in a.conditions:
                continue  # the same runs as `music`
            pts = sorted((r["width"], r["improvement_vs_random"]) for r in rows if r["condition"] == c
                         and r["metric"] == metric and r["improvement_vs_random"] is not None and c != baseline(c))
            if pts:
                ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", color=colors[i % 20],
                        label=c + (" (vs long-random)" if baseline(c) != "random" else ""))
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        if widths:
            ax.set_xticks(widths)
            ax.set_xticklabels([str(w) for w in widths])
            ax.set_xlim(widths[0] / 1.5, widths[-1] * 1.5)
        ax.set_xlabel("width d")
        ax.set_ylabel("improvement over random (%)")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, path)


ABLATION = ("random", "music", "ablation-attn", "ablation-mlp", "ablation-norm", "poetry", "ladder", "ablation-embed")


def plot_ablation(a, records, path):
    plt = common.pyplot()
    conds = [c for c in ABLATION if any(r["condition"] == c for r in records)]
    widths = sorted({r["width"] for r in records if r["condition"] in conds})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(conds) * max(1, len(widths)) * 0.6), 4))
    bw = 0.8 / max(1, len(widths))
    for k, w in enumerate(widths):
        ms = [common.mean_std(values(records, c, w, "ppl_final")) for c in conds]
        ax.bar([i + k * bw for i in range(len(conds))], [m for m, _, _ in ms], bw,
               yerr=[s if n > 1 else 0 for _, s, n in ms], capsize=3, label=f"d = {w}")
    lows = [m for w in widths for c in conds for m in [common.mean_std(values(records, c, w, "ppl_final"))[0]]]
    if lows:
        ax.set_ylim(0.9 * min(lows), 1.03 * max(lows))
    ax.set_xticks([i + bw * (len(widths) - 1) / 2 for i in range(len(conds))])
    ax.set_xticklabels(conds, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("final prose validation perplexity")
    missing = [c for c in ABLATION if c not in conds]
    ax.set_title("what each transferred part is worth" + (f" (not run: {', '.join(missing)})" if missing else ""),
                 fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    common.save_figure(fig, path)


# ---------------------------------------------------------------------------------------------

def write_all(a, runs, sweep_wall_s=None):
    """Read the finished runs, write report.md, report.json, details.json and the PNGs; returns report.md."""
    from experiments.ladder import ladder_steps, steps_per_epoch
    records, details, missing = collect(a)
    rows = table(a, records)
    comps = comparisons(a, records)
    timing_path = a.out / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {"sweeps": []}
    if sweep_wall_s is not None:
        timing["sweeps"].append({"wall_s": round(sweep_wall_s, 1), "jobs": a.jobs, "finished": time.strftime("%F %T")})
        common.write_json(timing_path, timing)
    finished = [r for r in runs.values() if (r.folder / "summary.json").exists()]
    spe, unique = steps_per_epoch(a)
    facts = {"n_runs": len(finished), "train_min": sum(common.read_summary(r.folder)["seconds"] for r in finished) / 60,
             "wall_min": sum(s["wall_s"] for s in timing["sweeps"]) / 60, "sweeps": len(timing["sweeps"]),
             "spe": spe, "ladder_steps": ladder_steps(a),
             "prose_desc": (f"the first {unique:,} training tokens of {a.prose_stage}"
                            + (f" ({a.prose})" if a.prose_stage == "prose" else "")) if unique else
                           f"the whole {a.prose_stage} training split ({a.prose})"}
    text = write_markdown(a, records, rows, comps, missing, facts)
    common.write_json(a.out / "report.json", {"runs": records, "table": rows})
    settings = common.settings_json(a)
    common.write_json(a.out / "details.json", {"claim": CLAIM, "paper": PAPER, "settings": settings, "facts": facts,
                                               "hardware": common.hardware(), "comparisons": comps,
                                               "runs": details, "missing": [list(m) for m in missing]})
    common_write_text(a.out / "report.md", text)
    plot_curves(a, details, a.out / "curves.png")
    plot_width(a, rows, a.out / "width.png")
    plot_ablation(a, records, a.out / "ablation.png")
    return text
