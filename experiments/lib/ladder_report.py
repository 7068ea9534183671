"""The ladder experiment's report from its records (experiments/ladder.py collects them): render() writes report.md,
report.json, details.json and the PNGs, rebuild(out) again from report.json (and details.json's curves) alone; the
claims (ladder_claims.py) and the checks they rest on (the prose unigram, the controls, the long pair) from records."""

import argparse
import json
import math
from pathlib import Path

from experiments.lib import common
from experiments.lib.provenance import hardware, provenance_line
from experiments.lib.claims import (check_lines, combined_verdict, fmt_mean_std, fmt_n, fmt_p, md_section, md_table,
                                    read_all, table, RULE)
from experiments.lib.significance import mean_std
from experiments.lib.ladder_claims import CLAIMS, SIX, SOURCE

FIGURES, MUSIC = ["width.png", "curves.png", "ablation.png"], ("music.png", "music-real.mid", "music-sampled.mid")
OVERFIT_TOLERANCE = 0.05
TITLES = {"proportions": ", with pre-training ~15% of the prose tokens seen"}
ROWS = {"proportions": (1, 3, 6)}  # the contributions a preset's conditions read (else all six)
PAPER_SHARE = "a few percent: music ~2 passes over 36k MAESTRO chunks and a poetry stage before 5 epochs of WikiText-103"


def reused(a, defaults):
    """--reuse DIR (its settings ours; a flag it predates at its default): {(condition, width, seed): (record, details)},
    their prose runs not trained again (their pre-training is: the facts); --preset scarcity: {(condition, width, seed,
    U asked): record}."""
    if not a.reuse:
        return {}
    old, now = common.reused_report(a.reuse), common.settings_json(a, common.INVOCATION_FLAGS + ("more_seeds",))
    now, was = json.loads(json.dumps(now)), lambda k: old["settings"].get(k, defaults.get(k))  # noqa: E731
    if diff := sorted(k for k, v in now.items() if was(k) != v):
        fix = f"add --preset {was('preset')}" if was("preset") != now.get("preset") else "give the same flags"
        raise common.UserError(f"--reuse {a.reuse}: its report was made with other settings ({len(diff)}: " + ", ".join(
            f"{k} {was(k)!r:.40} there, {now[k]!r:.40} here" for k in diff[:4]) + f"{', ...' * (len(diff) > 4)}); {fix}")
    if a.preset == "scarcity":
        return {(r["condition"], r["width"], r["seed"], r["unique_asked"]): r for r in old["runs"]}
    det = json.loads((Path(a.reuse) / "details.json").read_text())["runs"]
    return {(r["condition"], r["width"], r["seed"]): (r, det[f"{r['condition']}/d{r['width']}/s{r['seed']}"])
            for r in old["runs"]}


def baseline(c):
    return "long-random" if c.startswith("long-") else "random"


def values(records, c, w, metric):
    return [r[metric] for r in records if r["condition"] == c and r["width"] == w]


def widths_of(records, c):
    return sorted({r["width"] for r in records if r["condition"] == c})


def checks(records, unigram, facts=None):
    """report.json's `checks` ({check, holds, detail}) and {a claim's extra "check": the note after its numbers, or
    its extra "fails": the check its cells failed}."""
    means = {w: mean_std(values(records, "random", w, "ppl_first_epoch"))[0] for w in widths_of(records, "random")}
    above = [f"d{w} {m:.1f}" for w, m in means.items() if unigram is not None and m > unigram]
    fit = [r["ppl_final"] / r["ppl_best"] - 1 for r in records if r["condition"] == "compute-matched"
           and math.isfinite(r.get("ppl_best", math.nan))]
    runs = [r for r in records if r["condition"].startswith("long-")]
    capped = [r for r in runs if not r.get("stopped_early")]
    ch = [r["last_epoch_change"] for r in capped if math.isfinite(r.get("last_epoch_change", math.nan))]
    falling = (f" (their last epoch changed the perplexity by {100 * sum(ch) / len(ch):+.1f}% on average, "
               f"{100 * min(ch):+.1f}% to {100 * max(ch):+.1f}%)") if ch else ""
    other = (facts or {}).get("long_pair_elsewhere")
    elsewhere = other and (f"; the long pair at d{other['width']}, {other['seeds']} seeds, is not run here: "
                           f"~{other['cpu_hours']:g} CPU-hours at the epoch cap by the plan's cost model")
    out = [("random init after the first epoch is below the prose unigram perplexity", not above,
            ", ".join(f"d{w} {m:.1f}" for w, m in means.items()) + f" vs unigram {unigram:.1f}"
            if means and unigram is not None else None),
           (f"the compute-matched control does not overfit (final <= best epoch + {100 * OVERFIT_TOLERANCE:.0f}%)",
            fit and max(fit) <= OVERFIT_TOLERANCE,
            fit and f"{len(fit)} runs; the worst ends {100 * max(fit):.1f}% above its best evaluation"),
           ("the long pair stopped at a plateau (its stopping rule), not at the epoch cap", not capped,
            runs and f"{len(runs) - len(capped)} of {len(runs)} runs stopped early" + (
                "; the others ran to the cap, so their best perplexity is the best within the cap" + falling
                if capped else "") + (elsewhere or ""))]
    pre = {k: (p, mean_std(p["val_ppl"])[0]) for k, p in ((facts or {}).get("pretrain") or {}).items()}  # (older: none)
    out += [("every pre-training run ends below its data's unigram perplexity (it learnt more than token counts)",
             all(p["unigram_ppl"] is None or v < p["unigram_ppl"] for p, v in pre.values()), "; ".join(
                 f"{k} ({p['stage']}, {p['steps']} steps): {fmt_mean_std(p['val_ppl'], '{:.1f}')} vs unigram "
                 f"{p['unigram_ppl'] or math.nan:.1f}" for k, (p, v) in pre.items()))] * bool(pre)
    notes = {"unigram": above and (f"random init after the first epoch is still above the prose unigram perplexity "
                                   f"{unigram:.1f} at {', '.join(above)}: part of a gain there is a head start"),
             "plateau": capped and (f"{len(capped)} of {len(runs)} runs ran to the epoch cap before --patience saw a "
                                    "plateau: the gap at the cap, not at a plateau" + falling)}
    return [{"check": c, "holds": h if d else None, "detail": d or "not measured"} for c, h, d in out], notes


def said(claim, entry):
    """A claim's cells as 'music vs random d16 -8.9% (paired p < 0.001, n = 5)'."""
    first, t, b = "first epoch: " * (claim.metric == "ppl_first_epoch"), claim.treat, claim.base["condition"]
    return "; ".join(f"{first}{c['arm'] or t['condition']} vs {b} {claim.label.format(c['cell'])} {c['change']:+.1f}% "
                     f"({c['test']} {fmt_p(c['p'])}, {fmt_n(c)})" for c in entry["cells"]) or "not in this run"


def front_table(entries, preset=None):
    """report.json's `front_table`: the contributions (SIX; a preset's ROWS), its claims' cells beside the paper's."""
    by, rows = {e["claim"]: e for e in entries}, []
    for n, title, paper, idx in (row for row in SIX if row[0] in ROWS.get(preset, (row[0],))):
        ours = [said(CLAIMS[i], by[CLAIMS[i].claim]) for i in idx]
        rows.append([n, title, paper, " ".join(f"({'abc'[k]}) {o}" for k, o in enumerate(ours)) if len(ours) > 1
                     else ours[0], f"**{combined_verdict([by[CLAIMS[i].claim]['verdict'] for i in idx])}**"])
    which = f"contributions {', '.join(map(str, ROWS[preset]))}" if preset in ROWS else "six contributions"
    head = ["#", "contribution", "paper", "ours: change of prose perplexity (test, n)", "verdict"]
    return {"title": f"The ladder paper's {which} beside its numbers" + TITLES.get(preset, "") +
                     " (each claim's cells in RESULTS.md)", "lines": md_table(head, rows)}


def pretrain_share(a, f):
    """The ladder's pre-training steps (music + poetry) / its prose steps (the same batch x block), and the paper's."""
    return {"ours": (a.music_steps + a.poetry_steps) / (a.prose_epochs * f["spe"]), "paper": PAPER_SHARE,
            "paper_approx": 0.05}


def regime(a, data, provenance):
    """report.json's `regime`: our scale and budget, and what differs from the paper's."""
    f, more, h = data["facts"], getattr(a, "capacity_widths", None), (provenance or {}).get("hardware")
    widths = ", ".join(map(str, a.widths)) + (f" (volume also d = {', '.join(map(str, more))})" if more else "") + (
        f", the long pair at d = {a.long_width}" if any(c.startswith("long-") for c in a.conditions) else "")
    return (f"{a.n_layer}-layer GPTs at d = {widths}; {a.seeds} seeds" + (f" ({a.headline_seeds} for random, music, "
            "ladder)" if getattr(a, "headline_seeds", 0) else "") + (f" (more: {a.more_seeds})" if getattr(
                a, "more_seeds", "") else "") + f"; prose = {f['prose_desc']}, {a.prose_epochs} "
            f"epochs of {f['spe']} steps x {a.batch_size} x {a.block_size} tokens; music {a.music_steps} steps on "
            f"{3 * a.music_chunks:,} chunks of " + (f"--music-dir {a.music_dir}" if a.music_dir else "score-derived "
            "MIDI of the offline music21 corpus (Bach, Monteverdi, Haydn, Mozart)") + f"; poetry {a.poetry_steps} "
            f"steps; the compute-matched control repeats the prose set for {f['ladder_steps'] / f['spe']:.1f} epochs."
            + (f" {provenance['wall_seconds'] / 60:.1f} min wall on {hardware(h)}."
               if provenance else "") + " The paper trains on WikiText-103 (~100M tokens) after MAESTRO piano "
            f"performances (12k / 36k chunks), 5 seeds, to convergence: our 'final' is after {a.prose_epochs} epochs "
            f"of a far smaller prose set, so our perplexities are far higher. Pre-training is "
            f"{100 * pretrain_share(a, f)['ours']:.1f}% of the prose tokens the ladder sees (the paper: a few percent)."
            + (" The long pair trains at a constant lr after its warmup, so its stopping rule sees a plateau."
               if getattr(a, "long_schedule", "cosine") == "constant" else "")
            + (f" {f['reused'][0]} results from {f['reused'][1]}/report.json (--reuse)." if f.get("reused") else ""))


def markdown(a, data, entries, check_list, front, figures, provenance):
    f, records, missing = data["facts"], data["runs"], data["missing"]
    ppl = lambda c, w, m: fmt_mean_std(values(records, c, w, m), "{:.1f}")  # noqa: E731
    n, draws = a.music_chunks, a.music_steps * a.batch_size
    rows = [[c, w, len(values(records, c, w, "ppl_final")), ppl(c, w, "ppl_first_epoch"), ppl(c, w, "ppl_final")]
            for c in a.conditions for w in widths_of(records, c)]
    lines = [f"# The ladder: music -> poetry -> prose{' (--quick)' if a.quick else ''}", "",
             provenance_line(provenance), "", "## The paper's claims beside ours", "", *table(entries), "",
             RULE + " Perplexity of the prose validation split, lower is better; the arms pair by seed (the same "
             "prose batches).", "",
             *(["## The paper's contributions", "", *front["lines"], "", "A contribution's verdict combines its "
                "claims' verdicts by the same rule.", ""] if front else []), "## Checks", "", *check_lines(check_list), "",
             *md_section("Prose validation perplexity (mean ± std over seeds)", None,
                         ["condition", "d", "n", "after the first epoch", "final"], rows),
             "## Setup, and what differs from the paper", "", regime(a, data, provenance), ""]
    if "music_train_chunks" in f:
        lines += [f"Music volume (the paper's 12k vs 36k MAESTRO chunks, 1 : 3): N = {n:,}, 3N = {3 * n:,} of the "
                  f"{f['music_train_chunks']:,} training chunks; {draws:,} chunk draws per music stage, "
                  f"{draws / (3 * n):.1f} passes over 3N, {draws / n:.1f} over N (the paper: 2 passes over 36k).", ""]
    if a.quick:
        lines += ["This --quick run is a smoke test (tiny budgets): it checks the pipeline, not the claims.", ""]
    if missing:
        shown = ", ".join(f"{c} d{w} s{s} ({why})" for c, w, s, why in missing[:20])
        lines += [f"Missing results ({len(missing)}): {shown}" + " ..." * (len(missing) > 20), ""]
    music = (f"; `{MUSIC[0]}`: a real piece of the music stage beside one sampled from the d{min(a.widths)} music run "
             f"(piano rolls), to listen to: `{MUSIC[1]}`, `{MUSIC[2]}`") if MUSIC[0] in figures else ""
    return "\n".join(lines + [
        f"Figures: `width.png` (change against the baseline per width; the volume pair per seed beside the paper's), "
        f"`curves.png` (prose validation perplexity per epoch, mean over seeds), `ablation.png` (final perplexity per "
        f"condition){music}. Every run's record: `report.json`; per-run chains and curves: `details.json`.", ""])


def render(a, data, details, out, provenance):
    """report.md (returned), report.json, the PNGs and (with details) details.json from the records alone."""
    records = data["runs"]
    check_list, notes = checks(records, data["prose_unigram_ppl"], data["facts"])
    entries = read_all(CLAIMS, records, notes={c.claim: notes.get(c.extra.get("check")) for c in CLAIMS},
                       failed=lambda claim, treat, cell: notes.get(claim.extra.get("fails")) or "")
    front = front_table(entries, a.preset) if getattr(a, "preset", "subset") != "subset" else None  # (older: none)
    figures = FIGURES + [MUSIC[0]] * (out / MUSIC[0]).exists()
    if details is not None:
        common.write_json(out / "details.json", {"runs": details})
        plot_curves(a, details, out / "curves.png")
    plot_width(a, records, out / "width.png")
    plot_ablation(records, out / "ablation.png")
    return common.write_report(out, markdown(a, data, entries, check_list, front, figures, provenance), source=SOURCE,
                               regime=regime(a, data, provenance), figures=figures, verdicts=entries,
                               provenance=provenance, prose_unigram_ppl=data["prose_unigram_ppl"], checks=check_list,
                               **({"front_table": front} if front else {}), settings=common.settings_json(a),
                               facts=data["facts"], pretrain_share=pretrain_share(a, data["facts"]), runs=records,
                               missing=data["missing"])


def rebuild(out):
    """The report again from OUT/report.json alone (and the per-epoch curves of details.json if it is there)."""
    rep, path = json.loads((out / "report.json").read_text()), out / "details.json"
    a, prov, preset = argparse.Namespace(**rep["settings"]), rep.get("provenance"), rep["settings"].get("preset")
    if preset == "scarcity":
        from experiments.lib import ladder_scarcity
        return ladder_scarcity.render(a, rep["runs"], rep["missing"], out, prov)
    if preset == "headline":
        return render_headline(a, rep["runs"], rep["missing"], out, prov)
    data = {k: rep[k] for k in ("runs", "missing", "facts", "prose_unigram_ppl")}
    return render(a, data, json.loads(path.read_text())["runs"] if path.exists() else None, out, prov)


def render_headline(a, records, missing, out, provenance):
    """--preset headline: report.md and report.json from the records (one per arm and seed)."""
    from experiments.lib.ladder_headline_claims import CLAIMS as HEADLINE
    entries, b = read_all(HEADLINE, records), a.budget
    ppl = {c: [r["ppl_final"] for r in records if r["condition"] == c] for c in a.conditions}
    seeds = " / ".join(str(1337 + k) for k in range(a.seeds))
    fewer = [f"{c} {len(v)}" for c, v in ppl.items() if 0 < len(v) < a.seeds]
    lines = md_table(["arm", "train.py --stages", "prose val ppl", f"seeds {seeds}", "vs prose only", "min"], [
        [c, f"`{v}`", fmt_mean_std(ppl[c], "{:.1f}"), " / ".join(f"{x:.1f}" for x in ppl[c]),
         f"{100 * (mean_std(ppl[c])[0] / mean_std(ppl['prose-only'])[0] - 1):+.1f}%",
         f"{mean_std([r['seconds'] / 60 for r in records if r['condition'] == c])[0]:.1f}"]
        for c, v in a.conditions.items() if ppl[c]])
    regime = (f"train.py's default budget, each arm's command as typed: {b['iters']} steps a stage of {b['batch_size']}"
              f" x {b['block_size']} tokens, {b['n_layer']} layers, d = {b['n_embd']}, lr {b['lr']:g}; {a.seeds} seeds "
              f"from 1337 (the default){' (' + ', '.join(fewer) + ')' if fewer else ''}; 'min': a run's minutes on one "
              "thread; the paper: WikiText-103, to convergence.")
    text = "\n".join(["# The headline command: `python train.py --stages music,poetry,prose --prores`", "",
                      provenance_line(provenance), "", *table(entries), "", RULE, "", *lines, "", regime, "",
                      *(f"Missing: {m}" for m in missing), "`headline.png`: the headline command's loss (1337).", ""])
    return common.write_report(out, text, source=SOURCE, regime=regime, figures=["headline.png"], verdicts=entries,
                               provenance=provenance, front_table={"title": "The headline command at train.py's "
                               "default budget, prose perplexity per arm", "lines": lines}, runs=records,
                               missing=missing, settings=common.settings_json(a))


def headline_records(a, runs):
    """--preset headline: (each finished run's prose perplexity, the missing runs); seed 1337's loss: headline.png."""
    done, head = [(r.meta, common.read_summary(r.folder)) for r in runs.values()], runs["curriculum+prores-s0"].folder
    if (head / "metrics.jsonl").exists():
        common.summary.plot_losses(head), (a.out / "headline.png").write_bytes((head / "loss.png").read_bytes())
    return ([{"condition": m["condition"], "seed": m["seed"], "ppl_final": s["stages"][-1]["val_ppl"], "stage_ppl":
              [t["val_ppl"] for t in s["stages"]], "seconds": round(s["seconds"], 1)} for m, s in done if s],
            [[m["condition"], m["seed"], "not run or diverged"] for m, s in done if not s])


# --- figures ---------------------------------------------------------------------------------------

def curve_conditions(conditions, details, width):
    """The conditions curves.png draws at one width: those with runs there, volume-large only where
    `music` (the same runs) has none at that width (the capacity widths)."""
    have = {c for c in conditions if any(k.startswith(f"{c}/d{width}/") for k in details)}
    return [c for c in conditions if c in have and not (c == "volume-large" and "music" in have)]


def plot_curves(a, details, path):
    """Prose validation perplexity per epoch, mean over seeds, one panel per width."""
    plt, widths = common.pyplot(), sorted({int(k.split("/d")[1].split("/")[0]) for k in details})
    fig, axes = plt.subplots(1, max(1, len(widths)), figsize=(5 * max(1, len(widths)), 4), squeeze=False)
    for ax, w in zip(axes[0], widths):
        for c in curve_conditions(a.conditions, details, w):
            by_epoch = common.group((pt for k, d in details.items() if k.startswith(f"{c}/d{w}/") for pt in d["curve"]),
                                    lambda pt: round(pt[0], 3))
            ax.plot(sorted(by_epoch), [sum(p for _, p in by_epoch[x]) / len(by_epoch[x]) for x in sorted(by_epoch)],
                    marker=".", label=c, color=plt.get_cmap("tab20").colors[a.conditions.index(c) % 20],
                    ls="--" if c.startswith("long-") or c == "compute-matched" else "-")
        ax.set(title=f"d = {w}", xlabel="prose epoch", ylabel="validation perplexity (mean over seeds)", yscale="log")
    common.finish(fig, axes[0], path)


def plot_width(a, records, path):
    """Each condition's change of prose perplexity against its baseline per width (first epoch, final) and,
    where the volume pair ran at several widths, 3N against N seed by seed beside the paper's numbers."""
    plt, vol = common.pyplot(), next(c for c in CLAIMS if isinstance(c.paper_value, dict))
    capacity = len(widths_of(records, "volume-small")) > 1
    fig, axes = plt.subplots(1, 2 + capacity, figsize=(5 * (2 + capacity), 4))
    change = lambda t, b, w, m: 100 * (mean_std(values(records, t, w, m))[0]  # noqa: E731
                                       / mean_std(values(records, b, w, m))[0] - 1)
    for ax, m in zip(axes, ("ppl_first_epoch", "ppl_final")):
        for i, c in enumerate(a.conditions):
            ws = [w for w in widths_of(records, c) if values(records, baseline(c), w, m)]
            if ws and c != baseline(c) and not (c == "volume-large" and "music" in a.conditions):  # = music's runs
                ax.plot(ws, [change(c, baseline(c), w, m) for w in ws], marker="o", label=c,
                        color=plt.get_cmap("tab20").colors[i % 20])
        ax.set(title=m, ylabel="change of prose ppl vs the baseline (%)")
    if capacity:
        small = {(r["width"], r["seed"]): r["ppl_final"] for r in records if r["condition"] == "volume-small"}
        ax, ws = axes[2], [w for w in widths_of(records, "volume-small") if w in widths_of(records, "volume-large")]
        ax.scatter(*zip(*[(r["width"], 100 * (r["ppl_final"] / small[r["width"], r["seed"]] - 1)) for r in records
                          if r["condition"] == "volume-large" and (r["width"], r["seed"]) in small]), alpha=0.4, s=14)
        ax.plot(ws, [change("volume-large", "volume-small", w, "ppl_final") for w in ws], marker="o",
                color="tab:blue", label="ours: mean (dots: each seed)")
        ax.plot(*zip(*sorted(vol.paper_value.items())), marker="s", ls="--", color="tab:red",
                label="paper (MAESTRO 12k vs 36k)")
        ax.set(title="3N vs N music chunks (negative: 3N better)", ylabel="change of prose ppl (%)")
    ws = sorted({r["width"] for r in records})
    for ax in axes:
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(xlabel="width d", xscale="log", xticks=ws, xticklabels=ws, xlim=(ws[0] / 1.5, ws[-1] * 1.5))
        ax.minorticks_off()
    common.finish(fig, axes, path)


def plot_ablation(records, path):
    """Final perplexity per condition and width, bars with the seeds' std."""
    conds = [c for c in ("random", "music", "ablation-attn", "ablation-mlp", "ablation-norm", "poetry", "ladder",
                         "ablation-embed") if widths_of(records, c)]
    widths = sorted({w for c in conds for w in widths_of(records, c)})
    fig, ax = common.pyplot().subplots(figsize=(max(6, 0.72 * len(conds) * max(1, len(widths))), 4))
    bw, lows = 0.8 / max(1, len(widths)), []
    for k, w in enumerate(widths):
        ms = [mean_std(values(records, c, w, "ppl_final")) for c in conds]
        ax.bar([i + k * bw for i in range(len(conds))], [m for m, _, _ in ms], bw, capsize=3, label=f"d = {w}",
               yerr=[s if n > 1 else 0 for _, s, n in ms])
        lows += [m for m, _, _ in ms if math.isfinite(m)]
    ax.set(ylabel="final prose validation perplexity", title="what each transferred part is worth",
           xticks=[i + bw * (len(widths) - 1) / 2 for i in range(len(conds))], **(
               {"ylim": (0.9 * min(lows), 1.03 * max(lows))} if lows else {}))
    ax.set_xticklabels(conds, rotation=25, ha="right", fontsize=8)
    common.finish(fig, [ax], path, axis="y")
