"""
The report of experiments/procedural.py's authors preset: the diagnostics as the authors run them.
Jiang, Shinnick et al., "Procedural Pretraining: Warming Up Language Models with Abstract Data",
arXiv 2601.21725; the claims are procedural_verdicts.PAPER.

    records = collect(a, runs)                       # finished runs -> one record each
    render(a, records, n_planned, out, provenance)   # records -> report.md, report.json, PNGs
    rebuild(out)                                     # report.json alone -> the same files

A diagnostic run's record keeps its condition (none, a kind, a kind's shuffled control, a merge),
transfer, task, seed, records seen, its accuracy curve ([records seen, exact-answer accuracy] at
every evaluation, from metrics.jsonl), and its final exact-answer accuracy (ours) and token-level
accuracy (the authors' compute_metrics: the positions whose input is an answer token, pooled),
both on the 4,000 test records; the second is computed from the final checkpoint (cached in the
run's scores.json). On HAYSTACK the two are the same number: one answer token. The records needed
to reach 50% and 90% are read off each curve (linear between evaluations). Every difference goes
through the reading rule (common.compare: Welch p < 0.05 with at least 3 runs a side); each claim
is read on the authors' metric, the one their 10% -> 98% is.
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np

from experiments.lib import common
from experiments.lib import procedural_authors as pa
from experiments.lib import procedural_verdicts as pv
from experiments.lib.common import fmt_mean_std, mean_std
from experiments.lib.procedural_report import compare, pct, says

FIGURES = ["curves.png", "accuracy.png"]
INVOCATION_FLAGS = ("out", "jobs", "threads", "report_only")
THRESHOLDS = ("50", "90")
PAPER_HAYSTACK = {"none": 0.10, "dyck": 0.98}   # the paper's headline, their token-level accuracy


# ---------------------------------------------------------------------------------------------
# collect: the finished runs -> records

def scores(a, folder, task):
    """{exact, token}: exact-answer and the authors' token-level accuracy on the test set, from
    the run's final checkpoint; cached in folder/scores.json (redone if the checkpoint changed)."""
    from contextlib import nullcontext
    import torch
    import data
    from batches import task_predictions
    from checkpoint import stage_file
    from data.tasks import answer_accuracy, answer_span, their_loss_mask, token_accuracy
    from experiments.lib.evaluate import stage_model
    path, cache = stage_file(folder, 0, f"stream:{task}"), Path(folder) / "scores.json"
    if cache.exists():
        out = json.loads(cache.read_text())
        if out.get("checkpoint_mtime") == path.stat().st_mtime:
            return out
    model, _ = stage_model(folder, 0, f"stream:{task}")
    corpus = data.load(f"stream:{task}", seed=a.data_seed, task_test=a.task_test)
    rows, pred = task_predictions(model, corpus, 1000, torch.device("cpu"), nullcontext())
    out = {"exact": answer_accuracy(pred, rows[:, 1:], answer_span(task, rows)),
           "token": token_accuracy(pred, rows[:, 1:], their_loss_mask(task, rows)[:, 1:]),
           "test_records": len(rows), "checkpoint_mtime": path.stat().st_mtime}
    common.write_json(cache, out)
    return out


def record(a, run):
    """Everything the report uses about one run (None if it has not finished)."""
    s = common.read_summary(run.folder)
    r = {"name": run.name, **{k: v for k, v in run.meta.items() if k != "init"}, "argv": [str(x) for x in run.argv]}
    if s is None:
        return {**r, "diverged": True} if (Path(run.folder) / "diverged.json").exists() else None
    st = s["stages"][-1]
    r.update(diverged=False, seconds=s["seconds"], val_loss=st["val_loss"], steps=st["iters"], tokens=st["tokens"])
    if run.meta["part"] == "pretrain":
        r["rows"] = int(run.argv[run.argv.index("--batch-size") + 1])
        r["unigram_loss"] = math.log(st["unigram_val_ppl"]) if st.get("unigram_val_ppl") else None
        return r
    ev = sorted((e["iter"], e["accuracy"]) for e in common.read_events(run.folder, "eval"))
    sc = scores(a, run.folder, run.meta["task"])
    r.update(records_seen=st["iters"] * run.meta["batch"], curve=[[it * run.meta["batch"], acc] for it, acc in ev],
             exact=st["accuracy"], token=sc["token"], exact_recomputed=sc["exact"])
    return r


def collect(a, runs):
    return [r for r in (record(a, run) for run in runs) if r is not None]


def rebuild(out):
    """report.md, report.json and the PNGs again from OUT/report.json alone."""
    rep = json.loads((out / "report.json").read_text())
    return render(argparse.Namespace(**rep["settings"]), rep["runs"], rep["n_planned"], out, rep.get("provenance"))


# ---------------------------------------------------------------------------------------------
# the analysis (records -> cells and comparisons)

def records_to(curve, target):
    """The records seen at which an accuracy curve [[records, acc], ...] first reaches target:
    linear between the evaluation before and the first at or above it. (records, qualifier):
    '=' interpolated, '<=' already at the first evaluation, '>' never (records = the last point's)."""
    prev = None
    for x, y in curve:
        if y >= target:
            if prev is None:
                return x, "<="
            x0, y0 = prev
            return x0 + (x - x0) * (target - y0) / (y - y0), "="
        prev = (x, y)
    return (curve[-1][0] if curve else None), ">"


def label(condition, transfer):
    return condition if transfer in ("none", "full") else f"{condition} ({transfer})"


def make_cell(runs):
    """The runs of one (task, condition, transfer) over seeds."""
    runs = sorted(runs, key=lambda r: r["seed"])
    return {"condition": runs[0]["condition"], "transfer": runs[0]["transfer"], "seeds": [r["seed"] for r in runs],
            "exact": [r["exact"] for r in runs], "token": [r["token"] for r in runs],
            "loss": [r["val_loss"] for r in runs], "records_seen": [r["records_seen"] for r in runs],
            "to": {t: [list(records_to(r["curve"], int(t) / 100)) for r in runs] for t in THRESHOLDS},
            "curves": {str(r["seed"]): r["curve"] for r in runs}}


def table(a, recs):
    """{task: {label: cell}} in the plan's order (pa.cells), finished runs only."""
    done = [r for r in recs if r["part"] == "task" and not r.get("diverged")]
    out = {}
    for task, cond, mode in pa.cells(a):
        runs = [r for r in done if (r["task"], r["condition"], r["transfer"]) == (task, cond, mode)]
        if runs:
            out.setdefault(task, {})[label(cond, mode)] = make_cell(runs)
    return out


def to_compare(treat, base):
    """Records to a threshold, lower is better, only where every run of both sides got there."""
    if not treat or not base or any(q == ">" for _, q in treat + base):
        return None
    return compare([x for x, _ in treat], [x for x, _ in base], higher_is_better=False)


def versus(t, b):
    return {"exact": compare(t["exact"], b["exact"]), "token": compare(t["token"], b["token"]),
            **{f"to{k}": to_compare(t["to"][k], b["to"][k]) for k in THRESHOLDS}}


def comparisons(a, tab):
    """Per task: every cell against no pre-training, each kind against its shuffled control,
    attention-only against MLP-only transfer per --split-kinds row."""
    out = {}
    for task, cells in tab.items():
        c = {"vs_none": {}, "vs_shuffled": {}, "attn_vs_mlp": {}}
        if "none" in cells:
            c["vs_none"] = {k: versus(v, cells["none"]) for k, v in cells.items() if k != "none"}
        for kind in a.controls:
            if kind in cells and kind + pa.SHUFFLED in cells:
                c["vs_shuffled"][kind] = versus(cells[kind], cells[kind + pa.SHUFFLED])
        for row in a.split_kinds:
            if f"{row} (attn)" in cells and f"{row} (mlp)" in cells:
                c["attn_vs_mlp"][row] = versus(cells[f"{row} (attn)"], cells[f"{row} (mlp)"])
        out[task] = c
    return out


def pretrain_table(recs):
    """{condition-arch: {steps, rows, tokens, val_loss: [...], unigram_loss: [...]}} over seeds."""
    out = {}
    for r in sorted((r for r in recs if r["part"] == "pretrain" and not r.get("diverged")), key=lambda r: r["seed"]):
        e = out.setdefault(f"{r['condition']}-{r['arch']}", {"condition": r["condition"], "arch": r["arch"],
                                                             "steps": r["steps"], "rows": r["rows"], "tokens": r["tokens"],
                                                             "val_loss": [], "unigram_loss": []})
        e["val_loss"].append(r["val_loss"])
        if r.get("unigram_loss") is not None:
            e["unigram_loss"].append(r["unigram_loss"])
    return out


def analyse(a, recs):
    tab = table(a, recs)
    return {"runs": recs, "cells": tab, "comparisons": comparisons(a, tab), "pretrain": pretrain_table(recs),
            "seconds": sum(r.get("seconds") or 0 for r in recs), "n_runs": len(recs)}


# ---------------------------------------------------------------------------------------------
# verdicts: each claim on the authors' metric

def cell_claim(res, claim, paper, pairs):
    """A claim over (task, treat label, the comparison) cells, each read on the token metric."""
    cells, parts = [], []
    for task, treat, base, c in pairs:
        cells.append((f"{treat} on {task}", c["token"], common.verdict_of(c["token"])))
        t, b = res["cells"][task][treat], res["cells"][task][base]
        parts.append(f"{treat} {pct(t['token'])}% vs {base} {pct(b['token'])}% on {task} (the authors' token-level "
                     f"accuracy; exact answers {pct(t['exact'])}% vs {pct(b['exact'])}%)")
    return pv.entry(claim, paper, cells, "; ".join(parts), pv.welch_test(cells))


def verdicts(a, res):
    """report.json's `verdicts`: the paper's diagnostic claims (not measured where not run)."""
    cmp = res["comparisons"]
    vs_none = lambda kinds, tasks: [(t, k, "none", cmp[t]["vs_none"][k]) for t in tasks if t in cmp
                                    for k in kinds if k in cmp[t]["vs_none"]]
    shuffled = [(t, k, k + pa.SHUFFLED, c) for t in cmp for k, c in cmp[t]["vs_shuffled"].items()]
    layers = [(t, f"{k} (attn)", f"{k} (mlp)", c) for t in cmp for k, c in cmp[t]["attn_vs_mlp"].items()]
    merges = [(t, k, "none", c) for t in cmp for k, c in cmp[t]["vs_none"].items() if k.startswith("attn-")]
    out = [cell_claim(res, "Dyck pre-training lifts HAYSTACK", "10% -> 98% accuracy", vs_none(["dyck"], ["haystack"])),
           cell_claim(res, "shuffled procedural data loses the benefit", "falls back to the no-pre-training baseline",
                      shuffled),
           cell_claim(res, "Rule 110 pre-training helps reversed addition", "helps",
                      vs_none(["eca110"], ["reversed_addition"])),
           cell_claim(res, "SET / UNION pre-training help sorting", "help", vs_none(["set", "union"], ["sorting"])),
           cell_claim(res, "attention layers carry the algorithmic benefit", "attention-only transfer keeps it",
                      layers),
           cell_claim(res, "merging attention from one kind with MLP from another combines their benefits",
                      "combines the benefits", merges)]
    return out


def regime(a, provenance):
    """report.json's `regime`: our settings, and what differs from the authors'."""
    where = ""
    if provenance:
        h = provenance["hardware"]
        where = f" {provenance['wall_seconds'] / 60:.0f} min wall on {common.hardware(h) if isinstance(h, dict) else h}."
    tasks = ", ".join(f"{t} ({pa.arch(t)}, batch {pa.TASKS[t]['batch']}, {pa.task_steps(a, t):,} steps)" for t in a.tasks)
    pre = "; ".join(f"{r}: {s:,} steps x {n} rows of {block + 1} tokens" for r in pa.rows(a)[1:]
                    for s, n, _, block in [pa.pretrain_plan(a, r)])
    dyck = any(r.startswith("dyck") for r in pa.rows(a))
    return (f"The authors' diagnostics (downstream/algorithmic_tasks/experiment_stream.py and task_*.py): {tasks}; "
            f"{a.records:,} records seen per run (the authors: 10,000,000), a fresh stream of records that never "
            f"yields one of the {a.task_test:,} test records, AdamW lr 1e-3, 500 warm-up steps, cosine, weight decay "
            f"0.001, untied head; {a.seeds} seed(s) per cell. Pre-training on the task's architecture (the authors' "
            f"yaml files are written for 12_12_768): {pre or 'none'}; "
            + (f"Dyck rows of {a.dyck_length} tokens (theirs 2,048), " if dyck else "")
            + f"no dropout (theirs 0.1), lr {a.pretrain_lr or pa.SMALL_LR:g} (theirs 5e-4); full transfer with "
            "mean embedding rows (their 'everything' + 'average': every weight but the embeddings and the head, "
            "each embedding and head row the mean of the pre-trained embedding rows). Our exact-answer accuracy is reported beside their token-level one; the claims are read "
            "on theirs." + where
            + (" This --quick run is a smoke test of the pipeline: it does not test the claims." if a.quick else "")
            + (f" With {a.seeds} seed(s) no cell can pass the reading rule (n >= 3 a side)."
               if a.seeds < common.MIN_N else ""))


# ---------------------------------------------------------------------------------------------
# the report

def fmt_records(x, q):
    if x is None:
        return "-"
    return {"<=": "<=", ">": ">", "=": ""}[q] + (f"{x / 1e6:.2f}M" if x >= 1e5 else f"{x:,.0f}")


def fmt_to(pairs):
    return ", ".join(fmt_records(x, q) for x, q in pairs)


def fmt_vs(c, key, scale=100):
    x, records = c.get(key), key in ("to50", "to90")
    if x is None:
        return "not tested (a run did not get there)" if records else "-"
    if records:
        return f"{(x['diff']) / 1e6:+.2f}M records ({common.reading(x, 'fewer', 'more')})"
    return f"{scale * x['diff']:+.1f} pts ({says(x)})"


def task_lines(a, res, task):
    cells, cmp = res["cells"][task], res["comparisons"][task]
    from data.tasks import AUTHORS
    lines = [f"### {task} ({AUTHORS[task]['task_id']}; model {pa.arch(task)}, batch {pa.TASKS[task]['batch']})", "",
             "| condition | seeds | exact-answer accuracy (%) | the authors' token-level accuracy (%) | their loss "
             "(nats) | records to 50%, per seed | records to 90%, per seed |", "|---|---|---|---|---|---|---|"]
    for lab, c in cells.items():
        lines.append(f"| {lab} | {len(c['seeds'])} | {pct(c['exact'])} | {pct(c['token'])} | "
                     f"{fmt_mean_std(c['loss'])} | {fmt_to(c['to']['50'])} | {fmt_to(c['to']['90'])} |")
    lines.append("")
    for title, group in (("against no pre-training", cmp["vs_none"]), ("against the shuffled control", cmp["vs_shuffled"]),
                         ("attention-only against MLP-only", cmp["attn_vs_mlp"])):
        for k, c in group.items():
            lines.append(f"- {k} {title}: token-level {fmt_vs(c, 'token')}; exact {fmt_vs(c, 'exact')}; records to 50% "
                         f"{fmt_vs(c, 'to50')}; to 90% {fmt_vs(c, 'to90')}.")
    return lines + [""]


def pretrain_lines(res):
    if not res["pretrain"]:
        return []
    lines = ["## Pre-training", "", "| condition | model | steps x rows | tokens seen | val loss (nats per loss token) | "
             "unigram loss |", "|---|---|---|---|---|---|"]
    for e in res["pretrain"].values():
        uni = fmt_mean_std(e["unigram_loss"], "{:.2f}") if e["unigram_loss"] else "-"
        lines.append(f"| {e['condition']} | {e['arch']} | {e['steps']:,} x {e['rows']} | {e['tokens']:,} | "
                     f"{fmt_mean_std(e['val_loss'], '{:.3f}')} | {uni} |")
    return lines + ["", "The unigram loss is that of the token counts alone on the same targets: how far below it a "
                    "pre-training got is what it learnt beyond them.", ""]


def markdown(a, res, verdict_list, provenance):
    from experiments.lib.procedural_report import verdict_table
    lines = [f"# Procedural pre-training: the diagnostics as the authors run them{' (--quick)' if a.quick else ''}", "",
             common.provenance_line(provenance), "",
             f"Jiang, Shinnick et al., \"{pv.SOURCE['title']}\", arXiv {pv.SOURCE['arxiv']}. The paper: "
             + "; ".join(pv.PAPER[k] for k in ("haystack", "reversed_addition", "sorting", "shuffled")) + ".", "",
             f"{res['n_runs']} of {res['n_planned']} runs finished; {res['seconds'] / 60:.1f} min of training summed "
             "over runs.", "", f"**Regime.** {regime(a, provenance)}", "",
             "## The paper's claims beside ours", "",
             "A difference is clear only when Welch's p < 0.05 with at least 3 runs on each side. Each claim is read "
             "on the authors' token-level accuracy (the metric of their 10% -> 98%).", ""]
    lines += verdict_table(verdict_list) + ["", "## The diagnostics", "",
                                            "Accuracy on the test records after the whole budget, mean ± std over "
                                            "seeds; the records seen until the exact-answer accuracy curve first "
                                            "reaches 50% and 90% (interpolated between evaluations every "
                                            f"{a.eval_records:,} records; '>' never within the budget).", ""]
    for task in res["cells"]:
        lines += task_lines(a, res, task)
    lines += pretrain_lines(res)
    lines += ["## What differs from the authors, and why", ""] + [f"- {d}" for d in pa.DIFFERENCES] + ["",
              "Figures: `curves.png` (accuracy against records seen), `accuracy.png` (the final accuracies). Every "
              "run's numbers and flags: `report.json`.", ""]
    return "\n".join(lines)


def render(a, recs, n_planned, out, provenance):
    """Write report.md, report.json and the PNGs from the records; returns report.md. Nothing here
    reads the run folders, the clock or the machine."""
    res = analyse(a, recs)
    res["n_planned"] = n_planned
    verdict_list = verdicts(a, res)
    text = markdown(a, res, verdict_list, provenance)
    settings = {k: v for k, v in common.settings_json(a).items() if k not in INVOCATION_FLAGS}
    common.write_report(out, text, source=pv.SOURCE, regime=regime(a, provenance), figures=FIGURES,
                        verdicts=verdict_list, provenance=provenance, paper=pv.PAPER, settings=settings, **res)
    plot_all(res, out)
    return text


# ---------------------------------------------------------------------------------------------
# figures

def plot_all(res, out):
    plt = common.pyplot()
    tasks = list(res["cells"]) or ["haystack"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, (lab, c) in enumerate(res["cells"].get(task, {}).items()):
            color = f"C{i}"
            curves = [np.array(v) for v in c["curves"].values() if v]
            for cv in curves:
                ax.plot(cv[:, 0] / 1e6, 100 * cv[:, 1], color=color, lw=0.6, alpha=0.5)
            if curves and all(len(cv) == len(curves[0]) for cv in curves):
                ax.plot(curves[0][:, 0] / 1e6, 100 * np.mean([cv[:, 1] for cv in curves], axis=0), color=color,
                        marker="o", ms=3, label=lab)
        if task == "haystack":
            for k, v in PAPER_HAYSTACK.items():
                ax.axhline(100 * v, color="grey", ls=":", lw=0.8)
                top = v > 0.9  # a line near the top: its label goes under it, inside the axes
                ax.text(0.01, 100 * v + (-1 if top else 1), f"paper, {k}", fontsize=7, color="grey",
                        va="top" if top else "bottom", transform=ax.get_yaxis_transform())
        ax.set_title(f"{task}: exact-answer accuracy", fontsize=9)
        ax.set_xlabel("records seen (millions)")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, out / "curves.png")
    fig, axes = plt.subplots(1, len(tasks), figsize=(1.5 + 1.3 * max(len(res["cells"].get(t, {})) for t in tasks)
                                                     * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        cells = res["cells"].get(task, {})
        x = np.arange(len(cells))
        for j, (key, name) in enumerate((("exact", "exact answer"), ("token", "the authors' token-level"))):
            m = [100 * mean_std(c[key])[0] for c in cells.values()]
            s = [100 * mean_std(c[key])[1] for c in cells.values()]
            ax.bar(x + (j - 0.5) * 0.38, m, 0.38, yerr=s, capsize=2, label=name)
        ax.set_xticks(x, list(cells), fontsize=7, rotation=20)
        ax.set_title(f"{task}: accuracy after the budget", fontsize=9)
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, out / "accuracy.png")
