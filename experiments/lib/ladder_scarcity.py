"""The ladder against repeating prose where prose is scarce (experiments/ladder.py --preset scarcity): at each number U
of unique prose tokens (--scan-tokens), three prose runs a (width, seed) on the same batches: the ladder (one music ->
poetry pair serves every U), prose alone for as many steps (random) and for the whole ladder's (compute-matched: U
repeated), each read at its end and at its best evaluation (every --eval-every steps: the most a stopping rule keeping
the best checkpoint gives). The crossover: the largest U where the ladder ends clearly below the control at its best."""

import math

from experiments.lib import common
from experiments.lib.claims import RULE, read_all, table
from experiments.lib.significance import mean_std
from experiments.lib.ladder_claims import SOURCE
from experiments.lib.ladder_scarcity_claims import CLAIMS, CROSSOVER
from experiments.lib.provenance import provenance_line

ARMS = {"random": None, "ladder": "ladder", "compute-matched": None}  # prose run -> the pre-training it starts from


def scan(a):
    """The U values of --scan-tokens in whole steps of batch x block tokens (0: the whole training split)."""
    per = a.batch_size * a.block_size
    return [max(1, round(int(u) / per)) * per if int(u) else 0 for u in str(a.scan_tokens).split(",")]


def chains(a, make_run, pre_run):
    """Each cell's runs, first to last (a pre-training pair serves every U; prose in wave 3, width by width)."""
    for order, (w, s) in enumerate((w, s) for w in a.widths for s in range(a.seeds)):
        for u, (c, pre) in ((u, x) for u in scan(a) for x in ARMS.items() if (x[0], w, s, u) not in a._reused):
            steps, chain = a.prose_steps + (a.music_steps + a.poetry_steps) * (c == "compute-matched"), [
                pre_run(a, "musicL", w, s), pre_run(a, pre, w, s)] if pre else []
            r = make_run(a, f"prose-{c}-u{u}-d{w}-s{s}", a.prose_stage, steps, a.eval_every, -(-steps // a.eval_every),
                         a.eval_iters, w, s, chain[-1] if chain else None, "text", ["--unique-tokens", u] * bool(u))
            r.meta.update(condition=c, unique=u, seed=s, wave=3)
            for x in chain + [r]:
                x.meta["order"] = order
            yield chain + [r]


def records(a, runs):
    """(the records of the reused cells and of the finished prose runs, the cells still missing)."""
    got = {**a._reused}
    for m, s, r in ((r.meta, s, r) for r in runs.values() if r.name.startswith("prose-")
                    for s in [common.read_summary(r.folder)] if s):
        evals = sorted((e["iter"], math.exp(e["val_loss"])) for e in common.read_events(r.folder, "eval"))
        best, prose = min(evals, key=lambda e: e[1]), s["stages"][0]
        got[m["condition"], m["width"], m["seed"], m["unique"]] = {
            "condition": m["condition"], "width": m["width"], "seed": m["seed"], "unique": prose["unique_tokens"],
            "unique_asked": m["unique"], "ppl_final": prose["val_ppl"], "ppl_best": best[1], "best_step": best[0],
            "steps": prose["iters"], "epochs": round(prose["epochs"], 2), "seconds": round(s["seconds"], 1),
            "curve": [list(e) for e in evals]}
    want = [(c, w, s, u) for w in a.widths for s in range(a.seeds) for u in scan(a) for c in ARMS]
    return [got[k] for k in want if k in got], [list(k) for k in want if k not in got]


def render(a, recs, missing, out, provenance):
    """report.md, report.json and curves.png from the records."""
    entries = read_all(CLAIMS, recs)
    cells = {tuple(c["cell"]): c for c in next(e for e in entries if e["claim"] == CROSSOVER.claim)["cells"]}
    crossover = {w: max((u for (w2, u), c in cells.items() if w2 == w and c["verdict"] == "reproduces"), default=None)
                 for w in sorted({r["width"] for r in recs})}
    said = "; ".join(f"d{w}: " + (f"U = {u:,}" if u else "none in the range") for w, u in crossover.items())
    regime = (f"{a.n_layer}-layer GPTs at d = {', '.join(map(str, a.widths))}, {a.seeds} seeds; prose ({a.prose}) "
              f"{a.prose_steps} steps of {a.batch_size} x {a.block_size} tokens at every U; music {a.music_steps} "
              f"steps on {3 * a.music_chunks} chunks, poetry {a.poetry_steps}; the control as many as all three; "
              f"evaluated every {a.eval_every} steps ({a.eval_iters} batches); the paper: WikiText-103 (not scarce).")
    text = "\n".join(["# The ladder where prose is scarce: `python experiments/ladder.py --preset scarcity`", "",
                      provenance_line(provenance), "", *table(entries), "", RULE, "",
                      f"The crossover (the largest U where the ladder is clearly below the control at its best): "
                      f"{said}.", "", regime, "", *(f"Missing: {m}" for m in missing[:20]),
                      "`curves.png`: prose validation perplexity against the step, each arm's mean over seeds.", ""])
    plot(recs, out / "curves.png")
    return common.write_report(out, text, source=SOURCE,
                               regime=regime, figures=["curves.png"], verdicts=entries, provenance=provenance,
                               front_table={"title": "The ladder against prose repeated for as many steps, by unique "
                                            f"prose tokens U (the crossover: {said})", "lines": table(entries)},
                               crossover=crossover, runs=recs, missing=missing, settings=common.settings_json(a))


def plot(recs, path):
    """curves.png: a panel per (width, U), each arm's mean validation perplexity over seeds against the step."""
    if not (by := common.group(recs, lambda r: (r["width"], r["unique"]))):
        return
    ws, us = sorted({w for w, _ in by}), sorted({u for _, u in by})
    fig, axes = common.pyplot().subplots(len(ws), len(us), figsize=(4 * len(us), 3.2 * len(ws)), squeeze=False)
    for (w, u), rs in by.items():
        ax = axes[ws.index(w)][us.index(u)]
        for c, cs in common.group(rs, lambda r: r["condition"]).items():
            steps = sorted({s for r in cs for s, _ in r["curve"]})
            ax.plot(steps, [mean_std([p for r in cs for s2, p in r["curve"] if s2 == s])[0] for s in steps], label=c)
        ax.set(title=f"d{w}, U = {u:,}", yscale="log", xlabel="prose step", ylabel="val ppl")
    common.finish(fig, [ax for row in axes for ax in row], path)
