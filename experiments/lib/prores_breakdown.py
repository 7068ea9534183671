"""
Where the baseline breaks with depth, and whether ProRes prevents it: the ProRes report's
sections for a measurement whose run records carry the activation fits (the `breakdown`
preset's runs, and any run analysed since train.py logs `act_rms` at every evaluation).
Chen et al., arXiv 2603.05369: ProRes stays stable at depth where Pre-LN degrades, has almost
no loss spikes, and its activation norms grow linearly with depth instead of exponentially.

    sections = analyse_breakdown(a, recs, depths)   # report.json's `breakdown`: every number below
    lines = breakdown_md(a, recs, depths, sections) # report.md's tables
    vs = breakdown_verdicts(a, depths, sections) + growth_verdicts(sections["growth"])

Definitions, stated once (the report prints them, report.json keeps them as `definitions`):
  a run FAILS by NaN (train.py stopped it when its loss or gradient norm became NaN or infinite;
  it has no final loss) or STUCK (its final val loss within --stuck-margin of the unigram loss
  ln(unigram val ppl), or above it: it learnt little more than token counts);
  a loss spike is a step whose training loss exceeds (1 + --loss-spike-pct/100) x the median of
  the previous --spike-window steps (lib/prores_report.count_spikes);
  the baseline BREAKS at depth L when its final val loss there is clearly above its own at the
  shallowest depth L0 (Welch, common.compare: the arms at two depths share batches, not
  weights), or when most of its runs at L fail; never where most of its runs at L0 fail
  already (no depth effect to locate);
  ProRes PREVENTS a breakdown at L when its final val loss at L is clearly below the baseline's
  (the t-test paired by seed: the two arms of a seed share their initial weights and batches)
  and not all of its own runs at L fail.
Runs that failed by NaN have no final loss: they are counted, and left out of every test.
"""

import math

import numpy as np

from experiments.lib.common import ALPHA, MIN_N, combined_verdict, fmt_mean_std, fmt_p, reading, verdict_of
from experiments.lib.prores_cells import (OPEN_STREAM, by_seed, cell, compare_cell, label, spike_steps,
                                          two_tests)
from experiments.lib.prores_growth import MIN_LAYERS
from experiments.lib.prores_runs import prores_T

RAMP_STEPS_WANTED = 10  # a layer's ramp over fewer steps than this is closer to a switch than a warmup


def definitions(a):
    """report.json's `breakdown.definitions`: the words of the module docstring, with the flags' values."""
    return {
        "nan": "the training loss or gradient norm became NaN or infinite: train.py stopped the run "
               "(diverged.json), which has no final loss",
        "stuck": f"final val loss within {a.stuck_margin:g} nats of the unigram loss ln(unigram val ppl), or above "
                 "it: the run learnt little more than token counts",
        "failed": "nan or stuck",
        "loss_spike": f"a step whose training loss exceeds {1 + a.loss_spike_pct / 100:.2f} x the median of the "
                      f"previous {a.spike_window} steps",
        "breaks": "the baseline breaks at L: its final val loss at L is clearly above its own at the shallowest "
                  "depth L0 (Welch), or most of its runs at L failed; never where most of its runs at L0 failed "
                  "(no depth effect to locate)",
        "prevents": "ProRes prevents a breakdown at L: its final val loss at L is clearly below the baseline's "
                    "(t-test paired by seed), and not all of its runs at L failed",
    }


def failure_of(r, stuck_margin):
    """'nan', 'stuck' or None for one run's record (the definitions above)."""
    if r["diverged"] or r["val_loss"] is None:
        return "nan"
    return "stuck" if r["val_loss"] >= r["unigram_loss"] - stuck_margin else None


def failures(rs):
    return {"runs": len(rs), "nan": sum(r.get("failure") == "nan" for r in rs),
            "stuck": sum(r.get("failure") == "stuck" for r in rs)}


def n_failed(f):
    return f["nan"] + f["stuck"]


def mostly_failed(f):
    return 2 * n_failed(f) > f["runs"]


# ---------------------------------------------------------------------------------------------
# the analysis: every number the sections state

def loss_rows(a, recs, depths):
    """ProRes against its baseline on the final val loss, every (placement, depth): the values
    by seed, Welch's p (scipy's ttest_ind, equal_var=False) and the paired p (ttest_rel)."""
    rows = []
    for norm in a.norms:
        for d in depths:
            base, pro = cell(recs, norm=norm, prores=False, depth=d), cell(recs, norm=norm, prores=True, depth=d)
            if base and pro:
                rows.append(dict(norm=norm, depth=d, **compare_cell(base, pro, "val_loss"),
                                 base_seeds=sorted(by_seed(base, "val_loss")),
                                 prores_seeds=sorted(by_seed(pro, "val_loss")),
                                 failures={"base": failures(base), "prores": failures(pro)}))
    return rows


def breakdown_row(recs, norm, d0, d):
    """Does the baseline break from d0 to d layers, and does ProRes prevent it (the module
    docstring's definitions); every difference with its Welch and paired test."""
    loss = {(pr, dd): by_seed(cell(recs, norm=norm, prores=pr, depth=dd), "val_loss") for pr in (False, True)
            for dd in (d0, d)}
    fails = {(pr, dd): failures(cell(recs, norm=norm, prores=pr, depth=dd)) for pr, dd in loss}
    tests = {"baseline_vs_ref": two_tests(loss[False, d], loss[False, d0]),
             "prores_vs_baseline": two_tests(loss[True, d], loss[False, d]),
             "prores_vs_ref": two_tests(loss[True, d], loss[True, d0]),
             "prores_vs_baseline_ref": two_tests(loss[True, d], loss[False, d0])}
    degrades = tests["baseline_vs_ref"]["welch"]["clear"] and tests["baseline_vs_ref"]["welch"]["diff"] > 0
    fb, fp = fails[False, d], fails[True, d]
    fails_at_ref = mostly_failed(fails[False, d0])  # then there is no depth effect to locate
    breaks = not fails_at_ref and (degrades or mostly_failed(fb))
    verdict = "not measured"  # nothing to prevent where the baseline does not break
    if breaks:
        verdict = verdict_of(tests["prores_vs_baseline"]["paired"])
        if verdict == "reproduces" and fp["runs"] and n_failed(fp) == fp["runs"]:
            verdict = "no clear difference"  # lower, but failed as well: nothing prevented
    return {"norm": norm, "depth": d, "ref_depth": d0, **tests, "baseline_degrades": degrades,
            "baseline_fails_at_ref": fails_at_ref, "baseline_breaks": breaks,
            "failures": {"base": fb, "prores": fp, "base_ref": fails[False, d0], "prores_ref": fails[True, d0]},
            "verdict": verdict}


def growth_rows(a, recs, depths):
    """The log-RMS fits (lib/prores_growth) per condition: b, c, the better line and both lines'
    residual sums of squares of every seed; ProRes - baseline on b and on c, Welch and paired by
    seed."""
    rows = []
    for norm in a.norms:
        for d in depths:
            arms = {pr: [r for r in cell(recs, norm=norm, prores=pr, depth=d) if r.get("act_fit")]
                    for pr in (False, True)}
            if not (arms[False] and arms[True]):
                continue
            keys = ("b", "c", "better", "rss_exp", "rss_pow")
            fit = {k: {pr: {r["seed"]: r["act_fit"][k] for r in rs} for pr, rs in arms.items()} for k in keys}
            rows.append({"norm": norm, "depth": d,
                         **{arm: {k: [fit[k][pr][s] for s in sorted(fit[k][pr])] for k in keys}
                            for arm, pr in (("base", False), ("prores", True))},
                         "b_test": two_tests(fit["b"][True], fit["b"][False]),
                         "c_test": two_tests(fit["c"][True], fit["c"][False])})
    return rows


def spike_rows(a, recs, depths):
    """Loss and gradient spikes of the two arms of each seed, split by step: shared (both arms
    spike at that step; they saw the same batch there, so it is the batch's) and each arm's own.
    The paired test of the raw counts (the spike claims) is the paired test of the own counts:
    the shared part cancels."""
    rows = []
    for norm in a.norms:
        for d in depths:
            arm = {pr: {r["seed"]: r for r in cell(recs, norm=norm, prores=pr, depth=d)} for pr in (False, True)}
            seeds = sorted(arm[False].keys() & arm[True].keys())
            if not seeds:
                continue
            row = {"norm": norm, "depth": d, "seeds": seeds}
            for key, factor in (("loss", 1 + a.loss_spike_pct / 100), ("grad_norm", a.grad_spike_x)):
                at = {pr: [set(spike_steps(arm[pr][s][key], a.spike_window, factor)) for s in seeds]
                      for pr in (False, True)}
                row[key] = {"shared": [len(b & p) for b, p in zip(at[False], at[True])],
                            "base_own": [len(b - p) for b, p in zip(at[False], at[True])],
                            "prores_own": [len(p - b) for b, p in zip(at[False], at[True])]}
            rows.append(row)
    return rows


def analyse_breakdown(a, recs, depths):
    """report.json's `breakdown`: the definitions, the loss rows, the breakdown rows (every deep
    depth against the shallowest), the growth rows and the spike rows."""
    d0 = depths[0]
    return {"definitions": definitions(a), "loss": loss_rows(a, recs, depths),
            "depth": [breakdown_row(recs, norm, d0, d) for norm in a.norms for d in depths[1:]
                      if cell(recs, norm=norm, depth=d) and cell(recs, norm=norm, depth=d0)],
            "growth": growth_rows(a, recs, depths), "spikes": spike_rows(a, recs, depths)}


# ---------------------------------------------------------------------------------------------
# the verdicts

def diff_text(t, fmt="{:+.3f}"):
    """'+0.123 (Welch p = 0.004, paired p = 0.02)' of a two_tests entry."""
    d = t["welch"]["diff"]
    return (fmt.format(d) if math.isfinite(d) else "n/a") + \
        f" (Welch {fmt_p(t['welch']['p'])}, paired {fmt_p(t['paired']['p'])})"


def fail_text(f):
    parts = [f"{f[k]}/{f['runs']} {k}" for k in ("nan", "stuck") if f[k]]
    return ", ".join(parts)


def row_reading(row):
    """One breakdown row in words."""
    d, d0, f = row["depth"], row["ref_depth"], row["failures"]
    base = f"baseline {diff_text(row['baseline_vs_ref'])} from its L = {d0}"
    base += f" ({fail_text(f['base'])} at L = {d})" if fail_text(f["base"]) else ""
    if row["baseline_fails_at_ref"]:
        return f"L = {d}: {base}: the baseline fails already at L = {d0} ({fail_text(f['base_ref'])}), no depth effect"
    if not row["baseline_breaks"]:
        return f"L = {d}: {base}: does not break"
    pro = (f"ProRes {diff_text(row['prores_vs_baseline'])} against it"
           + (f" ({fail_text(f['prores'])})" if fail_text(f["prores"]) else "")
           + f", {diff_text(row['prores_vs_ref'])} from its own L = {d0}")
    return f"L = {d}: {base}: breaks; {pro}: {row['verdict']}"


def breakdown_verdicts(a, depths, sections):
    """ProRes prevents the deep breakdown: one entry per placement, its cells the deeper depths
    (where the baseline does not break, "not measured": nothing to prevent)."""
    out = []
    for norm in a.norms:
        rows = [r for r in sections["depth"] if r["norm"] == norm]
        if not rows:
            continue
        cost = next((r for r in sections["loss"] if r["norm"] == norm and r["depth"] == depths[0]), None)
        at_ref = (f"; at L = {depths[0]} ProRes - baseline {diff_text(cost)}"
                  + (" (ProRes costs there)" if cost["paired"]["clear"] and cost["paired"]["diff"] > 0 else "")
                  if cost else "")
        broken = [r for r in rows if r["baseline_breaks"]]
        out.append({"claim": f"ProRes prevents the deep breakdown of {label(norm, False)}",
                    "paper": "stable at 120 layers where Pre-LN degrades (71M parameters, 24-120 layers)",
                    "ours": "final val loss (nats): " + "; ".join(row_reading(r) for r in rows) + at_ref,
                    "test": ("paired t by seed of ProRes - baseline where the baseline breaks: " +
                             ", ".join(f"{fmt_p(r['prores_vs_baseline']['paired']['p'])} "
                                       f"(n = {r['prores_vs_baseline']['paired']['n']}) at L = {r['depth']}"
                                       for r in broken)
                             if broken else "the baseline breaks at no depth (Welch against its L = "
                                            f"{depths[0]}): nothing to prevent"),
                    "verdict": combined_verdict([r["verdict"] for r in rows])})
    return out


def growth_cell_verdict(row):
    """ProRes' b clearly smaller (paired): reproduces, but only 'partly' unless the exponential
    line fits most baseline runs better and the power line most ProRes runs."""
    v = verdict_of(row["b_test"]["paired"])
    shapes = (2 * row["base"]["better"].count("exponential") > len(row["base"]["better"]) and
              2 * row["prores"]["better"].count("power") > len(row["prores"]["better"]))
    return "partly" if v == "reproduces" and not shapes else v


def growth_text(row):
    b, p = row["base"], row["prores"]
    return (f"{label(row['norm'], False)} L = {row['depth']}: b = {fmt_mean_std(b['b'], '{:.4f}')} -> "
            f"{fmt_mean_std(p['b'], '{:.4f}')} a layer, {reading(row['b_test']['paired'], 'smaller', 'larger')}; "
            f"c = {fmt_mean_std(b['c'], '{:.2f}')} -> {fmt_mean_std(p['c'], '{:.2f}')}; the exponential line fits better in "
            f"{b['better'].count('exponential')}/{len(b['better'])} baseline and "
            f"{p['better'].count('exponential')}/{len(p['better'])} ProRes runs")


def growth_verdicts(growth):
    """Activation growth linear under ProRes, exponential without: one entry over the
    placements without a norm on the residual stream, a cell per depth (growth_cell_verdict)."""
    rows = [r for r in growth if r["norm"] in OPEN_STREAM and r["depth"] >= MIN_LAYERS]
    if not rows:
        return []
    return [{"claim": "Activation norms grow linearly with depth under ProRes, exponentially without",
             "paper": "activation norms grow linearly with depth instead of exponentially",
             "ours": "fits of log RMS of the residual stream against layer l = 1..L (final weights): "
                     "log RMS = a + b l (exponential) and a + c log l (power; c = 1 linear), baseline -> ProRes: "
                     + "; ".join(growth_text(r) for r in rows),
             "test": "paired t by seed of ProRes' b against the baseline's: " +
                     ", ".join(f"{fmt_p(r['b_test']['paired']['p'])} (n = {r['b_test']['paired']['n']}) at "
                               f"{label(r['norm'], False)} L = {r['depth']}" for r in rows),
             "verdict": combined_verdict([growth_cell_verdict(r) for r in rows])}]


# ---------------------------------------------------------------------------------------------
# report.md's sections

def ramp_T(a, depths):
    return {d: prores_T(a, d, a.iters) for d in depths}


def regime(a, lr, depths):
    """report.json's `regime` for these runs: steps, T per layer against the ramp a layer
    needs (and the run length that would give it), and the paper's."""
    T = ramp_T(a, depths)
    ends = sorted({math.ceil(T[d] * d - 1e-9) for d in depths})
    short = [d for d in depths if T[d] < RAMP_STEPS_WANTED]
    text = (f"Ours: GPT-2 blocks (LayerNorm) of width {a.n_embd}, {', '.join(map(str, depths))} layers, "
            f"{a.iters:,} steps of {a.batch_size} x {a.block_size} tokens of `{a.stage}` at lr {lr:g}, {a.seeds} "
            f"seed(s); ProRes' `{a.prores_schedule}` ramp, every layer on by step {'/'.join(f'{e:,}' for e in ends)}: "
            "T = " + " / ".join(f"{T[d]:.1f}" for d in depths) + " steps a layer at L = "
            + " / ".join(map(str, depths)))
    if short:
        text += (f", so at L = {', '.join(map(str, short))} each layer ramps over fewer than the ~{RAMP_STEPS_WANTED} "
                 "steps a warmup needs")
        if not a.prores_T:
            need = math.ceil(RAMP_STEPS_WANTED * max(short) / a.ramp_frac / 1000) * 1000
            text += f": {need:,} steps would be the next step"
    return text + (". The paper: LLaMA blocks (RMSNorm, SwiGLU) of 71M-7B parameters, 24-120 layers at 71M, "
                   "T = 500-1,000 steps a layer in runs of 100k steps of 512 x 1,024 tokens of C4.")


def definitions_md(a):
    d = definitions(a)
    return ["### Definitions", "",
            f"- A run fails by **NaN** ({d['nan']}) or is **stuck** ({d['stuck']}).",
            f"- A **loss spike** is {d['loss_spike']}; a gradient spike, a pre-clipping gradient norm above "
            f"{a.grad_spike_x:g} x the median of the previous {a.spike_window} steps.",
            "- The baseline **breaks** at L when its final val loss there is clearly above its own at the "
            "shallowest depth L0 (Welch: the two depths share batches, not weights), or most of its runs at L "
            "fail; never where most of its runs at L0 fail already (no depth effect to locate).",
            "- ProRes **prevents** a breakdown at L when its final val loss at L is clearly below the baseline's "
            "(t-test paired by seed: the arms of a seed share their initial weights and batches) and not all of "
            "its own runs at L fail.",
            f"- Clearly: p < {ALPHA:g} with n >= {MIN_N} on each side (common.compare, common.paired). NaN runs "
            "have no final loss: they are counted, never tested.", ""]


def arm_text(vals, f):
    return fmt_mean_std(vals) + (f", {fail_text(f)}" if fail_text(f) else "")


def loss_md(rows):
    out = ["### Final val loss: baseline against ProRes, every placement and depth", "",
           "Mean ± std over seeds (nats/token); ProRes - baseline = the difference of the means; Welch's p "
           "(scipy.stats.ttest_ind, equal_var=False) and the paired p (ttest_rel, by seed) recompute from "
           "report.json's `runs`; the reading is the paired test's.", "",
           "| placement | L | baseline | + ProRes | ProRes - baseline | Welch p | paired p | reading |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, head = r["welch"]["diff"], f"| {label(r['norm'], False)} | {r['depth']} |"
        out.append(f"{head} {arm_text(r['base'], r['failures']['base'])} | "
                   f"{arm_text(r['prores'], r['failures']['prores'])} | {d:+.3f} | {fmt_p(r['welch']['p'])[4:]} | "
                   f"{fmt_p(r['paired']['p'])[4:]} | {reading(r['paired'], 'lower', 'higher')} |"
                   if math.isfinite(d) else f"{head} - | - | - | - | - | no test |")
    return out + [""]


def depth_md(rows):
    out = ["### Does the baseline break with depth, and does ProRes prevent it?", "",
           "Differences of mean final val loss (nats), each with Welch's p and the paired p (by seed).", "",
           "| placement | L | baseline - its L0 | breaks? | ProRes - baseline | ProRes - its L0 | "
           "ProRes - baseline at L0 | prevents? |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["failures"]["base"]
        breaks = ("yes" if r["baseline_breaks"] else "no") + (f"; at L: {fail_text(f)}" if fail_text(f) else "") + \
            (f"; fails at L0 already ({fail_text(r['failures']['base_ref'])})" if r["baseline_fails_at_ref"] else "")
        out.append(f"| {label(r['norm'], False)} | {r['ref_depth']} -> {r['depth']} | "
                   f"{diff_text(r['baseline_vs_ref'])} | {breaks} | {diff_text(r['prores_vs_baseline'])} | "
                   f"{diff_text(r['prores_vs_ref'])} | {diff_text(r['prores_vs_baseline_ref'])} | "
                   f"{r['verdict'] if r['baseline_breaks'] else 'nothing to prevent'} |")
    return out + [""]


def growth_md(rows):
    out = ["### Activation growth with depth: fits of log RMS against the layer", "",
           "Per run, over layers l = 1..L of the final model (lib/prores_growth): log RMS = a + b l "
           "(exponential: x e^b a layer) and log RMS = a + c log l (power: RMS ~ l^c, c = 1 linear); "
           "RSS: each line's residual sum of squares (mean over seeds); 'exp. better' counts the runs where the "
           "exponential line's is the smaller. Post-LN ends every block with a LayerNorm, so its stream is flat by "
           "construction.", "",
           "| placement | L | b, baseline | b, + ProRes | ProRes - baseline on b | c, baseline | c, + ProRes | "
           "ProRes - baseline on c | RSS exp. / power, baseline; ProRes | exp. better, baseline; ProRes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    rss = lambda f: f"{np.mean(f['rss_exp']):.3g} / {np.mean(f['rss_pow']):.3g}"  # noqa: E731
    for r in rows:
        b, p = r["base"], r["prores"]
        out.append(f"| {label(r['norm'], False)} | {r['depth']} | {fmt_mean_std(b['b'], '{:.4f}')} | "
                   f"{fmt_mean_std(p['b'], '{:.4f}')} | {diff_text(r['b_test'], '{:+.4f}')} | {fmt_mean_std(b['c'], '{:.2f}')} | "
                   f"{fmt_mean_std(p['c'], '{:.2f}')} | {diff_text(r['c_test'], '{:+.2f}')} | {rss(b)}; {rss(p)} | "
                   f"{b['better'].count('exponential')}/{len(b['better'])}; "
                   f"{p['better'].count('exponential')}/{len(p['better'])} |")
    return out + [""]


def spikes_md(rows):
    out = ["### Spikes: the batch's or the run's own", "",
           "Both arms of a seed see the same batches, so a spike at a step where the other arm spikes too is the "
           "batch's (shared); the rest are each arm's own. Mean ± std over seeds; the paired test of the raw counts "
           "(the spike claims above) is the test of the own counts, the shared part cancelling.", "",
           "| placement | L | loss: shared | baseline own | ProRes own | gradient: shared | baseline own "
           "| ProRes own |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {label(r['norm'], False)} | {r['depth']} | " + " | ".join(
            fmt_mean_std(r[key][k], "{:.1f}") for key in ("loss", "grad_norm") for k in ("shared", "base_own", "prores_own"))
            + " |")
    return out + [""]


def over_time_md(a, recs, depths):
    """RMS after the last block at every evaluation, mean over seeds."""
    steps = sorted({s for r in recs for s in r.get("act_rms_steps") or []})
    if not steps:
        return []
    out = ["### Residual-stream RMS after the last block over training (mean over seeds)", "",
           "| condition | L | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|---|" + "---|" * len(steps)]
    for norm in a.norms:
        for pr in (False, True):
            for d in depths:
                at = {}
                for r in cell(recs, norm=norm, prores=pr, depth=d):
                    for s, rms in zip(r.get("act_rms_steps") or [], r.get("act_rms_curve") or []):
                        at.setdefault(s, []).append(rms[-1])
                if at:
                    out.append(f"| {label(norm, pr)} | {d} | " + " | ".join(
                        f"{np.mean(at[s]):.3g}" if s in at else "-" for s in steps) + " |")
    return out + [""]


def runs_md(recs):
    out = ["### Every run", "",
           "Max grad norm: the largest pre-clipping gradient norm (at step), and the largest after the lr warmup.", "",
           "| run | final val | best val | fails | loss spikes | grad spikes | max grad norm (step) | after warmup "
           "| RMS, last block | b | c | better line |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    num = lambda v, f: "-" if v is None else f.format(v)  # noqa: E731
    for r in sorted(recs, key=lambda r: (r["norm"], r["prores"], r["depth"], r["seed"])):
        fit = r.get("act_fit") or {}
        out.append(f"| {r['name']} | {num(r['val_loss'], '{:.3f}')} | {num(r['best_val_loss'], '{:.3f}')} | "
                   f"{r.get('failure') or '-'} | {r['loss_spikes']} | {r['grad_spikes']} | "
                   f"{num(r['max_grad_norm'], '{:.2f}')} ({num(r.get('max_grad_norm_step'), '{}')}) | "
                   f"{num(r.get('max_grad_norm_after_warmup'), '{:.2f}')} | "
                   f"{num((r['act_rms'] or [None])[-1], '{:.3g}')} | "
                   f"{num(fit.get('b'), '{:.4f}')} | {num(fit.get('c'), '{:.2f}')} | {fit.get('better', '-')} |")
    return out + [""]


def breakdown_md(a, recs, depths, sections):
    return (definitions_md(a) + loss_md(sections["loss"]) + depth_md(sections["depth"]) +
            growth_md(sections["growth"]) + over_time_md(a, recs, depths) + spikes_md(sections["spikes"]))


# ---------------------------------------------------------------------------------------------
# figures

def plot_breakdown(a, recs, depths, plt, colors, save):
    """breakdown.png (final val loss against depth, baseline and ProRes, every seed) and
    activation_over_time.png (RMS after the last block, and the fit's b, at every evaluation);
    returns the names drawn."""
    fig, axes = plt.subplots(1, len(a.norms), figsize=(5 * len(a.norms), 3.8), squeeze=False)
    for ax, norm in zip(axes[0], a.norms):
        for pr in (False, True):
            rs = [r for r in cell(recs, norm=norm, prores=pr) if r["val_loss"] is not None]
            ds = sorted({r["depth"] for r in rs})
            if not ds:
                continue
            kw = dict(color=colors.get(norm), ls="--" if pr else "-", label=label(norm, pr))
            ax.plot(ds, [np.mean([r["val_loss"] for r in rs if r["depth"] == d]) for d in ds], marker="o", **kw)
            ax.plot([r["depth"] for r in rs], [r["val_loss"] for r in rs], ".", color=kw["color"], alpha=0.5)
        if recs:
            ax.axhline(recs[0]["unigram_loss"], color="gray", ls=":", label="unigram")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xlim(min(depths) / 1.3, max(depths) * 1.3)
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.set_title(label(norm, False))
        ax.set_xlabel("layers")
        ax.set_ylabel(f"final val loss, {a.iters} steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, "breakdown.png")
    drawn = ["breakdown.png"]
    if not any(r.get("act_rms_steps") for r in recs):
        return drawn
    fig, axes = plt.subplots(2, len(depths), figsize=(5 * len(depths), 7), squeeze=False)
    for j, d in enumerate(depths):
        for norm in a.norms:
            for pr in (False, True):
                rs = [r for r in cell(recs, norm=norm, prores=pr, depth=d) if r.get("act_rms_steps")]
                if not rs:
                    continue
                r = min(rs, key=lambda r: r["seed"])
                kw = dict(color=colors.get(norm), ls="--" if pr else "-", label=label(norm, pr))
                axes[0][j].plot(r["act_rms_steps"], [x[-1] for x in r["act_rms_curve"]], marker=".", **kw)
                b = r["act_fit_curve"]["b"]
                axes[1][j].plot([s for s, v in zip(r["act_rms_steps"], b) if v is not None],
                                [v for v in b if v is not None], marker=".", **kw)
        axes[0][j].set_title(f"{d} layers (seed 0)")
        axes[0][j].set_ylabel("RMS after the last block")
        axes[0][j].set_yscale("log")
        axes[1][j].set_ylabel("b: log RMS slope a layer")
        for ax in axes[:, j]:
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)  # the deepest models: every condition's runs are there first (deepest first)
    fig.tight_layout()
    save(fig, "activation_over_time.png")
    return drawn + ["activation_over_time.png"]


def bare_p(p):
    """fmt_p without its 'p = ' (a table column of p-values): '0.012', '< 0.001', 'n/a'."""
    return fmt_p(p).removeprefix("p = ").removeprefix("p ")


def front_table(sections):
    """report.json's `front_table` (RESULTS.md and the README show it beside the claims): per
    placement and depth the final val loss of the baseline and of ProRes (mean ± std over seeds),
    Welch's and the paired p, the failed runs, whether the baseline breaks there and whether
    ProRes prevents it."""
    depth = {(d["norm"], d["depth"]): d for d in sections["depth"]}
    lines = ["| placement | L | baseline | + ProRes | Welch p | paired p | failed: base / ProRes | the baseline "
             "breaks | does ProRes prevent it |", "|---|---|---|---|---|---|---|---|---|"]
    for c in sections["loss"]:
        d = depth.get((c["norm"], c["depth"]))
        f = c["failures"]
        breaks = "(reference)" if d is None else "yes" if d["baseline_breaks"] else "no"
        lines.append(f"| {c['norm']} | {c['depth']} | {fmt_mean_std(c['base'])} | {fmt_mean_std(c['prores'])} | "
                     f"{bare_p(c['welch']['p'])} | {bare_p(c['paired']['p'])} | "
                     f"{f['base']['nan'] + f['base']['stuck']}/{f['base']['runs']} / "
                     f"{f['prores']['nan'] + f['prores']['stuck']}/{f['prores']['runs']} | {breaks} | "
                     f"{'-' if d is None else d['verdict'] if d['baseline_breaks'] else '(nothing to prevent)'} |")
    return {"title": "Where the baselines break, the final validation loss (nats/token) per placement and depth, "
                     "baseline against ProRes (mean ± std over seeds; p: Welch's t-test and the t-test paired by seed)",
            "lines": lines}
