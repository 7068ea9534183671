"""
Analysis, report and figures of experiments/data_constrained.py (MIR, strong decay, MDLM, the laws).
Xu et al., arXiv 2606.06888: the laws of scaling.py fitted per method, MIR's gain and effective-data multiplier, where the gain sits by token frequency, AR vs MDLM.

Every statistic here is computed from the records `collect` builds (one per grid run, with its
full-validation loss), and report.json holds those records, so each table can be recomputed.
"""

import csv
import json
import math
import statistics
import time

import numpy as np

import scaling
from experiments.lib.common import write_text as common_write_text  # noqa: E402
from experiments import data_constrained as dc
from experiments.lib.common import fmt_mean_std, hardware, mean_std, pyplot, read_summary, save_figure, settings_json, write_json

PAPER = {
    "mir_gain": "MIR lowers the validation loss at every size, more at larger sizes: ~0.006 nats at 72M "
                "up to ~0.03 at 1.4B parameters",
    "laws": "SoftQ fits and extrapolates best; Chinchilla is mis-specified because the loss gap between "
            "data budgets grows with model size (fan-out)",
    "multiplier": "MIR is worth ~1.3x more unique data (under the baseline's SoftQ fit)",
    "ar_mdlm": "strong weight decay tuned for AR also improves dLLMs substantially and closes most of the "
               "AR-dLLM gap",
    "setup": "72M-1.4B parameters, 16-32 epochs, decay tuned 0.4-3.2 (0.2-3.2 by size), AdamW lr 1e-3..1e-2",
}


# ---------------------------------------------------------------------------------------------
# records

def collect(a, sweep, grid, strong):
    """{"sweep": [...], "runs": [...]}: one record per sweep run and per (method, grid run),
    with its full-validation loss (evaluated now from the final checkpoint if not cached)."""
    def record(r):
        rec = dict(r.meta, name=r.name)
        s = read_summary(r.folder)
        if s is None:
            rec["status"] = "diverged" if (r.folder / "diverged.json").exists() else "not run"
            return rec
        st = s["stages"][0]
        e = dc.evaluate_run(r, dc.stage_corpus(s["args"]))
        rec.update(status="done", N=s["params"], params_total=s["params_total"], U_true=st["unique_tokens"],
                   D=st["tokens"], epochs=st["epochs"], steps=st["iters"], loss=e["loss"], loss_kind=e["kind"],
                   val_tokens=e["tokens"], summary_val_loss=st["val_loss"], train_loss=st["train_loss"],
                   unigram_val_ppl=st.get("unigram_val_ppl"), seconds=s["seconds"])
        return rec
    return {"sweep": [record(r) for r in sweep], "runs": [record(r) for r in grid],
            "strong": {k: {"wd": v[0], "lr": v[1]} for k, v in strong.items()}}


def done(records, method=None):
    return [r for r in records["runs"] if r["status"] == "done" and (method is None or r["method"] == method)]


def cells(runs):
    """Seed-averaged cells: {(N, U): dict(N, U, D, loss, losses, size)} in (N, U) order."""
    out = {}
    for r in runs:
        c = out.setdefault((r["N"], r["U_true"]), dict(N=r["N"], U=r["U_true"], D=[], losses=[], size=r["size"]))
        c["D"].append(r["D"])
        c["losses"].append(r["loss"])
    for c in out.values():
        c["D"], c["loss"] = float(np.mean(c["D"])), float(np.mean(c["losses"]))
    return dict(sorted(out.items()))


def write_csv(path, runs):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["N", "U", "D", "loss", "method", "seed"])
        for r in runs:
            w.writerow([r["N"], r["U_true"], r["D"], repr(float(r["loss"])), r["method"], r["seed"]])


# ---------------------------------------------------------------------------------------------
# statistics

def fit_laws(a, records):
    """Per method: the data's fan-out and, per law, the fit on the seed-averaged cells (params,
    RMSE, MAE, fan-out of the fitted surface) and the extrapolation to the largest U."""
    laws = a.laws.split(",") if a.laws else list(scaling.LAWS)
    out = {}
    for method in a.fit_methods:
        cs = list(cells(done(records, method)).values())
        if not cs:
            continue
        N, U, D, L = (np.array([c[k] for c in cs], float) for k in ("N", "U", "D", "loss"))
        res = {"cells": len(cs), "laws": {}}
        try:
            res["fan_out_data"] = scaling.fan_out(N, U, L)
        except ValueError as e:
            res["fan_out_data"] = None
            res["fan_out_note"] = str(e)
        for law in laws:
            k = len(scaling.PARAMS[law])
            if len(cs) < k:
                res["laws"][law] = {"note": f"{len(cs)} cells < {k} parameters"}
                continue
            t0 = time.time()
            f = scaling.fit(law, N, U, D, L)
            r = {"params": f.params, "rmse": f.rmse, "mae": f.mae}
            try:
                r["fan_out_fit"] = scaling.fan_out(N, U, f.predict(N, U, D))
            except ValueError:
                r["fan_out_fit"] = None
            if (U < U.max()).sum() >= k:
                x = scaling.extrapolate(law, N, U, D, L)
                r["extrapolation"] = {"budget": x.budget, "rmse": x.rmse, "mae": x.mae, "params": x.fit.params}
            r["seconds"] = time.time() - t0
            res["laws"][law] = r
        out[method] = res
    return out


def mir_gain(records):
    """Per (size, U): loss(wd) - loss(wd+mir) paired by seed (positive = MIR better)."""
    base = {(r["size"], r["U"], r["seed"]): r for r in done(records, "wd")}
    rows = {}
    for r in done(records, "wd+mir"):
        b = base.get((r["size"], r["U"], r["seed"]))
        if b:
            c = rows.setdefault((r["N"], r["U"]), dict(size=r["size"], N=r["N"], U=r["U"], gains=[], wd=[], mir=[]))
            c["gains"].append(b["loss"] - r["loss"])
            c["wd"].append(b["loss"])
            c["mir"].append(r["loss"])
    out = []
    for (_, _), c in sorted(rows.items()):
        m, s, n = mean_std(c["gains"])
        c.update(mean=m, std=s, n=n, p_paired=paired_p(c["wd"], c["mir"]))
        out.append(c)
    return out


def paired_p(x, y):
    """Two-sided p of the paired t-test (scipy.stats.ttest_rel); None below 2 pairs or no spread."""
    from scipy import stats
    d = np.subtract(x, y)
    if len(d) < 2 or np.std(d) == 0:
        return None
    return float(stats.ttest_rel(x, y).pvalue)


def multipliers(fits, records):
    """MIR's effective-data multiplier per wd+mir cell under the baseline's SoftQ (and Chinchilla)
    fit, and the baseline's own cells under its own fit (the calibration: 1 for a perfect fit)."""
    out = {}
    for law in ("softq", "chinchilla"):
        f = fits.get("wd", {}).get("laws", {}).get(law, {})
        if "params" not in f:
            continue
        res = {}
        for method in ("wd+mir", "wd"):
            cs = list(cells(done(records, method)).values())
            if not cs:
                continue
            N, U, D, L = (np.array([c[k] for c in cs], float) for k in ("N", "U", "D", "loss"))
            m = scaling.effective_data_multiplier(law, f["params"], N, U, L, D)
            ok = m[np.isfinite(m)]
            res[method] = {"cells": [dict(size=c["size"], N=c["N"], U=c["U"], multiplier=float(x)) for c, x in zip(cs, m)],
                           "geomean": float(np.exp(np.log(ok).mean())) if len(ok) else None,
                           "median": float(np.median(ok)) if len(ok) else None, "finite": int(len(ok)), "n": len(m)}
        out[law] = res
    return out


def ar_vs_mdlm(records):
    """Per (size, U): seed-0 losses of ar-weak, wd, mdlm-weak, mdlm-strong and the gaps (MDLM - AR)."""
    by = {}
    for r in done(records):
        if r["method"] in ("ar-weak", "wd", "mdlm-weak", "mdlm-strong") and r["seed"] == 0:
            by.setdefault((r["N"], r["U"]), dict(size=r["size"], N=r["N"], U=r["U"]))[r["method"]] = r["loss"]
    rows = []
    for _, c in sorted(by.items()):
        g = lambda m1, m2: c[m1] - c[m2] if m1 in c and m2 in c else None
        c.update(gap_weak=g("mdlm-weak", "ar-weak"), gap_strong=g("mdlm-strong", "wd"),
                 mdlm_decay_gain=g("mdlm-weak", "mdlm-strong"), ar_decay_gain=g("ar-weak", "wd"))
        rows.append(c)
    return rows


# ---------------------------------------------------------------------------------------------
# report

def fmt(x, f="{:.3f}"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f.format(x)


def signed_pm(g):
    """'+0.0123 ± 0.0045' (mean with sign, std without) or '+0.0123' for one seed."""
    return f"{g['mean']:+.4f}" + (f" ± {g['std']:.4f}" if g["n"] > 1 else "")


def slope_per_decade(rows, key):
    """Least-squares slope of rows[key] against log10 N (None below 2 sizes)."""
    pts = [(math.log10(r["N"]), r[key]) for r in rows if r.get(key) is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    return float(np.polyfit(*zip(*pts), 1)[0])


def setup_lines(a, records, fit_seconds, timings):
    runs = done(records)
    sizes = {}
    for r in runs + [r for r in records["sweep"] if r["status"] == "done"]:
        sizes.setdefault(r["size"], r)
    U_true = sorted({r["U_true"] for r in runs})
    secs = sum(r["seconds"] for r in {r["name"]: r for r in runs + records["sweep"] if r["status"] == "done"}.values())
    n_runs = len({r["name"] for r in runs + records["sweep"] if r["status"] == "done"})
    lines = ["## Setup", "",
             f"- Hardware: {hardware()}. {n_runs} training runs, {secs / 60:.1f} min of training in all (train.run's "
             f"seconds, summed; runs went {a.jobs} at a time)"
             + (f"; wall time of the {len(timings)} invocation(s) that trained (training and evaluation): "
                f"{sum(v for t in timings for k, v in t.items() if k.endswith('_seconds')) / 60:.1f} min"
                if timings else "") + f"; the fits {fit_seconds / 60:.1f} min.",
             f"- Corpus: stage `{a.stage}`; the U unique tokens are "
             + ("U/(block+1) whole chunks drawn uniformly across the training stream (--music-chunks, data seed 0)"
                if a.subset == "chunks" else "the first U training tokens")
             + f"; the loss is every run's final checkpoint on the whole validation split "
             f"({next((r['val_tokens'] for r in runs if r['loss_kind'] == 'nll'), '?'):,} targets; AR: NLL per token, "
             "MDLM: the NLL bound per token, the same fixed masks for every run).",
             f"- Budgets U = {', '.join(f'{u:,}' for u in U_true)} tokens, {a.epochs:g} epochs each (D = tokens seen "
             f"= steps x {a.batch_size} x {a.block_size}); batch {a.batch_size} x {a.block_size}, AdamW (0.9, 0.95), "
             f"cosine lr to lr/10, warmup {a.warmup_frac:.0%} of the steps, grad clip 1; decay on attention/MLP matrices only.",
             f"- Methods: {', '.join(a.methods)}. Seeds 0..{a.seeds - 1} for wd and wd+mir in the {a.seeded_sizes} "
             f"smallest size(s), seed 0 elsewhere. MIR: lambda {a.mir_lambda:g}, ratio {a.mir_ratio}, keep-first "
             f"{a.mir_keep_first}. Weak decay {a.weak_decay:g} (train.py's default).", "",
             "| size | layers x width | N (non-embedding) | parameters in all | strong decay (sweep) | lr |",
             "|---|---|---|---|---|---|"]
    missing = {r["name"]: r["status"] for r in records["runs"] + records["sweep"] if r["status"] != "done"}
    if missing:
        lines[-3:-3] = [f"- Missing from every table: {len(missing)} run(s): "
                        + ", ".join(f"{n} ({s})" for n, s in sorted(missing.items())) + "."]
    for label, L, d, h in a.sizes:
        r = sizes.get(label)
        st = records["strong"].get(label) or {}
        lines.append(f"| {label} | {L} x {d} ({h} heads) | {r['N']:,} | {r['params_total']:,} | {st.get('wd', '-'):g} | "
                     f"{st.get('lr', float('nan')):g} |" if r else f"| {label} | {L} x {d} | not run | | | |")
    return lines + [""]


def sweep_lines(a, records):
    lines = [f"## 1. Weight-decay sweep (AR, U = {a.sweep_budget:,} nominal, {a.epochs:g} epochs, seed 0)", "",
             "Full-validation loss (nats/token); **bold** = the lowest, used as that size's strong decay by every "
             "method. The authors tune 0.4-3.2 with lr 1e-3..1e-2.", "",
             "| size | lr | " + " | ".join(f"wd {d:g}" for d in a.decays) + " |", "|---|---|" + "---|" * len(a.decays)]
    for label, *_ in a.sizes:
        for lr in a.lrs:
            st = records["strong"].get(label) or {}
            cells_ = []
            for d in a.decays:
                r = next((r for r in records["sweep"] if r["size"] == label and r["wd"] == d and r["lr"] == lr), None)
                v = fmt(r.get("loss")) if r and r["status"] == "done" else (r["status"] if r else "-")
                cells_.append(f"**{v}**" if st.get("wd") == d and st.get("lr") == lr else v)
            lines.append(f"| {label} | {lr:g} | " + " | ".join(cells_) + " |")
    return lines + [""]


def mir_lines(gains):
    lines = ["## 2. MIR against the strong-decay baseline", "", f"Paper: {PAPER['mir_gain']}.", "",
             "Gain = loss(wd) - loss(wd+mir), paired by seed (positive: MIR lowers the loss); mean ± std over "
             "seeds, n seeds; p: paired t-test where n >= 2.", "",
             "| size | N | U | wd | wd+mir | gain | n | p |", "|---|---|---|---|---|---|---|---|"]
    for g in gains:
        lines.append(f"| {g['size']} | {g['N']:,} | {g['U']:,} | {fmt_mean_std(g['wd'])} | {fmt_mean_std(g['mir'])} | "
                     f"{signed_pm(g)} | {g['n']} | {fmt(g['p_paired'], '{:.3f}')} |")
    by_size = {}
    for g in gains:
        c = by_size.setdefault((g["N"], g["size"]), dict(means=[], wd=[], mir=[]))
        c["means"].append(g["mean"])
        c["wd"] += g["wd"]
        c["mir"] += g["mir"]
    per = []
    for (n, size), c in sorted(by_size.items()):
        d = np.subtract(c["wd"], c["mir"])
        per.append(dict(N=n, size=size, gain=statistics.mean(c["means"]), cells_positive=sum(x > 0 for x in c["means"]),
                        cells=len(c["means"]), pairs=len(d), pairs_positive=int((d > 0).sum()),
                        p_paired=paired_p(c["wd"], c["mir"])))
    slope = slope_per_decade(per, "gain")
    lines += ["", "Per size, over its budgets: mean of the cells' gains; the cells and the (U, seed) pairs where "
              "MIR is lower; p: paired t-test over all the size's pairs.", "",
              "| size | N | mean gain | cells with MIR lower | pairs with MIR lower | p |", "|---|---|---|---|---|---|"]
    lines += [f"| {p['size']} | {p['N']:,} | {p['gain']:+.4f} | {p['cells_positive']} of {p['cells']} | "
              f"{p['pairs_positive']} of {p['pairs']} | {fmt(p['p_paired'], '{:.3g}')} |" for p in per]
    if slope is not None:
        lines += ["", f"Slope of the mean gain against log10 N: {slope:+.4f} nats per decade ("
                  f"{'grows' if slope > 0 else 'shrinks'} with size; the paper's grows, by ~0.024 nats over its "
                  "1.3 decades, ~0.019 per decade)."]
    return lines + [""], {"per_size": per, "slope_per_decade": slope}


def law_lines(fits):
    lines = ["## 3. Scaling laws per method", "", f"Paper: {PAPER['laws']}.", "",
             "Fitted on the seed-averaged cells (approach 3: Huber on log L, L-BFGS from a grid; scaling.py). "
             "Extrapolation: fitted without the largest U, error on it. Fan-out: slope of L(smallest U) - L(largest "
             "U) per decade of N, of the data and of each fitted surface (0 for an additive law). Muennighoff: its "
             "two-step fit takes its base law from single-epoch runs, and the grid has none (every run repeats its "
             "U for the same number of epochs, so R_D = D/U - 1 is one value for all rows): scaling.py then fits "
             "the base on repeated-data rows and R_D*, R_N* are not identified, so its row is no test of that law. "
             "MDLM's losses are NLL bounds.", ""]
    verdict = {}
    for method, res in fits.items():
        lines += [f"### {method} ({res['cells']} cells; fan-out of the data {fmt(res['fan_out_data'], '{:+.4f}')} "
                  "nats per decade of N)", "",
                  "| law | RMSE | MAE | extrap. RMSE | extrap. MAE | fan-out of fit | parameters |",
                  "|---|---|---|---|---|---|---|"]
        for law, r in res["laws"].items():
            if "params" not in r:
                lines.append(f"| {law} | {r['note']} | | | | | |")
                continue
            x = r.get("extrapolation", {})
            lines.append(f"| {law} | {r['rmse']:.4f} | {r['mae']:.4f} | {fmt(x.get('rmse'), '{:.4f}')} | "
                         f"{fmt(x.get('mae'), '{:.4f}')} | {fmt(r['fan_out_fit'], '{:+.4f}')} | "
                         + " ".join(f"{k}={v:.4g}" for k, v in r["params"].items()) + " |")
        fitted = {k: v for k, v in res["laws"].items() if "params" in v}
        if fitted:
            best_in = min(fitted, key=lambda k: fitted[k]["rmse"])
            ext = {k: v["extrapolation"]["rmse"] for k, v in fitted.items() if "extrapolation" in v}
            best_ext = min(ext, key=ext.get) if ext else None
            verdict[method] = {"best_in_sample": best_in, "best_extrapolation": best_ext}
            lines += ["", f"Lowest in-sample RMSE: **{best_in}**; lowest extrapolation RMSE: **{best_ext or '-'}**.", ""]
    return lines, verdict


def multiplier_lines(mult):
    lines = ["## 4. MIR's effective-data multiplier", "", f"Paper: {PAPER['multiplier']}.", "",
             "U* / U where the baseline's (wd) fitted law at the cell's N and D reaches the wd+mir loss "
             "(scaling.effective_data_multiplier; > 1: MIR is worth more data). The same computation on the "
             "baseline's own cells shows what the fit's residuals alone give (1 for a perfect fit).", ""]
    for law, res in mult.items():
        def summ(k):
            r = res.get(k)
            if not r or r["geomean"] is None:
                return "-"
            xs = [c["multiplier"] for c in r["cells"] if math.isfinite(c["multiplier"])]
            return (f"geometric mean {r['geomean']:.2f}x, median {r['median']:.2f}x, range {min(xs):.2f}-{max(xs):.2f}x "
                    f"({r['finite']} of {r['n']} cells inside the bracket)")
        lines += [f"- under the wd {law} fit: wd+mir {summ('wd+mir')}; wd itself {summ('wd')}."]
    if "softq" in mult and "wd+mir" in mult["softq"]:
        own = {(c["N"], c["U"]): c["multiplier"] for c in mult["softq"].get("wd", {}).get("cells", [])}
        lines += ["", "| size | U | wd+mir (SoftQ) | wd's own cell |", "|---|---|---|---|"]
        lines += [f"| {c['size']} | {c['U']:,} | {fmt(c['multiplier'], '{:.2f}x')} | {fmt(own.get((c['N'], c['U'])), '{:.2f}x')} |"
                  for c in mult["softq"]["wd+mir"]["cells"]]
    return lines + [""]


def budget_keys(tok):
    """The per-budget subsets of the per-token analysis, 'U=...', in increasing U."""
    return sorted((k for k in tok["buckets"] if k.startswith("U=")), key=lambda k: int(k[2:]))


def token_lines(tok, a):
    if not tok:
        return ["## 5. Where the gain sits", "", "No matched wd / wd+mir pair finished.", ""]
    lines = ["## 5. Where MIR's gain sits (per token)", "",
             f"{tok['pairs']} matched pairs (same size, U, seed). Gain per validation target = CE(wd) - CE(wd+mir) "
             "(positive: MIR better); buckets by the target token's count in that run's training subset (its U "
             f"tokens). Total gain per pair: {tok['total_gain_per_pair']:+.1f} nats summed over the validation "
             "targets; the share column splits it by bucket (shown only when the total is positive).", "",
             "| training count | targets per pair | CE wd | CE wd+mir | mean gain | summed gain per pair | share |",
             "|---|---|---|---|---|---|---|"]
    for b in tok["buckets"]["all"]:
        lines.append(f"| {b['bucket']} | {b['targets_per_pair']:,.0f} | {b['ce_wd']:.3f} | {b['ce_mir']:.3f} | "
                     f"{b['gain']:+.4f} | {b['gain_per_pair']:+.1f} | {fmt(b['share'], '{:.0%}')} |")
    keys = budget_keys(tok) + [f"size={label}" for label, *_ in a.sizes if f"size={label}" in tok["buckets"]]
    labels = [b["bucket"] for b in tok["buckets"]["all"]]
    lines += ["", "Mean gain per bucket, by budget and by size:", "",
              "| subset | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for k in keys:
        d = {b["bucket"]: b["gain"] for b in tok["buckets"][k]}
        lines.append(f"| {k} | " + " | ".join(fmt(d.get(l), "{:+.4f}") for l in labels) + " |")
    for title, key in ((f"Tokens with the largest summed gain (top {a.top_tokens})", "top_tokens"),
                       ("Tokens MIR hurts most", "bottom_tokens")):
        lines += ["", f"{title}:", "", "| token | id | targets per pair | mean gain | summed gain per pair | share |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {t['token']} | {t['id']} | {t['targets_per_pair']:.0f} | {t['mean_gain']:+.4f} | "
                  f"{t['gain_per_pair']:+.2f} | {fmt(t['share'], '{:.1%}')} |" for t in tok[key]]
    lines += ["", "Gain by position in the window (MIR never masks the first keep-first positions): "
              + "; ".join(f"{p['positions']}: {p['gain']:+.4f}" for p in tok["by_position"]) + ".", ""]
    return lines


def mdlm_lines(rows, records, a):
    same = [k for k, v in records["strong"].items() if v and v["wd"] == a.weak_decay]
    lines = ["## 6. AR vs masked diffusion (MDLM) at weak and strong decay", "", f"Paper: {PAPER['ar_mdlm']}.", "",
             f"Seed 0. Weak = {a.weak_decay:g}; strong = the decay tuned for AR (section 1), the same for MDLM. "
             "Gap = MDLM - AR (positive: AR lower). MDLM's loss is its NLL bound, an upper bound on its NLL, so "
             "the gap overstates MDLM's deficit. MDLM sees the same tokens (same steps and batches)."
             + (f" For {', '.join(same)} the sweep chose the weak decay itself, so weak and strong are the same "
                "runs there." if same else ""), "",
             "| size | U | AR weak | AR strong | MDLM weak | MDLM strong | gap weak | gap strong |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['size']} | {r['U']:,} | {fmt(r.get('ar-weak'))} | {fmt(r.get('wd'))} | "
                     f"{fmt(r.get('mdlm-weak'))} | {fmt(r.get('mdlm-strong'))} | {fmt(r['gap_weak'], '{:+.3f}')} | "
                     f"{fmt(r['gap_strong'], '{:+.3f}')} |")
    m = lambda k: statistics.mean([r[k] for r in rows if r.get(k) is not None]) if any(r.get(k) is not None for r in rows) else None
    summ = {k: m(k) for k in ("gap_weak", "gap_strong", "mdlm_decay_gain", "ar_decay_gain")}
    if summ["gap_weak"] is not None and summ["gap_strong"] is not None:
        closed = 1 - abs(summ["gap_strong"]) / abs(summ["gap_weak"]) if summ["gap_weak"] else None
        summ["gap_closed"] = closed
        lines += ["", f"Mean over cells: gap {summ['gap_weak']:+.3f} at weak decay, {summ['gap_strong']:+.3f} at strong "
                  f"decay ({fmt(closed, '{:.0%}')} of it closed); strong decay changes MDLM by "
                  f"{fmt(summ['mdlm_decay_gain'], '{:+.3f}')} and AR by {fmt(summ['ar_decay_gain'], '{:+.3f}')} "
                  "(positive: lower loss with strong decay).", ""]
    return lines, summ


FAN_FLAT = 0.01  # nats of budget gap per decade of N below which the fan-out counts as none


def honest_lines(a, records, gains, fits, verdict, mult, mdlm):
    """The report's closing sentences: each finding beside the paper's, with what limits it."""
    lines = ["## Reading", ""]
    if gains:
        pos = sum(g["mean"] > 0 for g in gains)
        spread = [g["std"] for g in gains if g["n"] > 1]
        lines.append(f"- MIR lowers the loss in {pos} of {len(gains)} cells (the paper: at every size). Its gain is "
                     f"{statistics.mean(g['mean'] for g in gains):+.4f} nats on average"
                     + (f", against seed standard deviations of the gain up to {max(spread):.4f}" if spread else "") + ".")
    for m, v in verdict.items():
        fan = fits[m].get("fan_out_data")
        grows = ("the gap between the smallest and largest U grows with N, as in the paper" if fan and fan > FAN_FLAT
                 else "the gap between budgets shrinks as N grows here" if fan and fan < -FAN_FLAT
                 else f"flat within {FAN_FLAT} nats per decade: no fan-out here")
        lines.append(f"- {m}: {v['best_in_sample']} fits best in-sample, {v['best_extrapolation'] or '-'} extrapolates "
                     f"best (the paper: SoftQ for both)" + (f"; the data's fan-out is {fan:+.3f} nats per decade of N: "
                                                            f"{grows}" if fan is not None else "") + ".")
    s = mult.get("softq", {}).get("wd+mir", {})
    if s.get("geomean"):
        lines.append(f"- Effective data: MIR is worth ~{s['geomean']:.2f}x the unique data under the baseline's SoftQ "
                     "fit (the paper: ~1.3x); the baseline's own cells under the same fit show how much of that the "
                     "fit's residuals alone produce.")
    if mdlm.get("gap_closed") is not None:
        lines.append(f"- AR vs MDLM: the gap is {mdlm['gap_weak']:+.3f} nats at weak decay and {mdlm['gap_strong']:+.3f} "
                     "at the AR-tuned decay (the paper: strong decay closes most of it); MDLM's number is a bound.")
    runs = done(records)
    if runs:
        lines.append(f"- Scale: {min(r['N'] for r in runs):,}-{max(r['N'] for r in runs):,} non-embedding parameters, "
                     f"at most {max(r['D'] for r in runs):,} tokens seen, the `{a.stage}` corpus; the paper: 72M-1.4B "
                     "parameters on web text for 16-32 epochs of far larger U. Its MIR gains (0.006-0.03 nats) are "
                     "of the order of our seed spread, so only effects clearly above the spread count as seen."
                     + (" This --quick run is a smoke test of the pipeline (tiny budgets, few steps), not evidence."
                        if a.quick else ""))
    return lines + [""]


def write_report(a, records, t0, phases=None):
    out, t_fits = a.out, time.time()
    runs = done(records)
    write_csv(out / "runs.csv", runs)
    for m in a.methods:
        write_csv(out / f"runs-{m.replace('+', '_')}.csv", done(records, m))
    fits = fit_laws(a, records)
    gains = mir_gain(records)
    mult = multipliers(fits, records)
    tok = dc.per_token(a, records)
    mdlm = ar_vs_mdlm(records)
    lines = [f"# Data-constrained pre-training: MIR, strong decay, masked diffusion, scaling laws{' (--quick)' if a.quick else ''}",
             "", "Xu et al., arXiv 2606.06888 (PAPERS.md section 3). The paper: " + "; ".join(
                 PAPER[k] for k in ("mir_gain", "laws", "multiplier", "ar_mdlm")) + f". Its setup: {PAPER['setup']}.", ""]
    timings = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else []
    lines += setup_lines(a, records, time.time() - t_fits, timings) + sweep_lines(a, records)
    ml, gain_summary = mir_lines(gains)
    ll, verdict = law_lines(fits)
    dl, mdlm_summary = mdlm_lines(mdlm, records, a)
    lines += ml + ll + multiplier_lines(mult) + token_lines(tok, a) + dl
    lines += honest_lines(a, records, gains, fits, verdict, mult, mdlm_summary)
    lines += ["Figures: `laws.png` (loss vs N per U, each law's fitted curves, wd and wd+mir), `mir_gain.png`, "
              "`gain_by_frequency.png`, `ar_vs_mdlm.png`, `wd_sweep.png`. Every run: `report.json` and "
              "`runs.csv` (N,U,D,loss,method,seed; `runs-<method>.csv` per method, for `python scaling.py compare`); "
              "run folders `runs/<objective>-<size>-U<U>-wd<decay>-lr<lr>-s<seed>/` (val_eval.json holds the "
              "full-validation loss).", ""]
    text = "\n".join(lines)
    common_write_text(out / "report.md", text)
    write_json(out / "report.json", {
        "paper": PAPER, "hardware": hardware(), "wall_seconds": time.time() - t0, "phase_seconds": phases,
        "timings": timings,
        "settings": settings_json(a),
        "strong": records["strong"], "sweep": records["sweep"], "runs": records["runs"], "fits": fits,
        "verdict": verdict, "mir_gain": gains, "mir_gain_summary": gain_summary, "multipliers": mult,
        "per_token": tok, "ar_vs_mdlm": mdlm, "ar_vs_mdlm_summary": mdlm_summary})
    plot_all(a, records, fits, gains, tok, mdlm)
    return text


# ---------------------------------------------------------------------------------------------
# figures

def log_x(ax):
    """Log x axis with labels on the decades only (minor labels overlap at small ranges)."""
    from matplotlib.ticker import NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_all(a, records, fits, gains, tok, mdlm):
    plt = pyplot()
    laws = [law for law in (a.laws.split(",") if a.laws else scaling.LAWS)]
    methods = [m for m in ("wd", "wd+mir") if m in fits]
    if methods:
        fig, axes = plt.subplots(len(methods), len(laws), figsize=(3.6 * len(laws), 3.2 * len(methods)),
                                 squeeze=False, sharex=True, sharey=True)
        for row, m in zip(axes, methods):
            cs = list(cells(done(records, m)).values())
            Us = sorted({c["U"] for c in cs})
            colors = plt.cm.viridis(np.linspace(0, 0.85, len(Us)))
            grid = np.geomspace(min(c["N"] for c in cs), max(c["N"] for c in cs), 60)
            for ax, law in zip(row, laws):
                f = fits[m]["laws"].get(law, {})
                for u, col in zip(Us, colors):
                    pts = [c for c in cs if c["U"] == u]
                    ax.scatter([c["N"] for c in pts], [c["loss"] for c in pts], color=col, s=14, label=f"U={u:,}")
                    if "params" in f:
                        D = np.full_like(grid, np.mean([c["D"] for c in pts]))
                        ax.plot(grid, scaling.predict(law, f["params"], grid, np.full_like(grid, u), D), color=col, lw=1)
                log_x(ax)
                ax.set(title=f"{m}: {law}" + (f" (RMSE {f['rmse']:.4f})" if "rmse" in f else ""))
                ax.grid(alpha=0.3)
            row[0].set_ylabel("validation loss")
        axes[0][0].legend(fontsize=7)
        for ax in axes[-1]:
            ax.set_xlabel("N (non-embedding parameters)")
        fig.tight_layout()
        save_figure(fig, a.out / "laws.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for u in sorted({g["U"] for g in gains}):
        gs = [g for g in gains if g["U"] == u]
        ax.errorbar([g["N"] for g in gs], [g["mean"] for g in gs], yerr=[g["std"] for g in gs], marker="o",
                    capsize=3, label=f"U={u:,}")
    ax.axhline(0, color="k", lw=0.8)
    log_x(ax)
    ax.set(xlabel="N (non-embedding parameters)", ylabel="loss(wd) - loss(wd+mir)",
           title="MIR's gain (positive = MIR better)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, a.out / "mir_gain.png")

    if tok:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        labels = [b["bucket"] for b in tok["buckets"]["all"]]
        x = np.arange(len(labels))
        keys = budget_keys(tok)
        for j, k in enumerate(keys):
            d = {b["bucket"]: b["gain"] for b in tok["buckets"][k]}
            axes[0].bar(x + (j - (len(keys) - 1) / 2) * 0.8 / len(keys), [d.get(l, 0) for l in labels],
                        0.8 / len(keys), label=k)
        axes[0].set(xticks=x, xticklabels=labels, xlabel="target's count in the training subset",
                    ylabel="mean gain per target (nats)", title="MIR's gain by token frequency")
        axes[0].legend(fontsize=8)
        axes[1].bar(x, [b["gain_per_pair"] for b in tok["buckets"]["all"]])
        axes[1].set(xticks=x, xticklabels=labels, xlabel="target's count in the training subset",
                    ylabel="summed gain per pair (nats)", title="where the summed gain comes from (all pairs)")
        for ax in axes:
            ax.axhline(0, color="k", lw=0.8)
            ax.tick_params(axis="x", labelsize=7)
        fig.tight_layout()
        save_figure(fig, a.out / "gain_by_frequency.png")

    Us = sorted({r["U"] for r in mdlm})
    fig, axes = plt.subplots(1, max(1, len(Us)), figsize=(4 * max(1, len(Us)), 3.6), squeeze=False, sharey=True)
    style = {"ar-weak": ("tab:blue", "--", "s"), "wd": ("tab:blue", "-", "o"), "mdlm-weak": ("tab:red", "--", "s"),
             "mdlm-strong": ("tab:red", "-", "o")}
    for ax, u in zip(axes[0], Us):
        rs = [r for r in mdlm if r["U"] == u]
        for m, (col, ls, mk) in style.items():
            pts = [(r["N"], r[m]) for r in rs if m in r]
            if pts:
                ax.plot(*zip(*pts), color=col, ls=ls, marker=mk, mfc="none" if ls == "--" else col, ms=7 if ls == "--" else 4,
                        label=m.replace("wd", "ar-strong") if m == "wd" else m)
        log_x(ax)
        ax.set(title=f"U = {u:,}", xlabel="N (non-embedding parameters)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation loss (MDLM: NLL bound)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, a.out / "ar_vs_mdlm.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, *_ in a.sizes:
        for lr in a.lrs:
            pts = [(r["wd"], r["loss"]) for r in records["sweep"] if r["size"] == label and r["lr"] == lr
                   and r["status"] == "done"]
            if pts:
                ax.plot(*zip(*sorted(pts)), marker="o", label=label + (f" lr {lr:g}" if len(a.lrs) > 1 else ""))
    log_x(ax)
    ax.set(xlabel="weight decay", ylabel="validation loss", title=f"decay sweep (U = {a.sweep_budget:,})")
    ax.set_xticks(a.decays, [f"{d:g}" for d in a.decays])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, a.out / "wd_sweep.png")
