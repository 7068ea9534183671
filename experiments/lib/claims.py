"""
The one reading engine: a paper's claims as data, read from a report's records by one rule.

A paper's claim table (experiments/lib/<paper>_claims.py) is a list of Claim: the paper's
statement and number, the arms it compares (record filters), the metric and which way is
better, and the cells it is read in (a record field: width, depth, size...). Records are flat
dicts, one per run (or per derived quantity: a fit's error by cell, a run's growth slope...).

    readings = read_all(CLAIMS, records)   # report.json's `verdicts`
    lines = table(readings)                # the claims table of report.md and RESULTS.md

The rule, the same everywhere, is RULE (shown on every report): the paired t-test (scipy's ttest_rel) where both
arms share the claim's `pair_by` keys, Welch's (ttest_ind, equal_var=False) otherwise, linregress for a trend
(Claim.slope); a ratio metric (Claim.percent) on its log; an effect at p < ALPHA with MIN_N runs a side; a cell's 95%
interval against the paper's number gives one of the WORDS (`against`); a claim read in several cells gets one verdict
(combined_verdict); a cell whose treated arm failed its report's check (read_all's `failed`) is "check failed"; the
same two arms read by two claims (`signature`) are one test in Benjamini-Hochberg (`bh`) and in the tallies.
"""

import math
from dataclasses import dataclass, field

from experiments.lib.significance import ALPHA, MIN_N, compare, finite, mean_std, n80, slope_test

WORDS = ("reproduces", "smaller than the paper", "larger than the paper", "cannot tell", "disagrees", "opposite")
RULE = ("A difference is an effect only at p < 0.05 with at least 3 runs a side: the paired t-test where both "
        "arms share seeds (the same batches), Welch's t-test otherwise, a trend by its slope's own test. A claim "
        "read in several cells is \"partly\" when some cells reproduce it and others do not, \"opposite\" when "
        "none does and some go clearly against it. "
        "Against the paper, from each cell's 95% interval: **reproduces** (it excludes zero on the paper's side "
        "and contains the paper's number), **smaller than the paper** / **larger than the paper** (it excludes "
        "zero on the paper's side and the paper's number), **cannot tell** (it contains zero and the paper's "
        "number), **disagrees** (it contains zero and excludes the paper's number: no effect of the paper's size), "
        "**opposite** (it excludes zero on the other side); where the paper gives only a direction, against zero "
        "alone (reproduces, cannot tell, opposite). A perplexity's change is tested on its log (the loss "
        "difference), shown as a percentage. A cell whose treated arm failed one of its report's checks says "
        "\"check failed\" and counts under no word; the same two arms read by two claims count once. Cells marked "
        "\"not BH\" have p < 0.05 but do not survive Benjamini-Hochberg at q = 0.05 across their report's tests; a "
        "cell without an effect says how many pairs (runs a side) 80% power would need at its observed effect and "
        "spread.")
VERDICTS = ("reproduces", "partly", "no clear difference", "opposite", "check failed", "not measured")


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
    paper_value: object = None     # the paper's number in the cell's unit (a dict: by cell; None: a direction only)
    fmt: str = "{:.3f}"            # a value in `ours`
    percent: bool = False          # a ratio metric: the change exp(mean log ratio) - 1 in % (else treat - base)
    label: str = "{}"              # a cell's name: "d{}", "L = {}"
    note: str = ""                 # said after our numbers
    extra: dict = field(default_factory=dict)  # the paper module's own keys (what a figure needs)


def fmt_mean_std(xs, fmt="{:.3f}"):
    m, s, n = mean_std(xs)  # a spread has no sign
    return "-" if n == 0 else fmt.format(m) if n == 1 else f"{fmt.format(m)} ± {fmt.replace('+', '').format(s)}"


def fmt_p(p):
    """'p = 0.003', 'p < 0.001', or 'p = n/a' (no test)."""
    return ("p = n/a" if p is None or not math.isfinite(p) else "p < 0.001" if p < 0.001 else f"p = {p:.3f}" if p < 0.1
            else f"p = {p:.2f}")


def fmt_n(c):
    return f"n = {c['n'][0]}/{c['n'][1]}" if isinstance(c["n"], (list, tuple)) else f"n = {c['n']}"


def signature(c):
    """What a cell tested: its test and the values of both arms (the same two arms read by two claims: one test)."""
    return (c["test"], *(tuple(c.get(k) or ()) for k in (("x", "y") if c["test"] == "slope" else ("treat", "base"))))


def against(ci, side, paper_value=None):
    """One of WORDS from a cell's 95% interval [low, high], the paper's side (+1: the paper has the effect above
    zero, -1 below) and the paper's number in the same unit (None: the paper gives a direction only)."""
    lo, hi = sorted(side * x for x in ci)  # the paper's side is above zero now
    pv = None if paper_value is None else side * paper_value
    if hi < 0:
        return "opposite"
    if lo > 0:
        return ("reproduces" if pv is None or lo <= pv <= hi else "smaller than the paper" if hi < pv else
                "larger than the paper")
    return "cannot tell" if pv is None or lo <= pv <= hi else "disagrees"


def _judged(claim, c, v, unit=lambda x: x, failed=""):
    """The cell with its interval in its unit (unit(x)), the paper's number there, its word (none where its check
    failed: the reason); n80 where no effect."""
    side = -1 if (claim.falls if claim.slope else (v not in claim.worse_in) == claim.lower_is_better) else 1
    pv = claim.paper_value.get(v) if isinstance(claim.paper_value, dict) else claim.paper_value
    n = min(c["n"]) if isinstance(c["n"], list) else c["n"] - (claim.slope is not None)
    ci = c["ci"] and [unit(x) for x in c["ci"]]
    c.update(ci=ci, paper_value=pv, word=against(ci, side, pv) if ci and n >= MIN_N and not failed else None)
    if failed:
        c.update(verdict="check failed", check_failed=failed)
    if c["verdict"] == "no clear difference" and not claim.slope:
        c["n80"] = n80(c)
    return c


def cell_verdict(c, paper_better=True):
    """A cell's verdict: reproduces on a clear difference the paper's way, opposite on one the other way."""
    if c is None or not c["clear"]:
        return "not measured" if c is None else "no clear difference"
    good = c["better"] if "better" in c else c["slope"] > 0
    return "reproduces" if good == paper_better else "opposite"


def combined_verdict(verdicts):
    """One verdict from a claim's cells (cells not measured or whose check failed left out; all failed: check failed):
    theirs when they agree;
    "partly" when some reproduce and others do not; "opposite" when none reproduces and some go
    clearly against the paper; "no clear difference" otherwise."""
    vs = {v for v in verdicts if v not in ("not measured", "check failed")}
    if len(vs) <= 1:
        return vs.pop() if vs else "check failed" if "check failed" in verdicts else "not measured"
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


def read(claim, records, failed=None):
    """report.json's verdict entry of one claim: claim, paper, ours, test, verdict and its cells; failed(claim, treat
    filter, cell value) -> the check a cell's treated arm failed ("" none)."""
    failed = failed or (lambda *_: "")
    if claim.slope:
        return _read_slope(claim, records, failed)
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
            c = compare(ts, bs, claim.metric, claim.pair_by, claim.lower_is_better, log=claim.percent)
            mt, mb = mean_std(c["treat"])[0], mean_std(c["base"])[0]
            change = ratio(c["diff"]) if claim.percent else mt - mb
            name = " ".join(x for x in (arm, "" if v is None else claim.label.format(*v) if several else
                                        claim.label.format(v)) if x)
            cells.append(_judged(claim, dict(c, cell=v, arm=arm, name=name, mean_treat=mt, mean_base=mb, change=change,
                                              verdict=cell_verdict(c, paper_better=v not in claim.worse_in)), v,
                                 ratio if claim.percent else (lambda x: x), failed(claim, t, v)))
    return _entry(claim, cells, [_ours(claim, c) for c in cells])


def ratio(d):
    """A mean log ratio d as the percentage change of the ratio, 100 (exp(d) - 1): never below -100."""
    return 100 * math.expm1(d)


def _read_slope(claim, records, failed):
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
            cells.append(_judged(claim, dict(c, cell=v, name="" if v is None else claim.label.format(v), x=[
                u for u, _ in pts], y=[w for _, w in pts], verdict=cell_verdict(c, paper_better=not claim.falls)), v,
                failed=failed(claim, claim.treat, v)))
    per = f" per decade of {claim.slope}" if claim.log_x else f" per unit of {claim.slope}"
    what = "advantage" if claim.base is not None else claim.metric
    ours = [f"{_name(claim, c)}{what} {c['slope']:+.4g} ± {c['stderr']:.2g}{per}" for c in cells]
    return _entry(claim, cells, ours)


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
    """A cell's test: p (Welch's beside a paired p when they disagree on the verdict), n, the 95% interval,
    "not BH" where an effect does not survive Benjamini-Hochberg, the n80 of a cell without an effect."""
    slope, w = c["test"] == "slope", c.get("welch_p")
    num = "{:+.2g}" if slope else "{:+.1f}" if claim.percent else claim.fmt.replace("{:", "{:+")
    ci = c.get("ci") and f", 95% CI {num.format(c['ci'][0])} to {num.format(c['ci'][1])}{'%' * claim.percent}"
    welch = f" (Welch {fmt_p(w)})" if w is not None and c["clear"] != (w < ALPHA and c["n"] >= MIN_N) else ""
    power = "" if "n80" not in c else f", 80% power at {c['n80']} {'pairs' if c['test'] == 'paired' else 'a side'}" if c[
        "n80"] else ", 80% power beyond 1,000 runs"
    return (f"{'slope test' if slope else c['test']} {_name(claim, c)}{fmt_p(c['p'])}{welch}, {fmt_n(c)}{ci or ''}"
            f"{', not BH' if c.get('bh') is False and c['clear'] else ''}{power}"
            f"{'; the same test as ' + c['same_as'] if c.get('same_as') else ''}")


def _entry(claim, cells, ours):
    if not cells:
        return {"claim": claim.claim, "paper": claim.paper, "ours": "not in this run", "test": "not tested",
                "verdict": "not measured", "cells": []}
    note = f"; {claim.note}" if claim.note else ""
    return {"claim": claim.claim, "paper": claim.paper, "ours": "; ".join(ours) + note,
            "test": "; ".join(_test(claim, c) for c in cells), "verdict": combined_verdict([c["verdict"] for c in cells]),
            "against": "; ".join(f"{_name(claim, c) if len(cells) > 1 else ''}" + (
                f"check failed: {c['check_failed']}" if c.get("check_failed") else c["word"] or "too few runs")
                                 for c in cells), "cells": cells}


def benjamini_hochberg(cells, q=ALPHA):
    """bh = True on the cells (with a p, their check not failed) that survive Benjamini-Hochberg at q over the
    distinct tests (a signature once): ranks up to the last p_(k) <= k q / m; a repeated test takes its first's mark."""
    first = {}
    for c in cells:
        if c.get("p") is not None and not c.get("check_failed"):
            first.setdefault(signature(c), c)
    ps = sorted(first.values(), key=lambda c: c["p"])
    k = max((i for i, c in enumerate(ps, 1) if c["p"] <= i * q / len(ps)), default=0)
    for i, c in enumerate(ps, 1):
        c["bh"] = i <= k
    for c in cells:
        if c.get("p") is not None and not c.get("check_failed"):
            c["bh"] = first[signature(c)]["bh"]


def read_all(claims, records, notes=None, failed=None):
    """Every claim's entry, in the table's order, its cells marked by Benjamini-Hochberg across them all (a cell
    repeating an earlier claim's test says so: same_as); notes: {claim text: what the report adds to `ours`} (a
    caveat the numbers rest on); failed(claim, treat filter, cell value): the check a cell's treated arm failed."""
    entries, seen = [read(cl, records, failed) for cl in claims], {}
    for e in entries:
        for c in e["cells"]:
            if signature(c) in seen:
                c["same_as"] = seen[signature(c)]
            seen.setdefault(signature(c), f"\"{e['claim']}\"" + (f" {c['name']}" if c.get("name") else ""))
    benjamini_hochberg([c for e in entries for c in e["cells"]])
    for cl, e in zip(claims, entries):
        e["test"] = "; ".join(_test(cl, c) for c in e["cells"]) or e["test"]
        e["ours"] += f"; {notes[e['claim']]}" if (notes or {}).get(e["claim"]) else ""
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
    """The claims table (Markdown lines): claim, paper, ours, test, verdict, the words; their counts under it."""
    words = any(c.get("word") for e in entries for c in e.get("cells", []))
    return md_table(["the paper's claim", "paper", "ours", "test", "verdict", "against the paper"], [
        [*(cell(e[k]) for k in ("claim", "paper", "ours", "test")), f"**{e['verdict']}**", cell(e.get("against", "-"))]
        for e in entries]) + (["", f"Against the paper, cell by cell: {word_counts(entries)}."] if words else [])


def distinct(entries):
    """The entries less those whose every cell repeats a test of an earlier entry (the same two arms: one test)."""
    seen, out = set(), []
    for e in entries:
        sigs = {signature(c) for c in e.get("cells", [])}
        if not sigs or not sigs <= seen:
            out.append(e)
        seen |= sigs
    return out


def counts(entries):
    """'2 reproduce, 3 no clear difference, 1 opposite' (only the verdicts that occur; a repeated test once)."""
    n = {v: sum(1 for x in distinct(entries) if x["verdict"] == v) for v in VERDICTS}
    return ", ".join(f"{n[v]} {'reproduce' if v == 'reproduces' else v}" for v in VERDICTS if n[v]) or "none recorded"


def word_counts(entries):
    """'3 reproduces, 2 disagrees, ...; 5 of 7 effects survive BH; 2 check failed': the distinct tests' words against
    the paper, how many with p < ALPHA survive Benjamini-Hochberg, how many failed their report's check."""
    first = {}  # each distinct test once (its first cell)
    for c in (c for e in entries for c in e.get("cells", [])):
        first.setdefault(signature(c), c)
    cells = list(first.values())
    n = {w: sum(1 for c in cells if c.get("word") == w) for w in WORDS}
    effects = [c for c in cells if c.get("p") is not None and c["p"] < ALPHA and c.get("word")]
    return (", ".join(f"{n[w]} {w}" for w in WORDS if n[w]) or "none") + (
        f"; {sum(1 for c in effects if c.get('bh'))} of {len(effects)} effects survive BH" if effects else "") + (
        f"; {failed} check failed" if (failed := sum(1 for c in cells if c.get("check_failed"))) else "")
