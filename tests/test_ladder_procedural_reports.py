"""The committed ladder and procedural reports: rebuilt from their report.json alone (no run
folders) they come out byte-identical; their verdicts follow from their own runs by the reading
rule (that the report modules import no experiment script: tests/test_house.py)."""
import json
import shutil
from pathlib import Path

import pytest
from scipy import stats

from experiments.lib import common

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def rebuilt(name, tmp_path):
    """A copy of experiments/results/<name>, rebuilt with --report-only; returns (copy, original)."""
    from experiments import ladder, procedural
    out = tmp_path / name
    shutil.copytree(RESULTS / name, out)
    {"ladder": ladder, "procedural": procedural}[name].main(["--report-only", "--out", str(out)])
    return out, RESULTS / name


@pytest.mark.parametrize("name", ["ladder", "procedural"])
def test_report_only_rebuilds_the_committed_report_byte_identical(name, tmp_path):
    out, committed = rebuilt(name, tmp_path)
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (committed / f).read_bytes(), f
    assert not (out / "runs").exists() and not (out / "provenance.json").exists()


@pytest.mark.parametrize("name", ["ladder", "procedural"])
def test_results_page_contract(name):
    rep = json.loads((RESULTS / name / "report.json").read_text())
    assert set(rep["source"]) == {"arxiv", "title"} and rep["regime"]
    assert rep["figures"] and all((RESULTS / name / f).exists() for f in rep["figures"])
    for v in rep["verdicts"]:
        assert set(v) == {"claim", "paper", "ours", "test", "verdict"} and v["verdict"] in common.VERDICTS
    p = rep["provenance"]
    assert set(p) >= {"commit", "dirty", "command", "hardware", "wall_seconds", "cpu_seconds", "runs_trained",
                      "invocations"} and p["command"] == f"python experiments/{name}.py" and len(p["commit"]) == 40


def test_ladder_verdicts_follow_from_the_runs_by_welch():
    rep = json.loads((RESULTS / "ladder" / "report.json").read_text())
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
    md = (RESULTS / "ladder" / "report.md").read_text()
    assert "significant" not in md and "every width" not in md

