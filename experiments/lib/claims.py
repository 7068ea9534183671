"""
The one reading engine: a paper's claims as data, read from a report's records by one rule.

A paper's claim table (experiments/lib/<paper>_claims.py) is a list of Claim: the paper's
statement and number, the arms it compares (record filters), the metric and which way is
better, and the cells it is read in (a record field: width, depth, size...). Records are flat
dicts, one per run (or per derived quantity: a fit's error by cell, a run's growth slope...).

    readings = read_all(CLAIMS, records)   # report.json's `verdicts`
    lines = table(readings)                # the claims table of report.md and RESULTS.md

The rule, the same everywhere:
- two arms that share seeds (the same initial weights and batches: the same values of the claim's
  `pair_by` fields in both arms) are read by the paired t-test over the keys they share
  (scipy.stats.ttest_rel); arms that share fewer than 2 keys, or hold a key twice, by Welch's t-test
  (ttest_ind, equal_var=False);
- a trend (Claim.slope: a field of the records) by the slope's own test (scipy.stats.linregress)
  of the treat arm's advantage (paired differences) or, without a base arm, of the metric;
- a difference is an effect only at p < ALPHA with at least MIN_N runs (pairs) a side, a slope
  with at least MIN_N + 1 points; a cell reproduces the claim when the effect goes the paper's way,
  is "opposite" when it goes clearly the other way, "no clear difference" otherwise;
- a claim read in several cells gets one verdict (combined_verdict).
"""

import math
import statistics
from dataclasses import dataclass, field

ALPHA = 0.05   # a two-sided p must be below this ...
MIN_N = 3      # ... with at least this many runs (pairs) on each side
VERDICTS = ("reproduces", "partly", "no clear difference", "opposite", "not measured")
RULE = ("A difference is an effect only at p < 0.05 with at least 3 runs a side: the paired t-test where both "
        "arms share seeds (the same batches), Welch's t-test otherwise, a trend by its slope's own test. A claim "
        "read in several cells is \"partly\" when some cells reproduce it and others do not, \"opposite\" when "
        "none does and some go clearly against it.")


@dataclass
class Claim:
    """One claim of a paper, as our records test it (treat against base, cell by cell)."""
    claim: str                     # the paper's statement
    paper: str                     # the paper's number
    treat: dict                    # record filter of the arm the paper says is better: {"condition": "music"}
    base: dict = None              # the arm it is compared with (None: a trend of treat's metric alone)
    metric: str = "loss"
    lower_is_better: bool = True
    cells: str = None              # the record field the claim is read in (a tuple: several; None: one cell)
    only: tuple = None             # the cell values read (None: every value both arms have)
    worse_in: tuple = ()           # cells where the paper has treat worse than base
    pair_by: tuple = ("seed",)     # the fields that pair two runs (same batches)
    slope: str = None              # a trend claim: the field on the x axis
    log_x: bool = False            # ... read against log10 of it
    falls: bool = False            # ... the paper has the advantage (or metric) falling along x
    fmt: str = "{:.3f}"            # a value in `ours`
    percent: bool = False          # the change as % of base's mean (else the difference treat - base)
    label: str = "{}"              # a cell's name: "d{}", "L = {}"
    note: str = ""                 # said after our numbers
    extra: dict = field(default_factory=dict)  # the paper module's own keys (what a figure needs)


def finite(xs):
    return [float(x) for x in xs if x is not None and isinstance(x, (int, float)) and math.isfinite(x)]


def mean_std(xs):
    """(mean, sample std, n) of the finite values; std 0 for n = 1; (nan, nan, 0) for none."""
    if not (xs := finite(xs)):
        return float("nan"), float("nan"), 0
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def fmt_mean_std(xs, fmt="{:.3f}"):
    m, s, n = mean_std(xs)
    if n == 0:
        return "-"
    return fmt.format(m) if n == 1 else f"{fmt.format(m)} ± {fmt.replace('+', '').format(s)}"  # a spread has no sign


def fmt_p(p):
    """'p = 0.003', 'p < 0.001', or 'p = n/a' (no test)."""
    if p is None or not math.isfinite(p):
        return "p = n/a"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}" if p < 0.1 else f"p = {p:.2f}"


def fmt_n(c):
    return f"n = {c['n'][0]}/{c['n'][1]}" if isinstance(c["n"], (list, tuple)) else f"n = {c['n']}"


def welch(treat, base, lower_is_better=True):
    """treat against base by Welch's t-test: {"test", "diff" = mean(treat) - mean(base), "p", "n": [n_t, n_b],
    "clear", "better"}; no p with fewer than 2 values a side or no spread at all."""
    from scipy import stats
    a, b = finite(treat), finite(base)
    diff = statistics.mean(a) - statistics.mean(b) if a and b else float("nan")
    p = None
    if len(a) >= 2 and len(b) >= 2 and (statistics.pstdev(a) > 0 or statistics.pstdev(b) > 0):
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return _ruled({"test": "Welch", "diff": diff, "p": p, "n": [len(a), len(b)]}, min(len(a), len(b)), lower_is_better)


def paired(treat, base, lower_is_better=True):
    """treat[i] against base[i] by the paired t-test (ttest_rel): n = the pairs with both values;
    no p when the differences have no spread."""
    from scipy import stats
    pairs = [(t, b) for t, b in zip(treat, base) if finite([t]) and finite([b])]
    d = [t - b for t, b in pairs]
    diff = statistics.mean(d) if d else float("nan")
    p = None
    if len(d) >= 2 and statistics.pstdev(d) > 1e-12 * max(1.0, abs(diff)):
        p = float(stats.ttest_rel([t for t, _ in pairs], [b for _, b in pairs]).pvalue)
        p = p if math.isfinite(p) else None
    return _ruled({"test": "paired", "diff": diff, "p": p, "n": len(d)}, len(d), lower_is_better)


def _ruled(c, n, lower_is_better):
    c["clear"] = c["p"] is not None and c["p"] < ALPHA and n >= MIN_N
    c["better"] = None if not c["clear"] else (c["diff"] < 0) == lower_is_better
    return c


def slope_test(x, y):
    """Least-squares slope of y on x with its own test (linregress): {"test", "slope", "stderr", "p", "n",
    "clear"}; clear at p < ALPHA with at least MIN_N + 1 points (a line through 3 has one degree of freedom)."""
    from scipy import stats
    pts = [(float(u), float(v)) for u, v in zip(x, y) if finite([v])]
    c = {"test": "slope", "slope": float("nan"), "stderr": float("nan"), "p": None, "n": len(pts), "clear": False}
    if len(pts) >= 3 and len({u for u, _ in pts}) >= 2:
        r = stats.linregress([u for u, _ in pts], [v for _, v in pts])
        p = float(r.pvalue) if math.isfinite(r.pvalue) else None
        c.update(slope=float(r.slope), stderr=float(r.stderr), p=p,
                 clear=p is not None and p < ALPHA and len(pts) >= MIN_N + 1)
    return c


def compare(treat_runs, base_runs, metric, pair_by=("seed",), lower_is_better=True):
    """The rule on two lists of records: paired over the pair_by keys both arms have (when there are
    at least 2), Welch otherwise. Adds the arms' values as they were tested."""
    key = lambda r: tuple(r.get(k) for k in pair_by)  # noqa: E731
    t = {key(r): r.get(metric) for r in treat_runs}
    b = {key(r): r.get(metric) for r in base_runs}
    shared = sorted((k for k in t if k in b), key=str)
    if len(shared) >= 2 and len(t) == len(treat_runs) and len(b) == len(base_runs):
        c = paired([t[k] for k in shared], [b[k] for k in shared], lower_is_better)
        return dict(c, treat=[t[k] for k in shared], base=[b[k] for k in shared], keys=[list(k) for k in shared])
    treat, base = [r.get(metric) for r in treat_runs], [r.get(metric) for r in base_runs]
    return dict(welch(treat, base, lower_is_better), treat=treat, base=base)


def cell_verdict(c, paper_better=True):
    """A cell's verdict: reproduces on a clear difference the paper's way, opposite on one the other way."""
    if c is None or not c["clear"]:
        return "not measured" if c is None else "no clear difference"
    good = c["better"] if "better" in c else c["slope"] > 0
    return "reproduces" if good == paper_better else "opposite"


def combined_verdict(verdicts):
    """One verdict from a claim's cells (cells not measured left out): theirs when they agree;
    "partly" when some reproduce and others do not; "opposite" when none reproduces and some go
    clearly against the paper; "no clear difference" otherwise."""
    vs = {v for v in verdicts if v != "not measured"}
    if len(vs) <= 1:
        return vs.pop() if vs else "not measured"
    if "reproduces" in vs or "partly" in vs:
        return "partly"
    return "opposite" if "opposite" in vs else "no clear difference"


def select(records, flt, **more):
    """The records whose fields match every (key, value) of flt and more."""
    want = {**flt, **more}
    return [r for r in records if all(r.get(k) == v for k, v in want.items())]


def arms(claim):
    """[(treat filter, base filter, name)]: a claim may compare several arms with their bases
    (treat and base as lists of filters; one base for all, or one each)."""
    ts = claim.treat if isinstance(claim.treat, list) else [claim.treat]
    bs = claim.base if isinstance(claim.base, list) else [claim.base or {}] * len(ts)
    return [(t, b, " ".join(map(str, t.values())) if len(ts) > 1 else "") for t, b in zip(ts, bs)]


def read(claim, records):
    """report.json's verdict entry of one claim: claim, paper, ours, test, verdict and its cells."""
    if claim.slope:
        return _read_slope(claim, records)
    cells, several = [], isinstance(claim.cells, tuple)
    at = (lambda r: tuple(r.get(k) for k in claim.cells)) if several else (lambda r: r.get(claim.cells))
    for t, b, arm in arms(claim):
        t_all, b_all = select(records, t), select(records, b)
        values = [None] if claim.cells is None else sorted({at(r) for r in t_all} & {at(r) for r in b_all}, key=_order)
        for v in (v for v in values if claim.only is None or v in claim.only):
            more = {} if claim.cells is None else dict(zip(claim.cells, v)) if several else {claim.cells: v}
            ts, bs = select(t_all, {}, **more), select(b_all, {}, **more)
            if not ts or not bs:
                continue
            c = compare(ts, bs, claim.metric, claim.pair_by, claim.lower_is_better)
            mt, mb = mean_std(c["treat"])[0], mean_std(c["base"])[0]
            change = (100 * (mt / mb - 1) if claim.percent and mb else mt - mb)
            name = " ".join(x for x in (arm, "" if v is None else claim.label.format(*v) if several else
                                        claim.label.format(v)) if x)
            cells.append(dict(c, cell=v, arm=arm, name=name, mean_treat=mt, mean_base=mb, change=change,
                              verdict=cell_verdict(c, paper_better=v not in claim.worse_in)))
    return _entry(claim, cells, [_ours(claim, c) for c in cells], [_test(claim, c) for c in cells])


def _read_slope(claim, records):
    """A trend, in each cell: the advantage of treat over base (paired differences, > 0 when treat is
    better) or, without a base arm, treat's metric, against the field claim.slope (log10 with log_x)."""
    key = lambda r: tuple(r.get(k) for k in claim.pair_by)  # noqa: E731
    treat = select(records, claim.treat)
    values = [None] if claim.cells is None else sorted({r.get(claim.cells) for r in treat}, key=_order)
    cells = []
    for v in (v for v in values if claim.only is None or v in claim.only):
        ts = treat if v is None else select(treat, {}, **{claim.cells: v})
        if claim.base is None:
            pts = [(r.get(claim.slope), r.get(claim.metric)) for r in ts]
        else:
            base = {key(r): r.get(claim.metric) for r in select(records, claim.base)
                    if v is None or r.get(claim.cells) == v}
            sign = -1 if claim.lower_is_better else 1
            pts = [(r.get(claim.slope), sign * (r[claim.metric] - base[key(r)])) for r in ts
                   if finite([r.get(claim.metric)]) and finite([base.get(key(r))])]
        pts = [(math.log10(u) if claim.log_x else float(u), float(w)) for u, w in pts
               if u is not None and finite([w]) and (not claim.log_x or u > 0)]
        if pts:
            c = slope_test([u for u, _ in pts], [w for _, w in pts])
            cells.append(dict(c, cell=v, name="" if v is None else claim.label.format(v), x=[u for u, _ in pts],
                              y=[w for _, w in pts], verdict=cell_verdict(c, paper_better=not claim.falls)))
    per = f" per decade of {claim.slope}" if claim.log_x else f" per unit of {claim.slope}"
    what = "advantage" if claim.base is not None else claim.metric
    ours = [f"{_name(claim, c)}{what} {c['slope']:+.4g} ± {c['stderr']:.2g}{per}" for c in cells]
    return _entry(claim, cells, ours, [f"slope test {_name(claim, c)}{fmt_p(c['p'])}, n = {c['n']}" for c in cells])


def _order(v):
    return (0, v, "") if isinstance(v, (int, float)) else (2, tuple(map(_order, v)), "") if isinstance(
        v, tuple) else (1, 0, str(v))


def _name(claim, c):
    return c["name"] + " " if c.get("name") else ""


def _ours(claim, c):
    amount = f"{c['change']:+.1f}%" if claim.percent else claim.fmt.replace("{:", "{:+").format(c["change"])
    return (f"{_name(claim, c)}{fmt_mean_std(c['treat'], claim.fmt)} vs {fmt_mean_std(c['base'], claim.fmt)} "
            f"({amount})")


def _test(claim, c):
    return f"{c['test']} {_name(claim, c)}{fmt_p(c['p'])}, {fmt_n(c)}"


def _entry(claim, cells, ours, tests):
    if not cells:
        return {"claim": claim.claim, "paper": claim.paper, "ours": "not in this run", "test": "not tested",
                "verdict": "not measured", "cells": []}
    note = f"; {claim.note}" if claim.note else ""
    return {"claim": claim.claim, "paper": claim.paper, "ours": "; ".join(ours) + note, "test": "; ".join(tests),
            "verdict": combined_verdict([c["verdict"] for c in cells]), "cells": cells}


def read_all(claims, records, notes=None):
    """Every claim's entry, in the table's order; notes: {claim text: what the report adds to `ours`}
    (a check the numbers rest on, e.g. runs stopped at a cap rather than at a plateau)."""
    entries = [read(cl, records) for cl in claims]
    for e in (e for e in entries if (notes or {}).get(e["claim"])):
        e["ours"] += f"; {notes[e['claim']]}"
    return entries


def check_lines(checks):
    """A report's `checks` ({check, holds, detail}) as Markdown bullets: holds, FAILS or not measured."""
    return [f"- {c['check']}: " + {True: f"holds ({c['detail']}).", False: f"FAILS ({c['detail']})."}.get(
        c["holds"], "not measured.") for c in checks]


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header, rows):
    """A Markdown table's lines: the header, its rule, a line a row (each cell as str)."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"  # noqa: E731
    return [line(header), "|---" * len(header) + "|"] + [line(r) for r in rows]


def md_section(title, text, header, rows):
    """A report.md section: its title, a paragraph (if any), a table (md_table), a blank line."""
    return [f"## {title}", ""] + ([text, ""] if text else []) + md_table(header, rows) + [""]


def table(entries):
    """The claims table (Markdown lines): the paper's claim, its number, ours, the test, the verdict."""
    return md_table(["the paper's claim", "paper", "ours", "test", "verdict"], [
        [*(cell(e[k]) for k in ("claim", "paper", "ours", "test")), f"**{e['verdict']}**"] for e in entries])


def counts(entries):
    """'2 reproduce, 3 no clear difference, 1 opposite' (only the verdicts that occur)."""
    n = {v: sum(1 for x in entries if x["verdict"] == v) for v in VERDICTS}
    words = {"reproduces": "reproduce"}
    return ", ".join(f"{n[v]} {words.get(v, v)}" for v in VERDICTS if n[v]) or "none recorded"
