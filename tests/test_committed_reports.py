"""Every committed report (experiments/results/*/report.json): its verdicts are its paper's claim table
(experiments/lib/<paper>_claims.py) read from its own records by the one rule, recomputed here with
scipy by code of its own (not the engine's): the paired t-test where both arms share seeds, Welch's
otherwise, linregress for a trend; an effect only at p < 0.05 with n >= 3 a side (4 points for a
slope); a claim read in several cells gets one combined verdict. And what results.py reads is there."""
import importlib
import importlib.util
import json
import math
from pathlib import Path

import pytest
from scipy import stats

import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
REPORTS = sorted(p.parent.name for p in RESULTS.glob("*/report.json"))
VERDICTS = ("reproduces", "partly", "no clear difference", "opposite", "not measured")


def paper_claims(name):
    """The claim table of the experiment that wrote experiments/results/<name> (<script>[-<preset>]): the preset's
    own (experiments/lib/<script>_<preset>_claims.py, e.g. ladder_headline_claims) where there is one, or the module
    its report.json names (`claims`: reference/cross.py's report)."""
    named = json.loads((RESULTS / name / "report.json").read_text()).get("claims")  # e.g. reference.cross_claims
    if named:
        return importlib.import_module(named)
    own = f"experiments.lib.{name.replace('-', '_')}_claims"
    return importlib.import_module(own if importlib.util.find_spec(own) else f"experiments.lib.{name.split('-')[0]}_claims")


def ok(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def matching(records, flt):
    return [r for r in records if all(r.get(k) == v for k, v in flt.items())]


def expected_cells(cl, records):
    """[(p, n, verdict)] of a claim's cells, by scipy on the records."""
    if cl.slope:
        key = lambda r: tuple(r.get(k) for k in cl.pair_by)  # noqa: E731
        T = matching(records, cl.treat)
        values = [None] if cl.cells is None else sorted({r.get(cl.cells) for r in T}, key=lambda v: (isinstance(v, str), v))
        out = []
        for v in values:
            if cl.only is not None and v not in cl.only:
                continue
            ts = [r for r in T if v is None or r.get(cl.cells) == v]
            if cl.base is None:
                pts = [(r.get(cl.slope), r.get(cl.metric)) for r in ts]
            else:
                base = {key(r): r[cl.metric] for r in matching(records, cl.base) if v is None or r.get(cl.cells) == v}
                pts = [(r.get(cl.slope), (b - r[cl.metric]) if cl.lower_is_better else (r[cl.metric] - b))
                       for r in ts if ok(b := base.get(key(r))) and ok(r.get(cl.metric))]
            pts = [(math.log10(x) if cl.log_x else x, y) for x, y in pts if x is not None and ok(y)
                   and (x > 0 or not cl.log_x)]
            if not pts:
                continue
            if len(pts) < 3 or len({x for x, _ in pts}) < 2:
                out.append((None, len(pts), "no clear difference"))
                continue
            r = stats.linregress([x for x, _ in pts], [y for _, y in pts])
            clear = r.pvalue < 0.05 and len(pts) >= 4
            out.append((r.pvalue, len(pts), "no clear difference" if not clear else
                        "reproduces" if (r.slope > 0) != cl.falls else "opposite"))
        return out
    treats = cl.treat if isinstance(cl.treat, list) else [cl.treat]
    bases = cl.base if isinstance(cl.base, list) else [cl.base or {}] * len(treats)
    out = []
    for t, b in zip(treats, bases):
        T, B = matching(records, t), matching(records, b)
        at = lambda r: tuple(r.get(k) for k in cl.cells) if isinstance(cl.cells, tuple) else r.get(cl.cells)  # noqa
        values = [None] if cl.cells is None else sorted({at(r) for r in T} & {at(r) for r in B},
                                                        key=lambda v: (isinstance(v, str), v))
        for v in values:
            if cl.only is not None and v not in cl.only:
                continue
            ts = [r for r in T if cl.cells is None or at(r) == v]
            bs = [r for r in B if cl.cells is None or at(r) == v]
            if not ts or not bs:
                continue
            tk = {tuple(r.get(k) for k in cl.pair_by): r.get(cl.metric) for r in ts}
            bk = {tuple(r.get(k) for k in cl.pair_by): r.get(cl.metric) for r in bs}
            shared = [k for k in tk if k in bk]
            if len(shared) >= 2 and len(tk) == len(ts) and len(bk) == len(bs):
                pairs = [(tk[k], bk[k]) for k in shared if ok(tk[k]) and ok(bk[k])]
                x, y = [a for a, _ in pairs], [c for _, c in pairs]
                d = [a - c for a, c in pairs]
                p = stats.ttest_rel(x, y).pvalue if len(d) >= 2 and max(d) - min(d) > 1e-12 * max(1, abs(sum(d))) \
                    else None
                n, n_min = len(d), len(d)
            else:
                x, y = [r[cl.metric] for r in ts if ok(r.get(cl.metric))], [r[cl.metric] for r in bs
                                                                             if ok(r.get(cl.metric))]
                spread = len(set(x)) > 1 or len(set(y)) > 1
                p = stats.ttest_ind(x, y, equal_var=False).pvalue if min(len(x), len(y)) >= 2 and spread else None
                n, n_min = [len(x), len(y)], min(len(x), len(y))
            p = p if p is not None and math.isfinite(p) else None
            clear = p is not None and p < 0.05 and n_min >= 3
            better = (sum(x) / len(x) < sum(y) / len(y)) == cl.lower_is_better if x and y else None
            out.append((p, n, "no clear difference" if not clear else
                        "reproduces" if better == (v not in cl.worse_in) else "opposite"))
    return out


def combined(vs):
    vs = {v for v in vs if v != "not measured"}
    if len(vs) <= 1:
        return vs.pop() if vs else "not measured"
    return "partly" if vs & {"reproduces", "partly"} else "opposite" if "opposite" in vs else "no clear difference"


@pytest.mark.parametrize("name", REPORTS)
def test_verdicts_are_the_claim_table_read_by_the_rule(name):
    rep = json.loads((RESULTS / name / "report.json").read_text())
    mod = paper_claims(name)
    records = mod.records(rep)
    assert [v["claim"] for v in rep["verdicts"]] == [c.claim for c in mod.CLAIMS]
    for cl, v in zip(mod.CLAIMS, rep["verdicts"]):
        expect = expected_cells(cl, records)
        got = [(c["p"], c["n"], c["verdict"]) for c in v["cells"]]
        assert len(got) == len(expect), (cl.claim, got, expect)
        for (p, n, verdict), (ep, en, ev) in zip(got, expect):
            assert (p is None) == (ep is None) and (p is None or p == pytest.approx(ep, rel=1e-9)), (cl.claim, p, ep)
            assert n == en and verdict == ev, (cl.claim, n, en, verdict, ev)
        assert v["verdict"] == combined([e[2] for e in expect]), cl.claim
        assert v["paper"] == cl.paper


@pytest.mark.parametrize("name", REPORTS)
def test_what_results_py_reads_is_there(name):
    rep = json.loads((RESULTS / name / "report.json").read_text())
    assert set(rep["source"]) == {"arxiv", "title"} and rep["regime"]
    assert rep["figures"] and all((RESULTS / name / f).exists() for f in rep["figures"])
    for v in rep["verdicts"]:
        assert set(v) >= {"claim", "paper", "ours", "test", "verdict"} and v["verdict"] in VERDICTS
    p = rep["provenance"]
    assert set(p) >= {"commit", "command", "hardware", "wall_seconds"} and len(p["commit"]) == 40
    assert p["command"].split()[:2] == ["python", results.BUILT_BY.get(name, f"experiments/{name.split('-')[0]}.py")]


def interval(cl, c):
    """A cell's 95% interval by scipy's t quantiles on its own values, in the cell's unit: the paired differences'
    t interval, Welch's with the Welch-Satterthwaite degrees of freedom, or the slope's t interval."""
    if c["test"] == "slope":
        r = stats.linregress(c["x"], c["y"])
        half = stats.t.ppf(0.975, len(c["x"]) - 2) * r.stderr
        return r.slope - half, r.slope + half
    x, y = [v for v in c["treat"] if ok(v)], [v for v in c["base"] if ok(v)]
    if c["test"] == "paired":
        d = [a - b for a, b in zip(c["treat"], c["base"]) if ok(a) and ok(b)]
        mid, se, df = sum(d) / len(d), stats.tstd(d) / math.sqrt(len(d)), len(d) - 1
    else:
        va, vb = stats.tvar(x) / len(x), stats.tvar(y) / len(y)
        mid, se = sum(x) / len(x) - sum(y) / len(y), math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))
    unit = 100 / (sum(y) / len(y)) if cl.percent else 1
    half = stats.t.ppf(0.975, df) * se
    return unit * (mid - half), unit * (mid + half)


def word(cl, c, low, high):
    """The word against the paper from the interval, written out case by case."""
    cell = tuple(c["cell"]) if isinstance(c["cell"], list) else c["cell"]
    if cl.slope:  # the paper's side of zero: a slope rises unless the paper has it fall
        paper_side = -1 if cl.falls else 1
    else:  # treat better than base: below zero where lower is better; the other way in the paper's worse_in cells
        paper_side = (-1 if cl.lower_is_better else 1) * (-1 if cell in cl.worse_in else 1)
    pv = cl.paper_value.get(c["cell"]) if isinstance(cl.paper_value, dict) else cl.paper_value
    below, above = high < 0, low > 0  # the interval wholly below / above zero
    if (below and paper_side > 0) or (above and paper_side < 0):
        return "opposite"
    if not (below or above):
        return "cannot tell" if pv is None or low <= pv <= high else "disagrees"
    if pv is None or low <= pv <= high:
        return "reproduces"
    return "smaller than the paper" if abs(pv) > max(abs(low), abs(high)) else "larger than the paper"


@pytest.mark.parametrize("name", REPORTS)
def test_every_cell_has_its_interval_its_word_against_the_paper_and_its_bh_mark(name):
    """Every cell's 95% interval recomputes from its values; its word follows from the interval and the paper's
    number kept beside the claim; its Benjamini-Hochberg mark is scipy's (false_discovery_control) across the
    report's cells; a cell without an effect carries n80, and n80 pairs reach 80% power where n80 - 1 do not."""
    rep = json.loads((RESULTS / name / "report.json").read_text())
    mod = paper_claims(name)
    cells = [(cl, c) for cl, v in zip(mod.CLAIMS, rep["verdicts"]) for c in v["cells"]]
    with_p = [(cl, c) for cl, c in cells if c["p"] is not None]
    adjusted = stats.false_discovery_control([c["p"] for _, c in with_p]) if with_p else []
    for (cl, c), q in zip(with_p, adjusted):
        assert c["bh"] == (q <= 0.05), (cl.claim, c["name"], c["p"], q)
    for cl, c in cells:
        assert "ci" in c and "word" in c and "paper_value" in c, (cl.claim, c.get("name"))
        pv = cl.paper_value.get(c["cell"]) if isinstance(cl.paper_value, dict) else cl.paper_value
        assert c["paper_value"] == pv
        if c["p"] is None:
            assert c["ci"] is None and c["word"] is None
            continue
        low, high = interval(cl, c)
        assert c["ci"] == [pytest.approx(low, rel=1e-7, abs=1e-12), pytest.approx(high, rel=1e-7, abs=1e-12)]
        enough = (min(c["n"]) if isinstance(c["n"], list) else c["n"] - (c["test"] == "slope")) >= 3
        assert c["word"] == (word(cl, c, low, high) if enough else None), (cl.claim, c["name"], low, high, pv)
        assert (low > 0 or high < 0) == (c["p"] < 0.05), (cl.claim, c["name"])  # the same test
        if c["verdict"] == "no clear difference" and c["test"] != "slope" and c.get("n80"):
            assert power(c, c["n80"]) >= 0.8 > (power(c, c["n80"] - 1) if c["n80"] > 2 else 0)


def power(c, n):
    """The power of the cell's two-sided test at n pairs (runs a side) for its observed effect and spread."""
    x, y = [v for v in c["treat"] if ok(v)], [v for v in c["base"] if ok(v)]
    if c["test"] == "paired":
        d = [a - b for a, b in zip(x, y)]
        effect, var, df = sum(d) / len(d), stats.tvar(d), n - 1
    else:
        effect, var, df = sum(x) / len(x) - sum(y) / len(y), stats.tvar(x) + stats.tvar(y), 2 * n - 2
    t, nc = stats.t.ppf(0.975, df), abs(effect) / math.sqrt(var / n)
    return stats.nct.sf(t, df, nc) + np_nan_to_zero(stats.nct.cdf(-t, df, nc))


def np_nan_to_zero(x):
    return 0.0 if not math.isfinite(x) else x
