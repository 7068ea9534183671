"""
The data-constrained report's readings for the authors' baseline (preset `authors`): the decay
sweep read by its mean over seeds, the scan's choice, the regime check (every AR run >= 0.3 nats
below the unigram level), the fan-out and MIR's effective-data multiplier with their uncertainty,
and masked diffusion at the AR-tuned decay against a strong one.
Xu et al., arXiv 2606.06888 (github.com/yixinw-lab/dc_pretrain). Every reading goes through the
reading rule of experiments/lib/common.py (paired, slope_test, verdict_of, combined_verdict).

Bootstrap (bootstrap_ci): B resamples of the units with replacement (seeded), the statistic of
each, the 2.5% and 97.5% percentiles: a 95% interval that assumes only that the units are
exchangeable.
"""

import math
import statistics

import numpy as np

from experiments.lib.common import fmt_p, mean_std, paired, reading, slope_test, verdict_of

REGIME_MARGIN = 0.3  # nats below ln(unigram perplexity) every AR run must end (the issue's regime)


def bootstrap_ci(units, stat, n_boot=2000, seed=0, level=0.95):
    """(lo, hi) percentile interval of stat(resample) over n_boot resamples of `units` with
    replacement; None for fewer than 2 units or when no resample gives a finite value."""
    units = list(units)
    if len(units) < 2:
        return None
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        v = stat([units[i] for i in rng.integers(0, len(units), len(units))])
        if v is not None and math.isfinite(v):
            vals.append(v)
    if not vals:
        return None
    q = (1 - level) / 2
    return [float(np.quantile(vals, q)), float(np.quantile(vals, 1 - q))]


def _slope(pts):
    """Least-squares slope of y on x over [(x, y)]; None when x has no spread."""
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    sxx = ((x - x.mean()) ** 2).sum()
    return None if sxx <= 0 else float(((x - x.mean()) * (y - y.mean())).sum() / sxx)


def fan_out_summary(runs, method="wd"):
    """The fan-out, gap(N) = L(N, smallest U) - L(N, largest U), per decade of N: slope of gap on
    log10 N over one point per (size, seed) run at both budgets (common.slope_test: its standard
    error and p), with a 95% bootstrap interval over those points. runs: finished grid records."""
    rs = [r for r in runs if r["method"] == method]
    if not rs:
        return None
    lo, hi = min(r["U"] for r in rs), max(r["U"] for r in rs)
    at = lambda u: {(r["N"], r["seed"]): r["loss"] for r in rs if r["U"] == u}  # noqa: E731
    small, large = at(lo), at(hi)
    pts = [(math.log10(n), small[(n, s)] - large[(n, s)]) for n, s in sorted(small.keys() & large.keys())]
    out = dict(slope_test([p[0] for p in pts], [p[1] for p in pts]), method=method, U_small=lo, U_large=hi)
    out["ci95"] = bootstrap_ci(pts, _slope)
    out["gaps"] = [dict(log10_N=x, gap=g) for x, g in pts]
    return out


def multiplier_uncertainty(mult, law="softq"):
    """MIR's effective-data multiplier with a 95% bootstrap interval over cells: the geometric
    mean of MIR's cells, and the calibrated one, exp(mean(log m_mir - log m_own)) over the cells
    where both are finite (m_own: the baseline's own cell under its own fit, 1 for a perfect fit)."""
    res = (mult or {}).get(law) or {}
    if "wd+mir" not in res:
        return None
    own = {(c["size"], c["U"]): c["multiplier"] for c in res.get("wd", {}).get("cells", [])}  # by size: MIR's N is d larger
    fin = lambda x: x is not None and math.isfinite(x) and x > 0  # noqa: E731
    logs = [math.log(c["multiplier"]) for c in res["wd+mir"]["cells"] if fin(c["multiplier"])]
    d = [math.log(c["multiplier"]) - math.log(own[(c["size"], c["U"])]) for c in res["wd+mir"]["cells"]
         if fin(c["multiplier"]) and fin(own.get((c["size"], c["U"])))]
    gm = lambda xs: math.exp(statistics.mean(xs)) if xs else None  # noqa: E731
    ci = lambda xs: [math.exp(v) for v in bootstrap_ci(xs, statistics.mean)] if bootstrap_ci(xs, statistics.mean) else None  # noqa: E731
    return dict(law=law, geomean=gm(logs), ci95=ci(logs), cells=len(logs), calibrated=gm(d), calibrated_ci95=ci(d),
                calibrated_cells=len(d))


def sweep_summary(sweep, sizes, decays, lrs):
    """Per size and (decay, lr): mean ± std of the full-validation loss over the sweep's seeds;
    the chosen (lowest mean) decay; the spread of the means across decays beside the largest
    seed std (how far the choice stands above the noise)."""
    out = {}
    for size in sizes:
        rows = []
        for lr in lrs:
            for wd in decays:
                ls = [r["loss"] for r in sweep if r["size"] == size and r["wd"] == wd and r["lr"] == lr
                      and r["status"] == "done"]
                m, s, n = mean_std(ls)
                rows.append(dict(wd=wd, lr=lr, mean=m, std=s, n=n, losses=ls))
        ok = [r for r in rows if r["n"]]
        best = min(ok, key=lambda r: r["mean"]) if ok else None
        means = [r["mean"] for r in ok]
        out[size] = dict(rows=rows, chosen=dict(wd=best["wd"], lr=best["lr"]) if best else None,
                         spread=max(means) - min(means) if means else None,
                         max_seed_std=max((r["std"] for r in ok), default=None),
                         seeds=min((r["n"] for r in ok), default=0))
    return out


def regime_check(runs, margin=REGIME_MARGIN):
    """Every finished grid run's margin below ln(unigram_val_ppl): AR runs must clear `margin`,
    MDLM runs (their bound) must be below it. Returns the counts and the runs that fail."""
    fails, n = [], 0
    for r in runs:
        if r.get("status") != "done" or not r.get("unigram_val_ppl"):
            continue
        n += 1
        need = 0.0 if r["method"].startswith("mdlm") else margin
        m = math.log(r["unigram_val_ppl"]) - r["loss"]
        if m < need:
            fails.append(dict(name=r["name"], method=r["method"], margin=m, need=need))
    return dict(runs=n, margin=margin, failing=fails, ok=n > 0 and not fails)


def mdlm_rows(runs):
    """Per (size, U), seed 0: AR (wd), MDLM at the AR-tuned decay and at the strong decay, and the
    gaps MDLM - AR at each (positive: AR lower)."""
    by = {}
    for r in runs:
        if r["method"] in ("wd", "mdlm-tuned", "mdlm-strong") and r["seed"] == 0:
            # by size, not N: MDLM's [MASK] row makes an untied head (a non-embedding matrix) d larger
            c = by.setdefault((r["size"], r["U"]), dict(size=r["size"], N=r["N"], U=r["U"]))
            c[r["method"]], c[f"wd_{r['method']}"] = r["loss"], r["wd"]
            if r["method"] == "wd":
                c["N"] = r["N"]
    rows = []
    for c in sorted(by.values(), key=lambda c: (c["N"], c["U"])):
        if "mdlm-tuned" in c or "mdlm-strong" in c:
            g = lambda m: c[m] - c["wd"] if m in c and "wd" in c else None  # noqa: E731
            c.update(gap_tuned=g("mdlm-tuned"), gap_strong=g("mdlm-strong"))
            rows.append(c)
    return rows


def mdlm_tests(rows):
    """MDLM at the strong decay against the AR-tuned one, paired by cell, over the cells where the
    two decays differ (elsewhere they are one run); the fraction of the AR-MDLM gap it closes."""
    differ = [r for r in rows if r.get("mdlm-strong") is not None and r.get("mdlm-tuned") is not None
              and r.get("wd_mdlm-strong") != r.get("wd_mdlm-tuned")]
    t = paired([r["mdlm-strong"] for r in differ], [r["mdlm-tuned"] for r in differ])
    gt = [r["gap_tuned"] for r in differ if r["gap_tuned"] is not None]
    gs = [r["gap_strong"] for r in differ if r["gap_strong"] is not None]
    closed = 1 - statistics.mean(gs) / statistics.mean(gt) if gt and gs and statistics.mean(gt) > 0 else None
    return dict(cells=[(r["size"], r["U"]) for r in differ], strong_vs_tuned=t,
                gap_tuned=statistics.mean(gt) if gt else None, gap_strong=statistics.mean(gs) if gs else None,
                gap_closed=closed)


def analyse(records, a, mult):
    """Everything the authors' preset adds to the report, from the records alone."""
    runs = [r for r in records["runs"] if r["status"] == "done"]
    rows = mdlm_rows(runs)
    return dict(sweep=sweep_summary(records["sweep"], [s[0] for s in a.sizes], a.decays, a.lrs),
                regime=regime_check(records["runs"]), fan_out=fan_out_summary(runs, "wd"),
                fan_out_mir=fan_out_summary(runs, "wd+mir"), multiplier=multiplier_uncertainty(mult),
                mdlm=rows, mdlm_tests=mdlm_tests(rows))


# ---------------------------------------------------------------------------------------------
# report.md and the verdicts

def ci_text(ci, f="{:+.3f}"):
    return f"95% bootstrap CI [{f.format(ci[0])}, {f.format(ci[1])}]" if ci else "no bootstrap CI (< 2 points)"


def baseline_lines(a):
    where = ("on the attention block's output only (their placement: dcp/model.py:135 builds resid_dropout, "
             ":149 applies it to the attention's c_proj output; their MLP, embeddings and attention probabilities "
             "have none)" if getattr(a, "dropout_at", "all") == "attn-out" else "(embeddings, attention and MLP outputs)")
    return ["## The authors' baseline", "",
            f"Every run: dropout {a.dropout:g} {where}, LM head "
            f"{'tied to the embedding' if a.tie else 'untied'}"
            + ("" if a.tie else ", its matrix weight-decayed with attention and MLP (model.configure_optimizers "
               "puts an untied lm_head.weight in the decayed group; embeddings, norms and biases are never decayed)")
            + ". The authors' model (dc_pretrain, dcp/model.py:95: dropout 0.1; dcp/model.py:194: lm_head its own "
              "Linear, no tying) and optimizer (dcp/train4_diffusionauxiliary_impl.py:314-333: decay on every parameter "
              "but embeddings, norms and biases, so on the head); decays per size 0.4-3.2 in "
              "scripts/all5models_baseline.sh:21-25.", ""]


def scan_lines(scan):
    if not scan:
        return []
    ch = scan["choice"]
    lines = ["## 0. The scan: where the law can fan out", "",
             f"AR (weak decay, seed 0) at every candidate size x smallest budget U0 x epochs, and MDLM at the smallest "
             f"size. Rule (experiments/lib/data_constrained_scan.py): a size is kept when its loss is >= "
             f"{scan['rules']['margin']:g} nats below ln(unigram perplexity); (epochs, U0) qualifies with >= "
             f"{scan['rules']['min_sizes']} kept sizes, the two largest overfitting U0 by >= {scan['rules']['overfit_gap']:g} "
             f"nats (validation - training loss) and MDLM >= {scan['rules']['mdlm_margin']:g} nats below the unigram level; "
             "then the most sizes, the smallest U0, the fewest epochs."
             + (f" Time limit: the decay sweep and the grid must fit {scan['grid_hours']['limit']:g} h of two "
                "1-thread jobs (STEP_MS); a candidate keeps the most sizes, then the most budgets (>= "
                f"{scan['rules'].get('min_budgets', 2)}), that fit with its two largest sizes still overfitting; the "
                f"chosen grid is estimated at {scan['grid_hours']['estimate']:.1f} h." if scan.get("grid_hours") else ""),
             "",
             "| epochs | U0 | margin below unigram per size | overfit of the largest kept | MDLM margin | qualifies |",
             "|---|---|---|---|---|---|"]
    for c in scan["candidates"]:
        dropped = [s for s, m in c["margins"].items() if m is not None and m >= scan["rules"]["margin"]
                   and s not in c["kept"]]  # cleared the margin, left out by the time limit
        lines.append(f"| {c['epochs']:g} | {c['U0']:,} | " + ", ".join(
            f"{s} {m:+.2f}" if m is not None else f"{s} -" for s, m in c["margins"].items()) + " | "
            + ", ".join(f"{s} {v:.2f}" if v is not None else f"{s} -" for s, v in c["overfit"].items()) + " | "
            + (f"{c['mdlm_margin']:+.2f}" if c["mdlm_margin"] is not None else "-") + " | "
            + ("yes" if c["ok"] else f"no: {c['why']}")
            + (f" ({c['n_budgets']} budgets" + (f", without {', '.join(dropped)}" if dropped else "") + " within the "
               "time limit)" if c["ok"] and scan.get("grid_hours") else "") + " |")
    lines += ["", (f"Chosen: {ch[0]:g} epochs from U0 = {ch[1]:,}, sizes {', '.join(scan['sizes'])}, budgets "
                   f"{', '.join(f'{u:,}' for u in scan['budgets'])}." if ch and not scan.get("fallback") else
                   f"No candidate qualified; the closest ({scan.get('fallback_note', '')}) was used (--scan-fallback).")]
    return lines + [""]


def sweep_lines(a, ax):
    lines = [f"## 1. Weight-decay sweep (AR, U = {a.sweep_budget:,} nominal, {a.epochs:g} epochs, seeds "
             f"0..{a.sweep_seeds - 1})", "",
             "Full-validation loss, mean ± std over seeds; **bold** = the lowest mean, that size's decay for every "
             "method. Spread = max - min of the means across decays, beside the largest seed std: a choice within "
             "the seed noise is a choice, not a tested difference.", "",
             "| size | lr | " + " | ".join(f"wd {d:g}" for d in a.decays) + " | spread | max seed std |",
             "|---|---|" + "---|" * (len(a.decays) + 2)]
    for size, s in ax["sweep"].items():
        for lr in a.lrs:
            cells = []
            for r in [r for r in s["rows"] if r["lr"] == lr]:
                v = "-" if not r["n"] else f"{r['mean']:.3f}" + (f" ± {r['std']:.3f}" if r["n"] > 1 else "")
                cells.append(f"**{v}**" if s["chosen"] == dict(wd=r["wd"], lr=lr) else v)
            sp = "-" if s["spread"] is None else f"{s['spread']:.3f}"
            sd = "-" if s["max_seed_std"] is None else f"{s['max_seed_std']:.3f}"
            lines.append(f"| {size} | {lr:g} | " + " | ".join(cells) + f" | {sp} | {sd} |")
    return lines + [""]


def regime_lines(ax):
    g = ax["regime"]
    fails = g["failing"]
    return ["## The regime", "",
            f"{g['runs']} finished grid runs; AR runs must end >= {g['margin']:g} nats below ln(unigram perplexity), "
            "MDLM runs (their bound) below it: " + ("every run does." if g["ok"] else f"{len(fails)} do not: " + ", ".join(
                f"{f['name']} ({f['margin']:+.3f})" for f in fails[:12]) + ("..." if len(fails) > 12 else "") + "."), ""]


def fan_lines(ax):
    f = ax["fan_out"]
    if not f or f["p"] is None:
        return []
    return [f"Fan-out of the baseline (wd), L(U = {f['U_small']:,}) - L(U = {f['U_large']:,}) against log10 N over "
            f"{f['n']} (size, seed) runs: {f['slope']:+.4f} ± {f['stderr']:.4f} nats per decade ({ci_text(f['ci95'], '{:+.4f}')}), "
            f"{reading(f, 'the gap grows with N', 'the gap shrinks with N')}.", ""]


def multiplier_text(m):
    if not m or m["geomean"] is None:
        return []
    cal = (f"; calibrated by the baseline's own cells {m['calibrated']:.2f}x ({ci_text(m['calibrated_ci95'], '{:.2f}')}, "
           f"{m['calibrated_cells']} cells)" if m["calibrated"] is not None else "")
    return [f"MIR's effective-data multiplier under the baseline's {m['law']} fit: geometric mean {m['geomean']:.2f}x "
            f"({ci_text(m['ci95'], '{:.2f}')} over {m['cells']} cells){cal}.", ""]


def mdlm_lines(a, ax):
    t = ax["mdlm_tests"]
    lines = ["## 6. AR vs masked diffusion (MDLM) at the AR-tuned and a strong decay", "",
             f"Seed 0; MDLM {a.mdlm_epochs:g} epochs on the {a.mdlm_budgets or 'all'} smallest budget(s); tuned = the "
             f"decay the AR sweep chose, strong = {a.mdlm_strong_decay:g}. Gap = MDLM - AR(wd) (positive: AR lower); "
             "MDLM's loss is its NLL bound, an upper bound on its NLL.", "",
             "| size | U | AR (wd) | MDLM tuned (wd) | MDLM strong | gap tuned | gap strong |", "|---|---|---|---|---|---|---|"]
    f = lambda x, s="{:.3f}": "-" if x is None else s.format(x)  # noqa: E731
    for r in ax["mdlm"]:
        lines.append(f"| {r['size']} | {r['U']:,} | {f(r.get('wd'))} | {f(r.get('mdlm-tuned'))} "
                     f"({f(r.get('wd_mdlm-tuned'), '{:g}')}) | {f(r.get('mdlm-strong'))} | {f(r['gap_tuned'], '{:+.3f}')} | "
                     f"{f(r['gap_strong'], '{:+.3f}')} |")
    if t["cells"]:
        lines += ["", f"Where the two decays differ ({len(t['cells'])} cells), paired by cell: MDLM strong - tuned "
                  f"{t['strong_vs_tuned']['diff']:+.4f}, {reading(t['strong_vs_tuned'], 'strong decay lower', 'strong decay higher')}; "
                  f"mean gap {f(t['gap_tuned'], '{:+.3f}')} at the tuned decay, {f(t['gap_strong'], '{:+.3f}')} at the strong "
                  f"one ({f(t['gap_closed'], '{:.0%}')} closed)."]
    return lines + [""]


def signed(x):
    return "-" if x is None else f"{x:+.3f}"


def verdicts(ax):
    """The claims this preset reads in its own way: MDLM and strong decay, the fan-out's interval."""
    t = ax["mdlm_tests"]
    out = []
    if ax["mdlm"]:
        none = None if t["cells"] else "not measured: the strong decay equals the tuned one at every size"
        c = t["strong_vs_tuned"]
        out.append({"claim": "strong decay tuned for AR improves the masked-diffusion model",
                    "paper": "improves dLLMs substantially",
                    "ours": none or f"MDLM strong - tuned decay {c['diff']:+.4f} nats over {len(t['cells'])} cells (seed 0)",
                    "test": "not tested" if none else f"paired t by cell, {fmt_p(c['p'])}, n = {c['n']}",
                    "verdict": "not measured" if none else verdict_of(c)})
        closed = "-" if t["gap_closed"] is None else f"{t['gap_closed']:.0%}"
        out.append({"claim": "strong decay closes most of the AR-MDLM gap",
                    "paper": "closes most of the AR-dLLM gap",
                    "ours": none or f"gap MDLM - AR {signed(t['gap_tuned'])} at the tuned decay, {signed(t['gap_strong'])} "
                                    f"at the strong one ({closed} closed)",
                    "test": "not tested" if none else f"paired t by cell (the same pairs), {fmt_p(c['p'])}, n = {c['n']}",
                    "verdict": "not measured" if none else ("reproduces" if c["clear"] and c["better"] and
                                                            (t["gap_closed"] or 0) > 0.5 else
                                                            "partly" if c["clear"] and c["better"] else verdict_of(c))})
    return out


def front_table(vs, sizes, slope, mult, ltests, ax):
    """report.json's `front_table` (the README shows it; RESULTS.md has the full table): each claim with the paper's
    number, ours in one short phrase with its test, and the verdict (the full cells: `verdicts`)."""
    f, m, t = ax["fan_out"] or {}, ax["multiplier"] or {}, ax["mdlm_tests"]
    n_p = lambda c: f"{fmt_p(c['p'])}, n = {c['n']}"  # noqa: E731
    lt = lambda kind: (ltests.get("wd") or {}).get(kind)  # noqa: E731
    short = {}
    if sizes:
        ps = [s["paired"]["p"] for s in sizes if s["paired"]["p"] is not None]
        short["MIR lowers the validation loss at every size"] = (
            f"gain {min(s['gain'] for s in sizes):+.3f} to {max(s['gain'] for s in sizes):+.3f} nats per size "
            f"(paired p {min(ps):.2g}-{max(ps):.2g}, n = {sizes[0]['paired']['n']} each)" if ps else None)
    if slope.get("p") is not None:
        short["MIR's gain grows with model size"] = f"{slope['slope']:+.4f} ± {slope['stderr']:.4f} nats a decade ({n_p(slope)})"
    test = (mult.get("softq") or {}).get("test")
    if m.get("geomean") and test:
        ci = m.get("ci95") or [float("nan")] * 2
        short["MIR is worth more unique data (effective-data multiplier)"] = (
            f"{m['geomean']:.2f}x (95% CI {ci[0]:.2f}-{ci[1]:.2f}); against the baseline's own cells {n_p(test)}")
    for kind, claim in (("in_sample", "SoftQ fits better than Chinchilla"),
                        ("extrapolation", "SoftQ extrapolates better than Chinchilla (largest U held out)")):
        if lt(kind):
            short[claim] = f"baseline MAE {lt(kind)['softq_mae']:.4f} vs {lt(kind)['chinchilla_mae']:.4f} ({n_p(lt(kind))})"
    if f.get("p") is not None:
        short["the loss gap between data budgets grows with model size (fan-out)"] = (
            f"baseline {f['slope']:+.3f} ± {f['stderr']:.3f} nats a decade (CI {f['ci95'][0]:+.3f} to "
            f"{f['ci95'][1]:+.3f}; {n_p(f)})")
    c = t["strong_vs_tuned"]
    if t["cells"] and c.get("p") is not None:
        short["strong decay tuned for AR improves the masked-diffusion model"] = (
            f"MDLM at {ax['mdlm'][0]['wd_mdlm-strong']:g} vs at the AR-tuned decay {c['diff']:+.3f} nats ({n_p(c)}; "
            "only where the two differ)")
        short["strong decay closes most of the AR-MDLM gap"] = (
            f"gap {t['gap_tuned']:.2f} -> {t['gap_strong']:.2f} nats ({n_p(c)})")
    lines = ["| the paper's claim | the paper | ours (test) | verdict |", "|---|---|---|---|"]
    lines += [f"| {v['claim']} | {v['paper']} | {short.get(v['claim']) or v['ours']} | **{v['verdict']}** |" for v in vs]
    return {"title": "Each claim beside the paper's number (its cells in RESULTS.md)",
            "lines": lines, "readme_only": True}  # RESULTS.md has the full verdict table
