"""
The analysis, report and figures of experiments/procedural.py (procedural pre-training).
Jiang, Shinnick et al., "Procedural Pretraining: Warming Up Language Models with Abstract Data",
arXiv 2601.21725; the paper's claims are quoted in PAPER below.

    records = collect(a, runs)                       # finished runs -> one record each
    render(a, records, n_planned, out, provenance)   # records -> report.md, report.json, PNGs
    rebuild(out)                                     # report.json alone -> the same files

collect reads each run's summary.json, metrics.jsonl and, for the diagnostic tasks, its final
checkpoint (each answer token's teacher-forced accuracy, cached in the run's answer_metrics.json).
Everything else (the tables, comparisons, verdicts and every figure) follows from the records,
which report.json keeps as `runs`: `--report-only` on a folder without run folders (a copy of
experiments/results/procedural-table) rebuilds the same report from them. A sentence calls a difference
an effect only through the reading rule: common.compare (Welch p < 0.05 with at least 3 runs per
side: with 2 seeds no single cell passes it, whatever its p) or, pooled over many cells, the
paired t-test of procedural_verdicts.paired (p < 0.05 with at least 3 pairs).
"""

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

from experiments.lib import common
from experiments.lib.common import fmt_mean_std, mean_std
from experiments.lib import procedural_verdicts as pv

SHUFFLED = "-shuffled"
PAPER = pv.PAPER
PAPER_SUBST = pv.PAPER_SUBST
CLAIM_CELLS = [("dyck", "haystack"), ("eca110", "reversed_addition"), ("set", "sorting"), ("union", "sorting")]
INVOCATION_FLAGS = ("out", "jobs", "threads", "report_only")  # how a report was made, not what it measured
FIGURES = ["diagnostic_accuracy.png", "semantic_curves.png", "additive.png"]


# ---------------------------------------------------------------------------------------------
# collect: the finished runs -> records

def answer_metrics(a, folder, task):
    """Exact-answer and per-token accuracy (teacher forcing) on the whole test split, from the
    run's final checkpoint; cached in folder/answer_metrics.json."""
    import torch
    import data
    from checkpoint import stage_file
    from data.tasks import answer_accuracy
    from experiments.lib.evaluate import stage_model
    path = stage_file(folder, 0, f"task:{task}")
    cache = Path(folder) / "answer_metrics.json"
    if cache.exists():
        out = json.loads(cache.read_text())
        if out.get("checkpoint_mtime") == path.stat().st_mtime:  # not a run trained again since
            return out
    model, _ = stage_model(folder, 0, f"task:{task}")
    corpus = data.load(f"task:{task}", seed=a.data_seed, task_test=a.task_test, task_train=a.task_train)
    S = corpus.info["seq_len"]
    recs = np.asarray(corpus.val).reshape(-1, S).astype(np.int64)
    mask = np.asarray(corpus.val_mask).reshape(-1, S)[:, 1:].astype(bool)
    with torch.no_grad():
        pred = np.concatenate([model(torch.from_numpy(recs[i:i + 500, :-1]))[0][..., :corpus.vocab_size]
                               .argmax(-1).numpy() for i in range(0, len(recs), 500)])
    right = pred == recs[:, 1:]
    out = {"token_accuracy": float(right[mask].mean()), "exact_accuracy": answer_accuracy(pred, recs[:, 1:], mask),
           "test_records": len(recs), "checkpoint_mtime": path.stat().st_mtime}
    common.write_json(cache, out)
    return out


def record(a, run):
    """Everything the report uses about one run (None if it has not finished)."""
    s = common.read_summary(run.folder)
    r = {"name": run.name, **{k: (str(v) if isinstance(v, Path) else v) for k, v in run.meta.items()},
         "argv": [str(x) for x in run.argv]}
    if s is None:
        if (Path(run.folder) / "diverged.json").exists():
            return {**r, "diverged": True}
        return None
    st = s["stages"][-1]
    r.update(diverged=False, seconds=s["seconds"], val_loss=st["val_loss"], train_loss=st["train_loss"],
             tokens=st["tokens"], iters=st["iters"])
    if "accuracy" in st:
        r["accuracy"] = st["accuracy"]
    if run.meta["part"] == "pretrain" and st.get("unigram_val_ppl"):
        r["unigram_loss"] = math.log(st["unigram_val_ppl"])  # the loss of token counts alone, on the same tokens
    if run.meta["part"] == "task":
        m = answer_metrics(a, run.folder, run.meta["task"])
        r.update(token_accuracy=m["token_accuracy"], exact_recomputed=m["exact_accuracy"])
    if run.meta["part"] == "semantic":
        ev = sorted((e["iter"], e["val_loss"]) for e in common.read_events(run.folder, "eval"))
        r["curve"] = [[it / st["iters"], v] for it, v in ev]
    return r


def collect(a, runs):
    """The records of every finished (or diverged) run of the plan, each semantic warm-up with the
    procedural tokens its pre-training run saw."""
    recs = [r for r in (record(a, run) for run in runs) if r is not None]
    pre = {(r["row"], r["steps"], r["seed"]): r for r in recs if r["part"] == "pretrain"}
    for r in recs:
        if r["part"] == "semantic" and r["kind"] != "none":
            p = pre.get((r["kind"], r["steps"], r["seed"]))
            r["procedural_tokens"] = p["tokens"] if p and not p.get("diverged") else None
    return recs


def stored_only(out):
    """True when OUT holds a report.json but no run folders (a committed copy of a report)."""
    return (out / "report.json").exists() and not (out / "runs").exists()




def rebuild(out):
    """report.md, report.json and the PNGs again from OUT/report.json alone: the flags, records and
    provenance it keeps."""
    rep = json.loads((out / "report.json").read_text())
    return render(argparse.Namespace(**rep["settings"]), rep["runs"], rep["n_planned"], out, rep.get("provenance"))


# ---------------------------------------------------------------------------------------------
# statistics

def values(recs, key, **where):
    return [r[key] for r in recs if not r.get("diverged") and r.get(key) is not None
            and all(r.get(k) == v for k, v in where.items())]


def by_seed(recs, key, **where):
    """{seed: value} of the runs that match (the pairs of a paired test share a seed)."""
    return {r["seed"]: r[key] for r in recs if not r.get("diverged") and r.get(key) is not None
            and all(r.get(k) == v for k, v in where.items())}


def compare(treat, base, higher_is_better=True):
    """treat against base (values over seeds) by the reading rule (common.compare), with both
    means; None when a side has no runs."""
    if not treat or not base:
        return None
    return {"treat": mean_std(treat)[0], "base": mean_std(base)[0], **common.compare(treat, base, higher_is_better)}


def crossing(curve, target):
    """The share of the budget at which a loss curve [[share, loss], ...] first reaches target:
    linear interpolation between the evaluation before and the first at or below it. Returns
    (share, qualifier): '=' interpolated, '<=' already at the first evaluation, '>' never (share None)."""
    prev = None
    for f, v in curve:
        if v <= target:
            if prev is None:
                return f, "<="
            (f0, v0) = prev
            return f0 + (f - f0) * (v0 - target) / (v0 - v), "="
        prev = (f, v)
    return None, ">"


# ---------------------------------------------------------------------------------------------
# the analysis (records -> tables and comparisons)

def task_where(row, mode, task):
    return dict(part="task", row=row, transfer="none" if row == "none" else mode, task=task)


def diagnostic_table(a, tasks_recs, rows):
    """{transfer: {row: {task: {exact: [...], token: [...], loss: [...]}}}}; row 'none' is the same
    baselines under every transfer mode."""
    tab = {}
    for mode in a.transfers:
        tab[mode] = {}
        for row in rows:
            if row != "none" and mode != "full" and row not in a.split_kinds and "+" not in row:
                continue
            if "+" in row and mode != "full":
                continue
            w = lambda t: task_where(row, mode, t)
            tab[mode][row] = {t: {"exact": values(tasks_recs, "accuracy", **w(t)),
                                  "token": values(tasks_recs, "token_accuracy", **w(t)),
                                  "loss": values(tasks_recs, "val_loss", **w(t))}
                              for t in a.tasks}
    return tab


def metric_of(cell_a, cell_b):
    """Exact accuracy, unless both sides are below 1%: then per-token accuracy (said in the report)."""
    mx = max([mean_std(cell_a["exact"])[0], mean_std(cell_b["exact"])[0]], key=lambda v: -1 if math.isnan(v) else v)
    return "exact" if mx >= 0.01 else "token"


METRIC_KEY = {"exact": "accuracy", "token": "token_accuracy", "loss": "val_loss"}


def claims(a, tab):
    """The paper's diagnostic claims checked cell by cell (full transfer unless said)."""
    out = []
    full = tab.get("full", {})
    for kind, task in CLAIM_CELLS:
        if kind not in full or "none" not in full or task not in a.tasks:
            continue
        t, b = full[kind][task], full["none"][task]
        key = metric_of(t, b)
        c = {"claim": task, "kind": kind, "task": task, "metric": key, "vs_none": compare(t[key], b[key]),
             "loss_vs_none": compare(t["loss"], b["loss"], higher_is_better=False)}
        sh = kind + SHUFFLED
        if sh in full:
            c["shuffled_vs_none"] = compare(full[sh][task][key], b[key])
            c["kind_vs_shuffled"] = compare(t[key], full[sh][task][key])
        for mode in ("attn", "mlp"):
            if kind in tab.get(mode, {}):
                c[f"{mode}_vs_none"] = compare(tab[mode][kind][task][key], b[key])
        out.append(c)
    return out


def deltas(a, tab):
    """Every row against no pre-training, per task, full transfer: {row: {task: {metric, vs_none}}}."""
    full = tab.get("full", {})
    if "none" not in full:
        return {}
    out = {}
    for row, cells in full.items():
        if row != "none":
            out[row] = {}
            for t in a.tasks:
                key = metric_of(cells[t], full["none"][t])
                out[row][t] = {"metric": key, "vs_none": compare(cells[t][key], full["none"][t][key])}
    return out


def shuffled(a, tab):
    """Each kind against its shuffled control, per task, full transfer: {kind: {task: {metric, vs_shuffled}}}."""
    full = tab.get("full", {})
    out = {}
    for kind in a.controls:
        if kind in full and kind + SHUFFLED in full:
            out[kind] = {}
            for t in a.tasks:
                real, sh = full[kind][t], full[kind + SHUFFLED][t]
                key = metric_of(real, sh)
                out[kind][t] = {"metric": key, "vs_shuffled": compare(real[key], sh[key])}
    return out


def layers_on_tasks(a, tab):
    """Attention-only against MLP-only transfer, per split kind and task (the metric as metric_of)."""
    out = []
    if "attn" not in tab or "mlp" not in tab:
        return out
    for row in tab["attn"]:
        if row == "none" or row not in tab["mlp"]:
            continue
        for t in a.tasks:
            ca, cm = tab["attn"][row][t], tab["mlp"][row][t]
            key = metric_of(ca, cm)
            out.append({"row": row, "task": t, "metric": key, "attn_vs_mlp": compare(ca[key], cm[key])})
    return out


def size_table(a, tasks_recs):
    """{task: [(steps, {exact, token, loss}), ...]}: the --sem-kind model at every pre-training size
    (0 = none), full transfer, on the --size-tasks."""
    out = {}
    for t in a.size_tasks:
        in_table = lambda p: p == a.pretrain_steps and a.sem_kind in a.kinds
        rows = [(0, "none", "none")] + [(p, a.sem_kind if in_table(p) else f"{a.sem_kind}-P{p}", "full")
                                        for p in a.additive_steps]
        out[t] = [(p, {k: values(tasks_recs, key, row=row, transfer=mode, task=t) for k, key in
                       (("exact", "accuracy"), ("token", "token_accuracy"), ("loss", "val_loss"))})
                  for p, row, mode in rows]
    return out


def merges(a, tab):
    out = []
    full = tab.get("full", {})
    for m in a.merges:
        label = f"attn-{m[0]}+mlp-{m[1]}"
        if label not in full:
            continue
        for t in a.tasks:
            alone = {"none": full.get("none", {}).get(t), f"{m[0]} (full)": full.get(m[0], {}).get(t),
                     f"{m[1]} (full)": full.get(m[1], {}).get(t),
                     f"{m[0]} (attn only)": tab.get("attn", {}).get(m[0], {}).get(t),
                     f"{m[1]} (mlp only)": tab.get("mlp", {}).get(m[1], {}).get(t)}
            mc = full[label][t]
            key = "exact" if max([mean_std(c["exact"])[0] for c in [mc] + [c for c in alone.values() if c]] +
                                 [0]) >= 0.01 else "token"
            out.append({"merge": label, "task": t, "metric": key, "merged": mc[key],
                        "alone": {k: c[key] for k, c in alone.items() if c},
                        "vs": {k: compare(mc[key], c[key]) for k, c in alone.items() if c}})
    return out


def semantic(a, sem_recs):
    """Per domain: the baseline's curve and final loss per seed; per condition (steps, transfer)
    the final-loss differences; the substitutive share per seed (full transfer, --pretrain-steps)."""
    out = {}
    for d in a.domains:
        recs = [r for r in sem_recs if r["domain"] == d and not r.get("diverged")]
        base = {r["seed"]: r for r in recs if r["kind"] == "none"}
        if not base:
            continue
        conds = sorted({(r["steps"], r["transfer"]) for r in recs if r["kind"] != "none"})
        dd = {"base_final": [base[s]["val_loss"] for s in sorted(base)],
              "base_curves": {str(s): base[s]["curve"] for s in sorted(base)}, "conditions": []}
        for steps, mode in conds:
            rs = {r["seed"]: r for r in recs if r["steps"] == steps and r["transfer"] == mode}
            seeds = sorted(set(rs) & set(base))
            c = {"steps": steps, "transfer": mode, "seeds": seeds,
                 "procedural_tokens": rs[seeds[0]].get("procedural_tokens") if seeds else None,
                 "final": [rs[s]["val_loss"] for s in seeds],
                 "diff": [rs[s]["val_loss"] - base[s]["val_loss"] for s in seeds],
                 "curves": {str(s): rs[s]["curve"] for s in seeds}}
            c["vs_base"] = compare(c["final"], [base[s]["val_loss"] for s in seeds], higher_is_better=False)
            if mode == "full" and steps == a.pretrain_steps:
                cross = [crossing(rs[s]["curve"], base[s]["val_loss"]) for s in seeds]
                c["substitutive"] = [{"share": f, "qualifier": q} for f, q in cross]
                reached = [f for f, q in cross if f is not None]
                c["substitutive_mean"] = list(mean_std(reached)) if len(reached) == len(cross) and cross else None
            dd["conditions"].append(c)
        out[d] = dd
    return out


def pretrain_losses(recs):
    """{row-P<steps>: {val_loss: [...], unigram_loss: [...], tokens}} over seeds: how far each
    procedural pre-training got below the loss of its token counts alone (nats per loss token)."""
    out = {}
    for r in recs:
        if r["part"] == "pretrain" and not r.get("diverged"):
            e = out.setdefault(f"{r['row']}-P{r['steps']}", {"row": r["row"], "steps": r["steps"], "val_loss": [],
                                                             "unigram_loss": [], "tokens": r["tokens"]})
            e["val_loss"].append(r["val_loss"])
            if r.get("unigram_loss") is not None:
                e["unigram_loss"].append(r["unigram_loss"])
    return out


def analyse(a, recs):
    """Every table and comparison of the report, from the records alone."""
    pre = {(r["row"], r["steps"], r["seed"]): r for r in recs if r["part"] == "pretrain"}
    tasks_recs = [r for r in recs if r["part"] == "task"]
    merge_rows = [f"attn-{m[0]}+mlp-{m[1]}" for m in a.merges]
    rows = ["none"] + a.kinds + [k + SHUFFLED for k in a.controls] + merge_rows
    tab = diagnostic_table(a, tasks_recs, rows)
    res = {"runs": recs, "table": tab, "claims": claims(a, tab), "layers_tasks": layers_on_tasks(a, tab),
           "sizes": size_table(a, tasks_recs), "deltas": deltas(a, tab), "shuffled": shuffled(a, tab),
           "merges": merges(a, tab), "semantic": semantic(a, [r for r in recs if r["part"] == "semantic"]),
           "pretrain": {f"{k[0]}-P{k[1]}-s{k[2]}": {"val_loss": r.get("val_loss"), "tokens": r.get("tokens")}
                        for k, r in pre.items()},
           "pretrain_losses": pretrain_losses(recs),
           "seconds": sum(r.get("seconds") or 0 for r in recs), "n_runs": len(recs)}
    res["pooled"] = pooled_tests(a, res)
    return res




def paired_cells(pairs, higher_is_better=True):
    """common.paired over [(treat, base)] pairs of runs that share a cell and a seed."""
    return common.paired([t for t, _ in pairs], [b for _, b in pairs], higher_is_better)


def pooled_tests(a, res):
    """The claims that span many cells, each by one paired test over its cells and seeds: every kind
    against its shuffled control (full transfer, each task's metric), attention-only against MLP-only
    transfer on the diagnostics, and each additive warm-up size against the same seed's baseline,
    pooled over the semantic domains."""
    recs = res["runs"]

    def pairs_of(cells):
        out = []
        for treat, base, key in cells:
            t, b = by_seed(recs, key, **treat), by_seed(recs, key, **base)
            out += [(t[s], b[s]) for s in sorted(set(t) & set(b))]
        return out
    out = {}
    sh = [(task_where(k, "full", t), task_where(k + SHUFFLED, "full", t), METRIC_KEY[x["metric"]])
          for k, cells in res["shuffled"].items() for t, x in cells.items()]
    if sh:
        out["real_vs_shuffled"] = dict(paired_cells(pairs_of(sh)), cells=len(sh))
    lt = [(task_where(x["row"], "attn", x["task"]), task_where(x["row"], "mlp", x["task"]), METRIC_KEY[x["metric"]])
          for x in res["layers_tasks"]]
    if lt:
        out["attn_vs_mlp_tasks"] = dict(paired_cells(pairs_of(lt)), cells=len(lt))
    additive = {}
    for steps in a.additive_steps:
        pairs = [(f, f - d) for dd in res["semantic"].values() for c in dd["conditions"]
                 if c["steps"] == steps and c["transfer"] == "full" for f, d in zip(c["final"], c["diff"])]
        if pairs:
            additive[str(steps)] = paired_cells(pairs, higher_is_better=False)
    if additive:
        out["additive"] = additive
    return out


# ---------------------------------------------------------------------------------------------
# the report

def pct(xs):
    return fmt_mean_std([100 * x for x in xs], "{:.1f}")


def says(c):
    """What the reading rule allows: 'better (p, n)', 'worse (p, n)' or 'no clear difference (p, n)'."""
    return common.reading(c, "better", "worse")


def fmt_cmp(c, scale=100, unit="pts"):
    if c is None:
        return "not run"
    if scale == 1:
        return f"{c['treat']:.3f} vs {c['base']:.3f} ({c['diff']:+.3f} nats; {says(c)})"
    return f"{scale * c['treat']:.1f} vs {scale * c['base']:.1f} ({scale * c['diff']:+.1f} {unit}; {says(c)})"


def fmt_delta(c, token=False):
    """A table cell: the difference in points and its p; bold only when the reading rule calls it clear."""
    if c is None:
        return "-"
    cell = f"{100 * c['diff']:+.1f}{' t' if token else ''} ({common.fmt_p(c['p'])})"
    return f"**{cell}**" if c["clear"] else cell


def pretrain_cell(res, row, steps):
    """'3.68 ± 0.06 (4.85)': the pre-training val loss over seeds and its unigram loss."""
    e = res["pretrain_losses"].get(f"{row}-P{steps}")
    if not e:
        return "-"
    uni = mean_std(e["unigram_loss"])[0] if e["unigram_loss"] else None
    return fmt_mean_std(e["val_loss"], "{:.2f}") + (f" ({uni:.2f})" if uni is not None else " (-)")


def table_md(a, res, mode, key, title, with_pretrain=False):
    rows = res["table"].get(mode, {})
    if not rows:
        return []
    extra = " pre-training val loss (unigram) |" if with_pretrain else ""
    lines = [f"#### {title}", "", "| pre-training | " + " | ".join(a.tasks) + " |" + extra,
             "|---|" + "---|" * (len(a.tasks) + bool(with_pretrain))]
    fmt = (lambda xs: fmt_mean_std(xs, "{:.3f}")) if key == "loss" else pct
    for row, cells in rows.items():
        lines.append(f"| {row} | " + " | ".join(fmt(cells[t][key]) if cells[t][key] else "-" for t in a.tasks) + " |"
                     + (f" {pretrain_cell(res, row, a.pretrain_steps)} |" if with_pretrain else ""))
    return lines + [""]


def claim_lines(res):
    lines = []
    names = {"haystack": "Dyck -> HAYSTACK", "reversed_addition": "Rule 110 -> reversed addition",
             "sorting": "SET/UNION -> sorting"}
    done = {c["claim"] + c["kind"] for c in res["claims"]}
    for kind, task in CLAIM_CELLS:
        if task + kind not in done:
            lines.append(f"- {names[task]} ({kind} on {task}): not in this sweep (see --kinds, --tasks).")
    for c in res["claims"]:
        m = ("exact-answer accuracy" if c["metric"] == "exact"
             else "per-token answer accuracy (exact answers < 1% on both sides)")
        lines.append(f"- **{names[c['claim']]}** ({c['kind']} on {c['task']}; paper: {PAPER[c['claim']]}). "
                     f"Ours, {m}, {c['kind']} vs none: {fmt_cmp(c['vs_none'])}. Answer loss: "
                     f"{fmt_cmp(c['loss_vs_none'], scale=1)}.")
        if "kind_vs_shuffled" in c:
            lines.append(f"  - shuffled control: {c['kind']} vs {c['kind']}{SHUFFLED}: {fmt_cmp(c['kind_vs_shuffled'])}; "
                         f"{c['kind']}{SHUFFLED} vs none: {fmt_cmp(c['shuffled_vs_none'])}.")
        for mode in ("attn", "mlp"):
            if f"{mode}_vs_none" in c:
                lines.append(f"  - {mode}-only transfer vs none: {fmt_cmp(c[f'{mode}_vs_none'])}.")
    return lines


def verdict_table(verdict_list):
    return (["| claim | paper | ours | test | verdict |", "|---|---|---|---|---|"]
            + [f"| {v['claim']} | {v['paper']} | {v['ours']} | {v['test']} | {v['verdict']} |" for v in verdict_list])


def pooled_lines(res):
    """The pooled paired tests in words (the reading rule's words)."""
    p, lines = res["pooled"], []
    if "real_vs_shuffled" in p:
        c = p["real_vs_shuffled"]
        lines.append(f"- Real against shuffled pre-training (full transfer), paired over {c['cells']} (kind, task) "
                     f"cells x seeds: {100 * c['diff']:+.1f} points on average, {says(c)}.")
    if "attn_vs_mlp_tasks" in p:
        c = p["attn_vs_mlp_tasks"]
        lines.append(f"- Attention-only against MLP-only transfer on the diagnostics, paired over {c['cells']} "
                     f"(kind, task) cells x seeds: {100 * c['diff']:+.1f} points on average, {says(c)}.")
    for steps, c in p.get("additive", {}).items():
        lines.append(f"- Warm-up of {steps} steps (full transfer) against the same seed's baseline, paired over the "
                     f"semantic domains x seeds: {c['diff']:+.3f} nats on average, "
                     f"{common.reading(c, 'lowers the loss', 'raises the loss')}.")
    return lines


def semantic_lines(a, res):
    sem = res["semantic"]
    if not sem:
        return []
    conds = next(iter(sem.values()))["conditions"]
    lines = ["## (b) Semantic domains", "",
             f"Warm-up: procedural:{a.sem_kind}; final validation loss (nats/token, GPT-2 BPE) after "
             f"{a.sem_steps} steps x {a.sem_batch} x {a.sem_block} tokens = 100% of the semantic budget; "
             "difference to the baseline of the same seed (negative = lower loss after the warm-up); the reading "
             "of each against the baseline's runs below the table.", "",
             "| domain | baseline | " + " | ".join(f"P = {c['steps']} ({c['transfer']})" for c in conds) + " |",
             "|---|---|" + "---|" * len(conds)]
    for d, dd in sem.items():
        lines.append(f"| {d} | {fmt_mean_std(dd['base_final'])} | " +
                     " | ".join(fmt_mean_std(c["diff"], "{:+.3f}") for c in dd["conditions"]) + " |")
    lines.append("")
    for d, dd in sem.items():
        lines.append(f"- {d}: " + "; ".join(
            f"P = {c['steps']} ({c['transfer']}) {common.reading(c['vs_base'], 'lowers the loss', 'raises the loss')}"
            for c in dd["conditions"] if c["vs_base"]) + ".")
    lines += ["", "Procedural tokens per warm-up (steps x rows x tokens per row, seen): " +
              ", ".join(f"P = {c['steps']}: {c['procedural_tokens']:,}" for c in conds
                        if c["transfer"] == "full" and c["procedural_tokens"]) + ".", "",
              "#### Substitutive regime: the share of the semantic budget at which the warmed-up model "
              f"(P = {a.pretrain_steps}, full) reaches the baseline's final loss", "",
              "| domain | paper | ours, per seed | mean |", "|---|---|---|---|"]
    for d, dd in sem.items():
        c = next((c for c in dd["conditions"] if c.get("substitutive") is not None), None)
        if c is None:
            continue
        per = ", ".join(("not within 100%" if s["qualifier"] == ">" else f"{s['qualifier'].replace('=', '')}"
                         f"{100 * s['share']:.0f}%") for s in c["substitutive"])
        m = c["substitutive_mean"]
        mean = "-" if not m else (f"{100 * m[0]:.0f}%" + (f" ± {100 * m[1]:.0f}%" if m[2] > 1 else ""))
        paper = f"{100 * PAPER_SUBST[d]:.0f}%" + (" (C4)" if d == "prose" else "") if d in PAPER_SUBST else "-"
        lines.append(f"| {d} | {paper} | {per} | {mean} |")
    lines += ["", f"Evaluations at {', '.join(f'{100 * k / a.sem_evals:.0f}%' for k in range(1, a.sem_evals + 1))} "
              "of one constant-lr run stand for shorter budgets; the share is interpolated linearly between "
              "the evaluations around the crossing ('<=25%': already there at the first).", ""]
    modes = [m for m in ("attn", "mlp") if any(c["transfer"] == m for dd in sem.values() for c in dd["conditions"])]
    if len(modes) == 2:
        lines += ["#### Attention-only vs MLP-only warm-up by domain (paper: attention for code/math, MLP for "
                  "natural language)", ""]
        for d, dd in sem.items():
            c = {m: next((c for c in dd["conditions"] if c["transfer"] == m and c["steps"] == a.pretrain_steps), None)
                 for m in modes}
            if c["attn"] and c["mlp"]:
                cmp = compare(c["attn"]["final"], c["mlp"]["final"], higher_is_better=False)
                lines.append(f"- {d}: loss change vs baseline attn {fmt_mean_std(c['attn']['diff'], '{:+.3f}')}, "
                             f"mlp {fmt_mean_std(c['mlp']['diff'], '{:+.3f}')}; attn vs mlp: {fmt_cmp(cmp, scale=1)}.")
        lines.append("")
    return lines


def diagnostic_lines(a, res):
    lines = ["## (a) The diagnostic table", "",
             "Exact-answer accuracy (%, greedy decoding of the whole answer) on the test split; per-token "
             "accuracy (%, teacher-forced argmax on each answer token) where exact answers are out of reach at "
             "this budget; the answer loss (nats per answer token) in report.json. The last column of the first "
             "table: each pre-training run's final validation loss (nats per loss token: the answer spans, every "
             "token of Dyck) over seeds, and in brackets the loss of its token counts alone (the unigram loss of "
             "the same tokens).", ""]
    for i, mode in enumerate(a.transfers):
        lines += table_md(a, res, mode, "exact", f"Exact-answer accuracy, {mode} transfer", with_pretrain=i == 0)
    for mode in a.transfers:
        lines += table_md(a, res, mode, "token", f"Per-token answer accuracy, {mode} transfer")
    note = ("Difference in points of exact-answer accuracy, or of per-token accuracy (marked t) where both sides "
            "are below 1% exact, with Welch's p; bold = a clear difference by the reading rule (p < 0.05 with at "
            "least 3 runs per side)" + (f": with {a.seeds} seed(s) no cell can be one." if a.seeds < common.MIN_N
                                        else "."))
    if res["deltas"]:
        lines += ["#### Every row against no pre-training (full transfer)", "", note, "",
                  "| pre-training | " + " | ".join(a.tasks) + " |", "|---|" + "---|" * len(a.tasks)]
        for row, cells in res["deltas"].items():
            lines.append(f"| {row} | " + " | ".join(fmt_delta(cells[t]["vs_none"], cells[t]["metric"] == "token")
                                                    for t in a.tasks) + " |")
        lines.append("")
    if res["shuffled"]:
        lines += ["#### Each kind against its shuffled control (full transfer)", "", note.replace("no pre-training",
                  "the shuffled control"), "",
                  "| pre-training | " + " | ".join(a.tasks) + " |", "|---|" + "---|" * len(a.tasks)]
        for kind, cells in res["shuffled"].items():
            lines.append(f"| {kind} vs {kind}{SHUFFLED} | " + " | ".join(
                fmt_delta(cells[t]["vs_shuffled"], cells[t]["metric"] == "token") for t in a.tasks) + " |")
        lines.append("")
    for t, cells in res["sizes"].items():
        lines += [f"#### {a.sem_kind} pre-training size -> {t} (full transfer)", "",
                  "| pre-training steps | tokens seen | pre-training val loss (unigram) | exact accuracy (%) | "
                  "per-token accuracy (%) | answer loss |", "|---|---|---|---|---|---|"]
        for p, c in cells:
            e = res["pretrain_losses"].get(f"{a.sem_kind}-P{p}")
            tok = e["tokens"] if e else None
            lines.append(f"| {p} | {f'{tok:,}' if tok else '-'} | {pretrain_cell(res, a.sem_kind, p)} | "
                         f"{pct(c['exact']) if c['exact'] else '-'} | {pct(c['token']) if c['token'] else '-'} | "
                         f"{fmt_mean_std(c['loss']) if c['loss'] else '-'} |")
        lines.append("")
    return lines


def markdown(a, res, verdict_list, provenance):
    lines = [f"# Procedural pre-training{' (--quick)' if a.quick else ''}", "", common.provenance_line(provenance), "",
             f"Jiang, Shinnick et al., \"{pv.SOURCE['title']}\", arXiv {pv.SOURCE['arxiv']}. Paper's claims: " +
             "; ".join(PAPER[k] for k in ("haystack", "reversed_addition", "sorting", "shuffled", "layers")) + ".", "",
             f"{res['n_runs']} of {res['n_planned']} runs finished; {res['seconds'] / 60:.1f} min of training summed "
             "over runs (train.run's seconds).", "",
             f"Settings: {a.n_layer} layers, {a.n_head} heads, d = {a.n_embd} (the authors' diagnostic model), context "
             f"{a.context}; pre-training {a.pretrain_steps} steps x {a.batch_size} rows, lr {a.lr:g} cosine; diagnostics "
             f"{a.task_steps} steps x {a.batch_size} records, lr {a.lr:g}, accuracy on {a.task_test} test records "
             f"(the authors: 10,000 steps x 1000 records); seeds 0..{a.seeds - 1} (mean ± std over seeds). Transfer: "
             f"full = {a.full_groups} with the embedding rows = the mean of the pre-trained rows (the authors' "
             "'everything'); attn / mlp = that group only, fresh embeddings (the authors' code).", "",
             "## The paper's claims beside ours", "",
             "A difference is clear only when Welch's p < 0.05 with at least 3 runs on each side, or when a paired "
             "t-test pooled over cells and seeds gives p < 0.05 with at least 3 pairs."
             + (f" This run has {a.seeds} seed(s) per cell, so no single cell can pass the rule, whatever its p; "
                "only the pooled tests can." if a.seeds < common.MIN_N else ""), ""]
    lines += verdict_table(verdict_list) + [""]
    lines += ["Pooled tests (paired t-tests, scipy.stats.ttest_rel; n = pairs):", ""] + (pooled_lines(res) or ["- none in this run"]) + [""]
    lines += ["Cell by cell:", ""] + claim_lines(res) + [""]
    lt = res["layers_tasks"]
    if lt:
        lines += ["Attention-only vs MLP-only transfer on the diagnostics (paper: attention carries the algorithmic "
                  "benefit):", ""]
        lines += [f"- {x['row']} on {x['task']} ({'exact' if x['metric'] == 'exact' else 'per-token'}): attn vs mlp "
                  f"{fmt_cmp(x['attn_vs_mlp'])}" for x in lt] + [""]
    lines += diagnostic_lines(a, res)
    lines += semantic_lines(a, res)
    if res["merges"]:
        lines += ["## (c) Weight merging", "",
                  "| merge | task | merged | " + " | ".join(res["merges"][0]["alone"]) + " |",
                  "|---|---|---|" + "---|" * len(res["merges"][0]["alone"])]
        for x in res["merges"]:
            lines.append(f"| {x['merge']} | {x['task']} ({x['metric']}) | {pct(x['merged'])} | " +
                         " | ".join(pct(v) for v in x["alone"].values()) + " |")
        lines += ["", "Merged against no pre-training: " + "; ".join(
            f"{x['task']} {says(x['vs']['none'])}" for x in res["merges"] if x["vs"].get("none")) + ".", ""]
    lines += ["## What differs from the paper", "", pv.regime(a, provenance)
              + (" This --quick run is a smoke test of the pipeline (one seed, tens of steps): it does not test the "
                 "claims." if a.quick else ""), "",
              "Figures: `diagnostic_accuracy.png` (the tables as heat maps), `semantic_curves.png` (validation "
              "loss against the share of the semantic budget), `additive.png` (loss change against procedural "
              "tokens). Every run's numbers and flags: `report.json`.", ""]
    return "\n".join(lines)


def render(a, recs, n_planned, out, provenance):
    """Write report.md, report.json and the PNGs from the records; returns report.md. Nothing here
    reads the run folders, the clock or the machine."""
    res = analyse(a, recs)
    res["n_planned"] = n_planned
    verdict_list = pv.verdicts(a, res)
    text = markdown(a, res, verdict_list, provenance)
    settings = {k: v for k, v in common.settings_json(a).items() if k not in INVOCATION_FLAGS}
    common.write_report(out, text, source=pv.SOURCE, regime=pv.regime(a, provenance), figures=FIGURES,
                        verdicts=verdict_list, provenance=provenance, paper=PAPER, paper_substitutive=PAPER_SUBST,
                        settings=settings, **res)
    plot_all(a, res, out)
    return text


# ---------------------------------------------------------------------------------------------
# figures

def plot_all(a, res, out):
    plt = common.pyplot()
    tab = res["table"]
    panels = [(mode, key) for key in ("exact", "token") for mode in a.transfers if tab.get(mode)]
    if panels:
        fig, axes = plt.subplots(2, len(a.transfers), figsize=(3.2 + 1.1 * len(a.tasks) * len(a.transfers), 8),
                                 squeeze=False)
        for ax in axes.flat:
            ax.axis("off")
        for mode, key in panels:
            ax = axes[0 if key == "exact" else 1][a.transfers.index(mode)]
            rows = list(tab[mode])
            m = np.array([[100 * mean_std(tab[mode][r][t][key])[0] for t in a.tasks] for r in rows])
            ax.axis("on")
            ax.imshow(np.nan_to_num(m), cmap="viridis", vmin=0, vmax=max(1.0, np.nanmax(m) if m.size else 1.0),
                      aspect="auto")
            ax.set_xticks(range(len(a.tasks)), [t.replace("_", "\n") for t in a.tasks], fontsize=7)
            ax.set_yticks(range(len(rows)), rows, fontsize=7)
            for i in range(len(rows)):
                for j in range(len(a.tasks)):
                    if not math.isnan(m[i, j]):
                        ax.text(j, i, f"{m[i, j]:.1f}", ha="center", va="center", fontsize=6,
                                color="k" if m[i, j] > 0.6 * np.nanmax(m) else "w")
            ax.set_title(f"{key} accuracy (%), {mode}", fontsize=9)
        fig.tight_layout()
        common.save_figure(fig, out / "diagnostic_accuracy.png")
    sem = res["semantic"]
    if sem:
        fig, axes = plt.subplots(1, len(sem), figsize=(4.5 * len(sem), 3.6), squeeze=False)
        for ax, (d, dd) in zip(axes[0], sem.items()):
            def draw(curves, **kw):
                cs = [np.array(c) for c in curves.values() if c]
                if cs and all(len(c) == len(cs[0]) for c in cs):
                    ax.plot(cs[0][:, 0] * 100, np.mean([c[:, 1] for c in cs], axis=0), marker="o", **kw)
            draw(dd["base_curves"], color="k", label="baseline")
            for c in dd["conditions"]:
                draw(c["curves"], ls="-" if c["transfer"] == "full" else "--",
                     label=f"{a.sem_kind} P={c['steps']} {c['transfer']}")
            ax.axhline(statistics.mean(dd["base_final"]), color="k", lw=0.5, ls=":")
            ax.set_title(d)
            ax.set_xlabel("% of the semantic budget")
            ax.set_ylabel("val loss")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        common.save_figure(fig, out / "semantic_curves.png")
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for d, dd in sem.items():
            cs = [c for c in dd["conditions"] if c["transfer"] == "full" and c["procedural_tokens"]]
            if cs:
                ax.errorbar([c["procedural_tokens"] for c in cs], [mean_std(c["diff"])[0] for c in cs],
                            yerr=[mean_std(c["diff"])[1] for c in cs], marker="o", capsize=3, label=d)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("procedural tokens (warm-up)")
        ax.set_ylabel("final val loss - baseline (nats)")
        ax.set_title(f"additive regime ({a.sem_kind})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        common.save_figure(fig, out / "additive.png")
