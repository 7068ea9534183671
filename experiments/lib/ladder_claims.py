"""
The claims of "Listen and Chant Before You Read" (arXiv 2604.21265) as data, read from a report's run
records by experiments/lib/claims.py; and its six contributions, each with the claims it rests on.

The paper (section "Results": 5 seeds, WikiText-103 after MAESTRO piano performances, d in {16, 32, 64}):
music, then poetry, before prose lowers prose perplexity, 349.0 (ladder) vs 373.2 (music only) vs 423.0
(random init). Every claim is read in prose validation perplexity (lower is better), width by width, the
arms paired by seed (at one seed every condition sees the same prose batches: experiments/ladder.py).
A record: {"condition", "width", "seed", "ppl_first_epoch", "ppl_final", ...} (experiments/ladder.py).
"""

from experiments.lib.claims import Claim

SOURCE = {"arxiv": "2604.21265", "title": "Listen and Chant Before You Read"}
CONTROL = round(100 * (1 / 1.05 - 1), 1)  # the ladder against a control 5.0% behind it, % of the control's perplexity
PPL = dict(cells="width", label="d{}", fmt="{:.1f}", percent=True, pair_by=("seed",), metric="ppl_final")


def arm(condition):
    return {"condition": condition}


CLAIMS = [
    Claim("music -> prose: lower perplexity after the first prose epoch", "26% below random init",
          arm("music"), arm("random"), **dict(PPL, metric="ppl_first_epoch"), paper_value=-26, extra={"check": "unigram"}),
    Claim("music -> prose: lower perplexity at the end", "373.2 vs 423.0 (11.8% below random init), after convergence",
          arm("music"), arm("random"), paper_value=-11.8, **PPL),
    Claim("the ladder (music -> poetry -> prose): lower perplexity at the end",
          "349.0 vs 423.0 (17.5% below random init), p < 0.001", arm("ladder"), arm("random"), paper_value=-17.5, **PPL),
    Claim("poetry adds to music", "349.0 vs 373.2 (6.5% below music only)", arm("ladder"), arm("music"),
          paper_value=-6.5, **PPL),
    Claim("a compute-matched prose-only control stays behind the ladder", "the control 5.0% behind the ladder",
          arm("ladder"), arm("compute-matched"), paper_value=CONTROL, **PPL),
    Claim("the advantage persists at the plateau", "5.5% below random init at d = 64 (p = 0.017)",
          arm("long-ladder"), arm("long-random"), paper_value=-5.5, **PPL, extra={"fails": "plateau"}),
    Claim("more music data helps the wider models (3N = 36k vs N = 12k chunks)",
          "d16: 12k better by 3.1%; d32: 36k better by 3.3%; d64: 36k better by 6.1%",
          arm("volume-large"), arm("volume-small"), worse_in=(16,), **PPL,
          paper_value={16: 3.1, 32: -3.3, 64: -6.1}),  # width.png: 3N against N, % of N's perplexity
    Claim("real music beats synthetic music", "d16: 12k real chunks beat 36k synthetic ones",
          arm("volume-small"), arm("volume-large-synthetic"), only=(16,), **PPL),
    Claim("music helps through attention and the MLP", "music helps attention / FFN",
          [arm("ablation-attn"), arm("ablation-mlp")], arm("random"), **PPL),
    Claim("poetry helps through the token embeddings", "poetry calibrates the embeddings",
          arm("ladder"), arm("ablation-embed"), **PPL)]

# (number, contribution, the paper's number, the CLAIMS it rests on by index): its verdict combines theirs
SIX = [
    (1, "music before prose lowers prose perplexity",
     "26% lower than random init after the first prose epoch; 11.8% after convergence (373.2 vs 423.0)", (0, 1)),
    (2, "real music at N chunks reaches synthetic music's ceiling at 3N",
     "d16: 12k real chunks beat 36k synthetic ones (the same ceiling with a third of the data)", (7,)),
    (3, "poetry after music is additive; compute does not explain it",
     "ladder 17.5% below random init (349.0 vs 423.0, p < 0.001), 6.5% below music only; a compute-matched "
     "prose-only control still 5.0% behind the ladder", (2, 3, 4)),
    (4, "the mechanism is orthogonal: music trains attention / FFN, poetry the token embeddings",
     "transferring music's attention or MLP alone helps; re-initialising the poetry-trained embeddings loses "
     "poetry's gain", (8, 9)),
    (5, "the value of more music depends on capacity",
     "12k vs 36k chunks: 36k is 3.1% worse at d16, 3.3% better at d32, 6.1% better at d64", (6,)),
    (6, "the gap survives long training", "at d64 the ladder stays 5.5% below random init at the plateau (p = 0.017)",
     (5,))]


def records(report):
    """The records the claims read: report.json's `runs`, one per condition, width and seed."""
    return report["runs"]
