"""experiments/procedural.py end to end at toy size (arXiv 2601.21725), both presets: every part
runs, the report has its shape, its statistics follow from the runs' own files, and the default
(the authors' preset) is planned at the authors' settings and budget."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.lib import common
from experiments import procedural as P
from experiments.lib import procedural_authors as PA
from experiments.lib import procedural_authors_report as AR
from experiments.lib import procedural_report as R
from experiments.lib import procedural_table as PT

ROOT = Path(__file__).resolve().parents[1]


def tiny_argv(out, text_dir):
    return ["--preset", "table", "--out", str(out), "--jobs", "1", "--threads", "1", "--seeds", "2", "--kinds", "dyck,set",
            "--controls", "dyck",
            "--tasks", "haystack", "--transfers", "full,attn,mlp", "--split-kinds", "dyck", "--eval-iters", "2",
            "--merges", "dyck/set", "--pretrain-steps", "4", "--task-steps", "4", "--batch-size", "4",
            "--task-test", "40", "--task-train", "400", "--domains", "prose",
            "--prose-stage", f"text:{text_dir}", "--additive-steps", "2",
            "--sem-steps", "4", "--sem-batch", "2", "--sem-block", "16", "--sem-evals", "2", "--sem-eval-iters", "2"]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """One toy sweep shared by the tests below (module scope: it is the slow part)."""
    tmp = tmp_path_factory.mktemp("procedural")
    text_dir = tmp / "texts"
    from conftest import write_paragraphs
    write_paragraphs(text_dir)
    mp = pytest.MonkeyPatch()
    mp.setenv("PRELUDE_CACHE", str(tmp / "cache"))
    argv = tiny_argv(tmp / "out", text_dir)
    P.main(argv)
    yield argv, tmp / "out", json.loads((tmp / "out" / "report.json").read_text())
    mp.undo()


def test_every_run_finished_and_every_file_written(done):
    argv, out, rep = done
    a = P.parse_args(argv)
    pre, base, warm = PT.all_runs(a)
    # 2 seeds x (dyck, set, dyck-shuffled at P4 + dyck at P2); 2 seeds x (none, 3 full, dyck attn/mlp, merge,
    # dyck-P2) on haystack; 2 seeds x (base, P2 full, P4 full/attn/mlp) on prose
    assert (len(pre), len(base) + len(warm)) == (8, 2 * 8 + 2 * 5)
    assert rep["n_runs"] == rep["n_planned"] == len(pre) + len(base) + len(warm)
    for f in ("report.md", "report.json", "diagnostic_accuracy.png", "semantic_curves.png", "additive.png"):
        assert (out / f).stat().st_size > 0, f
    assert len(list((out / "merges").glob("*.pt"))) == 2
    md = (out / "report.md").read_text()
    for head in ("## The paper's claims beside ours", "## (a) The diagnostic table", "## (c) Weight merging",
                 "## (b) Semantic domains", "#### Substitutive regime", "## What differs from the paper", "98%",
                 "55% (C4)", "Provenance: commit"):
        assert head in md, head


def test_table_cells_are_the_runs_accuracies(done):
    argv, out, rep = done
    for mode, rows in rep["table"].items():
        for row, cells in rows.items():
            for task, cell in cells.items():
                m = "none" if row == "none" else mode
                accs = [json.loads((out / "runs" / f"task-{task}-{row}-{m}-s{s}" / "summary.json").read_text())
                        ["stages"][0]["accuracy"] for s in (0, 1)]
                assert cell["exact"] == accs, (mode, row, task)
                assert len(cell["token"]) == 2 and all(0 <= x <= 1 for x in cell["token"])
    assert set(rep["table"]["attn"]) == {"none", "dyck"}
    assert set(rep["table"]["full"]) == {"none", "dyck", "set", "dyck-shuffled", "attn-dyck+mlp-set"}
    for r in rep["runs"]:  # the checkpoint's greedy accuracy = the one train.py measured
        if r["part"] == "task":
            assert r["exact_recomputed"] == pytest.approx(r["accuracy"], abs=0.03), r["name"]


def test_claims_follow_from_the_table(done):
    _, _, rep = done
    c = next(c for c in rep["claims"] if c["kind"] == "dyck")
    cell, none = rep["table"]["full"]["dyck"]["haystack"], rep["table"]["full"]["none"]["haystack"]
    key = c["metric"]
    assert c["vs_none"]["treat"] == pytest.approx(statistics.mean(cell[key]))
    assert c["vs_none"]["base"] == pytest.approx(statistics.mean(none[key]))
    assert c["vs_none"]["diff"] == pytest.approx(statistics.mean(cell[key]) - statistics.mean(none[key]))
    assert "kind_vs_shuffled" in c and "attn_vs_none" in c and "mlp_vs_none" in c
    for row, cells in rep["deltas"].items():  # every row against none: the same numbers
        for t, x in cells.items():
            mine, none = rep["table"]["full"][row][t][x["metric"]], rep["table"]["full"]["none"][t][x["metric"]]
            assert x["vs_none"]["diff"] == pytest.approx(statistics.mean(mine) - statistics.mean(none))
    m = rep["merges"][0]
    assert set(m["alone"]) == {"none", "dyck (full)", "set (full)", "dyck (attn only)"}


def test_semantic_numbers_follow_from_the_curves(done):
    argv, out, rep = done
    a = P.parse_args(argv)
    for d in ("prose",):
        dd = rep["semantic"][d]
        base = [json.loads((out / "runs" / f"sem-{d}-base-s{s}" / "summary.json").read_text())["stages"][0]["val_loss"]
                for s in (0, 1)]
        assert dd["base_final"] == base
        assert [(c["steps"], c["transfer"]) for c in dd["conditions"]] == [(2, "full"), (4, "attn"), (4, "full"), (4, "mlp")]
        for c in dd["conditions"]:
            assert c["diff"] == pytest.approx([f - b for f, b in zip(c["final"], base)])
            for s, curve in c["curves"].items():
                assert [f for f, _ in curve] == [0.5, 1.0]
                assert curve[-1][1] == pytest.approx(c["final"][int(s)])
        full = next(c for c in dd["conditions"] if c.get("substitutive") is not None)
        assert full["steps"] == a.pretrain_steps and full["transfer"] == "full"
        for s, sub in zip((0, 1), full["substitutive"]):
            assert (sub["share"], sub["qualifier"]) == pytest.approx(R.crossing(full["curves"][str(s)], base[s]))
        assert full["procedural_tokens"] == rep["pretrain"]["dyck-P4-s0"]["tokens"]


def test_crossing_interpolates_where_the_curve_meets_the_target():
    curve = [[0.25, 5.0], [0.5, 4.0], [0.75, 3.5], [1.0, 3.0]]
    assert R.crossing(curve, 3.75) == (pytest.approx(0.625), "=")
    assert R.crossing(curve, 5.5) == (0.25, "<=")
    assert R.crossing(curve, 2.0) == (None, ">")
    assert R.crossing(curve, 4.0) == (0.5, "=")


def test_compare_follows_the_reading_rule():
    c = R.compare([0.9, 0.92], [0.1, 0.12])  # far apart, but n = 2 per side is never an effect
    assert not c["clear"] and c["better"] is None and R.says(c) == "no clear difference (p < 0.001, n = 2/2)"
    c = R.compare([0.9, 0.92, 0.91], [0.1, 0.12, 0.11])
    assert c["clear"] and c["better"] and R.says(c).startswith("better (p < 0.001, n = 3/3)")
    assert c["treat"] == pytest.approx(0.91) and c["diff"] == pytest.approx(0.8)
    assert R.compare([2.0, 2.01, 2.02], [3.0, 3.01, 3.03], higher_is_better=False)["better"] is True
    assert R.compare([0.5], [0.4])["p"] is None and R.compare([], [0.4]) is None



def test_pretraining_records_keep_their_unigram_loss(done):
    _, out, rep = done
    import math
    for r in rep["runs"]:
        if r["part"] == "pretrain":
            s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())["stages"][0]
            assert r["unigram_loss"] == pytest.approx(math.log(s["unigram_val_ppl"]))
    assert "pre-training val loss (unigram)" in (out / "report.md").read_text()


def rebuilt_from_json_alone(out, tmp_path):
    """A copy of OUT's report.md and report.json, without the run folders, rebuilt with
    --report-only: the copy's folder, after asserting both files came back byte-identical."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("report.md", "report.json"):
        (copy / f).write_bytes((out / f).read_bytes())
    P.main(["--report-only", "--out", str(copy)])
    for f in ("report.md", "report.json"):
        assert (copy / f).read_bytes() == (out / f).read_bytes(), f
    return copy


def test_a_copy_without_run_folders_rebuilds_the_same_report(done, tmp_path):
    argv, out, rep = done
    copy = rebuilt_from_json_alone(out, tmp_path)
    for f in R.FIGURES:
        assert (copy / f).stat().st_size > 0


def test_rerun_skips_finished_runs_and_rebuilds_the_same_report(done, monkeypatch):
    argv, out, rep = done
    import train

    def refuse(args):
        raise AssertionError("a finished run was trained again")
    monkeypatch.setattr(train, "run", refuse)
    monkeypatch.setenv("PRELUDE_CACHE", str(out.parent / "cache"))
    before = (out / "report.md").read_text()
    P.main(argv)
    after = (out / "report.md").read_text()
    assert after == before  # nothing trained: the same provenance, the same report


@pytest.mark.parametrize("flags, message", [
    (["--kinds", "dyck,bogus"], "unknown procedural kind 'bogus'"),
    (["--tasks", "haystack,poems"], "unknown task 'poems'"),
    (["--merges", "dyck/eca110", "--kinds", "dyck"], "not pre-trained"),
    (["--preset", "table", "--sem-steps", "10", "--sem-evals", "4"], "multiple of --sem-evals"),
    (["--sem-steps", "10"], "--sem-steps is a flag of the table preset; add --preset table"),
    (["--preset", "table", "--records", "10"], "--records is a flag of the authors preset"),
    (["--dyck-length", "64"], "fewer than the 100 of the task model"),
    (["--dyck-length", "129"], "must be even"),
    (["--tasks", "haystack,poems"], "unknown task 'poems'"),
    (["--records", "0"], "--records must be positive"),
])
def test_user_errors_are_one_line(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        common.main_guard(lambda: P.main(["--quick", "--out", str(tmp_path / "o"), "--report-only", *flags]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_script_runs_as_a_command(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "procedural.py"), "--kinds", "nope"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown procedural kind 'nope'")


# ---------------------------------------------------------------------------------------------
# the authors' preset (the default)

def test_the_default_is_planned_at_the_authors_settings_and_budget(tmp_path):
    """No training: the default's runs carry the authors' diagnostic settings (experiment_stream.py)
    and the pre-training of procedural_authors, 3 seeds of none / dyck / dyck-shuffled on HAYSTACK."""
    import train
    a = P.parse_args(["--out", str(tmp_path / "o")])
    pre, base, warm = PA.plan(a)
    assert (len(pre), len(base), len(warm)) == (6, 3, 6)
    assert sorted({(r.meta["condition"], r.meta["transfer"]) for r in base + warm}) == [
        ("dyck", "full"), ("dyck-shuffled", "full"), ("none", "none")]
    assert {r.meta["seed"] for r in base + warm} == {0, 1, 2}
    for r in base + warm:
        t = train.parse_args(r.argv + ["--out", str(tmp_path / "x")])
        assert (t.stages, t.n_layer, t.n_head, t.n_embd, t.block_size, t.no_tie, t.dropout) == (
            "stream:haystack", 2, 4, 16, 100, True, 0.0)
        assert (t.batch_size, t.iters, t.lr, t.min_lr, t.warmup_iters, t.schedule, t.weight_decay, t.beta2) == (
            1000, 10_000, 1e-3, 0.0, 500, "cosine", 0.001, 0.999)
        assert t.batch_size * t.iters >= 10_000_000 and t.eval_interval == 500 and t.task_test == 4000
        if r in warm:
            assert (t.transfer, t.embed_init) == ("full", "mean") and t.init_from == r.meta["init"]
            assert Path(r.meta["init"]).parent.name == PA.pre_name(r.meta["condition"], "haystack", r.meta["seed"])
    for r in pre:
        t = train.parse_args(r.argv + ["--out", str(tmp_path / "x")])
        assert (t.iters, t.batch_size, t.block_size, t.lr, t.schedule, t.warmup_iters, t.weight_decay) == (
            501, 512, 127, 3e-3, "constant", 0, 0.1)
        assert t.iters * t.batch_size * (t.block_size + 1) == 501 * 32 * 2048   # the authors' Dyck tokens
        assert t.procedural_sequences == 501 * 512 and not t.no_tie and t.dropout == 0.0


def authors_argv(out):
    return ["--out", str(out), "--jobs", "1", "--threads", "1", "--seeds", "2", "--records", "2000",
            "--eval-records", "1000", "--pretrain-steps", "2", "--pretrain-rows", "4", "--task-test", "100"]


@pytest.fixture(scope="module")
def authors_done(tmp_path_factory):
    """One toy sweep of the default preset: none / dyck / dyck-shuffled on HAYSTACK, 2 seeds."""
    tmp = tmp_path_factory.mktemp("procedural-authors")
    mp = pytest.MonkeyPatch()
    mp.setenv("PRELUDE_CACHE", str(tmp / "cache"))
    argv = authors_argv(tmp / "out")
    P.main(argv)
    yield argv, tmp / "out", json.loads((tmp / "out" / "report.json").read_text())
    mp.undo()


def test_authors_runs_keep_their_curves_and_both_accuracies(authors_done):
    argv, out, rep = authors_done
    assert rep["n_runs"] == rep["n_planned"] == 4 + 6
    assert set(rep) >= {"source", "regime", "figures", "verdicts", "provenance", "settings", "runs", "cells"}
    assert rep["settings"]["preset"] == "authors" and all((out / f).stat().st_size > 0 for f in rep["figures"])
    tasks = [r for r in rep["runs"] if r["part"] == "task"]
    assert {r["condition"] for r in tasks} == {"none", "dyck", "dyck-shuffled"}
    for r in tasks:
        s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())["stages"][0]
        assert r["task"] == "haystack" and r["records_seen"] == s["iters"] * 1000 == 2000
        assert r["curve"] == [[1000, pytest.approx(r["curve"][0][1])], [2000, s["accuracy"]]] and r["exact"] == s["accuracy"]
        assert r["exact_recomputed"] == pytest.approx(r["exact"], abs=0.02)
        assert r["token"] == pytest.approx(r["exact"], abs=0.02)    # haystack: one answer token
    cell = rep["cells"]["haystack"]["dyck"]
    none = rep["cells"]["haystack"]["none"]
    c = rep["comparisons"]["haystack"]["vs_none"]["dyck"]["token"]
    assert c["diff"] == pytest.approx(statistics.mean(cell["token"]) - statistics.mean(none["token"]))
    assert c["n"] == [2, 2] and not c["clear"]                          # n = 2: never an effect
    v = rep["verdicts"][0]
    assert v["claim"] == "Dyck pre-training lifts HAYSTACK" and v["verdict"] == "no clear difference"
    assert [x["verdict"] for x in rep["verdicts"][2:]] == ["not measured"] * 4
    md = (out / "report.md").read_text()
    for head in ("## The paper's claims beside ours", "### haystack (condattendstream_30", "## Pre-training",
                 "## What differs from the authors, and why", "Provenance: commit"):
        assert head in md, head


def test_records_to_reads_the_curve():
    curve = [[500, 0.2], [1000, 0.4], [1500, 0.8], [2000, 0.95]]
    assert AR.records_to(curve, 0.5) == (pytest.approx(1125.0), "=")
    assert AR.records_to(curve, 0.9) == (pytest.approx(1500 + 500 * 2 / 3), "=")
    assert AR.records_to(curve, 0.1) == (500, "<=")
    assert AR.records_to(curve, 0.99) == (2000, ">")
    assert AR.to_compare([[1, "="]] * 3, [[2, ">"]] * 3) is None       # a run that never got there: no test


def test_authors_report_rebuilds_from_its_json_alone(authors_done, tmp_path):
    argv, out, rep = authors_done
    rebuilt_from_json_alone(out, tmp_path)
