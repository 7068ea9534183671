"""
--baseline: after a curriculum, its last stage trained alone from random init in the same run folder, so
a curriculum's gain is read beside what it cost (the same budget, without --prores, and compute-matched:
as many steps as the whole curriculum, the ladder paper's control); OUT/baseline.png draws them side by side.
"""

import argparse
import json
from pathlib import Path

from checkpoint import write_atomic
from flags import command_line
from summary import figure, read_events, save_figure


def baseline_arms(args, result):
    """--baseline's arms: [(name, folder, what it keeps, its flags)], the last stage alone from random init with
    the same seed, so that the curriculum's gain is read beside what it cost. Each keeps every other flag:
      same budget      the last stage's own budget, every flag (exactly `--stages <last>` without --init-from);
      plain            the same without --prores, where --prores is on: what a user would otherwise type (ProRes
                       warms a model from scratch up slowly, which costs a short run);
      compute-matched  as many optimizer steps as the whole curriculum took (every stage's, summed: the ladder
                       paper's control; --iters, with --epochs / --tokens dropped), without --prores where it is
                       on; --unique-tokens stays, so scarce data is repeated for the extra steps.
    With --init-from the checkpoint's own training is not counted (it is not known here)."""
    last, total = args.stages.split(",")[-1], sum(s["iters"] for s in result["stages"])
    same = {**vars(args), "stages": last, "init_from": None, "baseline": False}
    plain = {**same, "prores": False}
    arms = [("same budget", "baseline", "every flag", same)]
    if args.prores:
        arms.append(("plain", "baseline-plain", "every flag but --prores", plain))
    if total != result["stages"][-1]["iters"]:  # (one stage from --init-from: the same-budget arm already is it)
        arms.append(("compute-matched", "baseline-matched", f"every flag{' but --prores' if args.prores else ''}, "
                     f"--iters {total}", {**plain, "iters": total, "epochs": None, "tokens": None}))
    return [(name, folder, keeps, argparse.Namespace(**{**flags, "out": str(Path(args.out) / folder)}))
            for name, folder, keeps, flags in arms]


def with_baseline(args, env, out, result, run):
    """--baseline: each of baseline_arms as a run of its own in OUT/<its folder> (run: train.run, resumable like
    any run); the curriculum's last-stage perplexity beside each arm's, with their steps and tokens, on screen
    and in OUT/summary.json ("baseline")."""
    last, stages = args.stages.split(",")[-1], result["stages"]
    cur = {"val_ppl": stages[-1]["val_ppl"], "steps": sum(s["iters"] for s in stages),
           "tokens": sum(s["tokens"] for s in stages)}
    arms = []
    for name, folder, keeps, base in baseline_arms(args, result):
        if env.master:
            print(f"\n--baseline, {name}: {last} alone from random init, the same seed, {keeps}, in {base.out}")
        s = run(base, inner=True)["stages"][-1]
        arms.append({"arm": name, "folder": folder, "keeps": keeps, "val_ppl": s["val_ppl"], "steps": s["iters"],
                     "tokens": s["tokens"], "change": cur["val_ppl"] / s["val_ppl"] - 1})
    result["baseline"] = {"stage": last, "curriculum": cur, "arms": arms}
    if env.master:
        write_atomic(out / "summary.json", json.dumps(result, indent=2).encode())
        print(baseline_table(last, cur, arms))
        if not args.no_plot:
            plot_baseline(out, result, args)
            print(f"{out / 'baseline.png'}: {last}'s validation loss against the tokens each model has seen, the "
                  "curriculum's last stage (after the tokens of its earlier stages) beside each arm; lower is better")
    return result


def baseline_curves(out, result):
    """{legend label: (tokens seen, validation loss)} of --baseline's figure: the curriculum's last stage, its
    tokens counted over every stage of the run, and each arm of result["baseline"], in its own folder."""
    stages, b = result["stages"], result["baseline"]

    def curve(folder, stage_index, before, per_step):
        evals = sorted((e["iter"], e["val_loss"]) for e in read_events(Path(folder) / "metrics.jsonl")
                       if e.get("event") == "eval" and e.get("stage_index") == stage_index)
        return [before + it * per_step for it, _ in evals], [loss for _, loss in evals]
    before, per_step = sum(s["tokens"] for s in stages[:-1]), stages[-1]["tokens"] / stages[-1]["iters"]
    curves = {f"the curriculum ({', '.join(s['name'] for s in stages)}): ppl {b['curriculum']['val_ppl']:.1f}":
              curve(out, len(stages) - 1, before, per_step)}
    for a in b["arms"]:
        curves[f"{b['stage']} alone, {a['arm']}: ppl {a['val_ppl']:.1f}"] = curve(Path(out) / a["folder"], 0, 0,
                                                                                  a["tokens"] / a["steps"])
    return curves


def plot_baseline(out, result, args):
    """OUT/baseline.png: baseline_curves on one axis, the arms' final perplexities in the legend, a line where the
    curriculum's last stage starts, titled with the command. Returns the legend's labels."""
    last, curves = result["baseline"]["stage"], baseline_curves(out, result)
    fig, (ax,) = figure()
    for label, (x, y) in curves.items():
        ax.plot(x, y, "o-", ms=3, label=label)
    start = sum(s["tokens"] for s in result["stages"][:-1])
    if start:
        ax.axvline(start, color="grey", lw=0.5, ls="--", label=f"the curriculum's {last} stage starts")
    ax.set_xlabel("tokens seen (every stage of a run)")
    ax.set_ylabel(f"{last} validation loss (nats/token)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, Path(out) / "baseline.png", f"the curriculum's {last} stage beside {last} alone from random init "
                f"(--baseline): {command_line(args)}")
    return list(curves)


def baseline_table(last, cur, arms):
    """--baseline's closing lines: each arm's perplexity, steps and tokens, the curriculum's change against it, and
    what the compute-matched arm says of the gain."""
    rows = [(f"the curriculum, every stage (its {last} stage's ppl)", cur, "")] + [
        (f"{last} alone, {a['arm']} ({a['keeps']})", a, f"{100 * a['change']:+.1f}%") for a in arms]
    w = max(len(r[0]) for r in rows)
    lines = [f"\n{'arm':<{w}}  {'steps':>7}  {'tokens':>11}  {'val ppl':>9}  the curriculum vs it"] + [
        f"{n:<{w}}  {r['steps']:>7,}  {r['tokens']:>11,}  {r['val_ppl']:>9.1f}  {c}" for n, r, c in rows]
    matched = [a for a in arms if a["arm"] == "compute-matched"]
    if matched:
        m = matched[0]
        lines.append(f"compute-matched: {last} alone for the curriculum's {m['steps']:,} steps ends "
                     + (f"LOWER ({m['val_ppl']:.1f} vs {cur['val_ppl']:.1f}): at this budget the curriculum's gain "
                        "over the same-budget arm is the extra training, not the earlier stages"
                        if m["val_ppl"] <= cur["val_ppl"] else
                        f"higher ({m['val_ppl']:.1f} vs {cur['val_ppl']:.1f}): the curriculum's gain is more than "
                        "its extra training") + " (one seed; experiments/ladder.py --preset headline reads five)")
    else:  # one stage from --init-from: the steps that made the checkpoint are not known here
        lines.append("no compute-matched arm: the steps that made --init-from's checkpoint are not known here, so "
                     "the change above leaves them out; train every stage in one run (--stages a,b) to get one")
    return "\n".join(lines)
