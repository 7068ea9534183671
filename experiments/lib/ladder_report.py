"""
The ladder experiment's analysis and report (experiments/ladder.py runs the sweep).
arXiv 2604.21265 ("Listen and Chant Before You Read"): prose perplexity 349.0 (ladder) vs 373.2
(music only) vs 423.0 (random init); music alone 26% lower after the first prose epoch.

    data, details = collect(a, runs, chains)        # finished runs -> records (+ per-epoch curves)
    render(a, data, details, out, provenance)       # records -> report.md, report.json, details.json, PNGs
    rebuild(out)                                    # report.json (+ details.json) -> the same files

Every number of report.json follows from its `runs` (one record per condition, width and seed):
the table (mean, sample std, n, improvement = 1 - mean / mean of the baseline at the same width,
Welch p against the baseline's runs), the comparisons and the verdicts; every sentence that calls
a difference an effect comes from common.compare / common.reading (clear only when Welch p < 0.05
with at least 3 runs on each side). details.json keeps what only the run folders know (each run's
chain and per-epoch curve). Without the run folders (`--report-only --out experiments/results/ladder`)
the records come back from report.json and the curves from details.json; curves.png is left as it
is when details.json is absent.
"""

import argparse
import json
import math

from experiments.lib import common, ladder_contributions, ladder_music
from experiments.lib.ladder_conditions import baseline, is_long, ladder_steps, steps_per_epoch

METRICS = ("ppl_first_epoch", "ppl_final")
SOURCE = {"arxiv": "2604.21265", "title": "Listen and Chant Before You Read"}
FIGURES = ["width.png", "curves.png", "ablation.png"]
MUSIC_FIGURE = "music.png"  # the contributions preset: a real piece and a sampled one (ladder_music)
CLAIMS_HEADING = "## The paper's claims beside ours"
CLAIM = ("music then poetry before prose lowers prose perplexity: 349.0 (ladder) vs 373.2 (music only) vs 423.0 "
         "(random init), p < 0.001; music alone is 26% lower after the first prose epoch and 11.8% after "
         "convergence; the advantage persists at the plateau (5.5% at d = 64, p = 0.017); a compute-matched "
         "prose-only control stays 5.0% behind the ladder")
# the paper's number for each condition (section "Results": 5 seeds, WikiText-103, MAESTRO, d in {16, 32, 64})
PAPER = {
    "random": "423.0 at convergence",
    "music": "26% below random after the first epoch; 373.2 at convergence (11.8% below)",
    "ladder": "349.0 at convergence (17.5% below random, p < 0.001; 6.5% below music only)",
    "compute-matched": "5.0% behind the ladder",
    "volume-small": "vs 36k real: d16 12k better by 3.1%; d32 36k better by 3.3%; d64 36k better by 6.1%",
    "volume-large-synthetic": "d16: 12k real beat 36k synthetic",
    "ablation-attn": "music helps attention/FFN",
    "ablation-mlp": "music helps attention/FFN",
    "ablation-embed": "poetry helps the embeddings; effects additive",
    "long-ladder": "5.5% below long-random at the plateau, d64 (p = 0.017)",
}
# the paper's claims as our conditions test them: (claim, the paper's number, [(x, y), ...] compared on metric,
# the widths the claim is about (None: every width) and, per width, whether the paper has x better than y)
CLAIMS = [
    ("music -> prose: lower perplexity after the first prose epoch", "26% below random init",
     [("music", "random")], "ppl_first_epoch", None, {}),
    ("music -> prose: lower perplexity at the end", "373.2 vs 423.0 (11.8% below random init), after convergence",
     [("music", "random")], "ppl_final", None, {}),
    ("the ladder (music -> poetry -> prose): lower perplexity at the end",
     "349.0 vs 423.0 (17.5% below random init), p < 0.001", [("ladder", "random")], "ppl_final", None, {}),
    ("poetry adds to music", "349.0 vs 373.2 (6.5% below music only)", [("ladder", "music")], "ppl_final", None, {}),
    ("a compute-matched prose-only control stays behind the ladder", "the control 5.0% behind the ladder",
     [("ladder", "compute-matched")], "ppl_final", None, {}),
    ("the advantage persists at the plateau", "5.5% below random init at d = 64 (p = 0.017)",
     [("long-ladder", "long-random")], "ppl_final", None, {}),
    ("more music data helps the wider models (3N = 36k vs N = 12k chunks)",
     "d16: 12k better by 3.1%; d32: 36k better by 3.3%; d64: 36k better by 6.1%",
     [("volume-large", "volume-small")], "ppl_final", None, {16: False}),
    ("real music beats synthetic music", "d16: 12k real chunks beat 36k synthetic ones",
     [("volume-small", "volume-large-synthetic")], "ppl_final", [16], {}),
    ("music helps through attention and the MLP", "music helps attention / FFN",
     [("ablation-attn", "random"), ("ablation-mlp", "random")], "ppl_final", None, {}),
    ("poetry helps through the token embeddings", "poetry calibrates the embeddings",
     [("ladder", "ablation-embed")], "ppl_final", None, {}),
]
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
INVOCATION_FLAGS = ("out", "jobs", "threads", "report_only", "plan")  # how a report was made, not what it measured


# ---------------------------------------------------------------------------------------------
# collect: the finished runs -> records

def read_record(a, c, w, s, runs):
    """One result (condition c, width w, seed s) from the runs of its chain, first to last, and its
    details; or (None, why) when a run is unfinished or diverged."""
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
    final = prose["best_val_loss"] if is_long(c) else prose["val_loss"]
    rec = {"condition": c, "width": w, "seed": s,
           "ppl_first_epoch": math.exp(first[0]) if first else float("nan"), "ppl_final": math.exp(final),
           "ppl_best": math.exp(min(v for _, v in evals)) if evals else float("nan"),
           "stopped_early": bool(prose["stopped_early"]),
           "steps": sum(st["iters"] for sm in sums for st in sm["stages"]),
           "tokens": sum(st["tokens"] for sm in sums for st in sm["stages"]),
           "seconds": round(sum(sm["seconds"] for sm in sums), 1)}
    if is_long(c):  # how far from a plateau the run ended: its last epoch's change of perplexity
        rec["last_epoch_change"] = math.exp(evals[-1][1] - evals[-2][1]) - 1 if len(evals) > 1 else float("nan")
    det = {"chain": [r.name for r in runs], "prose_steps": prose["iters"], "steps_per_epoch": spe,
           "prose_unique_tokens": prose["unique_tokens"], "stopped_early": prose["stopped_early"],
           "unigram_val_ppl": prose.get("unigram_val_ppl"),
           "curve": [[it / spe, math.exp(v)] for it, v in evals]}
    return rec, det


def collect(a, runs, chains):
    """(data, details) of a sweep: runs = {name: Run} of the plan, chains = {(condition, width, seed):
    the runs of that result, first to last}. data holds the records, the missing results, the facts
    of the sweep and the prose unigram perplexity (the same subset for every prose run)."""
    records, details, missing = [], {}, []
    for (c, w, s), chain_runs in chains.items():
        rec, det = read_record(a, c, w, s, chain_runs)
        if rec is None:
            missing.append([c, w, s, det])
            continue
        records.append(rec)
        details[f"{c}/d{w}/s{s}"] = det
    finished = [r for r in runs.values() if (r.folder / "summary.json").exists()]
    spe, unique = steps_per_epoch(a)
    facts = {"n_runs": len(finished), "train_min": sum(common.read_summary(r.folder)["seconds"] for r in finished) / 60,
             "spe": spe, "ladder_steps": ladder_steps(a),
             "prose_desc": (f"the first {unique:,} training tokens of {a.prose_stage}"
                            + (f" ({a.prose})" if a.prose_stage == "prose" else "")) if unique else
                           f"the whole {a.prose_stage} training split ({a.prose})"}
    uni = {d["unigram_val_ppl"] for d in details.values() if d.get("unigram_val_ppl") is not None}
    return {"runs": records, "missing": missing, "facts": facts,
            "prose_unigram_ppl": uni.pop() if len(uni) == 1 else None}, details


def stored_only(out):
    """True when OUT holds a report.json but no run folders (a committed copy of a report)."""
    return (out / "report.json").exists() and not (out / "runs").exists()




def rebuild(out):
    """report.md, report.json (and details.json, the PNGs) again from OUT/report.json alone: the
    flags, records and provenance it keeps; the per-epoch curves from details.json if it is there."""
    rep = json.loads((out / "report.json").read_text())
    a = argparse.Namespace(**rep["settings"])
    path = out / "details.json"
    details = json.loads(path.read_text())["runs"] if path.exists() else None
    data = {k: rep[k] for k in ("runs", "missing", "facts", "prose_unigram_ppl")}
    return render(a, data, details, out, rep.get("provenance"))


# ---------------------------------------------------------------------------------------------
# the numbers: table, comparisons, verdicts (all from the records)

def values(records, c, w, metric):
    return [r[metric] for r in records if r["condition"] == c and r["width"] == w]


def widths_of(records, c=None):
    return sorted({r["width"] for r in records if c is None or r["condition"] == c})


def table(a, records):
    rows = []
    for c in a.conditions:
        for w in widths_of(records, c):
            for metric in METRICS:
                xs, base = values(records, c, w, metric), values(records, baseline(c), w, metric)
                m, sd, n = common.mean_std(xs)
                bm = common.mean_std(base)[0]
                rows.append({"condition": c, "width": w, "metric": metric, "mean": m, "std": sd, "n": n,
                             "improvement_vs_random": (1 - m / bm) if base and math.isfinite(bm) else None,
                             "p_vs_random": None if c == baseline(c) else common.welch_p(xs, base)})
    return rows


def compare(records, x, y, w, metric="ppl_final"):
    """x against y at width w by the reading rule (common.compare; lower perplexity is better), with
    the means and gain = 1 - mean(x) / mean(y) (> 0: x has the lower perplexity); None without runs."""
    xs, ys = values(records, x, w, metric), values(records, y, w, metric)
    if not xs or not ys:
        return None
    c = common.compare(xs, ys)
    mx, my = common.mean_std(xs)[0], common.mean_std(ys)[0]
    return {"x": x, "y": y, "width": w, "metric": metric, "mean_x": mx, "mean_y": my, "gain": 1 - mx / my, **c}


def comparisons(a, records):
    out = []
    for x, y, what in COMPARISONS:
        for w in widths_of(records):
            for metric in METRICS:
                c = compare(records, x, y, w, metric)
                if c:
                    out.append(dict(c, what=what))
    return out


def change(c):
    """The change of x against y in % of y (negative: x has the lower perplexity)."""
    return "-" if c is None else f"{-100 * c['gain'] + 0.0:+.1f}%"  # + 0.0: no "-0.0%"


def says(c):
    """What the reading rule allows about one comparison: 'lower by 15.6% (p = 0.002, n = 3/3)'."""
    return common.reading(c, "lower", "higher", amount=f"by {abs(100 * c['gain']):.1f}%")




def claim_cells(records, pairs, metric, widths, direction):
    """[(label, comparison, verdict)] of one claim: every (x, y) pair at every width both were run at."""
    cells = []
    for x, y in pairs:
        for w in widths_of(records):
            c = compare(records, x, y, w, metric) if widths is None or w in widths else None
            if c:
                label = (f"{x} d{w}" if len(pairs) > 1 else f"d{w}")
                cells.append((label, c, common.verdict_of(c, paper_direction_better=direction.get(w, True))))
    return cells


def fmt_ppl(records, c):
    return common.fmt_mean_std(values(records, c["x"], c["width"], c["metric"]), "{:.1f}")


def head_start(records, unigram):
    """The widths where random init after the first prose epoch is still above the prose unigram
    perplexity (a model that knows only the token frequencies): part of a first-epoch gain there is
    a head start on them."""
    if unigram is None:
        return "; the prose unigram perplexity is not in the records"
    above = [f"d{w}" for w in widths_of(records, "random")
             if common.mean_std(values(records, "random", w, "ppl_first_epoch"))[0] > unigram]
    return (f"; random init after the first epoch is still above the prose unigram perplexity {unigram:.1f} at "
            f"{', '.join(above)} (part of a gain there is a head start on token frequencies)") if above else ""


def at_the_cap(records):
    """Where the long pair's runs ran to the epoch cap instead of stopping at a plateau (--patience):
    their gap is measured at the cap, not at the plateau the paper compares."""
    runs = [r for r in records if is_long(r["condition"])]
    capped = [r for r in runs if not r["stopped_early"]]
    return (f"; {len(capped)} of {len(runs)} runs ran to the epoch cap before --patience saw a plateau: the gap "
            "at the cap, not at a plateau" + ladder_contributions.still_falling(capped)) if capped else ""


def verdicts(records, unigram=None):
    """report.json's `verdicts`: one entry per claim of the paper, each cell of it tested by Welch's t-test."""
    out = []
    for claim, paper, pairs, metric, widths, direction in CLAIMS:
        cells = claim_cells(records, pairs, metric, widths, direction)
        if not cells:
            out.append({"claim": claim, "paper": paper, "ours": "not in this run", "test": "not tested",
                        "verdict": "not measured"})
            continue
        v = common.combined_verdict([vd for _, _, vd in cells])
        ours = "; ".join(f"{label} {fmt_ppl(records, c)} vs "
                         f"{common.fmt_mean_std(values(records, c['y'], c['width'], metric), '{:.1f}')} ({change(c)})"
                         for label, c, _ in cells)
        if len({vd for _, _, vd in cells}) > 1:  # the cells disagree: name each one's verdict
            ours += " (" + ", ".join(f"{label}: {vd}" for label, _, vd in cells) + ")"
        if metric == "ppl_first_epoch":
            ours += head_start(records, unigram)
        if any(is_long(x) for x, _ in pairs):
            ours += at_the_cap(records)
        ns = {common.fmt_n(c) for _, c, _ in cells}
        test = ("Welch " + ", ".join(f"{label} {common.fmt_p(c['p'])}" for label, c, _ in cells)
                + (f"; {ns.pop()} each" if len(ns) == 1 else "; " + ", ".join(common.fmt_n(c) for _, c, _ in cells)))
        out.append({"claim": claim, "paper": paper, "ours": ours, "test": test, "verdict": v})
    return out


def unigram_note(records, unigram):
    """Where random init stands after the first prose epoch against the prose unigram perplexity."""
    if unigram is None:
        return "The prose unigram perplexity is not in the records (older runs), so the first-epoch gains are not " \
               "set against it."
    cells = [(w, common.mean_std(values(records, "random", w, "ppl_first_epoch"))[0]) for w in widths_of(records, "random")]
    above = [f"d{w} {m:.1f}" for w, m in cells if m > unigram]
    below = [f"d{w} {m:.1f}" for w, m in cells if m <= unigram]
    text = f"The prose unigram perplexity (token frequencies alone) is {unigram:.1f}. "
    if above:
        text += (f"Random init after the first prose epoch is still above it ({', '.join(above)}): it has not yet "
                 "learnt the token frequencies, so part of a first-epoch gain there is a head start on them")
        text += f"; below it: {', '.join(below)}." if below else "."
    else:
        text += f"Random init after the first prose epoch is below it at every width ({', '.join(below)})."
    return text


# ---------------------------------------------------------------------------------------------
# report.md

def fmt_pct(x):
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def ppl(records, c, w, metric):
    return common.fmt_mean_std(values(records, c, w, metric), "{:.1f}")


def results_table(a, records):
    lines = ["| condition | d | ppl first epoch | ppl final | change vs baseline: first / final | first epoch "
             "| final | n | paper |", "|---|---|---|---|---|---|---|---|---|"]
    for c in a.conditions:
        for w in widths_of(records, c):
            cf, cz = (compare(records, c, baseline(c), w, m) for m in METRICS)
            read = (lambda x: "(baseline)") if c == baseline(c) else (lambda x: says(x) if x else "-")
            lines.append(f"| {c} | {w} | {ppl(records, c, w, 'ppl_first_epoch')} | {ppl(records, c, w, 'ppl_final')} | "
                         f"{change(cf)} / {change(cz)} | {read(cf)} | {read(cz)} | {len(values(records, c, w, 'ppl_final'))} "
                         f"| {PAPER.get(c, '-')} |")
    return lines


def comparison_lines(comps):
    lines = ["| x | y | d | metric | x | y | change of x | reading | what it tests |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in comps:
        lines.append(f"| {c['x']} | {c['y']} | {c['width']} | {c['metric']} | {c['mean_x']:.1f} | {c['mean_y']:.1f} | "
                     f"{change(c)} | {says(c)} | {c['what']} |")
    return lines


def claim_lines(records, verdict_list, unigram):
    lines = ["| claim | paper | ours | test | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {v['claim']} | {v['paper']} | {v['ours']} | {v['test']} | {v['verdict']} |" for v in verdict_list]
    lines += ["", "Cell by cell (a difference is clear only when Welch's p < 0.05 with at least 3 runs on each side; "
              "perplexity, lower is better):", ""]
    for claim, paper, pairs, metric, widths, direction in CLAIMS:
        for _, c, _ in claim_cells(records, pairs, metric, widths, direction):
            lines.append(f"- {claim} ({c['x']} vs {c['y']}, {metric}), d{c['width']}: {c['mean_x']:.1f} vs "
                         f"{c['mean_y']:.1f}, {says(c)}.")
    return lines + ["", unigram_note(records, unigram)]


def regime(a, data, provenance):
    """report.json's `regime`: our scale and budget, and what differs from the paper's."""
    f = data["facts"]
    music = ("score-derived MIDI of the offline music21 corpus (Bach, Monteverdi, Haydn, Mozart)" if not a.music_dir
             else f"--music-dir {a.music_dir}")
    where = ""
    if provenance:
        h = provenance["hardware"]
        where = (f" {provenance['wall_seconds'] / 60:.1f} min wall on "
                 f"{common.hardware(h) if isinstance(h, dict) else h}.")
    extra = getattr(a, "capacity_widths", None) or []
    widths = ", ".join(map(str, a.widths)) + (f" (volume also d = {', '.join(map(str, extra))})" if extra else "")
    if any(is_long(c) for c in a.conditions):
        widths += f", the long pair at d = {a.long_width}"
    seeds = f"{a.seeds} seeds" + (f" ({a.headline_seeds} for random, music, ladder)"
                                  if getattr(a, "headline_seeds", 0) else "")
    return (f"{a.n_layer}-layer GPTs at d = {widths}; {seeds}; prose = "
            f"{f['prose_desc']}, {a.prose_epochs} epochs of {f['spe']} steps x {a.batch_size} x {a.block_size} tokens; "
            f"music {a.music_steps} steps on {3 * a.music_chunks:,} chunks of {music}; poetry {a.poetry_steps} steps; "
            f"the compute-matched control repeats the prose set for {f['ladder_steps'] / f['spe']:.1f} epochs."
            f"{where} The paper trains on WikiText-103 (~100M tokens) after MAESTRO piano performances (12k / 36k "
            f"chunks), 5 seeds, to convergence: our 'final' is after {a.prose_epochs} epochs of a far smaller prose "
            "set, so our perplexities are far higher and our pre-training is large relative to the prose budget.")


def markdown(a, data, rows, comps, verdict_list, provenance):
    f, records, missing = data["facts"], data["runs"], data["missing"]
    lines = [f"# The ladder: music -> poetry -> prose{' (--quick)' if a.quick else ''}", "",
             common.provenance_line(provenance), "",
             f"Paper (arXiv {SOURCE['arxiv']}, \"{SOURCE['title']}\"): {CLAIM}.", "",
             "## Setup (ours)", "",
             f"- Training time: {f['train_min']:.1f} min summed over {f['n_runs']} finished runs (train.run's "
             "seconds; shared pre-training counted once).",
             f"- Conditions: {', '.join(a.conditions)}; widths {a.widths}; seeds 0..{a.seeds - 1} (--seed; data fixed "
             f"by --data-seed {a.data_seed}); model {a.n_layer} layers, {a.n_head} heads, context {a.block_size}, batch "
             f"{a.batch_size}, AdamW lr {a.lr} (warmup {a.warmup_iters} steps, cosine to train.py's --min-lr) in every stage.",
             f"- Prose: {f['prose_desc']}; {a.prose_epochs} epochs of {f['spe']} steps, evaluated at the end of "
             f"every epoch on {a.eval_iters} batches ({a.eval_iters * a.batch_size * a.block_size:,} tokens) of "
             f"validation windows. Music: {a.music_steps} steps on {a.music_chunks:,} (N) or {3 * a.music_chunks:,} "
             f"(3N) chunks of {a.block_size + 1} tokens ({a.music_stage}; synthetic: {a.synthetic_stage}). Poetry: "
             f"{a.poetry_steps} steps ({a.poetry_stage}). Compute-matched: {f['ladder_steps']} prose steps "
             f"(= music + poetry + prose steps of the ladder). Long-run pair: d{a.long_width}, at most "
             f"{a.long_epochs} epochs, patience {a.patience} epochs, ppl_final = best validation perplexity.",
             "- Transfer: music -> text copies attention, MLP and norms (token embedding, LM head and positions "
             "fresh); text -> text copies everything; ablations use --transfer as named.", "",
             CLAIMS_HEADING, ""]
    lines += claim_lines(records, verdict_list, data["prose_unigram_ppl"]) + [""]
    lines += ["## Results (prose validation perplexity, mean ± std over seeds)", "",
              "Change vs baseline = mean / mean of the baseline at the same width - 1 (random; long-random for the "
              "long pair): negative = lower perplexity. The reading columns test each against the baseline's runs.", ""]
    lines += results_table(a, records) + [""]
    if comps:
        lines += ["## Comparisons", ""] + comparison_lines(comps) + [""]
    lines += ["## What differs from the paper", "", regime(a, data, provenance) +
              (" This --quick run is a smoke test (tiny budgets, 2 seeds): it checks the pipeline, not the claims."
               if a.quick else ""), ""]
    if missing:
        lines += [f"Missing results ({len(missing)}): "
                  + ", ".join(f"{c} d{w} s{s} ({why})" for c, w, s, why in missing[:20])
                  + (" ..." if len(missing) > 20 else ""), ""]
    lines += ["Figures: `width.png` (change against random per width; where volume ran at several widths, 3N against N "
              "music chunks per width beside the paper's), `curves.png` (prose validation perplexity "
              "per epoch, mean over seeds), `ablation.png` (final perplexity per condition, bars). Every run's "
              "numbers, the table, comparisons and verdicts: `report.json`; per-run chains and curves: "
              "`details.json`.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# figures

def curve_conditions(conditions, details, width):
    """The conditions curves.png draws at one width: those with runs there, volume-large only where
    `music` (the same runs) has none at that width (the capacity widths)."""
    have = {c for c in conditions if any(k.startswith(f"{c}/d{width}/") for k in details)}
    return [c for c in conditions if c in have and not (c == "volume-large" and "music" in have)]


def plot_curves(a, details, path):
    plt = common.pyplot()
    widths = sorted({int(k.split("/d")[1].split("/")[0]) for k in details})
    fig, axes = plt.subplots(1, max(1, len(widths)), figsize=(5 * max(1, len(widths)), 4), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, w in zip(axes[0], widths):
        drawn = curve_conditions(a.conditions, details, w)
        for i, c in enumerate(a.conditions):
            if c not in drawn:
                continue
            curves = [d["curve"] for k, d in details.items() if k.startswith(f"{c}/d{w}/")]
            by_epoch = {}
            for cv in curves:
                for e, p in cv:
                    by_epoch.setdefault(round(e, 3), []).append(p)
            xs = sorted(by_epoch)
            ax.plot(xs, [sum(by_epoch[x]) / len(by_epoch[x]) for x in xs], marker=".", color=colors[i % 20],
                    label=c + (" (= volume-large)" if c == "music" and "volume-large" in a.conditions else ""),
                    ls="-" if not is_long(c) and c != "compute-matched" else "--")
        ax.set_title(f"d = {w}")
        ax.set_xlabel("prose epoch")
        ax.set_ylabel("validation perplexity (mean over seeds)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, path)


# contribution 5: the paper's change of prose perplexity with 3N (36k) rather than N (12k) music chunks, per width
PAPER_VOLUME = {16: 3.1, 32: -3.3, 64: -6.1}


def plot_volume(ax, records):
    """width.png's capacity panel: volume-large against volume-small per width, each seed's change
    (paired by seed) and the mean change, beside the paper's numbers."""
    widths = sorted({r["width"] for r in records if r["condition"] == "volume-small"}
                    & {r["width"] for r in records if r["condition"] == "volume-large"})
    means = []
    for w in widths:
        small = {r["seed"]: r["ppl_final"] for r in records if r["condition"] == "volume-small" and r["width"] == w}
        large = {r["seed"]: r["ppl_final"] for r in records if r["condition"] == "volume-large" and r["width"] == w}
        pts = [100 * (large[s] / small[s] - 1) for s in sorted(small.keys() & large.keys())]
        ax.scatter([w] * len(pts), pts, color="tab:blue", alpha=0.4, s=14)
        means.append(100 * (common.mean_std(values(records, "volume-large", w, "ppl_final"))[0]
                            / common.mean_std(values(records, "volume-small", w, "ppl_final"))[0] - 1))
    ax.plot(widths, means, marker="o", color="tab:blue", label="ours: mean (dots: each seed)")
    pw = sorted(PAPER_VOLUME)
    ax.plot(pw, [PAPER_VOLUME[w] for w in pw], marker="s", ls="--", color="tab:red", label="paper (MAESTRO 12k vs 36k)")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(widths) | set(pw)))
    ax.set_xticklabels([str(w) for w in sorted(set(widths) | set(pw))])
    ax.set_xlabel("width d")
    ax.set_ylabel("3N vs N music chunks: change of prose ppl (%)")
    ax.set_title("more music by capacity (negative: 3N better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_width(a, rows, path, records=()):
    plt = common.pyplot()
    capacity = len({r["width"] for r in records if r["condition"] == "volume-small"}) > 1
    fig, axes = plt.subplots(1, 3 if capacity else 2, figsize=(15 if capacity else 10, 4))
    if capacity:
        plot_volume(axes[2], records)
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

def paired_readings(records):
    """{claim: its cells read by the paired test by seed (common.paired), e.g. 'd16 p = 0.004 (n = 3)'}."""
    out = {}
    for claim, paper, pairs, metric, widths, direction in CLAIMS:
        cells = []
        for label, c, _ in claim_cells(records, pairs, metric, widths, direction):
            by_seed = lambda cond: {r["seed"]: r[metric] for r in records
                                    if r["condition"] == cond and r["width"] == c["width"]}
            xs, ys = by_seed(c["x"]), by_seed(c["y"])
            seeds = sorted(set(xs) & set(ys))
            pc = common.paired([xs[s] for s in seeds], [ys[s] for s in seeds])
            cells.append(f"{label} {common.fmt_p(pc['p'])} ({common.fmt_n(pc)})")
        if cells:
            out[claim] = ", ".join(cells)
    return out


def claim_changes(records):
    """{claim: its cells as 'music vs random d16 -13.6% (p = 0.017, n = 3/3)'} (the front table's column)."""
    out = {}
    for claim, paper, pairs, metric, widths, direction in CLAIMS:
        cells = [f"{c['x']} vs {c['y']} d{c['width']} {change(c)} ({common.fmt_p(c['p'])}, {common.fmt_n(c)})"
                 for _, c, _ in claim_cells(records, pairs, metric, widths, direction)]
        if cells:
            out[claim] = ("first epoch: " if metric == "ppl_first_epoch" else "") + "; ".join(cells)
    return out


def is_contributions(a):
    """True for the contributions preset's report (a report.json of the earlier default has no preset)."""
    return getattr(a, "preset", "subset") != "subset"


def render(a, data, details, out, provenance):
    """Write report.md, report.json, the PNGs and (with details) details.json from the records;
    returns report.md. Nothing here reads the run folders, the clock or the machine."""
    records = data["runs"]
    rows, comps, verdict_list = table(a, records), comparisons(a, records), verdicts(records, data["prose_unigram_ppl"])
    text = markdown(a, data, rows, comps, verdict_list, provenance)
    settings = {k: v for k, v in common.settings_json(a).items() if k not in INVOCATION_FLAGS}
    extra, figures = {}, FIGURES
    if is_contributions(a):
        figures = FIGURES + ([MUSIC_FIGURE] if (out / MUSIC_FIGURE).exists() else [])
        entries = ladder_contributions.contributions(verdict_list, paired_readings(records))
        check_list = ladder_contributions.checks(records, data["prose_unigram_ppl"])
        extra = {"contributions": entries, "checks": check_list,
                 "front_table": ladder_contributions.front_table(entries, claim_changes(records))}
        midi = [m for m in ladder_music.MIDI_FILES if (out / m).exists()]
        section = ladder_contributions.markdown(a, data, entries, check_list, MUSIC_FIGURE in figures and MUSIC_FIGURE,
                                                midi)
        head, tail = text.split(CLAIMS_HEADING, 1)
        text = head + "\n".join(section) + "\n" + CLAIMS_HEADING + tail
    common.write_json(out / "report.json", {
        "source": SOURCE, "regime": regime(a, data, provenance), "figures": figures, "verdicts": verdict_list,
        "provenance": provenance, "prose_unigram_ppl": data["prose_unigram_ppl"], **extra, "settings": settings,
        "facts": data["facts"], "runs": records, "table": rows, "comparisons": comps, "missing": data["missing"]})
    common.write_text(out / "report.md", text)
    if details is not None:
        common.write_json(out / "details.json", {"runs": details})
        plot_curves(a, details, out / "curves.png")
    plot_width(a, rows, out / "width.png", records)
    plot_ablation(a, records, out / "ablation.png")
    return text
