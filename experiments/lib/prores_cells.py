"""
The ProRes measurement's runs grouped into cells (placement x arm x depth, one run per seed) and
the two tests every cell comparison carries (lib/prores_report.py and lib/prores_breakdown.py
read them).

    cell(recs, norm="pre", prores=True, depth=48)    # the runs of one cell, every seed
    by_seed(rs, "val_loss")                          # {seed: value} (runs without the value left out)
    compare_cell(base, pro, "val_loss")              # ProRes - baseline: Welch and paired by seed
"""

import math
import statistics

from experiments.lib.common import compare, paired

NAMES = {"pre": "Pre-LN", "post": "Post-LN", "sandwich": "Sandwich-LN", "deepnorm": "DeepNorm",
         "lns": "LNS (fixed 1/sqrt(l))", "lns-init": "LNS (authors' init)"}
# placements without a norm on the residual stream: the activation-growth claim is about these
# (Post-LN and DeepNorm end every block with a LayerNorm, so their stream is flat by construction)
OPEN_STREAM = ("pre", "sandwich", "lns", "lns-init")


def label(norm, pr):
    return NAMES.get(norm, norm) + (" + ProRes" if pr else "")


def by_seed(rs, key):
    return {r["seed"]: r[key] for r in rs if r.get(key) is not None}


def cell(recs, **match):
    return [r for r in recs if r is not None and all(r[k] == v for k, v in match.items())]


def spike_steps(values, window, factor):
    """The indices t >= window with values[t] > factor * median(values[t - window:t]): a loss or
    gradient-norm spike against the running median of the steps before it."""
    return [t for t in range(window, len(values))
            if math.isfinite(values[t]) and values[t] > factor * statistics.median(values[t - window:t])]



def two_tests(treat, base):
    """treat - base over seeds ({seed: value} each): Welch's test over every value of each side
    (common.compare) and the t-test paired by the seeds both have (common.paired)."""
    seeds = sorted(treat.keys() & base.keys())
    return {"welch": compare(list(treat.values()), list(base.values())),
            "paired": paired([treat[s] for s in seeds], [base[s] for s in seeds]), "seeds": seeds}


def compare_cell(base, pro, key):
    """ProRes - baseline on one metric over seeds: Welch (common.compare) and paired by seed."""
    b, p = by_seed(base, key), by_seed(pro, key)
    return {**two_tests(p, b), "base": [b[s] for s in sorted(b)], "prores": [p[s] for s in sorted(p)]}
