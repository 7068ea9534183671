"""The committed ladder and procedural reports (the defaults', and the earlier presets' in
ladder-subset and procedural-table): rebuilt from their report.json alone (no run folders) they come out
byte-identical; their verdicts follow from their own runs by the reading rule (that the report
modules import no experiment script: tests/test_house.py)."""
import json
import shutil
from pathlib import Path

import pytest
from scipy import stats

from experiments.lib import common

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


REPORTS = ["ladder", "ladder-subset", "procedural", "procedural-table"]


def script(name):
    """The experiment that wrote experiments/results/<name> (an earlier preset's folder: <script>-<preset>)."""
    return name.split("-")[0]


def rebuilt(name, tmp_path):
    """A copy of experiments/results/<name>, rebuilt with --report-only; returns (copy, original)."""
    from experiments import ladder, procedural
    out = tmp_path / name
    shutil.copytree(RESULTS / name, out)
    {"ladder": ladder, "procedural": procedural}[script(name)].main(["--report-only", "--out", str(out)])
    return out, RESULTS / name


@pytest.mark.parametrize("name", REPORTS)
def test_report_only_rebuilds_the_committed_report_byte_identical(name, tmp_path):
    out, committed = rebuilt(name, tmp_path)
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (committed / f).read_bytes(), f
    assert not (out / "runs").exists() and not (out / "provenance.json").exists()


@pytest.mark.parametrize("name", REPORTS)
def test_results_page_contract(name):
    rep = json.loads((RESULTS / name / "report.json").read_text())
    assert set(rep["source"]) == {"arxiv", "title"} and rep["regime"]
    assert rep["figures"] and all((RESULTS / name / f).exists() for f in rep["figures"])
    for v in rep["verdicts"]:
        assert set(v) == {"claim", "paper", "ours", "test", "verdict"} and v["verdict"] in common.VERDICTS
    p = rep["provenance"]
    assert set(p) >= {"commit", "dirty", "command", "hardware", "wall_seconds", "cpu_seconds", "runs_trained",
                      "invocations"} and len(p["commit"]) == 40
    assert p["command"].split()[:2] == ["python", f"experiments/{script(name)}.py"]  # (+ invocation flags: --jobs)


def test_ladder_subset_verdicts_follow_from_the_runs_by_welch():
    """The earlier default (65,536 prose tokens, d 16/32/64), kept in ladder-subset."""
    rep = json.loads((RESULTS / "ladder-subset" / "report.json").read_text())
    runs = rep["runs"]
    vals = lambda c, w, m: [r[m] for r in runs if r["condition"] == c and r["width"] == w]
    by_claim = {v["claim"]: v for v in rep["verdicts"]}
    ladder = by_claim["the ladder (music -> poetry -> prose): lower perplexity at the end"]
    cells = []
    for w in (16, 32, 64):
        xs, ys = vals("ladder", w, "ppl_final"), vals("random", w, "ppl_final")
        p = stats.ttest_ind(xs, ys, equal_var=False).pvalue
        cells.append(p < 0.05 and sum(xs) < sum(ys))
        assert common.fmt_p(p) in ladder["test"]
    assert cells == [True, False, False] and ladder["verdict"] == "partly"  # d16 only: p = 0.002, 0.097, 0.23
    assert by_claim["poetry adds to music"]["verdict"] == "reproduces"
    assert by_claim["the advantage persists at the plateau"]["verdict"] == "not measured"
    assert rep["prose_unigram_ppl"] == pytest.approx(2295.29, abs=0.01)
    md = (RESULTS / "ladder-subset" / "report.md").read_text()
    assert "significant" not in md and "every width" not in md


MUST_HOLD_D16 = ("random", "music", "ladder", "synthetic", "compute-matched", "volume-small", "volume-large",
                 "volume-large-synthetic", "ablation-attn", "ablation-mlp", "ablation-norm", "ablation-embed")


def test_ladder_default_is_the_six_contributions_at_a_prose_budget_where_they_can_show():
    """The ladder default's committed report (--preset contributions): every condition of the six
    contributions at d16 and the long pair at d64 with n >= 3; random init's first epoch below the
    prose unigram perplexity; the compute-matched control within 5% of its own best epoch; every
    p-value (table, comparisons, verdicts) is scipy's Welch test on the runs, the long pair against
    long-random."""
    from experiments.lib.ladder_conditions import baseline
    rep = json.loads((RESULTS / "ladder" / "report.json").read_text())
    assert rep["settings"]["preset"] == "contributions" and not rep["missing"]
    runs, unigram = rep["runs"], rep["prose_unigram_ppl"]
    vals = lambda c, w, m: [r[m] for r in runs if r["condition"] == c and r["width"] == w]
    for c in MUST_HOLD_D16:
        assert len(vals(c, 16, "ppl_final")) >= 3, c
    for c in ("long-random", "long-ladder"):
        assert len(vals(c, 64, "ppl_final")) >= 3, c
    assert unigram > 1000 and all(p < unigram for p in vals("random", 16, "ppl_first_epoch"))
    matched = [r for r in runs if r["condition"] == "compute-matched"]
    assert all(r["ppl_final"] <= 1.05 * r["ppl_best"] for r in matched)
    assert [c["holds"] for c in rep["checks"][:2]] == [True, True]
    welch = lambda x, y: stats.ttest_ind(x, y, equal_var=False).pvalue
    for row in rep["table"]:
        if row["p_vs_random"] is not None:
            expect = welch(vals(row["condition"], row["width"], row["metric"]),
                           vals(baseline(row["condition"]), row["width"], row["metric"]))
            assert row["p_vs_random"] == pytest.approx(expect, rel=1e-9), row
    assert any(c["x"] == "long-ladder" and c["y"] == "long-random" for c in rep["comparisons"])
    for c in rep["comparisons"]:
        expect = welch(vals(c["x"], c["width"], c["metric"]), vals(c["y"], c["width"], c["metric"]))
        assert c["p"] == pytest.approx(expect, rel=1e-9), c
    by_claim = {v["claim"]: v for v in rep["verdicts"]}
    long_claim = by_claim["the advantage persists at the plateau"]
    assert common.fmt_p(welch(vals("long-ladder", 64, "ppl_final"), vals("long-random", 64, "ppl_final"))) \
        in long_claim["test"] and long_claim["verdict"] != "not measured"
    assert [e["contribution"] for e in rep["contributions"]] == [1, 2, 3, 4, 5, 6]
    assert all(e["verdict"] != "not measured" for e in rep["contributions"])
    front = "\n".join(rep["front_table"]["lines"])
    assert all(f"**{e['verdict']}**" in front for e in rep["contributions"])
    assert "music.png" in rep["figures"]


def test_procedural_default_is_the_authors_budget_and_its_p_values_recompute():
    """The procedural default's committed report: HAYSTACK with no pre-training, Dyck and shuffled
    Dyck, n >= 3 each, every run at the authors' 10,000,000 records with its accuracy curve; the
    verdicts' and the comparisons' p-values are scipy's Welch test on the runs' accuracies."""
    rep = json.loads((RESULTS / "procedural" / "report.json").read_text())
    assert rep["settings"]["preset"] == "authors"
    runs = [r for r in rep["runs"] if r["part"] == "task" and r["task"] == "haystack"]
    token = {c: [r["token"] for r in sorted(runs, key=lambda r: r["seed"]) if r["condition"] == c]
             for c in ("none", "dyck", "dyck-shuffled")}
    assert all(len(v) >= 3 for v in token.values()), {c: len(v) for c, v in token.items()}
    for r in runs:
        assert r["records_seen"] >= 10_000_000 and r["curve"][-1][0] == r["records_seen"]
        assert all(0 <= acc <= 1 for _, acc in r["curve"]) and r["curve"] == sorted(r["curve"])
    welch = lambda x, y: stats.ttest_ind(x, y, equal_var=False).pvalue
    cmp = rep["comparisons"]["haystack"]
    assert cmp["vs_none"]["dyck"]["token"]["p"] == pytest.approx(welch(token["dyck"], token["none"]), rel=1e-9)
    assert cmp["vs_shuffled"]["dyck"]["token"]["p"] == pytest.approx(welch(token["dyck"], token["dyck-shuffled"]),
                                                                      rel=1e-9)
    by_claim = {v["claim"]: v for v in rep["verdicts"]}
    assert common.fmt_p(welch(token["dyck"], token["none"])) in by_claim["Dyck pre-training lifts HAYSTACK"]["test"]
    assert common.fmt_p(welch(token["dyck"], token["dyck-shuffled"])) in \
        by_claim["shuffled procedural data loses the benefit"]["test"]
