"""The report of experiments/procedural.py (Jiang, Shinnick et al., arXiv 2601.21725): collect (the finished runs'
records), render (the paper's claims read by the one engine, accuracy and loss per cell, the pre-training losses, two
figures) and rebuild (the same from OUT/report.json alone; the table preset's archive: its own records)."""

import argparse
import json
import math
from pathlib import Path

import numpy as np

from evaluate import task_scores
from experiments.lib import common, procedural_authors as pa
from experiments.lib.provenance import hardware, provenance_line
from experiments.lib.claims import RULE, check_lines, fmt_mean_std, md_section, read_all, table
from experiments.lib.significance import MIN_N, mean_std
from experiments.lib.procedural_claims import CLAIMS, records

SOURCE = {"arxiv": "2601.21725", "title": "Procedural Pretraining: Warming Up Language Models with Abstract Data"}
FIGURES = ["curves.png", "accuracy.png"]
PAPER_HAYSTACK = {"none": 10, "dyck": 98}   # the paper's headline, % token-level accuracy
FLOOR_GAP, CEILING = 0.1, 99.0  # nats above its entropy a model that learnt its task ends; % a gain needs room under


def record(a, run):
    """Everything the report keeps of one run (None if it has not finished): a diagnostic run's accuracy curve, final
    exact-answer and token-level accuracy (evaluate.task_scores); a pre-training run's final and unigram val loss."""
    s = common.read_summary(run.folder)
    r = {"name": run.name, **{k: v for k, v in run.meta.items() if k != "init"}, "argv": [str(x) for x in run.argv]}
    if s is None:
        return {**r, "diverged": True} if (Path(run.folder) / "diverged.json").exists() else None
    st = s["stages"][-1]
    r.update(diverged=False, seconds=s["seconds"], val_loss=st["val_loss"], steps=st["iters"], tokens=st["tokens"])
    if run.meta["part"] == "pretrain":
        return dict(r, rows=int(run.argv[run.argv.index("--batch-size") + 1]),
                    unigram_loss=math.log(st["unigram_val_ppl"]) if st.get("unigram_val_ppl") else None,
                    best_val_loss=st["best_val_loss"], entropy=pa.entropy(a, run.meta["condition"], run.meta["task"]),
                    stop_reason=pa.stop_reason(run.argv, st.get("stopped_early"), st["iters"]))
    ev = sorted((e["iter"], e["accuracy"]) for e in common.read_events(run.folder, "eval"))
    sc = task_scores(run.folder, run.meta["task"], a.data_seed, a.task_test)
    r.update(records_seen=st["iters"] * run.meta["batch"], curve=[[it * run.meta["batch"], acc] for it, acc in ev],
             exact=st["accuracy"], token=sc["token"], exact_recomputed=sc["exact"])
    return r


def collect(a, runs):
    """The finished runs' records, from their folders, else --reuse DIR's report.json; a pre-training run reused and
    trained again (its model lost) keeps the first record (its runs' start), the new one as its `retrained`."""
    kept, keys = pa.reused(a, runs), ("val_loss", "best_val_loss", "steps", "stop_reason", "seconds")
    pairs = [(record(a, run), kept.get(run.name)) for run in runs]
    return [dict(old, retrained={k: new[k] for k in keys}) if new and old and new["part"] == "pretrain" and new[
        "val_loss"] != old["val_loss"] else new or old for new, old in pairs if new or old]


def rebuild(out):
    rep = json.loads((out / "report.json").read_text())
    a = argparse.Namespace(**rep["settings"], _regime=None if "records" in rep["settings"] else rep["regime"])
    return render(a, rep["runs"], rep["n_planned"], out, rep.get("provenance"))


def regime(a, provenance, runs=None):
    """report.json's `regime`: our settings and what differs from the authors'."""
    if getattr(a, "_regime", None):  # the table preset's archive: its own words (that preset is no longer run)
        return a._regime
    where = f" {provenance['wall_seconds'] / 60:.0f} min wall on {hardware(provenance['hardware'])}." if provenance else ""
    few = f" With {a.seeds} seed(s) no cell can pass the reading rule (n >= {MIN_N} a side)." if a.seeds < MIN_N else ""
    tasks = ", ".join(f"{t} ({pa.arch(t)}, batch {pa.TASKS[t]['batch']}, {pa.task_steps(a, t):,} steps)" for t in a.tasks)
    pre = "; ".join(f"{r}: {'up to ' if pa.ruled(r, 'haystack') else ''}{s:,} steps x {n} rows of {block + 1} tokens"
                    for r in pa.rows(a)[1:] for s, n, _, block in [pa.pretrain_plan(a, r)])
    seq = (f", the sequence kinds as their algorithmic.py for it (V = {pa.SMALL_SEQ['V']}, L = {pa.SMALL_SEQ['L']})"
           if any(pa.data_options(a, r, "haystack").get("V") for r in pa.rows(a)[1:]) else "")
    return (f"The authors' diagnostics (downstream/algorithmic_tasks/experiment_stream.py and task_*.py): {tasks}; "
            f"{a.records:,} records seen per run (the authors: 10,000,000), a fresh stream that never yields one of "
            f"the {a.task_test:,} test records, AdamW lr 1e-3, 500 warm-up steps, cosine, weight decay 0.001, untied "
            f"head; {a.seeds} seed(s) per cell. Pre-training on the task's architecture, one model per kind shared "
            f"by the seeds: {pre or 'none'}; Dyck (k = 16) as their script for this model (procedural_pretraining/"
            f"dyck.py){seq}, each until a stopping rule on the validation loss "
            f"({pa.DYCK['patience']} evaluations of {pa.DYCK['every']} steps without beating the best by "
            f"{pa.DYCK['delta']} nats); no dropout, lr {a.pretrain_lr or pa.SMALL_LR:g} "
            "(theirs 5e-5, 5e-4 in their yaml); full transfer with mean embedding rows (their 'everything' + "
            "'average'), the task's positions fresh where the pre-trained context is shorter. The claims are read on "
            "their token-level accuracy, our exact-answer accuracy beside it."
            + floors(runs) + where + (" This --quick run is a smoke test of the pipeline: it does not test the claims."
                                      if a.quick else "") + few)


def floors(runs):
    """The regime's check of each pre-trained model: its final validation loss against its data's entropy."""
    pre = [r for r in runs or [] if r["part"] == "pretrain" and r.get("entropy") is not None and not r.get("diverged")]
    gap = lambda r, x: f"{(d := x['val_loss'] - r['entropy']):+.3f}{', within 0.1' if d <= 0.1 else ''}"  # noqa: E731
    parts = [f"{r['condition']} {r['val_loss']:.3f} nats against its entropy {r['entropy']:.3f} ({gap(r, r)}; "
             f"{r['stop_reason']})" + (f", trained again for the runs made after its model was lost: {x['val_loss']:.3f} "
                                       f"({gap(r, x)}; {x['stop_reason']})" if (x := r.get("retrained")) else "")
             for r in pre]
    return f" Pre-trained models at the end: {'; '.join(parts)}." if parts else ""


def checks(runs, recs):
    """report.json's `checks`, and failed(claim, treat, task) for claims.read_all: the check a cell's treated arm
    failed: its pre-trained model short of its floor (over FLOOR_GAP above its data's entropy), or a task whose
    baseline leaves no room for a gain (token accuracy >= CEILING)."""
    gaps = [(r.get("condition", r.get("row")), x["val_loss"] - r["entropy"]) for r in runs if r["part"] == "pretrain"
            and r.get("entropy") is not None and not r.get("diverged") for x in (r, r.get("retrained") or r)]
    pre = {k: max(g for c, g in gaps if c == k) for k, _ in gaps}
    none = lambda t, m: [r[m] for r in recs if (r["task"], r["condition"]) == (t, "none") and m in r]  # noqa: E731
    base = {t: mean_std(none(t, "token"))[0] for t in dict.fromkeys(r["task"] for r in recs) if none(t, "token")}
    far, full = {k: g for k, g in pre.items() if g > FLOOR_GAP}, {t: m for t, m in base.items() if m >= CEILING}
    out = [dict(check=f"every pre-trained model ends within {FLOOR_GAP} nats of its data's entropy (it learnt its task)",
                holds=not far if pre else None, detail=", ".join(f"{k} {g:+.3f}" for k, g in pre.items())),
           dict(check=f"every task's baseline leaves room for a gain (token-level accuracy under {CEILING:g}%)",
                holds=not full if base else None, detail=", ".join(f"{t} {m:.1f}%" for t, m in base.items()))]

    def failed(claim, treat, task):
        cond = treat.get("condition", "")
        kinds = [k for k in pa.merge_kinds(cond) or [cond.split(" (")[0]] if k in far]
        room = [f"{task}'s baseline at {full[task]:.1f}% token-level, no room for a gain"] if task in full else []
        return "; ".join([f"{k} pre-trained {far[k]:+.3f} nats above its entropy" for k in kinds] + room)
    return out, failed


def cell_lines(recs):
    """Accuracy and loss per (task, condition), mean ± std over seeds."""
    first = list(dict.fromkeys(r["task"] for r in sorted(recs, key=lambda r: "token" not in r)))
    groups = common.group(sorted(recs, key=lambda r: first.index(r["task"])), lambda r: (r["task"], r["condition"]))
    col = lambda rs, k, f="{:.1f}": fmt_mean_std([r.get(k) for r in rs], f)  # noqa: E731
    head = ["task", "condition", "n", "token-level accuracy (%)", "exact-answer accuracy (%)", "final loss (nats)"]
    return md_section("Accuracy and loss per cell", "On the test records after the whole budget, mean ± std over seeds "
                      "(the semantic rows: validation loss).", head, [
                          [t, c, len(rs), col(rs, "token"), col(rs, "exact"), col(rs, "loss", "{:.3f}")]
                          for (t, c), rs in groups.items()])


def pretrain_lines(runs):
    groups = common.group((r for r in runs if r["part"] == "pretrain" and not r.get("diverged")),
                          lambda r: (r.get("condition", r.get("row")), r["steps"], r["tokens"]))
    rows = []
    for (cond, steps, tokens), rs in groups.items():
        ent = rs[0].get("entropy")
        gap = fmt_mean_std([r["val_loss"] - ent for r in rs], "{:+.3f}") if ent is not None else "-"
        rows.append([cond, f"{steps:,}", f"{tokens:,}", fmt_mean_std([r["val_loss"] for r in rs]),
                     f"{ent:.3f}" if ent is not None else "not derived" if "entropy" in rs[0] else "-", gap,
                     fmt_mean_std([r.get("unigram_loss") for r in rs], "{:.2f}"),
                     "; ".join(dict.fromkeys(r.get("stop_reason", "its steps") for r in rs))])
    head = ["condition", "steps", "tokens seen", "val loss", "entropy", "val loss - entropy", "unigram loss",
            "stopped by"]
    return md_section("Pre-training", "Final validation loss (nats per loss token), the data's entropy per loss token "
                      "(the lowest loss a model can reach: exact; the SET / UNION controls' from 10,000 sampled rows, "
                      "standard error <= 0.003) and the unigram loss (the token counts alone): where a pre-training "
                      "ended between them is how much it learnt.", head, rows) if groups else []


def render(a, runs, n_planned, out, provenance):
    """report.md (returned), report.json and the figures from the run records alone."""
    recs, authors, reg = records({"runs": runs}), getattr(a, "records", None) is not None, regime(a, provenance, runs)
    check_list, failed = checks(runs, recs)
    entries = read_all(CLAIMS, recs, failed=failed)
    lines = [f"# Procedural pre-training: {'the diagnostics as the authors run them' if authors else 'the table preset'}"
             f"{' (--quick)' if a.quick else ''}", "", provenance_line(provenance), "",
             f"Jiang, Shinnick et al., \"{SOURCE['title']}\", arXiv {SOURCE['arxiv']}. {len(runs)} of {n_planned} "
             f"runs finished; {sum(r.get('seconds') or 0 for r in runs) / 60:.1f} min of training summed over runs.",
             "", f"**Regime.** {reg}", "", "## The paper's claims beside ours", "", RULE, "", *table(entries), "",
             "## Checks", "", *check_lines(check_list), "", *cell_lines(recs), *pretrain_lines(runs)]
    if authors:
        lines += ["## What differs from the authors, and why", ""] + [
            f"- {d} Crossed (procedural-reference): {pa.CROSSED[c]}." for d, c in pa.DIFFERENCES] + [""]
    text = "\n".join(lines + ["Figures: `curves.png` (accuracy or loss along each run), `accuracy.png` (the final "
                              "accuracies). Every run's numbers and flags: `report.json`.", ""])
    plot_all(recs, out)
    return common.write_report(out, text, source=SOURCE, regime=reg, figures=FIGURES, verdicts=entries,
                               provenance=provenance, settings=common.settings_json(a), n_planned=n_planned,
                               checks=check_list, runs=runs)


def plot_all(recs, out):
    """curves.png: each task's (or domain's) mean curve per condition; accuracy.png: the final accuracies."""
    plt = common.pyplot()
    by = {t: common.group(rs, lambda r: r["condition"]) for t, rs in common.group(recs, lambda r: r["task"]).items()}
    panels = [t for t, cs in by.items() if any(r["curve"] for rs in cs.values() for r in rs)] or ["haystack"]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, task in zip(axes[0], panels):
        acc = any("token" in r for rs in by.get(task, {}).values() for r in rs)
        for i, (cond, rs) in enumerate(by.get(task, {}).items()):
            cs = [np.array(r["curve"], dtype=float) * ([1e-6, 100] if acc else 1) for r in rs if r["curve"]]
            for c in cs:
                ax.plot(c[:, 0], c[:, 1], color=f"C{i % 10}", lw=0.6, alpha=0.5)
            if cs and all(len(c) == len(cs[0]) for c in cs):
                ax.plot(cs[0][:, 0], np.mean([c[:, 1] for c in cs], axis=0), color=f"C{i % 10}", marker="o", ms=3,
                        label=cond)
        for k, v in PAPER_HAYSTACK.items() if task == "haystack" else ():
            ax.axhline(v, color="grey", ls=":", lw=0.8)
            ax.text(0.01, v, f"paper, {k}", fontsize=7, color="grey", va="top" if v > 50 else "bottom",
                    transform=ax.get_yaxis_transform())
        ax.set(title=task, xlabel="records seen (millions)" if acc else "share of the semantic budget",
               ylabel="exact-answer accuracy (%)" if acc else "validation loss (nats)")
    common.finish(fig, axes[0], out / "curves.png")
    tasks = [t for t, cs in by.items() if any("token" in r for rs in cs.values() for r in rs)] or ["haystack"]
    tall = max(len(by.get(t, {})) for t in tasks)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 1.2 + 0.35 * tall), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        conds = by.get(task, {})
        y = np.arange(len(conds))
        for j, key in enumerate(("token", "exact")):
            ms = [mean_std([r.get(key) for r in rs]) for rs in conds.values()]
            ax.barh(y + (0.5 - j) * 0.38, [m for m, _, _ in ms], 0.38, xerr=[s for _, s, _ in ms], capsize=2,
                    label=f"{key}-level" if key == "token" else "exact answer")
        ax.set_yticks(y, list(conds), fontsize=7)
        ax.invert_yaxis()
        ax.set(title=f"{task}: accuracy after the budget (%)", xlim=(0, 100))
    common.finish(fig, axes[0], out / "accuracy.png", axis="x")
