"""Every committed report (experiments/results/*/report.json): its verdicts are its paper's claim table
(experiments/lib/<paper>_claims.py) read from its own records by the one rule, recomputed here with
scipy by code of its own (not the engine's): the paired t-test where both arms share seeds, Welch's
otherwise, linregress for a trend; a perplexity (a claim in percent) on its log, its change exp(d) - 1; an effect
only at p < 0.05 with n >= 3 a side (4 points for a slope); a claim read in several cells gets one combined verdict;
a cell whose treated arm failed its report's check (a pre-trained model short of its floor, a task without room for
a gain, a long run that never reached its plateau) is "check failed"; Benjamini-Hochberg over the distinct tests.
And the checks can fail: mutated copies of committed reports (a flipped sign, a changed front-table number, a
deleted power figure, a moved crossover, a dropped run) each fail one."""
import importlib
import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest
from scipy import stats

import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
REPORTS = sorted(p.parent.name for p in RESULTS.glob("*/report.json"))
VERDICTS = ("reproduces", "partly", "no clear difference", "opposite", "check failed", "not measured")


def paper_claims(name, rep=None):
    """The claim table of the experiment that wrote experiments/results/<name> (<script>[-<preset>]): the preset's
    own (experiments/lib/<script>_<preset>_claims.py, e.g. ladder_headline_claims) where there is one, or the module
    its report.json names (`claims`: reference/cross.py's report)."""
    named = (rep or json.loads((RESULTS / name / "report.json").read_text())).get("claims")
    if named:
        return importlib.import_module(named)
    own = f"experiments.lib.{name.replace('-', '_')}_claims"
    return importlib.import_module(own if importlib.util.find_spec(own) else f"experiments.lib.{name.split('-')[0]}_claims")


def ok(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def matching(records, flt):
    return [r for r in records if all(r.get(k) == v for k, v in flt.items())]


def failed_checks(name, rep):
    """failed(claim, treat filter, cell) -> bool, from the report's runs by this file's own reading of each
    report's checks: procedural, a treated arm whose pre-trained kind ended over 0.1 nats above its entropy or a
    task whose baseline is at >= 99% token accuracy; the ladder, its plateau claim where a long run hit the cap."""
    runs = rep.get("runs") or []
    if name.startswith("procedural") and name != "procedural-reference":
        far = {r["condition"] for r in runs if r["part"] == "pretrain" and r.get("entropy") is not None
               and not r.get("diverged") and max(x["val_loss"] for x in (r, r.get("retrained") or r)) - r["entropy"] > 0.1}
        base = {}
        for r in runs:
            if r["part"] != "pretrain" and r.get("condition") == "none" and "token" in r:
                base.setdefault(r["task"], []).append(100 * r["token"])
        full = {t for t, v in base.items() if sum(v) / len(v) >= 99}

        def failed(cl, treat, cell):
            cond = treat.get("condition", "")
            kinds = cond[5:].split("+mlp-") if cond.startswith("attn-") else [cond.split(" (")[0]]
            return cell in full or any(k in far for k in kinds)
        return failed
    if name.startswith("ladder"):
        capped = any(r["condition"].startswith("long-") and not r.get("stopped_early") for r in runs)
        return lambda cl, treat, cell: cl.extra.get("fails") == "plateau" and capped
    return lambda cl, treat, cell: False


def expected_cells(cl, records, failed):
    """[{p, n, verdict, change, failed}] of a claim's cells, by scipy on the records."""
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
            bad = failed(cl, cl.treat, v)
            if len(pts) < 3 or len({x for x, _ in pts}) < 2:
                out.append(dict(p=None, n=len(pts), verdict="check failed" if bad else "no clear difference",
                                change=None, failed=bad))
                continue
            r = stats.linregress([x for x, _ in pts], [y for _, y in pts])
            clear = r.pvalue < 0.05 and len(pts) >= 4
            out.append(dict(p=r.pvalue, n=len(pts), change=None, failed=bad, verdict="check failed" if bad else
                            "no clear difference" if not clear else "reproduces" if (r.slope > 0) != cl.falls else
                            "opposite"))
        return out
    treats = cl.treat if isinstance(cl.treat, list) else [cl.treat]
    bases = cl.base if isinstance(cl.base, list) else [cl.base or {}] * len(treats)
    scale = (lambda x: math.log(x)) if cl.percent else (lambda x: x)  # a ratio metric on its log
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
                x, y = [scale(a) for a, _ in pairs], [scale(c) for _, c in pairs]
                d = [a - c for a, c in zip(x, y)]
                p = stats.ttest_rel(x, y).pvalue if len(d) >= 2 and max(d) - min(d) > 1e-12 * max(1, abs(sum(d))) \
                    else None
                n, n_min = len(d), len(d)
                raw = [a for a, _ in pairs], [c for _, c in pairs]
            else:
                raw = [r[cl.metric] for r in ts if ok(r.get(cl.metric))], [r[cl.metric] for r in bs
                                                                           if ok(r.get(cl.metric))]
                x, y = [scale(a) for a in raw[0]], [scale(c) for c in raw[1]]
                spread = len(set(x)) > 1 or len(set(y)) > 1
                p = stats.ttest_ind(x, y, equal_var=False).pvalue if min(len(x), len(y)) >= 2 and spread else None
                n, n_min = [len(x), len(y)], min(len(x), len(y))
            p = p if p is not None and math.isfinite(p) else None
            clear = p is not None and p < 0.05 and n_min >= 3
            d_mean = sum(x) / len(x) - sum(y) / len(y) if x and y else math.nan
            better = (d_mean < 0) == cl.lower_is_better if x and y else None
            change = 100 * (math.exp(d_mean) - 1) if cl.percent else sum(raw[0]) / len(raw[0]) - sum(raw[1]) / len(raw[1])
            bad = failed(cl, t, v)
            out.append(dict(p=p, n=n, change=change, failed=bad, verdict="check failed" if bad else
                            "no clear difference" if not clear else
                            "reproduces" if better == (v not in cl.worse_in) else "opposite"))
    return out


def combined(vs):
    kept = {v for v in vs if v not in ("not measured", "check failed")}
    if len(kept) <= 1:
        return kept.pop() if kept else "check failed" if "check failed" in vs else "not measured"
    return "partly" if kept & {"reproduces", "partly"} else "opposite" if "opposite" in kept else "no clear difference"


def interval(cl, c):
    """A cell's 95% interval by scipy's t quantiles on its own values, in the cell's unit: the paired differences'
    t interval, Welch's with the Welch-Satterthwaite degrees of freedom, or the slope's t interval; a perplexity's
    on the logs, shown as 100 (exp(x) - 1)."""
    if c["test"] == "slope":
        r = stats.linregress(c["x"], c["y"])
        half = stats.t.ppf(0.975, len(c["x"]) - 2) * r.stderr
        return r.slope - half, r.slope + half
    x, y = values(cl, c)
    if c["test"] == "paired":
        d = [a - b for a, b in zip(x, y)]
        mid, se, df = sum(d) / len(d), stats.tstd(d) / math.sqrt(len(d)), len(d) - 1
    else:
        va, vb = stats.tvar(x) / len(x), stats.tvar(y) / len(y)
        mid, se = sum(x) / len(x) - sum(y) / len(y), math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))
    half = stats.t.ppf(0.975, df) * se
    unit = (lambda v: 100 * (math.exp(v) - 1)) if cl.percent else (lambda v: v)
    return unit(mid - half), unit(mid + half)


def values(cl, c):
    """The cell's two arms as tested: finite values (pairs where paired), logs for a perplexity."""
    f = math.log if cl.percent else float
    if c["test"] == "paired":
        pairs = [(a, b) for a, b in zip(c["treat"], c["base"]) if ok(a) and ok(b)]
        return [f(a) for a, _ in pairs], [f(b) for _, b in pairs]
    return [f(v) for v in c["treat"] if ok(v)], [f(v) for v in c["base"] if ok(v)]


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


def power(cl, c, n):
    """The power of the cell's two-sided test at n pairs (runs a side) for its observed effect and spread."""
    x, y = values(cl, c)
    if c["test"] == "paired":
        d = [a - b for a, b in zip(x, y)]
        effect, var, df = sum(d) / len(d), stats.tvar(d), n - 1
    else:
        effect, var, df = sum(x) / len(x) - sum(y) / len(y), stats.tvar(x) + stats.tvar(y), 2 * n - 2
    t, nc = stats.t.ppf(0.975, df), abs(effect) / math.sqrt(var / n)
    below = stats.nct.cdf(-t, df, nc)
    return stats.nct.sf(t, df, nc) + (below if math.isfinite(below) else 0.0)


def arms_of(c):
    """What a cell tested, as this file reads it: the test and both arms' values (two claims on the same two arms
    are one test)."""
    return (c["test"], tuple(c.get("x") or c.get("treat") or ()), tuple(c.get("y") or c.get("base") or ()))


def problems(name, rep):
    """Every way the report differs from its runs read by the rule (recomputed here), as lines; none: it holds."""
    mod, out = paper_claims(name, rep), []
    records, failed = mod.records(rep), failed_checks(name, rep)
    if [v["claim"] for v in rep["verdicts"]] != [c.claim for c in mod.CLAIMS]:
        return [f"{name}: its claims are not its claim table's"]
    cells = []
    for cl, v in zip(mod.CLAIMS, rep["verdicts"]):
        expect, got = expected_cells(cl, records, failed), v["cells"]
        if len(got) != len(expect):
            out.append(f"{cl.claim}: {len(got)} cells, the records give {len(expect)}")
            continue
        for c, e in zip(got, expect):
            where = f"{cl.claim} {c.get('name')}"
            if (c["p"] is None) != (e["p"] is None) or (c["p"] is not None and not math.isclose(c["p"], e["p"],
                                                                                                rel_tol=1e-9)):
                out.append(f"{where}: p {c['p']} against {e['p']}")
            if c["n"] != e["n"] or c["verdict"] != e["verdict"] or bool(c.get("check_failed")) != e["failed"]:
                out.append(f"{where}: n {c['n']} {c['verdict']} against n {e['n']} {e['verdict']} (failed {e['failed']})")
            if e["change"] is not None and not math.isclose(c["change"], e["change"], rel_tol=1e-9, abs_tol=1e-12):
                out.append(f"{where}: change {c['change']} against {e['change']}")
            cells.append((cl, c))
        if v["verdict"] != combined([e["verdict"] for e in expect]) or v["paper"] != cl.paper:
            out.append(f"{cl.claim}: verdict {v['verdict']} against {combined([e['verdict'] for e in expect])}")
    first = {}
    for cl, c in cells:
        if c["p"] is not None and not c.get("check_failed"):
            first.setdefault(arms_of(c), c["p"])
    q = dict(zip(first, stats.false_discovery_control(list(first.values())))) if first else {}
    for cl, c in cells:
        where = f"{cl.claim} {c.get('name')}"
        pv = cl.paper_value.get(c["cell"]) if isinstance(cl.paper_value, dict) else cl.paper_value
        if c.get("paper_value") != pv or "ci" not in c or "word" not in c:
            out.append(f"{where}: the paper's number, the interval or the word missing")
            continue
        if c["p"] is None or c.get("check_failed"):
            if c["word"] is not None or (c["p"] is None and c["ci"] is not None):
                out.append(f"{where}: a word or an interval without a test")
            continue
        if c.get("bh") != (q[arms_of(c)] <= 0.05):
            out.append(f"{where}: BH {c.get('bh')} against q = {q[arms_of(c)]:.4f}")
        low, high = interval(cl, c)
        if not all(math.isclose(a, b, rel_tol=1e-7, abs_tol=1e-12) for a, b in zip(c["ci"], (low, high))):
            out.append(f"{where}: interval {c['ci']} against {[low, high]}")
        if cl.percent and low <= -100:
            out.append(f"{where}: a ratio's interval below -100%")
        enough = (min(c["n"]) if isinstance(c["n"], list) else c["n"] - (c["test"] == "slope")) >= 3
        if c["word"] != (word(cl, c, low, high) if enough else None):
            out.append(f"{where}: word {c['word']} against {word(cl, c, low, high) if enough else None}")
        if (low > 0 or high < 0) != (c["p"] < 0.05):
            out.append(f"{where}: the interval and p disagree")
        if c["verdict"] == "no clear difference" and c["test"] != "slope" and min(map(len, values(cl, c))) >= 2:
            if "n80" not in c:
                out.append(f"{where}: no power figure (n80)")
            elif c["n80"] and not power(cl, c, c["n80"]) >= 0.8 > (power(cl, c, c["n80"] - 1) if c["n80"] > 2 else 0):
                out.append(f"{where}: n80 = {c['n80']} is not where 80% power is reached")
    return out


@pytest.mark.parametrize("name", REPORTS)
def test_every_cell_recomputes_from_its_runs(name):
    """p, n, the verdict, the change, the check, the 95% interval, the word against the paper, the BH mark over the
    distinct tests (scipy's false_discovery_control) and the n80 of every cell, recomputed here."""
    assert problems(name, json.loads((RESULTS / name / "report.json").read_text())) == []


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


def rebuilt_differs(name, folder):
    """The report rebuilt from its own report.json (--report-only, no run folders) differs from it: the lines."""
    script = results.BUILT_BY.get(name, f"experiments/{name.split('-')[0]}.py")
    module = importlib.import_module(script[:-3].replace("/", "."))
    before = {f: (folder / f).read_bytes() for f in ("report.md", "report.json")}
    module.main(["--report-only", "--out", str(folder)])
    return [f"{f} rebuilds differently" for f, b in before.items() if (folder / f).read_bytes() != b]


def flip_a_sign(rep):
    c = next(c for v in rep["verdicts"] for c in v["cells"] if c.get("change"))
    c["change"] = -c["change"]


def change_a_front_table_number(rep):
    lines = rep["front_table"]["lines"]
    i = next(i for i, ln in enumerate(lines) if "%" in ln)
    lines[i] = lines[i].replace("%", "1%", 1)


def delete_a_power_figure(rep):
    del next(c for v in rep["verdicts"] for c in v["cells"] if c.get("n80"))["n80"]


def move_the_crossover(rep):
    rep["crossover"] = {k: 4 * v for k, v in rep["crossover"].items()}


def drop_a_run(rep):
    rep["runs"].pop(next(i for i, r in enumerate(rep["runs"]) if r.get("condition") == "random"))


MUTATIONS = [("ladder", flip_a_sign), ("ladder", change_a_front_table_number), ("ladder", delete_a_power_figure),
             ("ladder-scarcity", move_the_crossover), ("ladder", drop_a_run), ("procedural", flip_a_sign)]


@pytest.mark.parametrize("name,mutate", MUTATIONS, ids=[f"{n}-{m.__name__}" for n, m in MUTATIONS])
def test_a_mutated_report_fails_a_check(name, mutate, tmp_path):
    """A copy of a committed report passes every check (its cells recompute, it rebuilds byte for byte); the copy
    mutated once fails one of them."""
    folder = tmp_path / name
    shutil.copytree(RESULTS / name, folder)
    rep = json.loads((folder / "report.json").read_text())
    mutate(rep)
    (folder / "report.json").write_text(json.dumps(rep, indent=1))
    assert problems(name, rep) + rebuilt_differs(name, folder), mutate.__name__


@pytest.mark.parametrize("name", sorted({n for n, _ in MUTATIONS}))
def test_the_unmutated_copy_passes_every_check(name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(RESULTS / name, folder)
    rep = json.loads((folder / "report.json").read_text())
    (folder / "report.json").write_text(json.dumps(rep, indent=1))  # written as the mutated copies are
    assert problems(name, rep) + rebuilt_differs(name, folder) == []
