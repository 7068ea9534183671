"""The ProRes experiment's records (analyse: from the run folders), report and figures (render: from the records alone,
so a rebuild from report.json, which keeps every run's numbers and val curve and seed 0's per-step CURVES, is
byte-identical). experiments/prores.py runs it; claims: lib/prores_claims.py."""

import argparse
import math
from collections import Counter
from pathlib import Path

import numpy as np

from experiments.lib import prores_claims
from experiments.lib.claims import RULE, fmt_mean_std, fmt_p, md_section, md_table, read_all, table
from experiments.lib.significance import MIN_N, compare, paired
from experiments.lib.provenance import kept_provenance, provenance_line
from experiments.lib.common import (UserError, group, pyplot, read_events, read_summary, save_figure, settings_json,
                                    write_report)
from experiments.lib.prores_runs import arm_flags, prores_T, warmup_iters
from prores import ramp_steps

SOURCE = {"arxiv": "2603.05369", "title": "Progressive Residual Warmup for Language Model Pretraining"}
NAMES = {"pre": "Pre-LN", "post": "Post-LN", "sandwich": "Sandwich-LN", "deepnorm": "DeepNorm",
         "lns": "LNS (fixed 1/sqrt(l))", "lns-init": "LNS (authors' init)"}
COLORS = {"pre": "tab:blue", "post": "tab:red", "sandwich": "tab:green", "deepnorm": "tab:purple",
          "lns": "tab:brown", "lns-init": "tab:orange"}
CURVES = ("logged_steps", "loss", "grad_norm", "act_rms_steps", "act_rms_curve")  # seed 0's; every run: its val curve
RECORD_KEYS = ("settings", "measurement_point", "spike_definition", "scan", "runs")
FIGURES = {"breakdown.png": "final val loss against depth, every seed", "curves.png": "seed 0: training loss "
           "(10-step mean), gradient norm and RMS after the last block", "activation_norms.png": "RMS of the residual "
           "stream after each block of the final models, mean over seeds", "scan.png": "the scan's baselines"}


def label(norm, pr):
    return NAMES.get(norm, norm) + (" + ProRes" if pr else "")


def conditions(recs):
    """[(norm, prores, depth, its runs)] in the report's order."""
    key = lambda r: (list(NAMES).index(r["norm"]), r["prores"], r["depth"])  # noqa: E731
    return [(g[0]["norm"], g[0]["prores"], g[0]["depth"], g) for g in group(sorted(recs, key=key), key).values()]


def spike_steps(values, window, factor=None, mads=None):
    """The steps t >= window whose value exceeds the median m of the window steps before it: factor x m, or
    m + mads x 1.4826 MAD of those steps (the MAD scaled to a Gaussian's sigma: a threshold above the run's noise)."""
    meds = [(w, float(np.median(w))) for w in (np.asarray(values[t - window:t]) for t in range(window, len(values)))]
    bars = [factor * m if mads is None else m + mads * 1.4826 * float(np.median(np.abs(w - m))) for w, m in meds]
    return [t for t, bar in zip(range(window, len(values)), bars) if math.isfinite(values[t]) and values[t] > bar]


def growth_fit(rms):
    """Least-squares lines through log RMS over blocks l = 1..L (rms: the embeddings' first): a + b l (exponential) and
    a + c log l (power; c = 1 linear), `better` the smaller residual; None under 3 blocks or a value without a log."""
    if not rms or len(rms) < 4 or not all(v is not None and math.isfinite(v) and v > 0 for v in rms[1:]):
        return None
    layer, y = np.arange(1, len(rms), dtype=float), np.log(np.asarray(rms[1:], dtype=float))
    fit = {}
    for x, k, ka, kr in ((layer, "b", "a_exp", "rss_exp"), (np.log(layer), "c", "a_pow", "rss_pow")):
        s, a0 = np.polyfit(x, y, 1)
        fit.update({k: float(s), ka: float(a0), kr: float(np.sum((y - (a0 + s * x)) ** 2))})
    return dict(fit, better="exponential" if fit["rss_exp"] < fit["rss_pow"] else "power")


def stream_rms(r):
    """RMS after the embeddings, then after each block of a run's final model (L + 1 floats), or None."""
    return None if r.get("act_rms") is None else [r["embed_rms"]] + list(r["act_rms"])


class Data:
    """The corpus of the runs (loaded once), its fixed validation batch and its unigram loss."""
    key = None  # (stages, block size, batch size) of the corpus loaded

    def load(self, run):
        from evaluate import run_corpus, unigram_loss, val_batch
        from flags import parse_args
        args = parse_args(run.argv + ["--out", str(run.folder)])
        if (key := (args.stages, args.block_size, args.batch_size)) != self.key:
            corpus = run_corpus(args)
            self.key, self.batch = key, val_batch(corpus, args.batch_size, args.block_size)
            self.unigram_loss = unigram_loss(corpus)
        return args


def analyse_run(a, run, data):
    """A finished run's record (else None): its metrics.jsonl, the final model's RMS after each block (data.batch)."""
    from evaluate import activation_rms, stage_model
    s, diverged = read_summary(run.folder), (run.folder / "diverged.json").exists()
    if s is None and not diverged:
        return None
    args, st = data.load(run), (s["stages"][0] if s else {})
    tr, ev = (sorted(read_events(run.folder, kind), key=lambda e: e["iter"]) for kind in ("train", "eval"))
    loss, gn = [e["loss"] for e in tr], [e["grad_norm"] for e in tr]
    r = dict(name=run.name, **run.meta, diverged=diverged and s is None, unigram_loss=data.unigram_loss,
             val_loss=st.get("val_loss"), train_loss=st.get("train_loss"), seconds=s["seconds"] if s else None,
             best_val_loss=st.get("best_val_loss") or min((e["val_loss"] for e in ev), default=None),
             steps=st.get("iters", run.meta["iters"]), logged_steps=[e["iter"] for e in tr], loss=loss, grad_norm=gn,
             max_grad_norm=max(gn, default=None), max_grad_norm_step=tr[int(np.argmax(gn))]["iter"] if gn else None,
             act_rms_steps=[e["iter"] for e in ev if e.get("act_rms")],
             act_rms_curve=[e["act_rms"] for e in ev if e.get("act_rms")], prores_T=run.meta["T"],
             val_steps=[e["iter"] for e in ev], val_curve=[e["val_loss"] for e in ev], argv=list(map(str, run.argv)))
    r.update(spikes(a, r), diverged_at=len(tr) if r["diverged"] else None)
    r["failed"] = r["diverged"] or r["val_loss"] is None or r["val_loss"] >= r["unigram_loss"] - a.stuck_margin
    try:
        rms = activation_rms(stage_model(run.folder, 0, args.stages)[0], data.batch)
        r["embed_rms"], r["act_rms"] = rms[0], rms[1:]
    except FileNotFoundError:  # diverged before its stage checkpoint
        r["embed_rms"] = r["act_rms"] = None
    return settle(r, args.warmup_iters, a.stuck_margin)


def spikes(a, r):
    """A record's loss and gradient spikes by the preset's rule, counted on its per-step curves ({} without)."""
    return dict(loss_spikes=len(spike_steps(r["loss"], a.spike_window, 1 + a.loss_spike_pct / 100, a.loss_spike_mads)),
                grad_spikes=len(spike_steps(r["grad_norm"], a.spike_window, a.grad_spike_x))) if "loss" in r else {}


def analyse(a, runs):
    return [analyse_run(a, run, data) for data in [Data()] for run in runs]


def settle(r, warmup_iters, stuck_margin, curves=True):
    """A run's record as report.json keeps it (idempotent): the numbers its curves give; the curves with `curves`."""
    rms = stream_rms(r)
    r.setdefault("act_growth", rms[-1] / rms[1] if rms and len(rms) > 1 else None)
    r.setdefault("act_fit", growth_fit(rms))
    if "max_grad_norm_after_warmup" not in r:
        r["max_grad_norm_after_warmup"] = max((g for t, g in zip(r["logged_steps"], r["grad_norm"])
                                               if t > warmup_iters), default=None)
    r.setdefault("failure", "nan" if r["val_loss"] is None else
                 "stuck" if r["val_loss"] >= r["unigram_loss"] - stuck_margin else None)
    return {k: v for k, v in r.items() if curves or k not in CURVES}


def collect(a, scan_recs, meas_recs, point):
    """The records a report is rendered from: the settings, the measurement point, the spike rule, the runs."""
    if not any(scan_recs + meas_recs):
        raise UserError(f"no finished runs in {a.out / 'runs'}: run without --report-only first")
    return {"settings": settings_json(a, ("report_only", "plan", "reuse")),  # --reuse: in the runs ("reused")
            "measurement_point": dict(zip(("lr", "depths", "why"), point)), "spike_definition": spike_definition(a),
            "scan": [r for r in scan_recs if r], "runs": [r for r in meas_recs if r]}


def spike_definition(a):
    return {"window": a.spike_window, "loss_factor": 1 + a.loss_spike_pct / 100, "grad_factor": a.grad_spike_x,
            "first_counted_step_index": a.spike_window,
            **({"loss_mads": a.loss_spike_mads} if a.loss_spike_mads is not None else {})}


def regime(a, lr, depths):
    T = {d: prores_T(a, d, a.iters) for d in depths}
    ramp = (f"ProRes' `{a.prores_schedule}` ramp with T = " + " / ".join(f"{T[d]:.1f}" for d in depths) + " steps a "
            f"layer, every layer on by step {max(ramp_steps(d, T[d], a.prores_schedule) for d in depths):,}" if True in
            arm_flags(a) else "the baselines alone")
    return (f"Ours: GPT-2 blocks (LayerNorm) of width {a.n_embd}, {', '.join(map(str, depths))} layers, {a.iters:,} "
            f"steps of {a.batch_size} x {a.block_size} tokens of `{a.stage}` at lr {lr:g} after a "
            f"{warmup_iters(a, a.iters):,}-step warm-up, {a.seeds} seed(s); {ramp}. The paper: LLaMA blocks "
            "(RMSNorm, SwiGLU) of 71M-7B parameters, 24-120 layers at 71M, T = 500-1,000 steps a layer in runs of "
            "100k steps of 512 x 1,024 tokens of C4.")


def front_table(recs, margin):
    """Final val loss per placement and depth, baseline against ProRes (where ProRes ran), and the baseline
    against its own shallowest depth: the cells the loss and depth claims read, each by the rule (paired by seed)."""
    flat, both = prores_claims.records({"runs": recs}), any(r["prores"] for r in recs)
    head = ["placement", "L", "baseline"] + (["+ ProRes", "failed: base / ProRes", "ProRes - baseline"] if both
                                             else ["failed"]) + ["baseline - its shallowest", "the baseline degrades"]
    rows = []
    for norm, d in sorted({(r["norm"], r["depth"]) for r in recs}, key=lambda k: (list(NAMES).index(k[0]), k[1])):
        arm = {pr: [r for r in recs if (r["norm"], r["depth"], r["prores"]) == (norm, d, pr)] for pr in (False, True)}
        got = {k: [r for r in flat if (r["norm"], r["depth"], r["arm"]) == (norm, d, k)]
               for k in ("ProRes", "baseline", "baseline at L0")}
        c, deg = (compare(got[t], got[b], "val_loss") if got[t] and got[b] else None
                  for t, b in (("ProRes", "baseline"), ("baseline", "baseline at L0")))
        diff = lambda x: "-" if x is None else f"{x['diff']:+.3f} ({fmt_p(x['p'])})"  # noqa: E731
        fails = [f"{sum(r['failed'] for r in arm[pr])}/{len(arm[pr])}" for pr in (False, True)]
        cells = [label(norm, False), str(d), fmt_mean_std([r["val_loss"] for r in arm[False]])]
        cells += [fmt_mean_std([r["val_loss"] for r in arm[True]]), " / ".join(fails), diff(c)] if both else fails[:1]
        few = deg is not None and min(np.atleast_1d(deg["n"])) < MIN_N  # one seed: the margin, not a test
        cells += [diff(deg), "(reference)" if deg is None else f"{'yes' if deg['diff'] > margin else 'no'} by the "
                  f"{margin:g}-nat margin (n < {MIN_N})" if few else "yes" if got["baseline"][0]["degrades"] else "no"]
        rows.append(cells)
    return {"title": "Final validation loss (nats/token) per placement and depth, mean ± std over seeds; the "
                     "differences by the t-test paired by seed", "lines": md_table(head, rows)}


def stuck_notes(recs, warmup):
    """A depth claim's note where baseline runs failed: they never trained, not the paper's breakdown at the end."""
    notes = {}
    for norm in sorted({r["norm"] for r in recs}):
        base = [r for r in recs if r["norm"] == norm and not r["prores"]]
        failed, runs = Counter(r["depth"] for r in base if r["failed"]), Counter(r["depth"] for r in base)
        note = ("the baseline failed to train (diverged or ended near the unigram loss) at " + ", ".join(
            f"L = {d} ({failed[d]}/{runs[d]})" for d in sorted(failed)) + f", after a {warmup:,}-step lr warm-up")
        notes.update({c.claim: note for c in (prores_claims.degrades(norm, NAMES[norm]),
                                              prores_claims.prevents(norm, NAMES[norm]))} if failed else {})
    return notes


def runs_table(recs):
    """Every condition's numbers, mean ± std over its seeds."""
    cols = (("final val loss", "val_loss", "{:.3f}"), ("best val loss", "best_val_loss", "{:.3f}"),
            ("loss spikes", "loss_spikes", "{:.1f}"), ("grad spikes", "grad_spikes", "{:.1f}"),
            ("largest grad norm after warmup", "max_grad_norm_after_warmup", "{:.2f}"),
            ("RMS growth, last / first block", "act_growth", "{:.2f}"))
    head = ["condition", "L", "failed", *(c[0] for c in cols), "b of log RMS"]
    return md_section("Every condition (mean ± std over seeds)", None, head, [
        [label(norm, pr), d, f"{sum(r['failed'] for r in rs)}/{len(rs)}", *(fmt_mean_std([r[k] for r in rs], f)
         for _, k, f in cols), fmt_mean_std([(r["act_fit"] or {}).get("b") for r in rs], "{:.4f}")]
        for norm, pr, d, rs in conditions(recs)])


def along(a, recs):
    """Val loss where every layer is on (a baseline: the warm-up's end), where the decay starts and at the end; the
    plateau check: over the tenth of the run before the decay, each run's end against its start (paired t-test)."""
    rs = [r for r in recs if r.get("val_curve")]
    at = lambda r, t: next((v for s, v in zip(r["val_steps"][::-1], r["val_curve"][::-1]) if s <= t), None)  # noqa
    stable = round(a.iters * (1 - a.decay_frac))
    lo, rows = stable - max(1, a.iters // 10), []
    for n, pr, d, grp in conditions(rs):
        on = ramp_steps(d, grp[0]["prores_T"], a.prores_schedule) if pr else warmup_iters(a, a.iters)
        v = [[at(r, t) for r in grp] for t in (on, stable, a.iters)] + [[at(r, stable) - at(r, lo) for r in grp]]
        rows.append([label(n, pr), d, f"{on:,}", *map(fmt_mean_std, v[:3]), fmt_mean_std(v[3], "{:+.3f}")])
    c = paired([at(r, stable) for r in rs], [at(r, lo) for r in rs])
    plateau = dict(window=[lo, stable], change=c["diff"], p=c["p"], n=c["n"], flat=not c["clear"])
    head = ["condition", "L", "every layer on by step", "val loss there", f"at step {stable:,} (decay starts)", "end",
            f"change over steps {lo:,}-{stable:,}"]
    return md_section("Validation loss along training (nats, mean ± std over seeds)", None, head, rows) + [
        f"Plateau check: over steps {lo:,}-{stable:,} the val loss of the {c['n']} runs changed by {c['diff']:+.3f} "
        f"nats on average (paired t-test, end against start, {fmt_p(c['p'])}): " + ("no clear change, flat" if
        plateau["flat"] else "still " + ("falling" if c["diff"] < 0 else "rising")) + ".", ""], plateau


def scan_table(a, srecs):
    by = {(r["norm"], r["lr"], r["depth"]): r for r in srecs}
    cell = lambda r: "not run" if r is None else f"diverged at step {r['diverged_at']}" if r["diverged"] else (  # noqa
        f"{r['val_loss']:.3f}{' stuck' if r['failed'] else ''} [{r['loss_spikes']}/{r['grad_spikes']}]")
    return md_section(f"The scan of the baselines (seed 0, {a.scan_iters} steps)", "Final val loss; [loss "
                      "spikes/gradient spikes].", ["baseline", "lr", *(f"L = {d}" for d in a.scan_depths)], [
        [label(norm, False), f"{lr:g}", *(cell(by.get((norm, lr, d))) for d in a.scan_depths)]
        for norm in a.scan_norms for lr in a.scan_lrs])


def render(records, out):
    """report.md, report.json and the PNGs of OUT from the records alone; returns report.md's text."""
    out, a, point = Path(out), argparse.Namespace(**records["settings"]), records["measurement_point"]
    a.out, lr, depths, warmup = out, point["lr"], point["depths"], warmup_iters(a, a.iters)
    seed0 = min((r["seed"] for r in records["runs"]), default=0)
    recs = [settle(r, warmup, a.stuck_margin, r["seed"] == seed0) for r in records["runs"]]
    srecs = [settle(r, warmup_iters(a, a.scan_iters), a.stuck_margin, False) for r in records["scan"]]
    sd = records["spike_definition"]
    entries = read_all(prores_claims.with_spike_rule(sd), prores_claims.records({"runs": recs}),
                       notes={prores_claims.CLAIMS[-1].claim: f"`{a.stage}` has no downstream tasks",
                              **stuck_notes(recs, warmup)})
    prov, front, reg = kept_provenance(out), front_table(recs, a.margin), regime(a, lr, depths)
    train_s, kept = sum(r["seconds"] or 0 for r in {r["name"]: r for r in recs + srecs}.values()), Counter(
        f"{r['reused']}/report.json" for r in recs if r.get("reused"))  # --reuse: runs an earlier report holds
    lines = [f"# ProRes: {'depth scan, then ' if a.scan else ''}baselines{' and ProRes' * (True in arm_flags(a))} at depth"
             f"{' (--quick)' if a.quick else ''} (preset `{a.preset}`)", "", provenance_line(prov), "",
             f"Chen et al., \"{SOURCE['title']}\", arXiv {SOURCE['arxiv']}.", "", reg, "",
             f"Training: {train_s / 60:.1f} min summed over runs" + "".join(f" ({n} of them from `{f}`)" for f, n in
             kept.items()) + f". `--init {a.init}` (the DeepNorm baseline: DeepNet's "
             f"init, as the authors'), AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, `--schedule {a.schedule}` (warmup "
             f"{a.warmup_frac:g} of the run, decay over the last {a.decay_frac:g} to {a.min_lr:g}). A run failed if it "
             f"diverged or ended within {a.stuck_margin:g} nats of the unigram loss. A loss spike: a step whose loss "
             f"exceeds {prores_claims.loss_rule(sd, '{:.2f}')}; a gradient spike: a "
             f"pre-clipping norm above {sd['grad_factor']:g} x that median.", "", "## The paper's claims", "", RULE, ""]
    lines += table(entries) + ["", f"## {front['title']}", ""] + front["lines"] + [""]
    if a.scan:
        lines += scan_table(a, srecs) + ["## The measurement point", ""] + [f"- {w}" for w in point["why"]] + [
            f"- measured: lr {lr:g}, depths {', '.join(map(str, depths))}", ""]
    trend, plateau = along(a, recs) if any(r.get("val_curve") for r in recs) else ([], None)
    lines += runs_table(recs) + trend
    figures = plot(a, srecs, recs, depths)
    lines += ["Figures: " + ", ".join(f"`{f}` ({FIGURES[f]})" for f in figures) + ". Every run's numbers: "
              "`report.json`." + (" --quick is a smoke test of the pipeline, not of the claims." if a.quick else ""), ""]
    return write_report(out, "\n".join(lines), source=SOURCE, regime=reg, figures=figures, verdicts=entries,
                        provenance=prov, front_table=front, train_seconds=train_s,
                        **({"plateau": plateau} if plateau else {}), **{k: records[k] for k in RECORD_KEYS[:3]},
                        scan=srecs, runs=recs)


def panels(n_rows, n_cols, name, out, draw, ylabels, logy=()):
    fig, axes = pyplot().subplots(n_rows, n_cols, figsize=(4.5 * n_cols, 3.2 * n_rows), squeeze=False)
    for (i, j), ax in np.ndenumerate(axes):
        draw(ax, i, j)
        ax.set(ylabel=ylabels[i], yscale="log" if i in logy else "linear")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    save_figure(fig, out / name)
    return name


def depth_axis(ax, unigram_loss, depths, title):
    """A panel of final loss against depth: the unigram loss, log-spaced depth ticks, its legend and titles."""
    ax.axhline(unigram_loss, color="gray", ls=":", label="unigram")
    ax.set(xscale="log", title=title, xlabel="layers", xticks=depths, xticklabels=[str(d) for d in depths])
    ax.minorticks_off()
    ax.legend(fontsize=7)


def plot(a, srecs, recs, depths):
    """The PNGs, drawn into a.out from the records; returns their names."""
    drawn = []
    conds = [(n, pr) for n in a.norms for pr in arm_flags(a)]
    style = lambda n, pr: dict(color=COLORS.get(n), ls="--" if pr else "-", label=label(n, pr))  # noqa: E731
    pick = lambda n, pr, d: [r for r in recs if (r["norm"], r["prores"], r["depth"]) == (n, pr, d)]  # noqa: E731
    if recs:
        def final(ax, i, j):
            n = a.norms[j]
            for pr in arm_flags(a):
                rs = [r for r in recs if (r["norm"], r["prores"]) == (n, pr) and r["val_loss"] is not None]
                ds = sorted({r["depth"] for r in rs})
                ax.plot(ds, [np.mean([r["val_loss"] for r in rs if r["depth"] == d]) for d in ds], marker="o",
                        **style(n, pr))
                ax.plot([r["depth"] for r in rs], [r["val_loss"] for r in rs], ".", color=COLORS.get(n), alpha=0.5)
            depth_axis(ax, recs[0]["unigram_loss"], depths, NAMES.get(n, n))
        drawn.append(panels(1, len(a.norms), "breakdown.png", a.out, final, [f"final val loss, {a.iters} steps"]))

        def acts(ax, i, j):
            for n, pr in conds:
                if rs := [stream_rms(r) for r in pick(n, pr, depths[j]) if r.get("act_rms")]:
                    ax.plot(np.mean(rs, axis=0), marker=".", ms=3, **style(n, pr))
            ax.set(title=f"{depths[j]} layers", xlabel="layer (0 = embeddings)")
        drawn.append(panels(1, len(depths), "activation_norms.png", a.out, acts, ["residual-stream RMS"], (0,)))

        def curve(ax, i, j):
            for n, pr in conds:
                r = next((r for r in pick(n, pr, depths[j]) if r.get("loss") is not None), None)
                if r is None:
                    continue
                if i == 0 and len(r["loss"]) >= 10:
                    ax.plot(r["logged_steps"][9:], np.convolve(r["loss"], np.ones(10) / 10, "valid"), **style(n, pr))
                    if r.get("val_curve"):
                        ax.plot(r["val_steps"], r["val_curve"], "o", ms=3, color=COLORS.get(n))
                elif i < 2:
                    ax.plot(r["logged_steps"], r["loss" if i == 0 else "grad_norm"], **style(n, pr))
                elif r.get("act_rms_steps"):
                    ax.plot(r["act_rms_steps"], [x[-1] for x in r["act_rms_curve"]], marker=".", **style(n, pr))
            ax.set(title=f"{depths[j]} layers, seed 0", xlabel="step")
        drawn.append(panels(3, len(depths), "curves.png", a.out, curve,
                            ["train loss (10-step mean" + ("; dots: val)" if any(r.get("val_curve") for r in recs) else ")"),
                             "grad norm (before clipping)", "RMS after the last block"], (1, 2)))
    if srecs:
        def scan(ax, i, j):
            n = a.scan_norms[j]
            for lr in a.scan_lrs:
                rs = sorted((r for r in srecs if (r["norm"], r["lr"]) == (n, lr) and not r["diverged"]),
                            key=lambda r: r["depth"])
                ax.plot([r["depth"] for r in rs], [r["val_loss"] for r in rs], marker="o", label=f"lr {lr:g}")
            depth_axis(ax, srecs[0]["unigram_loss"], a.scan_depths, f"{label(n, False)} (diverged runs left out)")
        drawn.append(panels(1, len(a.scan_norms), "scan.png", a.out, scan, [f"final val loss, {a.scan_iters} steps"]))
    return drawn
