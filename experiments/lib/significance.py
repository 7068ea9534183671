"""
The tests the one reading engine (claims.py) applies to two arms of a claim, with scipy: the paired t-test where both
arms share seeds (the same batches), Welch's otherwise (`compare`), the slope's own test for a trend (`slope_test`),
a ratio metric on its log (`logs`), and the pairs 80% power would need (`n80`). An effect only at p < ALPHA with at
least MIN_N runs (pairs) a side.
"""

import bisect
import math
import statistics

ALPHA = 0.05   # a two-sided p must be below this ...
MIN_N = 3      # ... with at least this many runs (pairs) on each side


def finite(xs):
    return [float(x) for x in xs if x is not None and isinstance(x, (int, float)) and math.isfinite(x)]


def mean_std(xs):
    """(mean, sample std, n) of the finite values; std 0 for n = 1; (nan, nan, 0) for none."""
    xs = finite(xs)
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, len(xs)) if xs else (math.nan, math.nan, 0)


def welch(treat, base, lower_is_better=True):
    """treat against base by Welch's t-test: {"test", "diff" = mean(treat) - mean(base), "p", "n": [n_t, n_b],
    "clear", "better"}; no p with fewer than 2 values a side or no spread at all."""
    from scipy import stats
    a, b = finite(treat), finite(base)
    diff = statistics.mean(a) - statistics.mean(b) if a and b else float("nan")
    p = ci = None
    if len(a) >= 2 and len(b) >= 2 and (statistics.pstdev(a) > 0 or statistics.pstdev(b) > 0):
        p, ci = _tested(stats.ttest_ind(a, b, equal_var=False))
    return _ruled({"test": "Welch", "diff": diff, "p": p, "ci": ci, "n": [len(a), len(b)]}, min(len(a), len(b)),
                  lower_is_better)


def paired(treat, base, lower_is_better=True):
    """treat[i] against base[i] by the paired t-test (ttest_rel): n = the pairs with both values;
    no p when the differences have no spread."""
    from scipy import stats
    pairs = [(t, b) for t, b in zip(treat, base) if finite([t]) and finite([b])]
    d = [t - b for t, b in pairs]
    diff = statistics.mean(d) if d else float("nan")
    p = ci = None
    if len(d) >= 2 and statistics.pstdev(d) > 1e-12 * max(1.0, abs(diff)):
        p, ci = _tested(stats.ttest_rel([t for t, _ in pairs], [b for _, b in pairs]))
    return _ruled({"test": "paired", "diff": diff, "p": p, "ci": ci, "n": len(d)}, len(d), lower_is_better)


def _tested(res):
    """(p, [low, high]) of a scipy t-test result: its p and the 95% interval of treat - base; (None, None) if no p."""
    ci = res.confidence_interval(1 - ALPHA) if math.isfinite(res.pvalue) else None
    return (float(res.pvalue), [float(ci.low), float(ci.high)]) if ci else (None, None)


def _ruled(c, n, lower_is_better):
    c["clear"] = c["p"] is not None and c["p"] < ALPHA and n >= MIN_N
    c["better"] = None if not c["clear"] else (c["diff"] < 0) == lower_is_better
    return c


def slope_test(x, y):
    """Least-squares slope of y on x with its own test (linregress): {"test", "slope", "stderr", "p", "n",
    "clear"}; clear at p < ALPHA with at least MIN_N + 1 points (a line through 3 has one degree of freedom)."""
    from scipy import stats
    pts = [(float(u), float(v)) for u, v in zip(x, y) if finite([v])]
    c = dict(test="slope", slope=math.nan, stderr=math.nan, p=None, ci=None, n=len(pts), clear=False)
    if len(pts) >= 3 and len({u for u, _ in pts}) >= 2:
        r = stats.linregress([u for u, _ in pts], [v for _, v in pts])
        p = float(r.pvalue) if math.isfinite(r.pvalue) else None
        half = stats.t.ppf(1 - ALPHA / 2, len(pts) - 2) * r.stderr
        c.update(slope=float(r.slope), stderr=float(r.stderr), p=p, clear=p is not None and p < ALPHA and len(
            pts) >= MIN_N + 1, ci=None if p is None else [float(r.slope - half), float(r.slope + half)])
    return c


def compare(treat_runs, base_runs, metric, pair_by=("seed",), lower_is_better=True, log=False):
    """The rule on two lists of records: paired over the pair_by keys both arms have (when there are
    at least 2), Welch otherwise; with log, on the values' logs (diff: the mean log ratio). Adds the arms' values."""
    key, f = (lambda r: tuple(r.get(k) for k in pair_by)), (logs if log else list)  # noqa: E731
    t = {key(r): r.get(metric) for r in treat_runs}
    b = {key(r): r.get(metric) for r in base_runs}
    shared = sorted((k for k in t if k in b), key=str)
    if len(shared) >= 2 and len(t) == len(treat_runs) and len(b) == len(base_runs):
        ts, bs = [t[k] for k in shared], [b[k] for k in shared]
        c = paired(f(ts), f(bs), lower_is_better)
        return dict(c, welch_p=welch(f(ts), f(bs))["p"], treat=ts, base=bs, keys=[list(k) for k in shared], log=log)
    treat, base = [r.get(metric) for r in treat_runs], [r.get(metric) for r in base_runs]
    return dict(welch(f(treat), f(base), lower_is_better), treat=treat, base=base, log=log)


def logs(xs):
    """The natural logs of the positive finite values (others None): a ratio metric as a loss in nats."""
    return [math.log(x) if finite([x]) and x > 0 else None for x in xs]


def n80(c):
    """The pairs (runs a side for Welch) giving its test 80% power at its observed effect and spread (noncentral t)."""
    from scipy import stats
    a, b = (finite(logs(c[k]) if c.get("log") else c[k]) for k in ("treat", "base"))
    if min(len(a), len(b)) < 2:
        return None
    d = [x - y for x, y in zip(a, b)] if c["test"] == "paired" else None
    effect, var = (statistics.mean(d), statistics.variance(d)) if d else (
        statistics.mean(a) - statistics.mean(b), statistics.variance(a) + statistics.variance(b))

    def power(n):
        df, nc = (n - 1 if d else 2 * n - 2), abs(effect) / math.sqrt(var / n)
        t = stats.t.ppf(1 - ALPHA / 2, df)
        return sum(x for x in (stats.nct.sf(t, df, nc), stats.nct.cdf(-t, df, nc)) if math.isfinite(x))
    i = bisect.bisect_left(range(2, 1001), True, key=lambda n: power(n) >= 0.8) if var > 0 and effect else 999
    return 2 + i if i < 999 else None
