"""
The ProRes experiment's analysis, report and figures (experiments/prores.py runs the sweep).
Chen et al., arXiv 2603.05369: loss, spikes, divergences and per-layer activation norms, with and without ProRes.

analyse(a, runs) -> one record per run (None while unfinished) with every number the report uses;
write_report(...) -> report.md, report.json (every record, curves included) and the PNGs.
"""

import json
import math
import statistics

import numpy as np
import torch

from experiments.lib.common import write_text as common_write_text  # noqa: E402
from experiments.lib.common import (fmt_mean_std, hardware, pyplot, read_events, read_summary, save_figure,
                                settings_json, welch_p, write_json)  # (puts the repo root on sys.path)
import train  # noqa: E402
from checkpoint import load_checkpoint, stage_file  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

NAMES = {"pre": "Pre-LN", "post": "Post-LN", "sandwich": "Sandwich-LN", "deepnorm": "DeepNorm",
         "lns": "LNS (fixed 1/sqrt(l))", "lns-init": "LNS (authors' init)"}
COLORS = {"pre": "tab:blue", "post": "tab:red", "sandwich": "tab:green", "deepnorm": "tab:purple",
          "lns": "tab:brown", "lns-init": "tab:orange"}


def label(norm, pr):
    return NAMES.get(norm, norm) + (" + ProRes" if pr else "")


def fail_word(r):
    if r["diverged"]:
        return "diverged"
    return f"stuck near the unigram loss ({r['val_loss']:.3f}; unigram {r['unigram_loss']:.3f})"


# ---------------------------------------------------------------------------------------------
# per-run analysis

def count_spikes(values, window, factor):
    """Steps t >= window with values[t] > factor * median(values[t - window:t])."""
    return sum(1 for t in range(window, len(values))
               if math.isfinite(values[t]) and values[t] > factor * statistics.median(values[t - window:t]))


def activation_rms(ckpt_path, batch):
    """RMS of the residual stream after the embeddings and after each block: a list of L + 1,
    with the model's residual scales as the run left them."""
    ck = load_checkpoint(ckpt_path)
    m = GPT(GPTConfig(**ck["model_config"]))
    m.load_state_dict(ck["model"])
    m.eval()
    rms = []
    record = lambda mod, inp, out: rms.append(out.float().pow(2).mean().sqrt().item())  # noqa: E731
    hooks = [m.transformer.drop.register_forward_hook(record)]  # embeddings (dropout is off)
    hooks += [b.register_forward_hook(record) for b in m.transformer.h]
    with torch.no_grad():
        m(batch)
    for h in hooks:
        h.remove()
    return rms


class Data:
    """The corpus of the runs (loaded once) and its fixed validation batch and unigram loss."""

    def __init__(self):
        self.key, self.batch, self.unigram_loss = None, None, None

    def load(self, run):
        args = train.parse_args(run.argv + ["--out", str(run.folder)])
        key = (args.stages, args.block_size, args.batch_size)
        if key != self.key:
            corpus = train.load_corpus(args.stages, args)
            self.batch = train.get_batch(corpus, "val", args.batch_size, args.block_size, [20260305], 0, 1,
                                         torch.device("cpu"))[0]
            self.unigram_loss = math.log(train.unigram_perplexity(corpus))
            self.key = key
        return args


def analyse_run(a, run, data):
    """Every number of one finished run (None if it has not finished)."""
    s, diverged = read_summary(run.folder), (run.folder / "diverged.json").exists()
    if s is None and not diverged:
        return None
    args = data.load(run)
    r = dict(name=run.name, **run.meta, diverged=diverged and s is None, unigram_loss=data.unigram_loss)
    st = s["stages"][0] if s else {}
    r.update(val_loss=st.get("val_loss"), train_loss=st.get("train_loss"), best_val_loss=st.get("best_val_loss"),
             seconds=s["seconds"] if s else None)
    tr = sorted((e for e in read_events(run.folder, "train")), key=lambda e: e["iter"])
    loss, gn = [e["loss"] for e in tr], [e["grad_norm"] for e in tr]
    r.update(steps=[e["iter"] for e in tr], loss=loss, grad_norm=gn, lr_curve=[e["lr"] for e in tr],
             val_curve={e["iter"]: e["val_loss"] for e in sorted(read_events(run.folder, "eval"),
                                                                   key=lambda e: e["iter"])},
             loss_spikes=count_spikes(loss, a.spike_window, 1 + a.loss_spike_pct / 100),
             grad_spikes=count_spikes(gn, a.spike_window, a.grad_spike_x),
             max_grad_norm=max(gn) if gn else None, diverged_at=len(tr) if r["diverged"] else None)
    if r["best_val_loss"] is None and r["val_curve"]:
        r["best_val_loss"] = min(r["val_curve"].values())
    r["failed"] = r["diverged"] or r["val_loss"] is None or r["val_loss"] >= r["unigram_loss"] - a.stuck_margin
    ck = stage_file(run.folder, 0, args.stages)
    r["act_rms"] = activation_rms(ck, data.batch) if ck.exists() else None
    r["act_growth"] = r["act_rms"][-1] / r["act_rms"][1] if r["act_rms"] and len(r["act_rms"]) > 1 else None
    return r


def analyse(a, runs):
    data = Data()
    return [analyse_run(a, run, data) for run in runs]


# ---------------------------------------------------------------------------------------------
# tables and sentences

def cell(recs, **match):
    return [r for r in recs if r is not None and all(r[k] == v for k, v in match.items())]


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


def verdicts(a, recs, depths):
    """One sentence per (norm, depth): ProRes against its baseline, over seeds."""
    out = []
    for d in depths:
        for norm in a.norms:
            base, pro = cell(recs, norm=norm, prores=False, depth=d), cell(recs, norm=norm, prores=True, depth=d)
            vb = [r["val_loss"] for r in base if not r["diverged"]]
            vp = [r["val_loss"] for r in pro if not r["diverged"]]
            if not vb or not vp:
                if base and pro:
                    out.append(f"- {label(norm, False)}, L = {d}: baseline diverged in "
                               f"{sum(r['diverged'] for r in base)}/{len(base)}, ProRes in "
                               f"{sum(r['diverged'] for r in pro)}/{len(pro)}.")
                continue
            diff = statistics.mean(vp) - statistics.mean(vb)
            spread = max([statistics.stdev(v) for v in (vb, vp) if len(v) > 1] or [0.0])
            p = welch_p(vb, vp)
            seeds = sorted({r["seed"] for r in base} & {r["seed"] for r in pro})
            pair = {(r["seed"], r["prores"]): r["val_loss"] for r in base + pro if not r["diverged"]}
            wins = sum(1 for s in seeds
                       if (s, True) in pair and (s, False) in pair and pair[(s, True)] < pair[(s, False)])
            if len(vb) < 2 or len(vp) < 2:
                how = "one seed: no spread to judge it by"
            elif abs(diff) > 2 * spread:
                how = f"more than twice the seed spread {spread:.3f}; Welch p = {p:.2g}" if p is not None else \
                      f"more than twice the seed spread {spread:.3f}"
            else:
                how = f"within twice the seed spread {spread:.3f}: not a clear effect"
            ms = lambda rs, k: statistics.mean([r[k] for r in rs])  # noqa: E731
            fb, fp = sum(r["failed"] for r in base), sum(r["failed"] for r in pro)
            out.append(f"- {label(norm, False)}, L = {d}: ProRes {'lowers' if diff < 0 else 'raises'} the final "
                       f"val loss by {abs(diff):.3f} nats ({how}; lower in {wins} of {len(seeds)} seeds); "
                       f"failed runs (diverged or stuck) {fb} -> {fp}; loss spikes {ms(base, 'loss_spikes'):.1f} -> "
                       f"{ms(pro, 'loss_spikes'):.1f}, gradient spikes {ms(base, 'grad_spikes'):.1f} -> "
                       f"{ms(pro, 'grad_spikes'):.1f} per run.")
    return out


def claims_table(a, recs, depths):
    """The paper's claims beside what our measurement shows, one column per measured depth."""
    def col(d):
        better = clear = 0
        for norm in a.norms:
            vb = [r["val_loss"] for r in cell(recs, norm=norm, prores=False, depth=d) if not r["diverged"]]
            vp = [r["val_loss"] for r in cell(recs, norm=norm, prores=True, depth=d) if not r["diverged"]]
            if vb and vp:
                diff = statistics.mean(vp) - statistics.mean(vb)
                spread = max([statistics.stdev(v) for v in (vb, vp) if len(v) > 1] or [0.0])
                better += diff < 0
                clear += diff < 0 and len(vb) > 1 and len(vp) > 1 and -diff > 2 * spread
        rs = lambda pr: cell(recs, prores=pr, depth=d)  # noqa: E731
        spikes = lambda pr, k: statistics.mean([r[k] for r in rs(pr)] or [float("nan")])  # noqa: E731
        fails = lambda pr: f"{sum(r['failed'] for r in rs(pr))}/{len(rs(pr))}"  # noqa: E731
        grow = lambda pr: fmt_mean_std([r["act_growth"] for r in cell(recs, norm="pre", prores=pr, depth=d)],  # noqa: E731
                                       "{:.2f}")
        return (f"lower in {better} of {len(a.norms)} placements, by more than twice the seed spread in {clear}",
                f"failed (diverged or stuck) {fails(False)} -> {fails(True)}; loss spikes per run "
                f"{spikes(False, 'loss_spikes'):.1f} -> {spikes(True, 'loss_spikes'):.1f}, gradient spikes "
                f"{spikes(False, 'grad_spikes'):.1f} -> {spikes(True, 'grad_spikes'):.1f}",
                f"{grow(False)} -> {grow(True)}", "not measured (music: no downstream tasks)")
    cols = [col(d) for d in depths]
    claims = ["ProRes lowers perplexity at every size, with every placement (ours: final val loss, ProRes vs "
              "baseline)",
              "stable at depth where Pre-LN degrades; almost no loss or gradient spikes (ours: baseline -> ProRes)",
              "activation norms grow linearly, not exponentially, with depth (ours: Pre-LN RMS after the last "
              "block / after the first, baseline -> ProRes; per layer below and in activation_norms.png)",
              "+1.27% average zero-shot accuracy"]
    return ["| the paper's claim (71M-7B parameters, 24-120 layers, 100k steps) | " +
            " | ".join(f"ours, L = {d}" for d in depths) + " |", "|---|" + "---|" * len(depths)] + \
           [f"| {c} | " + " | ".join(col[k] for col in cols) + " |" for k, c in enumerate(claims)] + [""]


# ---------------------------------------------------------------------------------------------
# the report

def activation_table(a, recs, d):
    """Residual-stream RMS at a few layers of the L = d models, mean over seeds."""
    layers = sorted({0, 1, d // 4, d // 2, (3 * d) // 4, d})
    rows = [f"### Residual-stream RMS by layer, L = {d} (mean over seeds; layer 0 = embeddings)", "",
            "| condition | " + " | ".join(f"layer {l}" for l in layers) + " |", "|---|" + "---|" * len(layers)]
    for norm in a.norms:
        for pr in (False, True):
            rs = [r for r in cell(recs, norm=norm, prores=pr, depth=d) if r["act_rms"]]
            if rs:
                m = np.mean([r["act_rms"] for r in rs], axis=0)
                rows.append(f"| {label(norm, pr)} | " + " | ".join(f"{m[l]:.3g}" for l in layers) + " |")
    return rows + [""]


def settings_line(a, lr, depths):
    from experiments.prores import prores_T
    Ts = ", ".join(f"T = {prores_T(a, d, a.iters):g} at L = {d} (ramp ends at step "
                   f"{math.ceil(prores_T(a, d, a.iters) * d - 1e-9)} of {a.iters})" for d in depths)
    return (f"Stage `{a.stage}`, width {a.n_embd}, {a.n_head} heads, batch {a.batch_size} x {a.block_size} "
            f"tokens, `--init {a.init}`, AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, `--schedule {a.schedule}` "
            f"(warmup {a.warmup_frac:g} of the run" + (f", decay over the last {a.decay_frac:g} to {a.min_lr:g}"
                                                     if a.schedule == "wsd" else f", to {a.min_lr:g}") +
            f"). Measurement: lr {lr:g}, {a.iters} steps, seeds 0..{a.seeds - 1}, ProRes `{a.prores_schedule}` "
            f"with {Ts}.")


def write_report(a, scan, scan_recs, meas, meas_recs, lr, depths, why, claim):
    out = a.out
    wall = json.loads((out / "wall.json").read_text()) if (out / "wall.json").exists() else {}
    recs = [r for r in meas_recs if r is not None]
    srecs = [r for r in scan_recs if r is not None]
    train_s = sum(r["seconds"] or 0 for r in {r["name"]: r for r in recs + srecs}.values())
    lines = [f"# ProRes: depth scan and measurement{' (--quick)' if a.quick else ''} (preset `{a.preset}`)", "",
             f"Paper's claim: {claim}.", "",
             f"Hardware: {hardware()}. Training: {train_s / 60:.1f} min summed over runs; wall time of the sweep "
             + (", ".join(f"{k} {v / 60:.1f} min" for k, v in wall.items()) or "not recorded") +
             f" (--jobs {a.jobs}). Mean ± std over seeds (n = number of seeds).", "",
             settings_line(a, lr, depths), ""]
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
        lines += claims_table(a, recs, depths)
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
        lines += measure_table(a, recs, depths, "Activation growth: residual-stream RMS after the last block / after "
                               "the first (final weights, one fixed validation batch)", lambda r: r["act_growth"],
                               "{:.2f}")
        lines += activation_table(a, recs, depths[-1])
        lines += ["Post-LN and DeepNorm end every block with a LayerNorm, so their ratio is ~1 by construction; "
                  "the growth claim concerns the placements without a norm on the residual stream "
                  "(Pre-LN, Sandwich, LNS).", "", "### ProRes against its baseline", ""]
        lines += verdicts(a, recs, depths) + [""]
    lines += ["## Reading", "",
              "What the tables show is what these runs show, whatever it is; where a difference sits within the "
              "seed spread we do not claim an effect. Differences from the paper: it trains 71M-7B parameter "
              "LLaMA models (width 512+, RMSNorm, SwiGLU) for 100k steps of 512 x 1,024 tokens on text, with "
              f"T = 500-1000 steps per layer; here {a.n_embd}-wide GPT-2 blocks train for {a.iters} steps of "
              f"{a.batch_size * a.block_size} tokens of `{a.stage}`, so the ramp is a few steps per layer and the "
              "whole run is shorter than the authors' lr warmup." +
              (" This --quick run is a smoke test (one seed, tiny grid): it checks the pipeline, not the claim."
               if a.quick else ""), "",
              "Figures: `scan.png` (final val loss against depth per lr, baselines), `activation_norms.png` (RMS "
              "after each block, mean over seeds), `loss_curves.png` (training loss, 10-step running mean, seed 0), "
              "`grad_norms.png` (seed 0). Every per-run number, curves included: `report.json`; the runs: "
              "`runs/<norm>-<base|prores>-L<depth>-lr<lr>-i<steps>-s<seed>/`.", ""]
    text = "\n".join(lines)
    common_write_text(out / "report.md", text)
    write_json(out / "report.json", {
        "claim": claim, "hardware": hardware(), "wall_seconds": wall, "train_seconds": train_s,
        "settings": settings_json(a),
        "measurement_point": {"lr": lr, "depths": depths, "why": why},
        "spike_definition": {"window": a.spike_window, "loss_factor": 1 + a.loss_spike_pct / 100,
                             "grad_factor": a.grad_spike_x, "first_counted_step_index": a.spike_window},
        "scan": srecs, "runs": recs})
    plot(a, srecs, recs, depths)
    return text


# ---------------------------------------------------------------------------------------------
# figures

def plot(a, srecs, recs, depths):
    plt = pyplot()
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
    if not recs:
        return

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

    def acts(ax, rs, kw):
        rs = [r for r in rs if r["act_rms"]]
        if rs:
            ax.plot(np.mean([r["act_rms"] for r in rs], axis=0), marker=".", ms=3, **kw)
            ax.set_xlabel("layer (0 = embeddings)")

    def curve(key, smooth):
        def draw(ax, rs, kw):
            r = min(rs, key=lambda r: r["seed"])
            y = np.array(r[key], dtype=float)
            if smooth > 1 and len(y) >= smooth:
                ax.plot(r["steps"][smooth - 1:], np.convolve(y, np.ones(smooth) / smooth, mode="valid"), **kw)
            else:
                ax.plot(r["steps"], y, **kw)
            ax.set_xlabel("step")
        return draw

    per_depth("residual-stream RMS", acts, "activation_norms.png", logy=True)
    per_depth("train loss (10-step mean)", curve("loss", 10), "loss_curves.png")
    per_depth("grad norm (before clipping)", curve("grad_norm", 1), "grad_norms.png", logy=True)
