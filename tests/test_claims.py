"""The one reading engine (experiments/lib/claims.py): the tests it applies, checked against scipy
and by hand, and how a claim's cells, arms and verdict come out of a list of records."""
import math
import statistics

import pytest
from scipy import stats

from experiments.lib import claims, significance
from experiments.lib.claims import Claim


def test_welch_is_ttest_ind_and_needs_three_runs_a_side():
    a, b = [1.0, 1.1, 1.2], [2.0, 2.1, 2.25]
    c = significance.welch(a, b)
    assert c["p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue) and c["test"] == "Welch"
    assert c["clear"] and c["better"] is True and c["diff"] == pytest.approx(statistics.mean(a) - statistics.mean(b))
    assert significance.welch(a, b, lower_is_better=False)["better"] is False
    two = significance.welch([1.0, 1.01], [2.0, 2.01])  # p is tiny, but n = 2 is not a test
    assert two["p"] < 0.05 and not two["clear"] and two["better"] is None
    assert not significance.welch([1.0, 1.5, 2.0], [1.2, 1.7, 2.2])["clear"]  # n = 3 but p large


def test_paired_is_the_paired_t_by_hand():
    base, treat = [2.0, 2.5, 3.0], [2.1, 2.62, 3.08]  # higher in every pair
    d = [t - b for t, b in zip(treat, base)]
    t = statistics.mean(d) / (statistics.stdev(d) / 3 ** 0.5)
    c = significance.paired(treat, base)
    assert c["p"] == pytest.approx(2 * stats.t.sf(abs(t), 2)) and c["n"] == 3
    assert c["clear"] and c["better"] is False  # a higher loss: worse
    assert not significance.paired(treat[:2], base[:2])["clear"]  # two pairs are no test, however consistent
    assert significance.paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])["p"] is None  # differences without spread
    assert significance.paired([1.0, None, 3.0, 4.0], [0.0, 1.0, 2.1, 3.05])["n"] == 3  # a pair with a gap is left out


def test_slope_test_is_linregress_and_needs_four_points():
    x, y = [1, 2, 3, 4], [0.021, -0.022, 0.018, 0.026]
    s, r = significance.slope_test(x, y), stats.linregress(x, y)
    assert s["slope"] == pytest.approx(r.slope) and s["p"] == pytest.approx(r.pvalue) and not s["clear"]
    assert significance.slope_test([1, 2, 3, 4, 5], [1.0, 2.1, 2.9, 4.2, 5.0])["clear"]
    assert not significance.slope_test([1, 2, 3], [1.0, 2.0, 3.1])["clear"]  # one degree of freedom


@pytest.mark.parametrize("cells,verdict", [
    (["reproduces", "reproduces"], "reproduces"), (["reproduces", "no clear difference"], "partly"),
    (["reproduces", "opposite"], "partly"), (["opposite", "no clear difference", "not measured"], "opposite"),
    (["no clear difference", "not measured"], "no clear difference"), ([], "not measured")])
def test_combined_verdict(cells, verdict):
    assert claims.combined_verdict(cells) == verdict


def test_fmt_p():
    assert claims.fmt_p(None) == "p = n/a" and claims.fmt_p(0.0123) == "p = 0.012" and claims.fmt_p(0.23) == "p = 0.23"
    assert claims.fmt_p(0.0004) == "p < 0.001"


def runs(condition, values, seeds=None, **more):
    return [dict(condition=condition, seed=s, loss=v, **more) for s, v in zip(seeds or range(len(values)), values)]


def test_arms_that_share_seeds_are_paired_over_the_shared_seeds_and_others_by_welch():
    treat = runs("a", [1.00, 1.52, 2.01, 9.0, 9.0], seeds=[0, 1, 2, 3, 4])  # seeds 3, 4 have no partner
    base = runs("b", [1.10, 1.60, 2.12])
    e = claims.read(Claim("a beats b", "-", {"condition": "a"}, {"condition": "b"}), treat + base)
    (c,) = e["cells"]
    assert c["test"] == "paired" and c["n"] == 3 and c["treat"] == [1.00, 1.52, 2.01]
    assert c["p"] == pytest.approx(stats.ttest_rel([1.00, 1.52, 2.01], [1.10, 1.60, 2.12]).pvalue)
    assert e["verdict"] == "reproduces" and e["test"].startswith("paired p = ")
    other = runs("b", [1.10, 1.60, 2.12], seeds=[10, 11, 12])  # no shared seed: Welch on every run
    (w,) = claims.read(Claim("a beats b", "-", {"condition": "a"}, {"condition": "b"}), treat + other)["cells"]
    assert w["test"] == "Welch" and w["n"] == [5, 3]
    assert w["p"] == pytest.approx(stats.ttest_ind([1.0, 1.52, 2.01, 9.0, 9.0], [1.1, 1.6, 2.12], equal_var=False).pvalue)


def test_cells_directions_and_several_arms():
    recs = (runs("m", [1.0, 1.1, 1.2], width=16) + runs("r", [2.0, 2.15, 2.2], width=16)
            + runs("m", [3.0, 3.3, 3.1], width=32) + runs("r", [2.0, 2.1, 2.3], width=32)
            + runs("x", [5.0, 5.0, 5.0], width=64))  # no base at d64: no cell there
    cl = Claim("m beats r", "-", {"condition": "m"}, {"condition": "r"}, cells="width", label="d{}", percent=True,
               fmt="{:.1f}")
    e = claims.read(cl, recs)
    assert [c["cell"] for c in e["cells"]] == [16, 32]
    assert [c["verdict"] for c in e["cells"]] == ["reproduces", "opposite"] and e["verdict"] == "partly"
    ratio = 100 * (math.exp(statistics.mean(math.log(a / b) for a, b in zip([1.0, 1.1, 1.2], [2.0, 2.15, 2.2]))) - 1)
    assert e["ours"].startswith(f"d16 1.1 ± 0.1 vs 2.1 ± 0.1 ({ratio:+.1f}%)")  # a ratio: the mean log ratio
    assert e["cells"][0]["p"] == pytest.approx(stats.ttest_rel(*([math.log(v) for v in vs] for vs in (
        [1.0, 1.1, 1.2], [2.0, 2.15, 2.2]))).pvalue)
    flipped = claims.read(Claim("m beats r", "-", {"condition": "m"}, {"condition": "r"}, cells="width",
                                worse_in=(32,)), recs)
    assert flipped["verdict"] == "reproduces"  # the paper has m worse at d32: going that way reproduces it
    two = claims.read(Claim("m, x beat r", "-", [{"condition": "m"}, {"condition": "x"}], {"condition": "r"},
                            cells="width", only=(16,)), recs)
    assert [c["name"] for c in two["cells"]] == ["m 16"]  # the arm, then the cell (label "{}")
    assert claims.read(Claim("y beats r", "-", {"condition": "y"}, {"condition": "r"}), recs)["verdict"] == "not measured"


def test_a_trend_reads_the_paired_advantage_against_log_x():
    recs = []
    for n, gain in ((1e4, 0.01), (1e5, 0.02), (1e6, 0.03)):
        for s, noise in enumerate((0.0, 0.001, -0.001)):
            recs += [dict(arm="mir", N=n, seed=s, loss=2.0 - gain - noise), dict(arm="wd", N=n, seed=s, loss=2.0)]
    cl = Claim("the gain grows with N", "-", {"arm": "mir"}, {"arm": "wd"}, pair_by=("N", "seed"), slope="N",
               log_x=True)
    e = claims.read(cl, recs)
    (c,) = e["cells"]
    r = stats.linregress(c["x"], c["y"])
    assert c["n"] == 9 and c["slope"] == pytest.approx(0.01) and c["p"] == pytest.approx(r.pvalue)
    assert e["verdict"] == "reproduces"
    assert claims.read(Claim("falls", "-", {"arm": "mir"}, {"arm": "wd"}, pair_by=("N", "seed"), slope="N",
                             log_x=True, falls=True), recs)["verdict"] == "opposite"


def test_the_table_escapes_pipes_and_read_all_adds_notes():
    recs = runs("m", [1.0, 1.1, 1.2]) + runs("r", [2.0, 2.1, 2.25])
    es = claims.read_all([Claim("m | r", "x", {"condition": "m"}, {"condition": "r"})], recs,
                         notes={"m | r": "at the cap"})
    assert es[0]["ours"].endswith("; at the cap")
    lines = claims.table(es)
    assert lines[2].startswith("| m \\| r | x |") and lines[2].endswith("| **reproduces** | reproduces |")
    assert lines[-1] == "Against the paper, cell by cell: 1 reproduces; 1 of 1 effects survive BH."
    assert claims.counts(es + es) == "1 reproduce"  # the same two arms read twice: one test
    other = claims.read_all([Claim("m beats r again", "x", {"condition": "m"}, {"condition": "r"})],
                            runs("m", [1.0, 1.2, 1.3]) + runs("r", [2.0, 2.1, 2.25]))
    assert claims.counts(es + other) == "2 reproduce"


@pytest.mark.parametrize("ci, side, paper, word", [
    ((-14.0, -8.1), -1, -11.8, "reproduces"), ((-11.0, -6.7), -1, -26.0, "smaller than the paper"),
    ((-29.1, -25.0), -1, -17.5, "larger than the paper"), ((-5.6, 3.8), -1, -4.8, "cannot tell"),
    ((-2.8, 9.9), 1, 3.1, "cannot tell"), ((-1.9, 1.6), -1, -11.8, "disagrees"), ((5.2, 25.8), -1, -4.8, "opposite"),
    ((0.2, 5.8), -1, -6.1, "opposite"), ((0.01, 0.03), 1, None, "reproduces"), ((-0.01, 0.03), 1, None, "cannot tell"),
    ((-0.03, -0.01), 1, None, "opposite"), ((0.3, 0.5), 1, 0.262, "larger than the paper")])
def test_the_word_against_the_paper_follows_from_the_interval(ci, side, paper, word):
    assert claims.against(ci, side, paper) == word


def test_benjamini_hochberg_is_scipys():
    """The step-up rule against scipy's adjusted p-values (false_discovery_control), on a set where the largest
    rank that passes lifts a p above its own k q / m (0.03 at rank 3 of 6 passes through rank 4's 0.032)."""
    ps = [0.001, 0.02, 0.03, 0.032, 0.2, 0.9]
    cell = lambda p: {"p": p, "test": "paired", "treat": [p], "base": [0.0]}  # noqa: E731
    cells = [cell(p) for p in reversed(ps)] + [{"p": None, "test": "paired"}]
    claims.benjamini_hochberg(cells + [cell(0.001)] * 3)  # the same test three times more: still m = 6
    adjusted = stats.false_discovery_control(ps[::-1])
    assert [c["bh"] for c in cells[:-1]] == [bool(q <= 0.05) for q in adjusted] == [False, False, True, True, True, True]
    assert "bh" not in cells[-1]
    failed = dict(cell(0.01), check_failed="short of its floor")  # a cell whose check failed is not tested
    claims.benjamini_hochberg(cells + [failed])
    assert "bh" not in failed and [c["bh"] for c in cells[:-1]] == [False, False, True, True, True, True]


@pytest.mark.parametrize("test, treat, base, n", [
    ("paired", [1.0, 2.0, 3.0], [0.0, 1.0, 2.0], None),            # no spread in the differences: no power to compute
    ("paired", [2.0, 1.0, 0.0], [0.0, 0.0, 0.0], 10),             # effect 1, sd 1: 10 pairs (one-sample t, d = 1)
    ("Welch", [1.0, 0.0, 2.0], [0.0, -1.0, 1.0], 17),             # effect 1, sd 1 a side: 17 a side (d = 1)
    ("Welch", [0.0], [1.0, 2.0], None)])                          # one run a side: no spread
def test_n80_is_the_smallest_n_with_80_percent_power(test, treat, base, n):
    assert significance.n80({"test": test, "treat": treat, "base": base}) == n


def test_a_trend_is_read_in_each_cell():
    recs = [dict(method=m, N=n, seed=s, gap=(0.1 * k if m == "wd" else 0.0) + 0.001 * s)
            for m in ("wd", "mir") for k, n in enumerate((1e4, 1e5, 1e6)) for s in range(2)]
    e = claims.read(Claim("the gap grows", "-", {}, metric="gap", slope="N", log_x=True, cells="method"), recs)
    assert [c["cell"] for c in e["cells"]] == ["mir", "wd"] and [c["n"] for c in e["cells"]] == [6, 6]
    assert [c["verdict"] for c in e["cells"]] == ["no clear difference", "reproduces"] and e["verdict"] == "partly"
    assert e["test"].startswith("slope test mir p = ")


def test_a_ratios_interval_is_on_the_log_scale_and_never_passes_minus_100_percent():
    """Perplexities 10x apart with a wide spread: on the raw scale the interval of the change would reach far below
    -100%; on the log scale it is exp(d +- t se) - 1, inside (-100%, inf), and the change is exp(mean d) - 1."""
    recs = runs("m", [10.0, 400.0, 20.0]) + runs("r", [400.0, 500.0, 700.0])
    (c,) = claims.read(Claim("m beats r", "-", {"condition": "m"}, {"condition": "r"}, percent=True), recs)["cells"]
    d = [math.log(a / b) for a, b in zip([10.0, 400.0, 20.0], [400.0, 500.0, 700.0])]
    half = stats.t.ppf(0.975, 2) * statistics.stdev(d) / math.sqrt(3)
    assert c["ci"] == [pytest.approx(100 * math.expm1(statistics.mean(d) + k * half)) for k in (-1, 1)]
    assert -100 < c["ci"][0] and c["change"] == pytest.approx(100 * math.expm1(statistics.mean(d)))
    raw = [a - b for a, b in zip([10.0, 400.0, 20.0], [400.0, 500.0, 700.0])]  # what the raw scale would give
    assert 100 * (statistics.mean(raw) - stats.t.ppf(0.975, 2) * statistics.stdev(raw) / math.sqrt(3)) / statistics.mean([400, 500, 700]) < -100


def test_a_cell_whose_check_failed_has_no_word_and_counts_under_no_verdict():
    recs = (runs("m", [1.0, 1.1, 1.2], task="a") + runs("r", [2.0, 2.1, 2.25], task="a")
            + runs("m", [1.0, 1.1, 1.2], task="b") + runs("r", [2.0, 2.15, 2.3], task="b"))
    cl = Claim("m beats r", "-", {"condition": "m"}, {"condition": "r"}, cells="task")
    (e,) = claims.read_all([cl], recs, failed=lambda claim, treat, cell: "m short of its floor" * (cell == "b"))
    a, b = e["cells"]
    assert a["verdict"] == "reproduces" and a["word"] == "reproduces" and a["bh"] is True
    assert b["verdict"] == "check failed" and b["word"] is None and "bh" not in b and e["verdict"] == "reproduces"
    assert e["against"] == "a reproduces; b check failed: m short of its floor"
    (alone,) = claims.read_all([cl], recs, failed=lambda *_: "short")
    assert alone["verdict"] == "check failed" and claims.counts([alone]) == "1 check failed"
    assert claims.word_counts([e]) == "1 reproduces; 1 of 1 effects survive BH; 1 check failed"
