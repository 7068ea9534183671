"""The data-constrained report (experiments/data_constrained.py, phase 4; claims: data_constrained_claims.py):
`collect` reads the run folders, `render` writes it from the records alone (a rebuild from report.json is exact)."""

import argparse
import csv
import io
import math
from pathlib import Path

import numpy as np

import scaling
from experiments.lib import data_constrained_claims as dcc
from experiments.lib.claims import RULE, fmt_mean_std, md_section as md, read_all, table
from experiments.lib.significance import mean_std
from experiments.lib.provenance import kept_provenance, provenance_line
from experiments.lib.common import finish, group, pyplot, read_events, read_summary, settings_json, write_report
from experiments.lib.data_constrained_tokens import per_token
from data.common import atomic_write_bytes
from evaluate import evaluate_run

SOURCE = {"arxiv": "2606.06888",
          "title": "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling Laws"}
FIGURES = ["mir_gain.png", "laws.png", "ar_vs_mdlm.png", "gain_by_frequency.png"]  # the decay sweep: its table
RECORD_KEYS = ("settings", "strong", "sweep", "runs", "fits", "per_token", "scan")
MDLM_TABLE = ("ar-weak", "wd", "mdlm-weak", "mdlm-tuned", "mdlm-strong")


def collect(a, sweep, grid, strong, scan=None):
    """The records to render: settings, strong decay per size, a record per sweep and (method, grid) run (full val
    loss; its change per epoch over the last interval and from half-way; or DIR's), fits, per-token sums (or DIR's)."""
    def record(r):
        rec, s = dict(r.meta, name=r.name), read_summary(r.folder)
        if (o := a._reused.get(r.name)) or s is None:
            return dict(o, **rec, reused=str(a.reuse)) if o else dict(rec, status="diverged" if (
                r.folder / "diverged.json").exists() else "not run")
        st, e, ev = s["stages"][0], evaluate_run(r.folder), read_events(r.folder, "eval")
        return dict(rec, status="done", N=s["params"], params_total=s["params_total"], U_true=st["unique_tokens"],
                    D=st["tokens"], epochs=st["epochs"], steps=st["iters"], loss=e["loss"], loss_kind=e["kind"],
                    val_tokens=e["tokens"], summary_val_loss=st["val_loss"], train_loss=st["train_loss"],
                    unigram_val_ppl=st.get("unigram_val_ppl"), seconds=s["seconds"], last_epoch_change=(
                        ev[-1]["val_loss"] - ev[-2]["val_loss"]) / ((ev[-1]["iter"] - ev[-2]["iter"]) * st["epochs"]
                                                                    / st["iters"]) if len(ev) >= 2 else None,
                    second_half_change=ev[-1]["val_loss"] - min(ev, key=lambda x: abs(x["iter"] - st["iters"] / 2))[
                        "val_loss"] if len(ev) > 2 else None)  # (the cosine's small last lr: the first is small anyway)
    records = {"settings": settings_json(a, ("report_only",)),
               "strong": {k: {"wd": v[0], "lr": v[1]} for k, v in strong.items()},
               "sweep": [record(r) for r in sweep], "runs": [record(r) for r in grid]}
    return dict(records, fits=fit_laws(a.laws, a.methods, records), scan=scan,
                per_token=per_token(records["runs"], a.out / "runs") or a._old.get("per_token") and dict(
                    a._old["per_token"], **{"from": str(a.reuse)}))


def done(records, method=None):
    return [r for r in records["runs"] if r["status"] == "done" and (method is None or r["method"] == method)]


def arrays(records, method):
    """A method's seed-averaged cells [dict(N, U, size, D, loss)] in (N, U) order, and their N, U, D, loss arrays."""
    by = group(done(records, method), lambda r: (r["N"], r["U_true"], r["size"]))
    cs = [dict(N=n, U=u, size=s, D=float(np.mean([r["D"] for r in rs])), loss=float(np.mean([r["loss"] for r in rs])))
          for (n, u, s), rs in sorted(by.items())]
    return cs, tuple(np.array([c[k] for c in cs], float) for k in ("N", "U", "D", "loss"))


def fan_out(N, U, L):
    try:
        return scaling.fan_out(N, U, L)
    except ValueError:  # fewer than two sizes at both the smallest and the largest U
        return None


def fit_laws(laws, methods, records):
    """Per method: the data's fan-out; per law, the fit on the seed-averaged cells, extrapolated to the largest U."""
    out = {}
    for method in [m for m in methods if done(records, m)]:
        cs, (N, U, D, L) = arrays(records, method)
        res = out[method] = {"cells": len(cs), "laws": {}, "fan_out_data": fan_out(N, U, L)}
        for law in laws.split(",") if laws else scaling.LAWS:
            k = len(scaling.PARAMS[law])
            if len(cs) < k:
                res["laws"][law] = {"note": f"{len(cs)} cells < {k} parameters"}
                continue
            f = scaling.fit(law, N, U, D, L)
            r = res["laws"][law] = {"params": f.params, "rmse": f.rmse, "mae": f.mae,
                                    "fan_out_fit": fan_out(N, U, f.predict(N, U, D))}
            if (U < U.max()).sum() >= k and len(set(U[U < U.max()])) >= 2:
                x = scaling.extrapolate(law, N, U, D, L)
                r["extrapolation"] = {"budget": x.budget, "rmse": x.rmse, "mae": x.mae, "params": x.fit.params}
    return out


def derived(records):
    """What the law and multiplier claims read (report.json `law_errors`, `multipliers`): |prediction - loss| per
    seed-averaged cell of each AR method under its SoftQ and Chinchilla fits, in-sample and on the largest U
    under the fit without it; MIR's effective-data multiplier per cell under the baseline's SoftQ fit (at the
    baseline's N), and the baseline's own cells under it (1 for a perfect fit); geometric means, 95% t-intervals."""
    from scipy import stats
    errors, mult, base = {}, {}, {(c["size"], c["U"]): c["N"] for c in arrays(records, "wd")[0]}
    for m in dcc.AR_METHODS:
        fits, (cs, (N, U, D, L)) = (records["fits"].get(m) or {}).get("laws", {}), arrays(records, m)
        for fit in ("in_sample", "extrapolation") if cs else ():
            ps = {law: (fits.get(law, {}).get(fit) or {}).get("params") if fit == "extrapolation" else
                  fits.get(law, {}).get("params") for law in ("softq", "chinchilla")}
            err = {law: np.abs(scaling.predict(law, p, N, U, D) - L) for law, p in ps.items() if p}
            errors.setdefault(m, {})[fit] = [dict(size=c["size"], U=c["U"], **{k: float(e[i]) for k, e in err.items()})
                                             for i, c in enumerate(cs) if fit == "in_sample" or U[i] == U.max()]
        f = (records["fits"].get("wd") or {}).get("laws", {}).get("softq", {})
        if cs and m in ("wd", "wd+mir") and "params" in f:
            x = scaling.effective_data_multiplier("softq", f["params"], np.array([base.get((c["size"], c["U"]), c["N"])
                                                                                  for c in cs], float), U, L, D)
            lg = np.log(x[np.isfinite(x) & (x > 0)])
            half = stats.t.ppf(0.975, len(lg) - 1) * lg.std(ddof=1) / np.sqrt(len(lg)) if len(lg) > 1 else np.nan
            mult[m] = {"cells": [dict(size=c["size"], N=c["N"], U=c["U"], multiplier=float(v)) for c, v in zip(cs, x)],
                       "geomean": float(np.exp(lg.mean())) if len(lg) else None,
                       "ci95": [float(np.exp(lg.mean() + k * half)) for k in (-1, 1)] if len(lg) > 1 else None}
    return errors, {"softq": mult} if mult else {}


def regime(a, records):
    if not (runs := done(records)):
        return "No run has finished."
    span = lambda k: f"{min(r[k] for r in runs):,}-{max(r[k] for r in runs):,}"  # noqa: E731
    return (f"Ours: {span('N')} non-embedding parameters ({len(a.sizes)} sizes), U = {span('U_true')} unique tokens of "
            f"`{a.stage}`, {a.epochs:g} epochs (at most {max(r['D'] for r in runs):,} tokens seen), {a.seeds} seed(s) "
            "for wd and wd+mir" + (f" ({a.seeds_small_u} at U <= {a.small_u:,}: the preset's power rule)" if a.seeds_small_u else "")
            + ". The paper: 72M-1.4B parameters on web text (DCLM), 16-32 epochs of far larger U, "
            "decay tuned 0.4-3.2; its MIR gains (0.006-0.03 nats) are of the order of our seed spread.")


def f3(x, f="{:.3f}"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f.format(x)


def render(records, out):
    """report.md, report.json, runs.csv (and runs-<method>.csv) and the PNGs of OUT from the records alone."""
    out = Path(out)
    a = argparse.Namespace(**{"dropout": 0.0, "tie": True, "dropout_at": "all", "seeds_small_u": None, **records["settings"]})
    a.out, prov, reg = out, kept_provenance(out), regime(a, records)
    le, mult = derived(records)
    m, w = ((mult.get("softq") or {}).get(k) or {} for k in ("wd+mir", "wd"))
    note = (f"geometric mean {m['geomean']:.2f}x (95% CI {m['ci95'][0]:.2f}-{m['ci95'][1]:.2f}x) over MIR's {len(m['cells'])} "
            f"cells, {w['geomean']:.2f}x over the baseline's own" if m.get("ci95") and w.get("geomean") else "")
    recs = dcc.records({"runs": records["runs"], "law_errors": le, "multipliers": mult})
    verdicts = read_all(dcc.CLAIMS, recs, {c.claim: note for c in dcc.CLAIMS if c.metric == "log_m"})
    for method in [None] + a.methods:  # runs.csv, runs-<method>.csv
        csv.writer(f := io.StringIO(newline="")).writerows([["N", "U", "D", "loss", "method", "seed"]] + [
            [r["N"], r["U_true"], r["D"], repr(float(r["loss"])), r["method"], r["seed"]]
            for r in done(records, method)])
        atomic_write_bytes(out / (f"runs-{method.replace('+', '_')}.csv" if method else "runs.csv"),
                           f.getvalue().encode())
    text = "\n".join(
        [f"# Data-constrained pre-training: MIR, strong decay, masked diffusion, scaling laws{' (--quick)' * a.quick}",
         "", provenance_line(prov), "", f"Xu et al., \"{SOURCE['title']}\", arXiv {SOURCE['arxiv']}.",
         "", reg, "", "## The paper's claims against these runs", "", RULE, ""] + table(verdicts) + [""]
        + setup_lines(a, records) + sweep_lines(a, records) + law_lines(records["fits"]) + token_lines(records["per_token"])
        + mdlm_lines(records))
    return write_report(out, text, source=SOURCE, regime=reg, figures=plot_all(a, records, verdicts), verdicts=verdicts,
                        provenance=prov, **{k: records[k] for k in RECORD_KEYS}, law_errors=le, multipliers=mult)


def setup_lines(a, records):
    runs, sweep = done(records), [r for r in records["sweep"] if r["status"] == "done"]
    every, scan = {r["name"]: r for r in runs + sweep}, records["scan"]
    margin = min((math.log(r["unigram_val_ppl"]) - r["loss"] for r in runs
                  if not r["method"].startswith("mdlm") and r.get("unigram_val_ppl")), default=None)
    missing = sorted({r["name"] for r in records["runs"] + records["sweep"] if r["status"] != "done"})
    return ["## Setup", "", f"{len(every)} training runs, {sum(r['seconds'] for r in every.values()) / 60:.1f} min of "
            "training (summed)" + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; {k} of them from {a.reuse}/report.json" if (k := sum("reused" in r for r in every.values())) else "")
            + f". Every run: dropout {a.dropout:g} ({a.dropout_at}), LM head {'tied' if a.tie else 'untied'}; `{a.stage}` ("
            + ("U / (block + 1) whole chunks drawn across the stream" if a.subset == "chunks" else "its first U tokens")
            + f"), {a.epochs:g} epochs, batch {a.batch_size} x {a.block_size}; methods {', '.join(a.methods)}; MIR "
            f"lambda {a.mir_lambda:g}, ratio {a.mir_ratio}, keep-first {a.mir_keep_first}; weak decay {a.weak_decay:g}. "
            "The loss: the final checkpoint on the whole validation split (MDLM: its NLL bound)."
            + (f" Every AR run ends >= {margin:.2f} nats below ln(unigram perplexity)." if margin is not None else "")
            + (f" The scan (experiments/lib/data_constrained_scan.py; report.json `scan`) chose {scan['choice'][0]:g} "
               f"epochs from U0 = {scan['choice'][1]:,}, sizes {', '.join(scan['sizes'])}"
               + (" (none qualified: the closest)." if scan.get("fallback") else ".") if scan else ""), ""]


def sweep_lines(a, records):
    rows, n = [], {r["size"]: r["N"] for r in records["sweep"][::-1] + done(records)[::-1] if r["status"] == "done"}
    for label, L, w, h in a.sizes:
        st = records["strong"].get(label) or {}
        for lr in a.lrs:
            row = [fmt_mean_std([r["loss"] for r in records["sweep"] if (r["size"], r["wd"], r["lr"], r["status"])
                                 == (label, d, lr, "done")]) for d in a.decays]
            rows.append([label, f"{L} x {w} ({h} heads)", f"{n[label]:,}" if label in n else "-", f"{lr:g}"]
                        + [f"**{v}**" if (st.get("wd"), st.get("lr")) == (d, lr) else v for v, d in zip(row, a.decays)])
    return md(f"Weight-decay sweep (AR, U = {a.sweep_budget:,}, {a.epochs:g} epochs)",
              "Full-validation loss, mean ± std over the sweep's seeds; **bold**: the lowest mean, that size's decay for "
              "every method (a choice, not a tested difference). N: non-embedding parameters.",
              ["size", "layers x width", "N", "lr"] + [f"wd {d:g}" for d in a.decays], rows)


def law_lines(fits):
    rows = []
    for method, res in fits.items():
        rows.append([f"{method} ({res['cells']} cells)", "data", "", "", "", "", f3(res["fan_out_data"], "{:+.4f}"), ""])
        for law, r in res["laws"].items():
            x = r.get("extrapolation", {})
            rows.append([method, law, r["note"], "", "", "", "", ""] if "params" not in r else [
                method, law, f"{r['rmse']:.4f}", f"{r['mae']:.4f}", f3(x.get("rmse"), "{:.4f}"), f3(x.get("mae"), "{:.4f}"),
                f3(r["fan_out_fit"], "{:+.4f}"), " ".join(f"{k}={v:.4g}" for k, v in r["params"].items())])
    return md("Scaling laws per method", "Fitted on the seed-averaged cells (Huber on log L, L-BFGS from a grid; scaling.py); "
              "extrapolation: fitted without the largest U, scored on it. Fan-out: slope of L(smallest U) - L(largest U) per "
              "decade of N (data, fit); MDLM: NLL bounds. Muennighoff's base needs single-epoch runs: none here.",
              ["method", "law", "RMSE", "MAE", "extrap. RMSE", "extrap. MAE", "fan-out", "parameters"], rows)


def token_lines(tok):
    where = (f" of {tok['pairs_of']} (those whose run folders are here)" if tok and tok.get("pairs_of", tok["pairs"])
             != tok["pairs"] else "") + (f", as {tok['from']}/report.json has them" if tok and tok.get("from") else "")
    return md("Where MIR's gain sits (per token)", f"{tok['pairs']} matched pairs{where}; gain per validation target = "
              "CE(wd) - CE(wd+mir), bucketed by the target's count in the run's training subset; "
              f"{tok['total_gain_per_pair']:+.1f} nats summed per pair (a decomposition, not a test). Largest summed "
              "gains: " + ", ".join(f"{t['token']} {t['gain_per_pair']:+.2f}" for t in tok["top_tokens"][:5]) + ".",
              ["training count", "targets per pair", "CE wd", "CE wd+mir", "mean gain", "summed gain per pair", "share"],
              [[b["bucket"], f"{b['targets_per_pair']:,.0f}", f"{b['ce_wd']:.3f}", f"{b['ce_mir']:.3f}", f"{b['gain']:+.4f}",
                f"{b['gain_per_pair']:+.1f}", f3(b["share"], "{:.0%}")] for b in tok["buckets"]["all"]]) if tok else []


def mdlm_lines(records):
    by = {k: group(rs, lambda r: r["method"]) for k, rs in group(
        (r for r in done(records) if r["method"] in MDLM_TABLE), lambda r: (r["U"], r["size"])).items()}
    rows = {k: v for k, v in sorted(by.items()) if any(m.startswith("mdlm") for m in v)}
    ms = [m for m in MDLM_TABLE if any(m in v for v in rows.values())]
    arm = lambda rs: (f"{fmt_mean_std([r['loss'] for r in rs])} ({rs[0]['wd']:g}; "  # noqa: E731
                      f"{fmt_mean_std([r.get('last_epoch_change') for r in rs], '{:+.5f}')}; "
                      f"{fmt_mean_std([r.get('second_half_change') for r in rs], '{:+.4f}')})")
    what = sorted({f"lr {r['lr']:g}, {r['epochs']:.0f} epochs" for v in rows.values() for m in v if "mdlm" in m for r in v[m]})
    return md("AR vs masked diffusion (MDLM)", "Loss, mean ± std over seeds (decay; val loss change per epoch over the "
              f"last evaluation interval; change from half-way to the end). MDLM (its NLL bound): {'; '.join(what)}.",
              ["U", "size"] + ms, [[f"{u:,}", s] + [arm(v[m]) if m in v else "-" for m in ms]
                                   for (u, s), v in rows.items()]) if rows else []


def plot_all(a, records, verdicts):
    """The PNGs, most telling first (report.json `figures`); MIR's gain from the pairs of the per-size claim."""
    plt, drawn = pyplot(), []

    def figure(name, n=1, **kw):  # a row of n panels (log x unless kw says otherwise); grids, legends when saved
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 1.8, 3.8), squeeze=False, sharey=True)
        for ax in axes[0]:
            ax.set(**{"xscale": "log", **kw})
            ax.xaxis.set_minor_formatter("")  # no labels between the decades
        drawn.append((name, fig, axes[0]))
        return axes[0]
    laws, ax = (a.laws or "softq,chinchilla").split(",")[:2], figure("mir_gain.png", xlabel="U", title="MIR's gain",
                                                                      ylabel="loss(wd) - loss(wd+mir)")[0]
    ax.axhline(0, color="k", lw=0.8)
    for c in (c for c in verdicts[0]["cells"] if c.get("keys")):  # (U, seed) pairs of one size
        g = {u: [b - t for (v, _), t, b in zip(c["keys"], c["treat"], c["base"]) if v == u] for u, _ in c["keys"]}
        ax.errorbar(*zip(*[(u, *mean_std(x)[:2]) for u, x in sorted(g.items())]), marker="o", label=c["name"])
    for ax, law in zip(figure("laws.png", len(laws), xlabel="N", ylabel="loss") if "wd" in records["fits"] else [], laws):
        cs, f = arrays(records, "wd")[0], records["fits"]["wd"]["laws"].get(law, {})
        grid = np.geomspace(min(c["N"] for c in cs), max(c["N"] for c in cs), 60)
        for u in sorted({c["U"] for c in cs}):
            pts = [c for c in cs if c["U"] == u]
            line = ax.plot([c["N"] for c in pts], [c["loss"] for c in pts], "o", label=f"U={u:,}")[0]
            if "params" in f:
                ax.plot(grid, scaling.predict(law, f["params"], grid, np.full_like(grid, u), np.full_like(grid, np.mean(
                    [c["D"] for c in pts]))), color=line.get_color(), lw=1)
        ax.set_title(f"wd: {law} fit")
    Us = sorted({r["U"] for r in done(records) if r["method"].startswith("mdlm")})
    for ax, u in zip(figure("ar_vs_mdlm.png", len(Us), xlabel="N", ylabel="loss (MDLM: NLL bound)") if Us else [], Us):
        for m in MDLM_TABLE:
            pts = sorted((r["N"], r["loss"]) for r in done(records, m) if r["U"] == u and r["seed"] == 0)
            ax.plot(*zip(*pts), marker="o", ls="-" if m.startswith("mdlm") else "--", label=m) if pts else None
        ax.set_title(f"U = {u:,}")
    if records["per_token"]:
        b = records["per_token"]["buckets"]["all"]
        figure("gain_by_frequency.png", xlabel="target's count in the training subset (bucket)", ylabel="mean gain per "
               "target", title="MIR's gain by frequency", xscale="linear")[0].bar(range(len(b)), [x["gain"] for x in b],
                                                                 tick_label=[x["bucket"] for x in b], label="gain")
    for name, fig, axes in drawn:
        finish(fig, axes, a.out / name)
    return [f for f in FIGURES if f in {d[0] for d in drawn}]  # most telling first
