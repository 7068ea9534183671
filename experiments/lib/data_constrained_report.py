"""
Analysis, report and figures of experiments/data_constrained.py (MIR, strong decay, MDLM, the laws).
Xu et al., "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling Laws",
arXiv 2606.06888: MIR (Loss = NTP(x, y) + lambda NTP(x^, y), x^ a masked copy of x), the laws of
scaling.py fitted per method (SoftQ: L = E + (A / N^rho + B / U^(rho / (1 + alpha)))^(alpha / rho)),
MIR's gain and effective-data multiplier, where the gain sits by token frequency, AR vs MDLM.

    records = collect(a, sweep, grid, strong)   # from the run folders: losses, fits, per-token sums
    render(records, out)                        # report.md, report.json, runs.csv, the PNGs
    records = read_records(out)                 # the same records back from report.json

collect does what needs the run folders or takes minutes (the full-validation losses, the law
fits, the per-token analysis); render reads nothing but the records, so a report rebuilt from
report.json alone (the run folders gone) is byte-identical to the one built from the runs, and
every figure is drawn from the records too. Every reading is the reading rule's
(common.compare for Welch's test, common.slope_test, `paired` here for the t-test paired by seed
or by cell): a difference is an effect only at p < 0.05 with n >= 3 on each side.
"""

import argparse
import csv
import io
import json
import math
import statistics
from pathlib import Path

import numpy as np

import scaling
from experiments.lib.common import (ALPHA, COMBINED_RULE, MIN_N, VERDICTS, combined_verdict, compare, fmt_mean_std,
                                    fmt_p, kept_provenance, mean_std, paired, provenance_line, pyplot, read_summary,
                                    reading, save_figure, settings_json, slope_test, verdict_of, write_json,
                                    write_text)
from experiments.lib import data_constrained_authors as dca
from experiments.lib.data_constrained_tokens import per_token
from experiments.lib.evaluate import evaluate_run

SOURCE = {"arxiv": "2606.06888",
          "title": "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling Laws"}
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
FIGURES = ["mir_gain.png", "laws.png", "ar_vs_mdlm.png", "gain_by_frequency.png", "wd_sweep.png"]
RECORD_KEYS = ("settings", "strong", "sweep", "runs", "fits", "per_token", "scan")
AR_METHODS = ("wd", "wd+mir", "ar-weak")  # the fan-out and law claims are the paper's for AR models


# ---------------------------------------------------------------------------------------------
# collect: from the run folders

def collect(a, sweep, grid, strong, scan=None):
    """The records a report is rendered from: the settings (those a report.json kept, if `a` came
    from one; never --report-only), the strong decay per size, one record per sweep run and per
    (method, grid run) with its full-validation loss (evaluate_run, cached in the run folder),
    the law fits and the per-token analysis."""
    def record(r):
        rec = dict(r.meta, name=r.name)
        s = read_summary(r.folder)
        if s is None:
            rec["status"] = "diverged" if (r.folder / "diverged.json").exists() else "not run"
            return rec
        st = s["stages"][0]
        e = evaluate_run(r.folder)
        rec.update(status="done", N=s["params"], params_total=s["params_total"], U_true=st["unique_tokens"],
                   D=st["tokens"], epochs=st["epochs"], steps=st["iters"], loss=e["loss"], loss_kind=e["kind"],
                   val_tokens=e["tokens"], summary_val_loss=st["val_loss"], train_loss=st["train_loss"],
                   unigram_val_ppl=st.get("unigram_val_ppl"), seconds=s["seconds"])
        return rec
    settings = {k: v for k, v in (getattr(a, "_settings", None) or settings_json(a)).items() if k != "report_only"}
    records = {"settings": settings, "strong": {k: {"wd": v[0], "lr": v[1]} for k, v in strong.items()},
               "sweep": [record(r) for r in sweep], "runs": [record(r) for r in grid]}
    records["fits"] = fit_laws(a.laws, a.fit_methods, records)
    records["per_token"] = per_token(records["runs"], a.out / "runs", a.top_tokens, a.mir_keep_first)
    records["scan"] = scan
    return records


def read_records(out):
    """The records of OUT/report.json (what render needs when the run folders are gone), or None."""
    path = Path(out) / "report.json"
    if not path.exists():
        return None
    rep = json.loads(path.read_text())
    return {k: rep.get(k) for k in RECORD_KEYS}


def settings_of(records, out):
    """The experiment's flags as the records keep them (a Namespace; out = where the report goes,
    _settings = the kept settings themselves, so that collect keeps them as they were)."""
    a = argparse.Namespace(**records["settings"])
    a.out, a._settings = Path(out), records["settings"]
    return a




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


def cell_arrays(records, method):
    cs = list(cells(done(records, method)).values())
    return cs, tuple(np.array([c[k] for c in cs], float) for k in ("N", "U", "D", "loss"))


def fit_laws(laws, methods, records):
    """Per method: the data's fan-out and, per law, the fit on the seed-averaged cells (params,
    RMSE, MAE, fan-out of the fitted surface) and the extrapolation to the largest U (the fit on
    the smaller budgets and its error on the largest)."""
    laws = laws.split(",") if laws else list(scaling.LAWS)
    out = {}
    for method in methods:
        cs, (N, U, D, L) = cell_arrays(records, method)
        if not cs:
            continue
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
            f = scaling.fit(law, N, U, D, L)
            r = {"params": f.params, "rmse": f.rmse, "mae": f.mae}
            try:
                r["fan_out_fit"] = scaling.fan_out(N, U, f.predict(N, U, D))
            except ValueError:
                r["fan_out_fit"] = None
            if (U < U.max()).sum() >= k and len(set(U[U < U.max()])) >= 2:  # a data term needs >= 2 budgets
                x = scaling.extrapolate(law, N, U, D, L)
                r["extrapolation"] = {"budget": x.budget, "rmse": x.rmse, "mae": x.mae, "params": x.fit.params}
            res["laws"][law] = r
        out[method] = res
    return out


# ---------------------------------------------------------------------------------------------
# the reading rule, paired



def slope_verdict(s, paper_sign=1):
    """verdict_of for a slope_test: the paper's claim is a slope of sign paper_sign."""
    return verdict_of(dict(s, better=None if not s["clear"] else (s["slope"] > 0) == (paper_sign > 0)))




def test_of(c, name="paired t"):
    return f"{name}, {fmt_p(c['p'])}, n = {c['n']}"


# ---------------------------------------------------------------------------------------------
# statistics (render: from the records alone)

def mir_gain(records):
    """Per (size, U): gain = loss(wd) - loss(wd+mir) paired by seed (positive = MIR better), with
    MIR against wd by the paired t-test and by Welch's (common.compare)."""
    base = {(r["size"], r["U"], r["seed"]): r for r in done(records, "wd")}
    rows = {}
    for r in done(records, "wd+mir"):
        b = base.get((r["size"], r["U"], r["seed"]))
        if b:
            # at the baseline's N: with an untied head MIR's [MASK] row makes its own N d larger
            c = rows.setdefault((b["N"], r["U"]), dict(size=r["size"], N=b["N"], U=r["U"], gains=[], wd=[], mir=[]))
            c["gains"].append(b["loss"] - r["loss"])
            c["wd"].append(b["loss"])
            c["mir"].append(r["loss"])
    out = []
    for _, c in sorted(rows.items()):
        m, s, n = mean_std(c["gains"])
        c.update(mean=m, std=s, n=n, paired=paired(c["mir"], c["wd"]), welch=compare(c["mir"], c["wd"]))
        out.append(c)
    return out


def gain_by_size(gains):
    """Per size, over its budgets: every (U, seed) pair of the size, MIR against wd paired."""
    by = {}
    for g in gains:
        c = by.setdefault((g["N"], g["size"]), dict(N=g["N"], size=g["size"], means=[], wd=[], mir=[]))
        c["means"].append(g["mean"])
        c["wd"] += g["wd"]
        c["mir"] += g["mir"]
    out = []
    for _, c in sorted(by.items()):
        d = np.subtract(c["wd"], c["mir"])
        m, s, n = mean_std(list(d))
        out.append(dict(N=c["N"], size=c["size"], gain=m, std=s, pairs=n, cells=len(c["means"]),
                        paired=paired(c["mir"], c["wd"])))
    return out


def gain_slope(gains):
    """MIR's gain against log10 N over every matched pair (common.slope_test): does it grow with size?"""
    x = [math.log10(g["N"]) for g in gains for _ in g["gains"]]
    return slope_test(x, [v for g in gains for v in g["gains"]])


def fan_out_test(records, method):
    """The fan-out with its uncertainty: slope of the gap L(smallest U) - L(largest U) against
    log10 N, one point per (size, seed) run at both budgets (common.slope_test; with every seed at
    both budgets its slope is scaling.fan_out's of the seed-averaged cells)."""
    runs = done(records, method)
    if not runs:
        return None
    lo, hi = min(r["U_true"] for r in runs), max(r["U_true"] for r in runs)
    at = lambda u: {(r["N"], r["seed"]): r["loss"] for r in runs if r["U_true"] == u}  # noqa: E731
    small, large = at(lo), at(hi)
    keys = sorted(small.keys() & large.keys())
    return slope_test([math.log10(n) for n, _ in keys], [small[k] - large[k] for k in keys])


def law_errors(records, fits, method, law, held_out=False):
    """|prediction - loss| per seed-averaged cell of one law: in-sample (the fit on every cell)
    or held-out (the largest-U cells under the fit without them)."""
    f = fits.get(method, {}).get("laws", {}).get(law, {})
    params = (f.get("extrapolation") or {}).get("params") if held_out else f.get("params")
    if not params:
        return None
    cs, (N, U, D, L) = cell_arrays(records, method)
    keep = U == U.max() if held_out else np.ones(len(L), bool)
    return list(np.abs(scaling.predict(law, params, N[keep], U[keep], D[keep]) - L[keep]))


def law_tests(records, fits):
    """SoftQ against Chinchilla, per method: the per-cell absolute errors paired by cell, in-sample
    and on the held-out largest budget."""
    out = {}
    for m in fits:
        res = {}
        for kind, held in (("in_sample", False), ("extrapolation", True)):
            s, c = law_errors(records, fits, m, "softq", held), law_errors(records, fits, m, "chinchilla", held)
            if s is not None and c is not None:
                res[kind] = dict(paired(s, c), softq_mae=float(np.mean(s)), chinchilla_mae=float(np.mean(c)))
        out[m] = res
    return out


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
            cs, (N, U, D, L) = cell_arrays(records, method)
            if not cs:
                continue
            if method == "wd+mir":  # the baseline's law at the baseline's N (MIR's [MASK] row: its own N is d larger)
                base = {(c["size"], c["U"]): c["N"] for c in cells(done(records, "wd")).values()}
                N = np.array([base.get((c["size"], c["U"]), c["N"]) for c in cs], float)
            m = scaling.effective_data_multiplier(law, f["params"], N, U, L, D)
            ok = m[np.isfinite(m)]
            res[method] = {"cells": [dict(size=c["size"], N=c["N"], U=c["U"], multiplier=float(x)) for c, x in zip(cs, m)],
                           "geomean": float(np.exp(np.log(ok).mean())) if len(ok) else None,
                           "median": float(np.median(ok)) if len(ok) else None, "finite": int(len(ok)), "n": len(m)}
        if "wd+mir" in res and "wd" in res:  # MIR's cells against the baseline's own, log multiplier, by cell
            # by size, not N: with an untied head MIR's [MASK] row makes its N d larger than the baseline's
            own = {(c["size"], c["U"]): c["multiplier"] for c in res["wd"]["cells"]}
            pairs = [(math.log(c["multiplier"]), math.log(own[(c["size"], c["U"])])) for c in res["wd+mir"]["cells"]
                     if (c["size"], c["U"]) in own and c["multiplier"] > 0 and own[(c["size"], c["U"])] > 0
                     and math.isfinite(c["multiplier"]) and math.isfinite(own[(c["size"], c["U"])])]
            res["test"] = paired([p for p, _ in pairs], [q for _, q in pairs], higher_is_better=True)
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
        g = lambda m1, m2: c[m1] - c[m2] if m1 in c and m2 in c else None  # noqa: E731
        c.update(gap_weak=g("mdlm-weak", "ar-weak"), gap_strong=g("mdlm-strong", "wd"),
                 mdlm_decay_gain=g("mdlm-weak", "mdlm-strong"), ar_decay_gain=g("ar-weak", "wd"))
        rows.append(c)
    return rows


def decay_tests(rows, records, weak):
    """Strong decay against weak for MDLM, and the AR-MDLM gap, paired by cell over the cells
    whose strong decay differs from the weak one (elsewhere they are the same runs)."""
    differ = [r for r in rows if (records["strong"].get(r["size"]) or {}).get("wd") not in (None, weak)
              and r.get("mdlm-strong") is not None and r.get("mdlm-weak") is not None]
    gaps = [r for r in differ if r["gap_strong"] is not None and r["gap_weak"] is not None]
    return {"cells": [(r["size"], r["U"]) for r in differ],
            "mdlm": paired([r["mdlm-strong"] for r in differ], [r["mdlm-weak"] for r in differ]),
            "gap": paired([r["gap_strong"] for r in gaps], [r["gap_weak"] for r in gaps])}


# ---------------------------------------------------------------------------------------------
# report.md

def fmt(x, f="{:.3f}"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f.format(x)


def signed_pm(g):
    """'+0.0123 ± 0.0045' (mean with sign, std without) or '+0.0123' for one seed."""
    return f"{g['mean']:+.4f}" + (f" ± {g['std']:.4f}" if g["n"] > 1 else "")


def mir_reading(c):
    """MIR (treat) against wd, a paired or Welch comparison, in words."""
    return reading(c, "MIR lower", "MIR higher", f"by {abs(c['diff']):.4f}" if math.isfinite(c["diff"]) else "")


def setup_lines(a, records):
    runs = done(records)
    sizes = {}
    for r in runs + [r for r in records["sweep"] if r["status"] == "done"]:
        sizes.setdefault(r["size"], r)
    U_true = sorted({r["U_true"] for r in runs})
    secs = sum(r["seconds"] for r in {r["name"]: r for r in runs + records["sweep"] if r["status"] == "done"}.values())
    n_runs = len({r["name"] for r in runs + records["sweep"] if r["status"] == "done"})
    lines = ["## Setup", "",
             f"- {n_runs} training runs, {secs / 60:.1f} min of training in all (train.run's seconds, summed; runs "
             f"went {a.jobs} at a time; the wall time is the provenance line's).",
             f"- Corpus: stage `{a.stage}`; the U unique tokens are "
             + ("U/(block+1) whole chunks drawn uniformly across the training stream (--music-chunks, data seed 0)"
                if a.subset == "chunks" else "the first U training tokens")
             + f"; the loss is every run's final checkpoint on the whole validation split "
             f"({next((r['val_tokens'] for r in runs if r['loss_kind'] == 'nll'), '?'):,} targets; AR: NLL per token, "
             "MDLM: the NLL bound per token, the same fixed masks for every run).",
             f"- Budgets U = {', '.join(f'{u:,}' for u in U_true)} tokens, {a.epochs:g} epochs each (D = tokens seen "
             f"= steps x {a.batch_size} x {a.block_size}); batch {a.batch_size} x {a.block_size}, AdamW (0.9, 0.95), "
             f"cosine lr to lr/10, warmup {a.warmup_frac:.0%} of the steps, grad clip 1; decay on attention/MLP matrices only.",
             f"- Methods: {', '.join(a.methods)}. Seeds 0..{a.seeds - 1} for wd and wd+mir "
             + ("in every size" if a.seeded_sizes >= len(a.sizes) else
                f"in the {a.seeded_sizes} smallest size(s), seed 0 elsewhere")
             + f", seed 0 for the other methods. MIR: lambda {a.mir_lambda:g}, ratio {a.mir_ratio}, keep-first "
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
             "method (a choice from one seed, not a tested difference). The authors tune 0.4-3.2 with lr 1e-3..1e-2.",
             "", "| size | lr | " + " | ".join(f"wd {d:g}" for d in a.decays) + " |", "|---|---|" + "---|" * len(a.decays)]
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


def mir_lines(gains, sizes, slope):
    lines = ["## 2. MIR against the strong-decay baseline", "", f"Paper: {PAPER['mir_gain']}.", "",
             "Gain = loss(wd) - loss(wd+mir) per seed (positive: MIR's loss is the lower); mean ± std over seeds, "
             "n seeds. Each cell is read by the t-test paired by seed (a seed fixes the initial weights and the "
             f"batches of both methods) and by Welch's test: a difference counts only at p < {ALPHA:g} with n >= "
             f"{MIN_N} on each side.", "",
             "| size | N | U | wd | wd+mir | gain | paired t | Welch |", "|---|---|---|---|---|---|---|---|"]
    for g in gains:
        lines.append(f"| {g['size']} | {g['N']:,} | {g['U']:,} | {fmt_mean_std(g['wd'])} | {fmt_mean_std(g['mir'])} | "
                     f"{signed_pm(g)} | {mir_reading(g['paired'])} | {mir_reading(g['welch'])} |")
    lines += ["", "Per size, every (U, seed) pair of its budgets, paired t-test:", "",
              "| size | N | gain (mean ± std over pairs) | pairs | reading |", "|---|---|---|---|---|"]
    lines += [f"| {s['size']} | {s['N']:,} | {s['gain']:+.4f} ± {s['std']:.4f} | {s['pairs']} | "
              f"{mir_reading(s['paired'])} |" for s in sizes]
    if slope["p"] is not None:
        lines += ["", f"MIR's gain against log10 N over the {slope['n']} pairs (slope test): {slope['slope']:+.4f} ± "
                  f"{slope['stderr']:.4f} nats per decade: {reading(slope, 'grows with size', 'shrinks with size')}. "
                  "The paper's gain grows by ~0.024 nats over its 1.3 decades, ~0.019 per decade."]
    return lines + [""]


def law_lines(fits, fans, ltests):
    lines = ["## 3. Scaling laws per method", "", f"Paper: {PAPER['laws']}.", "",
             "Fitted on the seed-averaged cells (approach 3: Huber on log L, L-BFGS from a grid; scaling.py). "
             "Extrapolation: fitted without the largest U, error on it (where at least two budgets remain). "
             "Fan-out: slope of L(smallest U) - L(largest U) per decade of N, of the data and of each fitted "
             "surface (0 for an additive law); the data's with its slope test over the (size, seed) runs at both budgets. SoftQ against Chinchilla: their absolute "
             "errors paired by cell. Muennighoff: its two-step fit takes its base law from single-epoch runs, and the "
             "grid has none (every run repeats its U for the same number of epochs, so R_D = D/U - 1 is one value "
             "for all rows): scaling.py then fits the base on repeated-data rows and R_D*, R_N* are not identified, "
             "so its row is no test of that law. MDLM's losses are NLL bounds.", ""]
    best = {}
    for method, res in fits.items():
        fo = fans.get(method)
        lines += [f"### {method} ({res['cells']} cells; fan-out of the data {fmt(res['fan_out_data'], '{:+.4f}')} "
                  "nats per decade of N)", ""]
        if fo and fo["p"] is not None:
            lines += [f"Fan-out, slope test over {fo['n']} runs: {fo['slope']:+.4f} ± {fo['stderr']:.4f} nats per "
                      f"decade: {reading(fo, 'the gap between budgets grows with N', 'the gap between budgets shrinks with N')}.", ""]
        lines += ["| law | RMSE | MAE | extrap. RMSE | extrap. MAE | fan-out of fit | parameters |",
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
            best[method] = {"best_in_sample": best_in, "best_extrapolation": best_ext}
            lines += ["", f"Lowest in-sample RMSE: **{best_in}**; lowest extrapolation RMSE: **{best_ext or '-'}** "
                      "(a ranking, not a test)."]
        for kind, what in (("in_sample", "in-sample"), ("extrapolation", "on the held-out largest U")):
            t = ltests.get(method, {}).get(kind)
            if t:
                amount = f"by {abs(t['diff']):.4f}"
                lines += [f"SoftQ against Chinchilla, {what}: MAE {t['softq_mae']:.4f} vs {t['chinchilla_mae']:.4f}, "
                          f"{reading(t, 'SoftQ lower', 'SoftQ higher', amount)}."]
        lines += [""]
    return lines, best


def multiplier_lines(mult):
    lines = ["## 4. MIR's effective-data multiplier", "", f"Paper: {PAPER['multiplier']}.", "",
             "U* / U where the baseline's (wd) fitted law at the cell's N and D reaches the wd+mir loss "
             "(scaling.effective_data_multiplier; > 1: MIR is worth more data). The same computation on the "
             "baseline's own cells shows what the fit's residuals alone give (1 for a perfect fit); MIR's cells "
             "are read against those, log multiplier paired by cell.", ""]
    for law, res in mult.items():
        def summ(k):
            r = res.get(k)
            if not r or r["geomean"] is None:
                return "-"
            xs = [c["multiplier"] for c in r["cells"] if math.isfinite(c["multiplier"])]
            return (f"geometric mean {r['geomean']:.2f}x, median {r['median']:.2f}x, range {min(xs):.2f}-{max(xs):.2f}x "
                    f"({r['finite']} of {r['n']} cells inside the bracket)")
        test = (f"; MIR's against the baseline's own: {reading(res['test'], 'larger', 'smaller')}"
                if "test" in res else "")
        lines += [f"- under the wd {law} fit: wd+mir {summ('wd+mir')}; wd itself {summ('wd')}{test}."]
    if "softq" in mult and "wd+mir" in mult["softq"]:
        own = {(c["size"], c["U"]): c["multiplier"] for c in mult["softq"].get("wd", {}).get("cells", [])}
        lines += ["", "| size | U | wd+mir (SoftQ) | wd's own cell |", "|---|---|---|---|"]
        lines += [f"| {c['size']} | {c['U']:,} | {fmt(c['multiplier'], '{:.2f}x')} | {fmt(own.get((c['size'], c['U'])), '{:.2f}x')} |"
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
             "(positive: MIR's loss on it is the lower); buckets by the target token's count in that run's training "
             f"subset (its U tokens). Total gain per pair: {tok['total_gain_per_pair']:+.1f} nats summed over the "
             "validation targets; the share column splits it by bucket (shown only when the total is positive). "
             "A decomposition of the runs' loss difference (section 2 reads whether there is one), not a test.", "",
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
                       ("Tokens with the most negative summed gain", "bottom_tokens")):
        lines += ["", f"{title}:", "", "| token | id | targets per pair | mean gain | summed gain per pair | share |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {t['token']} | {t['id']} | {t['targets_per_pair']:.0f} | {t['mean_gain']:+.4f} | "
                  f"{t['gain_per_pair']:+.2f} | {fmt(t['share'], '{:.1%}')} |" for t in tok[key]]
    lines += ["", "Gain by position in the window (MIR never masks the first keep-first positions): "
              + "; ".join(f"{p['positions']}: {p['gain']:+.4f}" for p in tok["by_position"]) + ".", ""]
    return lines


def mdlm_lines(rows, records, a, dt):
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
    m = lambda k: statistics.mean([r[k] for r in rows if r.get(k) is not None]) if any(r.get(k) is not None for r in rows) else None  # noqa: E731
    summ = {k: m(k) for k in ("gap_weak", "gap_strong", "mdlm_decay_gain", "ar_decay_gain")}
    if summ["gap_weak"] is not None and summ["gap_strong"] is not None:
        summ["gap_closed"] = 1 - abs(summ["gap_strong"]) / abs(summ["gap_weak"]) if summ["gap_weak"] else None
        lines += ["", f"Mean over every cell: gap {summ['gap_weak']:+.3f} at weak decay, {summ['gap_strong']:+.3f} at "
                  f"strong decay ({fmt(summ['gap_closed'], '{:.0%}')} of it closed)."]
    if dt["cells"]:
        lines += [f"Where the strong decay differs from the weak one ({len(dt['cells'])} cells: "
                  f"{', '.join(sorted({s for s, _ in dt['cells']}))}), paired by cell: MDLM strong - weak "
                  f"{dt['mdlm']['diff']:+.4f}, {reading(dt['mdlm'], 'strong decay lower', 'strong decay higher')}; "
                  f"the gap strong - weak {dt['gap']['diff']:+.4f}, {reading(dt['gap'], 'smaller', 'larger')}."]
    return lines + [""], summ


# ---------------------------------------------------------------------------------------------
# the verdicts: one entry per claim of the paper

def verdicts(records, gains, sizes, slope, fans, ltests, mult, rows, dt):
    """The paper's claims against ours, each read by the rule (module docstring)."""
    out = []
    if sizes:
        out.append({"claim": "MIR lowers the validation loss at every size",
                    "paper": "lower at every size: ~0.006 nats at 72M up to ~0.03 at 1.4B parameters",
                    "ours": "gain loss(wd) - loss(wd+mir), mean ± std over each size's (U, seed) pairs: " + "; ".join(
                        f"{s['size']} (N = {s['N']:,}) {s['gain']:+.4f} ± {s['std']:.4f}"
                        + (f", {mir_reading(s['paired'])}" if s["paired"]["clear"] else "") for s in sizes),
                    "test": "paired t by (U, seed), per size: " + ", ".join(
                        f"{fmt_p(s['paired']['p'])} ({s['size']}, n = {s['paired']['n']})" for s in sizes),
                    "verdict": combined_verdict([verdict_of(s["paired"]) for s in sizes])})
    if slope["p"] is not None:
        out.append({"claim": "MIR's gain grows with model size",
                    "paper": "~0.006 nats at 72M to ~0.03 at 1.4B: ~0.019 per decade of N",
                    "ours": f"{slope['slope']:+.4f} ± {slope['stderr']:.4f} nats per decade of N (gains per size "
                            + ", ".join(f"{s['gain']:+.4f}" for s in sizes) + ")",
                    "test": f"slope test, {fmt_p(slope['p'])}, n = {slope['n']} pairs",
                    "verdict": slope_verdict(slope)})
    s = mult.get("softq", {})
    if "test" in s:
        out.append({"claim": "MIR is worth more unique data (effective-data multiplier)",
                    "paper": "~1.3x under the baseline's SoftQ fit",
                    "ours": f"{s['wd+mir']['geomean']:.2f}x geometric mean over {s['wd+mir']['finite']} cells; the "
                            f"baseline's own cells under the same fit {s['wd']['geomean']:.2f}x",
                    "test": f"paired t of log multiplier by cell (MIR's vs the baseline's own), {fmt_p(s['test']['p'])}, "
                            f"n = {s['test']['n']}",
                    "verdict": verdict_of(s["test"])})
    for kind, claim, paper in (("in_sample", "SoftQ fits better than Chinchilla", "SoftQ fits best"),
                               ("extrapolation", "SoftQ extrapolates better than Chinchilla (largest U held out)",
                                "SoftQ extrapolates best")):
        ts = {m: ltests[m][kind] for m in AR_METHODS if kind in ltests.get(m, {})}
        if ts:
            out.append({"claim": claim, "paper": paper,
                        "ours": "MAE SoftQ vs Chinchilla: " + "; ".join(
                            f"{m} {t['softq_mae']:.4f} vs {t['chinchilla_mae']:.4f}"
                            + (f", {reading(t, 'SoftQ lower', 'SoftQ higher')}" if t["clear"] else "")
                            for m, t in ts.items()),
                        "test": "paired t of absolute errors by cell: " + ", ".join(
                            f"{fmt_p(t['p'])} ({m}, n = {t['n']})" for m, t in ts.items()),
                        "verdict": combined_verdict([verdict_of(t) for t in ts.values()])})
    fs = {m: fans[m] for m in AR_METHODS if fans.get(m) and fans[m]["p"] is not None}
    if fs:
        out.append({"claim": "the loss gap between data budgets grows with model size (fan-out)",
                    "paper": "the gap grows with N (why Chinchilla is mis-specified)",
                    "ours": "slope of L(smallest U) - L(largest U) per decade of N: " + "; ".join(
                        f"{m} {f['slope']:+.3f} ± {f['stderr']:.3f}"
                        + (f", {reading(f, 'grows', 'shrinks')}" if f["clear"] else "") for m, f in fs.items()),
                    "test": "slope test: " + ", ".join(f"{fmt_p(f['p'])} ({m}, n = {f['n']})" for m, f in fs.items()),
                    "verdict": combined_verdict([slope_verdict(f) for f in fs.values()])})
    if rows:
        none = "not measured: the sweep chose the weak decay for every size" if not dt["cells"] else None
        where = f"{len(dt['cells'])} cells where the strong decay differs from the weak one " \
                f"({', '.join(sorted({s for s, _ in dt['cells']}))}, seed 0)"
        out.append({"claim": "strong decay tuned for AR improves the masked-diffusion model",
                    "paper": "improves dLLMs substantially",
                    "ours": none or f"MDLM strong - weak {dt['mdlm']['diff']:+.4f} nats over {where}",
                    "test": "not tested" if none else test_of(dt["mdlm"], "paired t by cell"),
                    "verdict": "not measured" if none else verdict_of(dt["mdlm"])})
        out.append({"claim": "strong decay closes most of the AR-MDLM gap",
                    "paper": "closes most of the AR-dLLM gap",
                    "ours": none or f"gap (MDLM - AR) strong - weak {dt['gap']['diff']:+.4f} nats over {where}",
                    "test": "not tested" if none else test_of(dt["gap"], "paired t by cell"),
                    "verdict": "not measured" if none else verdict_of(dt["gap"])})
    assert all(v["verdict"] in VERDICTS for v in out)
    return out


def verdict_table(vs):
    rows = ["| claim | the paper | ours | test | verdict |", "|---|---|---|---|---|"]
    return rows + [f"| {v['claim']} | {v['paper']} | {v['ours']} | {v['test']} | **{v['verdict']}** |" for v in vs] + [""]


def regime(a, records):
    """report.json's `regime`: our scale and budget against the paper's."""
    runs = done(records)
    if not runs:
        return "No run has finished."
    return (f"Ours: {min(r['N'] for r in runs):,}-{max(r['N'] for r in runs):,} non-embedding parameters "
            f"({len(a.sizes)} sizes), U = {min(r['U_true'] for r in runs):,}-{max(r['U_true'] for r in runs):,} "
            f"unique tokens of `{a.stage}`, {a.epochs:g} epochs (at most {max(r['D'] for r in runs):,} tokens seen), "
            f"{a.seeds} seed(s) for wd and wd+mir. The paper: 72M-1.4B parameters on web text (DCLM), 16-32 epochs "
            "of far larger U, decay tuned 0.4-3.2; its MIR gains (0.006-0.03 nats) are of the order of our seed "
            "spread.")


def csv_text(runs):
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["N", "U", "D", "loss", "method", "seed"])
    for r in runs:
        w.writerow([r["N"], r["U_true"], r["D"], repr(float(r["loss"])), r["method"], r["seed"]])
    return f.getvalue()


def render(records, out):
    """report.md, report.json, runs.csv (and runs-<method>.csv) and the PNGs of OUT from the records
    alone; returns report.md's text."""
    out = Path(out)
    a = settings_of(records, out)
    prov = kept_provenance(out)
    fits, tok = records["fits"], records["per_token"]
    gains = mir_gain(records)
    sizes = gain_by_size(gains)
    slope = gain_slope(gains)
    fans = {m: fan_out_test(records, m) for m in fits}
    ltests = law_tests(records, fits)
    mult = multipliers(fits, records)
    rows = ar_vs_mdlm(records)
    dt = decay_tests(rows, records, a.weak_decay)
    vs = verdicts(records, gains, sizes, slope, fans, ltests, mult, rows, dt)
    authors = getattr(a, "preset", "earlier") != "earlier"  # the earlier preset's report stays as it was
    if authors:
        ax = dca.analyse(records, a, mult)
        vs = [v for v in vs if not v["claim"].startswith("strong decay")] + dca.verdicts(ax)
    write_text(out / "runs.csv", csv_text(done(records)))
    for m in a.methods:
        write_text(out / f"runs-{m.replace('+', '_')}.csv", csv_text(done(records, m)))
    ml = mir_lines(gains, sizes, slope)
    ll, best = law_lines(fits, fans, ltests)
    dl, mdlm_summary = mdlm_lines(rows, records, a, dt)
    lines = [f"# Data-constrained pre-training: MIR, strong decay, masked diffusion, scaling laws{' (--quick)' if a.quick else ''}",
             "", provenance_line(prov), "",
             f"Xu et al., \"{SOURCE['title']}\", arXiv {SOURCE['arxiv']}. The paper: " + "; ".join(
                 PAPER[k] for k in ("mir_gain", "laws", "multiplier", "ar_mdlm")) + f". Its setup: {PAPER['setup']}.",
             "", regime(a, records), ""]
    lines += ["## The paper's claims against these runs", "",
              f"Each claim is read by one rule: a difference counts only at p < {ALPHA:g} with n >= {MIN_N} on each "
              "side (paired t-tests by seed or by cell, slope tests; Welch's test beside the paired one in section 2). "
              + COMBINED_RULE, ""] + verdict_table(vs)
    if authors:
        lines += (dca.baseline_lines(a) + setup_lines(a, records) + dca.regime_lines(ax) + dca.scan_lines(records.get("scan"))
                  + dca.sweep_lines(a, ax) + ml + ll + dca.fan_lines(ax) + multiplier_lines(mult)
                  + dca.multiplier_text(ax["multiplier"]) + token_lines(tok, a) + dca.mdlm_lines(a, ax))
    else:
        lines += setup_lines(a, records) + sweep_lines(a, records) + ml + ll + multiplier_lines(mult) + token_lines(tok, a) + dl
    lines += ["## Reading", "",
              "Every effect named above is a generated reading of the rule; where it says \"no clear difference\" "
              "these runs do not tell the two apart." +
              (" This --quick run is a smoke test of the pipeline (tiny budgets, few steps), not evidence."
               if a.quick else ""), "",
              "Figures: `mir_gain.png`, `laws.png` (loss vs N per U, each law's fitted curves, wd and wd+mir), "
              "`ar_vs_mdlm.png`, `gain_by_frequency.png`, `wd_sweep.png`. Every run: `report.json` and "
              "`runs.csv` (N,U,D,loss,method,seed; `runs-<method>.csv` per method, for `python scaling.py compare`); "
              "run folders `runs/<objective>-<size>-U<U>-wd<decay>-lr<lr>-s<seed>/` (val_eval.json holds the "
              "full-validation loss).", ""]
    text = "\n".join(lines)
    figures = plot_all(a, records, fits, gains, tok, rows)
    write_text(out / "report.md", text)
    extra = {} if not authors else {
        "fan_out": dict(ax["fan_out"] or {}, by_method=fans, wd_mir=ax["fan_out_mir"]), "scan": records.get("scan"),
        "regime_check": ax["regime"], "sweep_summary": ax["sweep"], "multiplier_uncertainty": ax["multiplier"],
        "ar_vs_mdlm": ax["mdlm"], "decay_tests": ax["mdlm_tests"],
        "front_table": dca.front_table(vs, sizes, slope, mult, ltests, ax)}
    write_json(out / "report.json", {
        "source": SOURCE, "regime": regime(a, records), "figures": figures, "verdicts": vs, "provenance": prov,
        "paper": PAPER, **{k: records[k] for k in ("settings", "strong", "sweep", "runs", "fits")},
        "best_law": best, "fan_out": fans, "law_tests": ltests, "mir_gain": gains,
        "mir_gain_summary": {"per_size": sizes, "slope": slope}, "multipliers": mult, "per_token": tok,
        "ar_vs_mdlm": rows, "ar_vs_mdlm_summary": mdlm_summary, "decay_tests": dt, **extra})
    return text


# ---------------------------------------------------------------------------------------------
# figures

def log_x(ax):
    """Log x axis with labels on the decades only (minor labels overlap at small ranges)."""
    from matplotlib.ticker import NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_all(a, records, fits, gains, tok, mdlm):
    """Draw the PNGs into a.out; returns their names, most telling first (report.json's `figures`)."""
    plt = pyplot()
    drawn = []
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
        drawn.append("laws.png")

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
    drawn.append("mir_gain.png")

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
        drawn.append("gain_by_frequency.png")

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
    drawn.append("ar_vs_mdlm.png")

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
    drawn.append("wd_sweep.png")
    return [f for f in FIGURES if f in drawn]
