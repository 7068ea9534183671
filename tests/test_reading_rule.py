"""The one reading rule every report uses (experiments/lib/common.py): when a difference may be
called an effect, the sentence that says so, a claim's verdict from its cells, provenance, and the
plans' measured pace."""
import json
import statistics

import pytest
from scipy import stats

from experiments.lib import common


def test_compare_is_welch_and_needs_three_runs_a_side():
    a, b = [1.0, 1.1, 1.2], [2.0, 2.1, 2.25]
    c = common.compare(a, b)
    assert c["p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert c["clear"] and c["better"] is True and c["diff"] == pytest.approx(statistics.mean(a) - statistics.mean(b))
    assert common.compare(a, b, higher_is_better=True)["better"] is False
    two = common.compare([1.0, 1.01], [2.0, 2.01])  # p is tiny, but n = 2 is not a test
    assert two["p"] < 0.05 and not two["clear"] and two["better"] is None
    far = common.compare([1.0, 1.5, 2.0], [1.2, 1.7, 2.2])  # n = 3 but p large
    assert not far["clear"]


def test_paired_is_ttest_rel_with_the_same_threshold():
    base, treat = [2.0, 2.5, 3.0], [2.1, 2.62, 3.08]  # higher in every pair
    d = [t - b for t, b in zip(treat, base)]
    t = statistics.mean(d) / (statistics.stdev(d) / 3 ** 0.5)  # the paired t by hand
    c = common.paired(treat, base)
    assert c["p"] == pytest.approx(2 * stats.t.sf(abs(t), 2)) and c["n"] == 3
    assert c["clear"] and c["better"] is False  # a higher loss: worse
    assert not common.paired(treat[:2], base[:2])["clear"]  # two pairs are no test, however consistent
    assert common.paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])["p"] is None  # no spread of the differences
    assert common.paired([1.0, None, 3.0, 4.0], [0.0, 1.0, 2.1, 3.05])["n"] == 3  # pairs with a gap are left out


def test_slope_test_is_linregress():
    x, y = [1, 2, 3, 4], [0.021, -0.022, 0.018, 0.026]  # the data-constrained MIR gains per size
    s = common.slope_test(x, y)
    r = stats.linregress(x, y)
    assert s["slope"] == pytest.approx(r.slope) and s["p"] == pytest.approx(r.pvalue) and not s["clear"]
    assert common.slope_test([1, 2, 3, 4, 5], [1.0, 2.1, 2.9, 4.2, 5.0])["clear"]
    assert not common.slope_test([1, 2, 3], [1.0, 2.0, 3.1])["clear"]  # 3 points: one degree of freedom


def test_reading_says_an_effect_only_on_a_clear_difference():
    clear = common.compare([1.0, 1.1, 1.2], [2.0, 2.1, 2.25])
    assert common.reading(clear, "lowers", "raises", "by 1.0").startswith("lowers by 1.0 (p < 0.001, n = 3/3)")
    worse = common.compare([2.0, 2.1, 2.25], [1.0, 1.1, 1.2])
    assert common.reading(worse, "lowers", "raises").startswith("raises (p < 0.001")
    two = common.compare([1.0, 1.01], [2.0, 2.01])
    assert common.reading(two, "lowers", "raises") == f"no clear difference ({common.fmt_p(two['p'])}, n = 2/2)"
    assert common.fmt_p(None) == "p = n/a" and common.fmt_p(0.0123) == "p = 0.012" and common.fmt_p(0.23) == "p = 0.23"


@pytest.mark.parametrize("cells,verdict", [
    (["reproduces", "reproduces"], "reproduces"),
    (["reproduces", "no clear difference"], "partly"),
    (["reproduces", "opposite"], "partly"),
    (["opposite", "no clear difference", "not measured"], "opposite"),  # nothing for the paper, something against
    (["no clear difference", "not measured"], "no clear difference"),
    ([], "not measured"), (["not measured"], "not measured")])
def test_combined_verdict(cells, verdict):
    assert common.combined_verdict(cells) == verdict


def test_verdict_of_follows_the_papers_direction():
    clear = common.compare([1.0, 1.1, 1.2], [2.0, 2.1, 2.25])  # lower = better
    assert common.verdict_of(clear) == "reproduces"
    assert common.verdict_of(clear, paper_direction_better=False) == "opposite"
    assert common.verdict_of(common.compare([1.0, 1.01], [2.0, 2.01])) == "no clear difference"


def test_provenance_sums_every_invocation_that_trained(tmp_path):
    first = common.Provenance(tmp_path, argv=["--seeds", "3"])
    first.finish(runs_trained=2)
    common.Provenance(tmp_path, argv=["--report-only"]).finish(runs_trained=0)  # a rebuild records nothing
    again = common.Provenance(tmp_path, argv=["--seeds", "3"]).finish(runs_trained=1)  # a resumed sweep
    entries = json.loads((tmp_path / "provenance.json").read_text())
    assert len(entries) == 2 and again["runs_trained"] == 3 and len(again["invocations"]) == 2
    assert again["wall_seconds"] == pytest.approx(sum(e["wall_seconds"] for e in entries))
    assert again["command"].endswith("--seeds 3") and set(again["hardware"]) >= {"cpu", "cores", "torch", "gpu"}
    assert common.kept_provenance(tmp_path) == again
    line = common.provenance_line(again)
    assert "over 2 invocations (resumed)" in line and "min wall" in line


def test_kept_provenance_falls_back_to_the_reports_own(tmp_path):
    prov = {"commit": "abc", "dirty": None, "command": "python x", "hardware": "AMD EPYC, 2 cores",
            "wall_seconds": 60.0, "cpu_seconds": None, "note": "reconstructed from the notes"}
    (tmp_path / "report.json").write_text(json.dumps({"provenance": prov}))
    assert common.kept_provenance(tmp_path) == prov
    assert common.provenance_line(prov).endswith("CPU time not recorded. Reconstructed from the notes.")
    assert common.kept_provenance(tmp_path / "none") is None


def test_a_stopped_invocation_is_recorded_unless_it_was_a_wrong_start(tmp_path):
    """main_guard records an invocation that Ctrl-C or an error stopped (Provenance.stop): with
    the runs finished since it started; one that finished nothing in its first minute is not kept."""
    def stopped_main(finish_a_run, error):
        def main():
            common.Provenance(tmp_path, argv=["--seeds", "3"])
            if finish_a_run:
                (tmp_path / "runs" / "a").mkdir(parents=True)
                (tmp_path / "runs" / "a" / "summary.json").write_text("{}")
            raise error
        with pytest.raises(SystemExit) as e:
            common.main_guard(main)
        return e.value.code
    assert stopped_main(False, KeyboardInterrupt()) == 130 and not (tmp_path / "provenance.json").exists()
    assert stopped_main(True, KeyboardInterrupt()) == 130
    assert stopped_main(False, common.UserError("a run failed")) == 2  # adds nothing: no run since it started
    (entry,) = json.loads((tmp_path / "provenance.json").read_text())
    assert entry["stopped"] == "interrupted" and entry["runs_trained"] == 1 and entry["command"].endswith("--seeds 3")
    assert common.Provenance.active is None


def test_pace_line_scales_the_rest_by_the_finished_runs_measured_time(tmp_path):
    runs = [common.Run(f"r{i}", tmp_path / f"r{i}", []) for i in range(3)]
    estimate = {"r0": 100.0, "r1": 300.0, "r2": 600.0}
    assert common.pace_line(runs, lambda r: estimate[r.name], 600.0, 2) == ""  # nothing finished yet
    for r, seconds in ((runs[0], 300.0), (runs[1], 900.0)):  # 3x their estimates of 100 and 300 s
        r.folder.mkdir()
        (r.folder / "summary.json").write_text(json.dumps({"seconds": seconds}))
    line = common.pace_line(runs, lambda r: estimate[r.name], 600.0, 2)
    assert "the 2 finished run(s) took 20 min, 3.00x their estimate" in line
    assert line.endswith("the rest at that pace ~15 min with --jobs 2")  # 3 x 600 s / 2 jobs
