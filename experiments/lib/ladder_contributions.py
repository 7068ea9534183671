"""
The ladder paper's six contributions, each beside its own number, and the checks a run must pass
before its prose budget can test them (the contributions preset's report; ladder_report renders it).
arXiv 2604.21265 ("Listen and Chant Before You Read"), section "Results" (5 seeds, WikiText-103 after
MAESTRO, d in {16, 32, 64}, Welch's t-test).

A contribution's verdict is common.combined_verdict over the verdicts of the claims it rests on
(each claim's cells read by common.compare: clear only at Welch p < 0.05 with >= 3 runs a side).
Beside each claim the paired test by seed (common.paired: at one seed every condition sees the
same prose batches in the same order) is shown as a second reading; the verdict is Welch's.

The checks (each holds / fails, from the records alone):
- random init's perplexity after the first prose epoch is below the prose unigram perplexity
  (exp of the cross-entropy of the training split's token frequencies on the validation split),
  so a first-epoch gain is not a head start on token frequencies;
- the compute-matched control does not overfit: each run's final perplexity is at most
  OVERFIT_TOLERANCE above its own best evaluation;
- the long pair: how many runs stopped at the plateau (--patience) rather than at the epoch cap, and how
  much the capped ones still changed in their last epoch.
"""

import math

from experiments.lib import common

OVERFIT_TOLERANCE = 0.05
# (number, contribution, the paper's number, the claims of ladder_report.CLAIMS it rests on)
SIX = [
    (1, "music before prose lowers prose perplexity",
     "26% lower than random init after the first prose epoch; 11.8% after convergence (373.2 vs 423.0)",
     ["music -> prose: lower perplexity after the first prose epoch", "music -> prose: lower perplexity at the end"]),
    (2, "real music at N chunks reaches synthetic music's ceiling at 3N",
     "d16: 12k real chunks beat 36k synthetic ones (the same ceiling with a third of the data)",
     ["real music beats synthetic music"]),
    (3, "poetry after music is additive; compute does not explain it",
     "ladder 17.5% below random init (349.0 vs 423.0, p < 0.001), 6.5% below music only; a compute-matched "
     "prose-only control still 5.0% behind the ladder",
     ["the ladder (music -> poetry -> prose): lower perplexity at the end", "poetry adds to music",
      "a compute-matched prose-only control stays behind the ladder"]),
    (4, "the mechanism is orthogonal: music trains attention / FFN, poetry the token embeddings",
     "transferring music's attention or MLP alone helps; re-initialising the poetry-trained embeddings loses "
     "poetry's gain",
     ["music helps through attention and the MLP", "poetry helps through the token embeddings"]),
    (5, "the value of more music depends on capacity",
     "12k vs 36k chunks: 36k is 3.1% worse at d16, 3.3% better at d32, 6.1% better at d64",
     ["more music data helps the wider models (3N = 36k vs N = 12k chunks)"]),
    (6, "the gap survives long training",
     "at d64 the ladder stays 5.5% below random init at the plateau (p = 0.017)",
     ["the advantage persists at the plateau"]),
]


def contributions(verdict_list, paired_text):
    """report.json's `contributions`: one entry per contribution, its claims' entries and its combined
    verdict. paired_text: {claim: the paired-by-seed reading of its cells}."""
    by_claim = {v["claim"]: v for v in verdict_list}
    out = []
    for n, title, paper, claims in SIX:
        vs = [by_claim[c] for c in claims if c in by_claim]
        out.append({"contribution": n, "title": title, "paper": paper, "claims": claims,
                    "ours": lettered([v["ours"] for v in vs]), "test": lettered([v["test"] for v in vs]),
                    "paired": lettered([paired_text.get(c, "-") for c in claims]),
                    "verdict": common.combined_verdict([v["verdict"] for v in vs])})
    return out


def lettered(texts):
    """'(a) .. (b) ..': one text per claim, in order (a table cell cannot hold a '|'); one text alone as it is."""
    return " ".join(f"({'abcdef'[i]}) {t}" for i, t in enumerate(texts)) if len(texts) > 1 else "".join(texts)


def front_table(entries, changes):
    """report.json's `front_table` (RESULTS.md and the README show it beside the claims): per
    contribution the paper's number, ours as each claim's change in prose perplexity with Welch's
    p, and the verdict. changes: {claim: 'music vs random d16 -13.6% (p = 0.017, n = 3/3)'}."""
    lines = ["| # | contribution | paper | ours: x vs y, change of x's prose perplexity (Welch p, n) | verdict |",
             "|---|---|---|---|---|"]
    lines += [f"| {e['contribution']} | {e['title']} | {e['paper']} | "
              f"{lettered([changes.get(c, 'not in this run') for c in e['claims']])} | **{e['verdict']}** |"
              for e in entries]
    return {"title": "The ladder paper's six contributions beside its numbers (each claim's cells in RESULTS.md)",
            "lines": lines}


def cell_means(records, c, metric):
    """{width: mean of metric} of condition c."""
    ws = sorted({r["width"] for r in records if r["condition"] == c})
    return {w: common.mean_std([r.get(metric) for r in records if r["condition"] == c and r["width"] == w])[0]
            for w in ws}


def check_unigram(records, unigram):
    means = cell_means(records, "random", "ppl_first_epoch")
    if unigram is None or not means:
        return {"check": "random init after the first epoch is below the prose unigram perplexity", "holds": None,
                "detail": "not measured"}
    return {"check": "random init after the first epoch is below the prose unigram perplexity",
            "holds": all(m < unigram for m in means.values()),
            "detail": ", ".join(f"d{w} {m:.1f}" for w, m in means.items()) + f" vs unigram {unigram:.1f}"}


def check_overfit(records):
    runs = [r for r in records if r["condition"] == "compute-matched" and r.get("ppl_best") is not None
            and math.isfinite(r["ppl_best"])]
    check = f"the compute-matched control does not overfit (final <= best epoch + {100 * OVERFIT_TOLERANCE:.0f}%)"
    if not runs:
        return {"check": check, "holds": None, "detail": "not measured"}
    worst = max(r["ppl_final"] / r["ppl_best"] - 1 for r in runs)
    return {"check": check, "holds": worst <= OVERFIT_TOLERANCE,
            "detail": f"{len(runs)} runs; the worst ends {100 * worst:.1f}% above its best evaluation"}


def still_falling(capped):
    """How far from a plateau the capped runs ended: their last epoch's change of perplexity (records
    of a report made before it was recorded: '')."""
    ch = [r["last_epoch_change"] for r in capped if r.get("last_epoch_change") is not None
          and math.isfinite(r["last_epoch_change"])]
    if not ch:
        return ""
    return (f" (their last epoch changed the perplexity by {100 * sum(ch) / len(ch):+.1f}% on average, "
            f"{100 * min(ch):+.1f}% to {100 * max(ch):+.1f}%)")


def check_plateau(records):
    runs = [r for r in records if r["condition"] in ("long-random", "long-ladder")]
    check = "the long pair stopped at a plateau (--patience), not at the epoch cap"
    if not runs:
        return {"check": check, "holds": None, "detail": "not measured"}
    stopped = [r for r in runs if r.get("stopped_early")]
    return {"check": check, "holds": len(stopped) == len(runs),
            "detail": f"{len(stopped)} of {len(runs)} runs stopped early" + (
                "" if len(stopped) == len(runs) else "; the others ran to the cap, so their best perplexity is the "
                                                     "best within the cap" + still_falling(
                                                         [r for r in runs if not r.get("stopped_early")]))}


def checks(records, unigram):
    """report.json's `checks`, from the records alone."""
    return [check_unigram(records, unigram), check_overfit(records), check_plateau(records)]


def music_scale(a, facts):
    """How N and 3N were scaled to our music corpus (the paper: 12k and 36k chunks of MAESTRO)."""
    n, chunk = a.music_chunks, a.block_size + 1
    total = facts.get("music_train_chunks")
    draws = a.music_steps * a.batch_size
    held = (f"the stage holds {total:,} training chunks of {chunk} tokens, so 3N = {3 * n:,} is "
            f"{100 * 3 * n / total:.0f}% of it and N a third of that" if total else
            f"3N = {3 * n:,} chunks of {chunk} tokens")
    return (f"Music volume: the paper's 12k vs 36k MAESTRO chunks keep their ratio 1 : 3 on our smaller corpus: "
            f"N = {n:,}, 3N = {3 * n:,} ({held}). Every music stage trains {a.music_steps} steps x {a.batch_size} "
            f"chunks = {draws:,} chunk draws: {draws / (3 * n):.1f} passes over 3N, {draws / n:.1f} over N "
            "(the paper: 2 passes over 36k).")


def fmt_check(c):
    return {True: "holds", False: "FAILS", None: "not measured"}[c["holds"]]


def markdown(a, data, entries, check_list, figure, midi=()):
    """The report's section on the six contributions (lines); midi: the .mid files beside the figure."""
    lines = ["## The six contributions beside the paper's numbers", "",
             "| # | contribution | paper | ours | test (Welch) | paired by seed | verdict |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {e['contribution']} | {e['title']} | {e['paper']} | {e['ours']} | {e['test']} | {e['paired']} | "
              f"{e['verdict']} |" for e in entries]
    lines += ["", common.COMBINED_RULE + " A contribution's verdict combines its claims' verdicts the same way; "
              "the verdict is Welch's, the paired test by seed is a second reading.", "",
              f"Widths: {', '.join(map(str, a.widths))} for every condition; "
              + (f"{', '.join(map(str, a.capacity_widths))} also for volume-small / volume-large (capacity); "
                 if a.capacity_widths else "")
              + f"the long pair at {a.long_width}. Seeds: {a.seeds}"
              + (f" ({a.headline_seeds} for random, music, ladder)" if a.headline_seeds > a.seeds else "") + ".", "",
              music_scale(a, data["facts"]), "", "### Checks", ""]
    lines += [f"- {c['check']}: {fmt_check(c)} ({c['detail']})." for c in check_list]
    if figure:
        lines += ["", f"`{figure}`: a real piece of the music stage beside one sampled from a music checkpoint "
                  "(piano rolls: pitch against time, velocity as shade)"
                  + (f"; to listen: {', '.join(f'`{m}`' for m in midi)}." if midi else ".")]
    return lines + [""]
