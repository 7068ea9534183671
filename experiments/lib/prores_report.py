"""
The ProRes experiment's analysis, report and figures (experiments/prores.py runs the sweep).
Chen et al., "Progressive Residual Warmup for Language Model Pretraining", arXiv 2603.05369:
each residual branch of layer l is scaled by alpha(l, t) = min(t / (T l), 1) during warmup.

    recs = analyse(a, runs)                          # one record per run, from its folder
    records = collect(a, scan_recs, recs, point)     # everything the report states
    render(records, out)                             # report.md, report.json, the PNGs
    records = read_records(out)                      # the same records back from report.json

render reads nothing but the records, so a report rebuilt from report.json alone (the run
folders gone) is byte-identical to the one built from the runs; every figure is drawn from the
records too (the per-step curves are in them). Each reading of ProRes against its baseline
comes from the reading rule (common.compare for Welch's test, `paired` here for the t-test
paired by seed): a difference is an effect only at p < 0.05 with n >= 3 on each side.
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np

from experiments.lib import prores_breakdown as bd
from experiments.lib.common import (ALPHA, COMBINED_RULE, MIN_N, VERDICTS, combined_verdict, kept_provenance, paired,
                                    fmt_mean_std, fmt_p, provenance_line, pyplot, read_events, read_summary, reading,
                                    save_figure, settings_json, verdict_of, write_json, write_text)
from experiments.lib.evaluate import activation_rms, run_corpus, stage_model, unigram_loss, val_batch
from experiments.lib.prores_cells import OPEN_STREAM, by_seed, cell, compare_cell, label, spike_steps
from experiments.lib.prores_growth import growth_curve, growth_fit
from experiments.lib.prores_runs import prores_T
from flags import parse_args

SOURCE = {"arxiv": "2603.05369", "title": "Progressive Residual Warmup for Language Model Pretraining"}
CLAIM = ("ProRes: lower perplexity at every size (71M-7B); stable at 120 layers where Pre-LN degrades; "
         "almost no loss/gradient spikes; activation norms grow linearly with depth instead of "
         "exponentially; +1.27% average zero-shot accuracy (arXiv 2603.05369)")
FIGURES = ["loss_curves.png", "grad_norms.png", "activation_norms.png", "scan.png"]
# the order of report.json's `figures` where the records carry the activation fits
FIGURES_BREAKDOWN = ["breakdown.png", "activation_norms.png", "activation_over_time.png", "loss_curves.png",
                     "grad_norms.png", "scan.png"]
FIGURE_WORDS = {"breakdown.png": "final val loss against depth, baseline and ProRes, every seed",
                "activation_norms.png": "RMS after each block of the final models, mean over seeds",
                "activation_over_time.png": "RMS after the last block and the fit's b at every evaluation, seed 0",
                "loss_curves.png": "training loss, 10-step running mean, seed 0", "grad_norms.png": "seed 0",
                "scan.png": "final val loss against depth per lr, baselines"}
COLORS = {"pre": "tab:blue", "post": "tab:red", "sandwich": "tab:green", "deepnorm": "tab:purple",
          "lns": "tab:brown", "lns-init": "tab:orange"}
RECORD_KEYS = ("settings", "measurement_point", "spike_definition", "scan", "runs")


def fail_word(r):
    if r["diverged"]:
        return "diverged"
    return f"stuck near the unigram loss ({r['val_loss']:.3f}; unigram {r['unigram_loss']:.3f})"


# ---------------------------------------------------------------------------------------------
# collect: one record per run, from its folder

def count_spikes(values, window, factor):
    """How many steps t >= window have values[t] > factor * median(values[t - window:t])."""
    return len(spike_steps(values, window, factor))


class Data:
    """The corpus of the runs (loaded once), its fixed validation batch and its unigram loss."""

    def __init__(self):
        self.key, self.batch, self.unigram_loss = None, None, None

    def load(self, run):
        args = parse_args(run.argv + ["--out", str(run.folder)])
        key = (args.stages, args.block_size, args.batch_size)
        if key != self.key:
            corpus = run_corpus(args)
            self.batch = val_batch(corpus, args.batch_size, args.block_size)
            self.unigram_loss = unigram_loss(corpus)
            self.key = key
        return args


def stream_rms(r):
    """The residual stream's RMS after the embeddings and after each block of a run's final model
    (L + 1 floats), or None: records keep the embeddings' apart (embed_rms) and one value per layer
    in act_rms; the committed depth report's older records keep all L + 1 in act_rms."""
    if r.get("act_rms") is None:
        return None
    return [r["embed_rms"]] + list(r["act_rms"]) if "embed_rms" in r else r["act_rms"]


def logged_steps(r):
    """The step of each logged loss of a run record (older records kept that list in `steps`)."""
    return r["logged_steps"] if "logged_steps" in r else r["steps"]


def analyse_run(a, run, data):
    """Every number of one finished run (None if it has not finished): its losses, curves,
    spikes, largest gradient norm (with its step, and the largest after the lr warmup: a
    plain-init baseline's largest is often its very first), failure (lib/prores_breakdown's
    definitions), the residual-stream RMS after each block of its final model (act_rms, one value
    per layer; embed_rms after the embeddings) and at every evaluation (act_rms_curve at
    act_rms_steps, as train.py logged them),
    and the log-RMS fits of both (lib/prores_growth)."""
    s, diverged = read_summary(run.folder), (run.folder / "diverged.json").exists()
    if s is None and not diverged:
        return None
    args = data.load(run)
    r = dict(name=run.name, **run.meta, diverged=diverged and s is None, unigram_loss=data.unigram_loss)
    st = s["stages"][0] if s else {}
    r.update(val_loss=st.get("val_loss"), train_loss=st.get("train_loss"), best_val_loss=st.get("best_val_loss"),
             seconds=s["seconds"] if s else None)
    tr = sorted((e for e in read_events(run.folder, "train")), key=lambda e: e["iter"])
    ev = sorted(read_events(run.folder, "eval"), key=lambda e: e["iter"])
    loss, gn = [e["loss"] for e in tr], [e["grad_norm"] for e in tr]
    # steps: the run's optimizer steps; logged_steps: the step of each loss / grad_norm entry (records of
    # the committed depth report, made before this split, keep that list in `steps`)
    r.update(steps=st.get("iters", r.get("iters")), logged_steps=[e["iter"] for e in tr], loss=loss, grad_norm=gn,
             lr_curve=[e["lr"] for e in tr],
             val_curve={e["iter"]: e["val_loss"] for e in ev},
             loss_spikes=count_spikes(loss, a.spike_window, 1 + a.loss_spike_pct / 100),
             grad_spikes=count_spikes(gn, a.spike_window, a.grad_spike_x),
             max_grad_norm=max(gn) if gn else None, diverged_at=len(tr) if r["diverged"] else None)
    if r["best_val_loss"] is None and r["val_curve"]:
        r["best_val_loss"] = min(r["val_curve"].values())
    r["failed"] = r["diverged"] or r["val_loss"] is None or r["val_loss"] >= r["unigram_loss"] - a.stuck_margin
    try:
        model, _ = stage_model(run.folder, 0, args.stages)
        rms = activation_rms(model, data.batch)
        r["embed_rms"], r["act_rms"] = rms[0], rms[1:]  # act_rms: one value per layer (after each block)
    except FileNotFoundError:  # a run that diverged before its stage checkpoint
        r["embed_rms"] = r["act_rms"] = None
    rms = stream_rms(r)
    r["act_growth"] = rms[-1] / rms[1] if rms and len(rms) > 1 else None
    acts = [e for e in ev if e.get("act_rms")]
    after = [g for t, g in zip(r["logged_steps"], gn) if t > args.warmup_iters]  # the initial gradient left out
    r.update(max_grad_norm_step=r["logged_steps"][int(np.argmax(gn))] if gn else None,
             max_grad_norm_after_warmup=max(after) if after else None)
    r.update(failure=bd.failure_of(r, a.stuck_margin), act_rms_steps=[e["iter"] for e in acts],
             act_rms_curve=[e["act_rms"] for e in acts], act_fit=growth_fit(stream_rms(r)),
             act_fit_curve=growth_curve([e["act_rms"] for e in acts]))
    return r


def analyse(a, runs):
    data = Data()
    return [analyse_run(a, run, data) for run in runs]


def collect(a, scan_recs, meas_recs, point):
    """The records a report is rendered from: the experiment's settings (as the runs were made:
    those a report.json kept, if `a` came from one; without --report-only, a fact of the
    invocation, not of the runs), the measurement point (lr, depths, why), the spike rule and
    every finished run's record."""
    lr, depths, why = point
    settings = {k: v for k, v in (getattr(a, "_settings", None) or settings_json(a)).items() if k != "report_only"}
    return {"settings": settings, "measurement_point": {"lr": lr, "depths": depths, "why": why},
            "spike_definition": {"window": a.spike_window, "loss_factor": 1 + a.loss_spike_pct / 100,
                                 "grad_factor": a.grad_spike_x, "first_counted_step_index": a.spike_window},
            "scan": [r for r in scan_recs if r is not None], "runs": [r for r in meas_recs if r is not None]}


def read_records(out):
    """The records of OUT/report.json (what render needs when the run folders are gone)."""
    path = Path(out) / "report.json"
    if not path.exists():
        return None
    rep = json.loads(path.read_text())
    return {k: rep[k] for k in RECORD_KEYS if k in rep}


def settings_of(records, out):
    """The experiment's flags as the records keep them (a Namespace; out = where the report goes,
    _settings = the kept settings themselves, so that collect keeps them as they were)."""
    a = argparse.Namespace(**records["settings"])
    a.out, a._settings = Path(out), records["settings"]
    return a




# ---------------------------------------------------------------------------------------------
# the reading rule, paired by seed

# what each compared metric is, and its unit in a reading
METRICS = {"val_loss": ("final val loss", "{:.3f} nats"), "max_grad_norm": ("largest gradient norm", "{:.2f}"),
           "act_growth": ("activation growth (RMS after the last block / after the first)", "{:.2f}"),
           "loss_spikes": ("loss spikes per run", "{:.1f}"), "grad_spikes": ("gradient spikes per run", "{:.1f}")}
# each reading_table: the metric, and the words for ProRes' value below / above its baseline's
READINGS = (("val_loss", "lower", "higher"), ("max_grad_norm", "lower", "higher"), ("act_growth", "smaller", "larger"),
            ("loss_spikes", "fewer", "more"), ("grad_spikes", "fewer", "more"))
# records that carry the activation fits (has_fits) are compared on one metric more: the largest
# gradient norm after the lr warmup (a plain-init baseline's largest is its first step's, which
# ProRes, starting from the identity, does not have by construction)
METRICS_FITS = {**METRICS, "max_grad_norm_after_warmup": ("largest gradient norm after the lr warmup", "{:.2f}")}
READINGS_FITS = READINGS[:2] + (("max_grad_norm_after_warmup", "lower", "higher"),) + READINGS[2:]


def comparisons(a, recs, depths, metrics=METRICS):
    """Every (metric, placement, depth) cell of the measurement: ProRes against its baseline."""
    out = []
    for key in metrics:
        for norm in a.norms:
            for d in depths:
                base, pro = cell(recs, norm=norm, prores=False, depth=d), cell(recs, norm=norm, prores=True, depth=d)
                if base and pro:
                    out.append(dict(metric=key, norm=norm, depth=d, **compare_cell(base, pro, key)))
    return out


def pooled(recs, depth, key, norms):
    """ProRes - baseline on one metric at one depth, every placement together, paired by
    (placement, seed)."""
    pairs = []
    for norm in norms:
        b = by_seed(cell(recs, norm=norm, prores=False, depth=depth), key)
        p = by_seed(cell(recs, norm=norm, prores=True, depth=depth), key)
        pairs += [(p[s], b[s]) for s in sorted(b.keys() & p.keys())]
    return paired([t for t, _ in pairs], [b for _, b in pairs])


def depth_penalty(recs, norm, d0, d):
    """The loss a placement loses from d0 to d layers, baseline and ProRes, paired by seed:
    pen(seed) = loss(d, seed) - loss(d0, seed); ProRes' penalty against the baseline's."""
    pen = {}
    for pr in (False, True):
        lo, hi = by_seed(cell(recs, norm=norm, prores=pr, depth=d0), "val_loss"), \
                 by_seed(cell(recs, norm=norm, prores=pr, depth=d), "val_loss")
        pen[pr] = {s: hi[s] - lo[s] for s in lo.keys() & hi.keys()}
    seeds = sorted(pen[False].keys() & pen[True].keys())
    base_deg = paired([by_seed(cell(recs, norm=norm, prores=False, depth=d), "val_loss").get(s) for s in seeds],
                      [by_seed(cell(recs, norm=norm, prores=False, depth=d0), "val_loss").get(s) for s in seeds])
    return {"base": [pen[False][s] for s in seeds], "prores": [pen[True][s] for s in seeds],
            "baseline_degrades": base_deg, "test": paired([pen[True][s] for s in seeds], [pen[False][s] for s in seeds])}


def both(c, better, worse, fmt):
    """A cell's reading, paired test first (the design pairs by seed), then Welch's."""
    amount = "by " + fmt.format(abs(c["paired"]["diff"])) if math.isfinite(c["paired"]["diff"]) else ""
    return (f"paired: {reading(c['paired'], better, worse, amount)}; "
            f"Welch: {reading(c['welch'], better, worse)}")


# ---------------------------------------------------------------------------------------------
# the verdicts: one entry per claim of the paper

def cells_text(cs, better, worse, fmt, where):
    """'clear' cells named, the rest counted: '<reading> at <where>; ...; no clear difference in k other cells'."""
    clear = [c for c in cs if c["paired"]["clear"]]
    parts = [f"{reading(c['paired'], better, worse, 'by ' + fmt.format(abs(c['paired']['diff'])))} {where(c)}"
             for c in clear]
    rest = len(cs) - len(clear)
    if rest:
        parts.append(f"no clear difference in {'the ' if not clear else ''}{rest}{' other' if clear else ''} "
                     f"cell{'s' if rest > 1 else ''}")
    return "; ".join(parts)


def test_text(cs, name="paired t by seed"):
    """The tests of a claim's cells: every p, or for many cells the range and the count below ALPHA."""
    ns = ", ".join(sorted({"n = " + str(c["paired"]["n"]) for c in cs}))
    if len(cs) <= 4:
        return f"{name} ({ns}): " + ", ".join(f"{fmt_p(c['paired']['p'])} at {c['where']}" for c in cs)
    ps = [c["paired"]["p"] for c in cs if c["paired"]["p"] is not None]
    return (f"{name} ({ns}) in each of {len(cs)} cells: p from {fmt_p(min(ps))[4:]} to {fmt_p(max(ps))[4:]}, "
            f"{sum(c['paired']['clear'] for c in cs)} of {len(cs)} clear" if ps else f"{name}: no test")


def verdicts(a, recs, depths, cmp, sections=None):
    """The paper's claims, each against our cells (module docstring: the reading rule). With
    `sections` (lib/prores_breakdown.analyse_breakdown: records that carry the activation fits),
    the breakdown per placement replaces the Pre-LN depth penalty and the fits of log RMS the
    last/first RMS ratio."""
    get = lambda key, norm=None: [dict(c, where=f"{label(c['norm'], False)} L = {c['depth']}")  # noqa: E731
                                  for c in cmp if c["metric"] == key and (norm is None or c["norm"] == norm)]
    out = []
    for norm in a.norms:  # the headline: lower loss, for each placement (condition) on its own
        cs = [dict(c, where=f"L = {c['depth']}") for c in get("val_loss", norm)]
        if not cs:
            continue
        ours = "; ".join(f"L = {c['depth']}: {fmt_mean_std(c['prores'])} vs {fmt_mean_std(c['base'])}"
                         + (f", {reading(c['paired'], 'lower', 'higher')}" if c["paired"]["clear"] else "")
                         for c in cs)
        out.append({"claim": f"ProRes lowers the loss with {label(norm, False)}",
                    "paper": "lower perplexity at every size, 71M-7B parameters",
                    "ours": f"final val loss, ProRes vs baseline: {ours}",
                    "test": test_text(cs),
                    "verdict": combined_verdict([verdict_of(c["paired"]) for c in cs])})
    d0, deep = depths[0], depths[1:]
    if sections is not None:
        out += bd.breakdown_verdicts(a, depths, sections)
    elif "pre" in a.norms and deep:
        pens = [dict(depth_penalty(recs, "pre", d0, d), depth=d) for d in deep]
        ours = "; ".join(penalty_text(d0, p) for p in pens)
        out.append({"claim": "ProRes stays stable at depth where Pre-LN degrades",
                    "paper": "stable at 120 layers where Pre-LN degrades (71M parameters, 24-120 layers)",
                    "ours": f"Pre-LN final val loss lost with depth (paired by seed): {ours}",
                    "test": "paired t by seed of ProRes' depth penalty against the baseline's: " +
                            ", ".join(f"{fmt_p(p['test']['p'])} (n = {p['test']['n']}) at L = {p['depth']}"
                                      for p in pens),
                    "verdict": combined_verdict([verdict_of(p["test"]) for p in pens])})
    for key, what in (("loss_spikes", "loss"), ("grad_spikes", "gradient")):
        cs = [dict(paired=pooled(recs, d, key, a.norms), where=f"L = {d}", depth=d) for d in depths]
        ours = "; ".join(f"L = {c['depth']}: {fmt_mean_std([r[key] for r in cell(recs, prores=True, depth=c['depth'])], '{:.1f}')}"
                         f" vs {fmt_mean_std([r[key] for r in cell(recs, prores=False, depth=c['depth'])], '{:.1f}')}"
                         + (f", {reading(c['paired'], 'fewer', 'more')}" if c["paired"]["clear"] else "")
                         for c in cs)
        out.append({"claim": f"ProRes has fewer {what} spikes",
                    "paper": f"almost no {what} spikes",
                    "ours": f"{what} spikes per run, ProRes vs baseline, every placement together: {ours}",
                    "test": test_text(cs, "paired t by (placement, seed)"),
                    "verdict": combined_verdict([verdict_of(c["paired"]) for c in cs])})
    cs = get("max_grad_norm" if sections is None else "max_grad_norm_after_warmup")
    if cs:
        out.append({"claim": "ProRes lowers the largest gradient norm",
                    "paper": "almost no gradient spikes",
                    "ours": "largest gradient norm before clipping" + ("" if sections is None else
                                                                      " after the lr warmup") +
                            ", ProRes vs baseline, by placement and depth: "
                            + cells_text(cs, "lower", "higher", "{:.2f}", lambda c: f"at {c['where']}"),
                    "test": test_text(cs),
                    "verdict": combined_verdict([verdict_of(c["paired"]) for c in cs])})
    cs = [c for c in get("act_growth") if c["norm"] in OPEN_STREAM]
    if sections is not None:
        out += bd.growth_verdicts(sections["growth"])
    elif cs:
        out.append({"claim": "ProRes flattens the growth of activation norms with depth",
                    "paper": "activation norms grow linearly with depth instead of exponentially",
                    "ours": "RMS of the residual stream after the last block / after the first, ProRes vs baseline "
                            "(placements without a norm on the residual stream): "
                            + cells_text(cs, "smaller", "larger", "{:.2f}", lambda c: f"at {c['where']}"),
                    "test": test_text(cs),
                    "verdict": combined_verdict([verdict_of(c["paired"]) for c in cs])})
    out.append({"claim": "ProRes raises zero-shot accuracy", "paper": "+1.27% average zero-shot accuracy",
                "ours": f"not measured (`{a.stage}`: no downstream tasks)", "test": "not tested",
                "verdict": "not measured"})
    assert all(v["verdict"] in VERDICTS for v in out)
    return out


def penalty_text(d0, p):
    amount = f"by {abs(p['test']['diff']):.3f}" if math.isfinite(p["test"]["diff"]) else ""
    return (f"L = {d0} -> {p['depth']}: baseline {fmt_mean_std(p['base'], '{:+.3f}')}"
            f", {reading(p['baseline_degrades'], 'improves', 'degrades')}; ProRes {fmt_mean_std(p['prores'], '{:+.3f}')}; "
            f"ProRes' penalty against the baseline's: {reading(p['test'], 'smaller', 'larger', amount)}")


# ---------------------------------------------------------------------------------------------
# render: report.md, report.json and the figures, from the records alone

def measure_table(a, recs, depths, title, fn, fmt="{:.3f}", note_fail=False):
    rows = [f"### {title}", "", "| condition | " + " | ".join(f"L = {d}" for d in depths) + " |",
            "|---|" + "---|" * len(depths)]
    for norm in a.norms:
        for pr in (False, True):
            vals = []
            for d in depths:
                rs = cell(recs, norm=norm, prores=pr, depth=d)
                v = fmt_mean_std([fn(r) for r in rs], fmt) if rs else "not run"
                if note_fail and rs:
                    div, bad = sum(r["diverged"] for r in rs), sum(r["failed"] and not r["diverged"] for r in rs)
                    v += (f", {div}/{len(rs)} diverged" if div else "") + (f", {bad}/{len(rs)} stuck" if bad else "")
                vals.append(v)
            rows.append(f"| {label(norm, pr)} | " + " | ".join(vals) + " |")
    return rows + [""]


def scan_table(a, recs):
    rows = ["| baseline | lr | " + " | ".join(f"L = {d}" for d in a.scan_depths) + " |",
            "|---|---|" + "---|" * len(a.scan_depths)]
    for norm in a.scan_norms:
        for lr in a.scan_lrs:
            vals = []
            for d in a.scan_depths:
                rs = cell(recs, norm=norm, lr=lr, depth=d)
                if not rs:
                    vals.append("not run")
                    continue
                r = rs[0]
                if r["diverged"]:
                    vals.append(f"diverged at step {r['diverged_at']}")
                    continue
                v = f"{r['val_loss']:.3f}" + (" stuck" if r["failed"] else "")
                vals.append(v + f" [{r['loss_spikes']}/{r['grad_spikes']}]")
            rows.append(f"| {label(norm, False)} | {lr:g} | " + " | ".join(vals) + " |")
    return rows + [""]


def reading_table(a, cmp, depths, key, better, worse):
    """ProRes against its baseline on one metric, every (placement, depth) cell, both tests."""
    name, fmt = METRICS_FITS[key]
    rows = [f"#### {name[0].upper() + name[1:]}", "", "| placement | " + " | ".join(f"L = {d}" for d in depths) + " |",
            "|---|" + "---|" * len(depths)]
    for norm in a.norms:
        cs = {c["depth"]: c for c in cmp if c["metric"] == key and c["norm"] == norm}
        if cs:
            rows.append(f"| {label(norm, False)} | " + " | ".join(both(cs[d], better, worse, fmt) if d in cs else "-"
                                                                 for d in depths) + " |")
    return rows + [""]


def activation_table(a, recs, d):
    """Residual-stream RMS at a few layers of the L = d models, mean over seeds."""
    layers = sorted({0, 1, d // 4, d // 2, (3 * d) // 4, d})
    rows = [f"### Residual-stream RMS by layer, L = {d} (mean over seeds; layer 0 = embeddings)", "",
            "| condition | " + " | ".join(f"layer {l}" for l in layers) + " |", "|---|" + "---|" * len(layers)]
    for norm in a.norms:
        for pr in (False, True):
            rs = [r for r in cell(recs, norm=norm, prores=pr, depth=d) if r["act_rms"]]
            if rs:
                m = np.mean([stream_rms(r) for r in rs], axis=0)
                rows.append(f"| {label(norm, pr)} | " + " | ".join(f"{m[l]:.3g}" for l in layers) + " |")
    return rows + [""]


def ramp_text(a, depths):
    return ", ".join(f"T = {prores_T(a, d, a.iters):g} at L = {d} (ramp ends at step "
                     f"{math.ceil(prores_T(a, d, a.iters) * d - 1e-9)} of {a.iters})" for d in depths)


def settings_line(a, lr, depths):
    return (f"Stage `{a.stage}`, width {a.n_embd}, {a.n_head} heads, batch {a.batch_size} x {a.block_size} "
            f"tokens, `--init {a.init}`, AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, `--schedule {a.schedule}` "
            f"(warmup {a.warmup_frac:g} of the run" + (f", decay over the last {a.decay_frac:g} to {a.min_lr:g}"
                                                     if a.schedule == "wsd" else f", to {a.min_lr:g}") +
            f"). Measurement: lr {lr:g}, {a.iters} steps, seeds 0..{a.seeds - 1}, ProRes `{a.prores_schedule}` "
            f"with {ramp_text(a, depths)}.")


def init_note(a, recs):
    """How the DeepNorm arms were initialised, from the records (runs before the per-arm init
    carry no `init`: both arms then had DeepNet's Xavier init, implied by --norm deepnorm)."""
    rs = cell(recs, norm="deepnorm")
    if not rs:
        return []
    theirs = ("the authors' `deeppost` baseline has DeepNet's Xavier init and their `deeppost_prores` plain "
              "N(0, 0.02) (dandingsky/ProRes, peft_pretraining/modeling_llama.py:161-164, 193-198 and 539-554)")
    if any("init" not in r for r in rs):
        return [f"DeepNorm's init: these runs predate the per-arm init, so both DeepNorm arms had DeepNet's "
                f"Xavier init (then implied by `--norm deepnorm`), while {theirs}; the experiment now runs "
                "`--init deepnet` for the baseline and `--init plain` for ProRes, as theirs.", ""]
    inits = {pr: sorted({r["init"] for r in rs if r["prores"] == pr}) for pr in (False, True)}
    return [f"DeepNorm's init: baseline `--init {', '.join(inits[False])}`, ProRes `--init {', '.join(inits[True])}` "
            f"({theirs}).", ""]


def regime(a, lr, depths):
    """report.json's `regime`: our scale and budget against the paper's."""
    return (f"Ours: GPT-2 blocks (LayerNorm) of width {a.n_embd}, {', '.join(map(str, depths))} layers, "
            f"{a.iters} steps of {a.batch_size} x {a.block_size} tokens of `{a.stage}` at lr {lr:g}, "
            f"{a.seeds} seed(s), ProRes ramps of {ramp_text(a, depths)}. The paper: LLaMA blocks (RMSNorm, "
            "SwiGLU) of 71M-7B parameters, 24-120 layers at 71M, 100k steps of 512 x 1,024 tokens of C4 with "
            "T = 500-1000 steps per layer, so our whole run is shorter than their lr warmup (2,000 steps).")


def verdict_table(vs):
    rows = ["| claim | the paper | ours | test | verdict |", "|---|---|---|---|---|"]
    return rows + [f"| {v['claim']} | {v['paper']} | {v['ours']} | {v['test']} | **{v['verdict']}** |" for v in vs] + [""]


def has_fits(recs):
    """Whether the runs' records carry the activation fits (analysed since train.py logs act_rms
    at every evaluation): then the report has lib/prores_breakdown's sections. A report.json
    kept from before (experiments/results/prores, the `depth` preset) has none, and rebuilds
    as it was."""
    return any("act_fit" in r for r in recs)


def render(records, out):
    """report.md, report.json and the PNGs of OUT from the records alone; returns report.md's text."""
    out = Path(out)
    a = settings_of(records, out)
    point = records["measurement_point"]
    lr, depths, why = point["lr"], point["depths"], point["why"]
    srecs, recs = records["scan"], records["runs"]
    prov = kept_provenance(out)
    train_s = sum(r["seconds"] or 0 for r in {r["name"]: r for r in recs + srecs}.values())
    rich = has_fits(recs)
    sections = bd.analyse_breakdown(a, recs, depths) if rich else None
    cmp = comparisons(a, recs, depths, METRICS_FITS if rich else METRICS)
    vs = verdicts(a, recs, depths, cmp, sections) if recs else []
    reg = bd.regime(a, lr, depths) if rich else regime(a, lr, depths)
    title = "depth scan and measurement" if a.scan else "baselines and ProRes at depth"
    lines = [f"# ProRes: {title}{' (--quick)' if a.quick else ''} (preset `{a.preset}`)", "",
             provenance_line(prov), "",
             f"Chen et al., \"{SOURCE['title']}\", arXiv {SOURCE['arxiv']}. Paper's claim: {CLAIM}.", "",
             reg, "",
             f"Training: {train_s / 60:.1f} min summed over runs (train.run's seconds). Mean ± std over seeds "
             "(n = number of seeds).", "", settings_line(a, lr, depths), ""] + init_note(a, recs)
    if a.scan:
        lines += [f"## Phase 1: scan of the baselines (seed 0, {a.scan_iters} steps)", "",
                  "Final val loss (nats/token); [loss spikes/gradient spikes]; \"stuck\": within "
                  f"{a.stuck_margin:g} of the unigram loss {srecs[0]['unigram_loss']:.3f} or above it (learnt "
                  "little more than token counts)."
                  if srecs else "No scan run has finished.", ""]
        lines += scan_table(a, srecs)
    lines += ["## The measurement point", ""] + [f"- {w}" for w in why] + \
             [f"- measured: lr {lr:g}, depths {', '.join(map(str, depths))}", ""]
    lines += [f"## Phase 2: {len(a.norms)} placements x {{baseline, ProRes}} x {a.seeds} seed(s)", ""]
    if recs:
        lines += ["### The paper's claims against these runs", "",
                  f"Each claim is read by one rule: a difference counts only at p < {ALPHA:g} with n >= {MIN_N} on "
                  "each side, here by the t-test paired by seed (the runs of one seed share their batches and, "
                  "unless the arms' inits differ, their initial weights); Welch's test is in the cell tables "
                  "below. " + (COMBINED_RULE + " Whether a baseline breaks with depth is read by Welch's test "
                               "across depths (the definitions below)." if rich else
                               "A claim made for several cells is \"partly\" where its cells disagree; `ours` names "
                               "the cells with a clear difference."), ""]
        lines += verdict_table(vs)
        if rich:
            lines += bd.breakdown_md(a, recs, depths, sections)
        lines += measure_table(a, recs, depths, "Final validation loss (nats/token; lower is better)",
                               lambda r: r["val_loss"], note_fail=True)
        lines += measure_table(a, recs, depths, "Best validation loss over the run's evaluations",
                               lambda r: r["best_val_loss"])
        lines += measure_table(a, recs, depths, f"Loss spikes per run (loss > {1 + a.loss_spike_pct / 100:.2f} x "
                               f"median of the previous {a.spike_window} steps)", lambda r: r["loss_spikes"], "{:.1f}")
        lines += measure_table(a, recs, depths, f"Gradient spikes per run (norm before clipping > {a.grad_spike_x:g} "
                               f"x median of the previous {a.spike_window} steps)", lambda r: r["grad_spikes"],
                               "{:.1f}")
        lines += measure_table(a, recs, depths, "Largest gradient norm (before clipping)",
                               lambda r: r["max_grad_norm"], "{:.2f}")
        if rich:
            lines += measure_table(a, recs, depths, "Largest gradient norm after the lr warmup (before clipping)",
                                   lambda r: r.get("max_grad_norm_after_warmup"), "{:.2f}")
        lines += measure_table(a, recs, depths, "Activation growth: residual-stream RMS after the last block / after "
                               "the first (final weights, one fixed validation batch)", lambda r: r["act_growth"],
                               "{:.2f}")
        for d in (depths if rich else depths[-1:]):
            lines += activation_table(a, recs, d)
        lines += ["Post-LN and DeepNorm end every block with a LayerNorm, so their ratio is ~1 by construction; "
                  "the growth claim concerns the placements without a norm on the residual stream "
                  "(Pre-LN, Sandwich, LNS).", "",
                  "### ProRes against its baseline, cell by cell", "",
                  "ProRes - baseline over the seeds of each cell: the t-test paired by seed, then Welch's test "
                  "(common.compare), each read by the rule above.", ""]
        for key, better, worse in (READINGS_FITS if rich else READINGS):
            lines += reading_table(a, cmp, depths, key, better, worse)
        fails = lambda pr, d: cell(recs, prores=pr, depth=d)  # noqa: E731
        lines += ["Failed runs (diverged or stuck), baseline -> ProRes, every placement together: "
                  + "; ".join(f"L = {d}: {sum(r['failed'] for r in fails(False, d))}/{len(fails(False, d))} -> "
                              f"{sum(r['failed'] for r in fails(True, d))}/{len(fails(True, d))}" for d in depths)
                  + " (counts, not tested).", ""]
        if rich:
            lines += bd.runs_md(recs)
    figures = plot(a, srecs, recs, depths, rich)
    lines += ["## Reading", "",
              "Every effect named above is a generated reading of the rule; where a cell says \"no clear "
              "difference\" these runs do not tell ProRes from its baseline." +
              (" This --quick run is a smoke test (one seed, tiny grid): it checks the pipeline, not the claim."
               if a.quick else ""), "",
              ("Figures: " + ", ".join(f"`{f}` ({FIGURE_WORDS[f]})" for f in figures) if rich else
               "Figures: `loss_curves.png` (training loss, 10-step running mean, seed 0), `grad_norms.png` (seed 0), "
               "`activation_norms.png` (RMS after each block, mean over seeds), `scan.png` (final val loss against "
               "depth per lr, baselines)") + ". Every per-run number, curves included: `report.json`; the runs: "
              "`runs/<norm>-<base|prores>-L<depth>-lr<lr>-i<steps>-s<seed>/`.", ""]
    text = "\n".join(lines)
    write_text(out / "report.md", text)
    write_json(out / "report.json", {
        "source": SOURCE, "regime": reg, "figures": figures, "verdicts": vs,
        "provenance": prov, "claim": CLAIM, **{k: records[k] for k in ("settings", "measurement_point",
                                                                       "spike_definition")},
        "train_seconds": train_s, "comparisons": cmp, **({"breakdown": sections, "front_table": bd.front_table(sections)} if rich else {}),
        "scan": srecs, "runs": recs})
    return text


# ---------------------------------------------------------------------------------------------
# figures

def plot(a, srecs, recs, depths, rich=False):
    """Draw the PNGs into a.out; returns their names, most telling first (report.json's `figures`);
    rich: lib/prores_breakdown's figures too."""
    plt = pyplot()
    drawn = []
    if srecs:
        fig, axes = plt.subplots(1, len(a.scan_norms), figsize=(5 * len(a.scan_norms), 3.8), squeeze=False)
        for ax, norm in zip(axes[0], a.scan_norms):
            for lr in a.scan_lrs:
                rs = sorted(cell(srecs, norm=norm, lr=lr), key=lambda r: r["depth"])
                ok = [r for r in rs if not r["diverged"]]
                line = ax.plot([r["depth"] for r in ok], [r["val_loss"] for r in ok], marker="o", label=f"lr {lr:g}")
                div = [r for r in rs if r["diverged"]]
                if div:
                    ax.plot([r["depth"] for r in div], [srecs[0]["unigram_loss"]] * len(div), "x",
                            color=line[0].get_color(), ms=10)
            ax.axhline(srecs[0]["unigram_loss"], color="gray", ls=":", label="unigram")
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(a.scan_depths, [str(d) for d in a.scan_depths])
            ax.set_title(f"{label(norm, False)} (x: diverged)")
            ax.set_xlabel("layers")
            ax.set_ylabel(f"final val loss, {a.scan_iters} steps")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, a.out / "scan.png")
        drawn.append("scan.png")
    if not recs:
        return drawn

    def per_depth(ylabel, draw, fname, logy=False):
        fig, axes = plt.subplots(1, len(depths), figsize=(5 * len(depths), 3.8), squeeze=False)
        for ax, d in zip(axes[0], depths):
            for norm in a.norms:
                for pr in (False, True):
                    rs = cell(recs, norm=norm, prores=pr, depth=d)
                    if rs:
                        draw(ax, rs, dict(color=COLORS.get(norm), label=label(norm, pr), ls="--" if pr else "-"))
            ax.set_title(f"{d} layers")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if logy:
                ax.set_yscale("log")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, a.out / fname)
        drawn.append(fname)

    def acts(ax, rs, kw):
        rs = [r for r in rs if r["act_rms"]]
        if rs:
            ax.plot(np.mean([stream_rms(r) for r in rs], axis=0), marker=".", ms=3, **kw)
            ax.set_xlabel("layer (0 = embeddings)")

    def curve(key, smooth):
        def draw(ax, rs, kw):
            r = min(rs, key=lambda r: r["seed"])
            y = np.array(r[key], dtype=float)
            if smooth > 1 and len(y) >= smooth:
                ax.plot(logged_steps(r)[smooth - 1:], np.convolve(y, np.ones(smooth) / smooth, mode="valid"), **kw)
            else:
                ax.plot(logged_steps(r), y, **kw)
            ax.set_xlabel("step")
        return draw

    per_depth("residual-stream RMS", acts, "activation_norms.png", logy=True)
    per_depth("train loss (10-step mean)", curve("loss", 10), "loss_curves.png")
    per_depth("grad norm (before clipping)", curve("grad_norm", 1), "grad_norms.png", logy=True)
    if rich:
        drawn += bd.plot_breakdown(a, recs, depths, plt, COLORS, lambda fig, name: save_figure(fig, a.out / name))
    return [f for f in (FIGURES_BREAKDOWN if rich else FIGURES) if f in drawn]
