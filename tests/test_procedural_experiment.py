"""experiments/procedural.py (arXiv 2601.21725): the default is planned at the authors' settings and budget;
--plan trains nothing; a toy sweep (every transfer mode and a merge) runs end to end, its records are its
runs' own numbers, a rerun trains nothing and a copy without run folders rebuilds the same report; the
committed reports (--cells table and the earlier table preset's archive) rebuild byte-identical from report.json,
the six claims measured from models read against their data's entropy; bad flags are one-line errors."""
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import procedural as P
from experiments.lib import common
from experiments.lib import procedural_authors as PA
from experiments.lib import procedural_claims as PC

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def test_the_default_is_planned_at_the_authors_settings_and_budget(tmp_path):
    """No training: the default's runs carry the authors' diagnostic settings (experiment_stream.py) and the
    pre-training of procedural_authors (one model per kind, its script's Dyck until the stopping rule), 3 seeds
    of none / dyck / dyck-shuffled on HAYSTACK."""
    import train
    a = P.parse_args(["--out", str(tmp_path / "o")])
    pre, base, warm = PA.plan(a)
    assert (len(pre), len(base), len(warm)) == (2, 3, 6)
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
        assert t.seed == r.meta["seed"] and t.data_seed == 0   # a seed's batches: the same in every condition
        if r in warm:
            assert (t.transfer, t.embed_init) == ("full", "mean") and t.init_from == r.meta["init"]
            assert Path(r.meta["init"]).parent.name == PA.pre_name(r.meta["condition"], "haystack", 0)
    for r in pre:   # dyck.py's defaults for 2_4_16: k = 16, 128 tokens, batch 64, constant lr, decay 0.01
        t = train.parse_args(r.argv + ["--out", str(tmp_path / "x")])
        assert (t.batch_size, t.block_size, t.lr, t.schedule, t.warmup_iters, t.weight_decay) == (
            64, 127, 3e-3, "constant", 0, 0.01)
        assert (t.iters, t.eval_interval, t.patience, t.min_delta, t.eval_iters * t.batch_size) == (
            20_000, 250, 8, 0.001, 1280)
        assert t.procedural_sequences == 500_000 and not t.no_tie and t.dropout == 0.0


def test_plan_prints_every_run_and_an_estimate_and_trains_nothing(tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("--plan trained")
    monkeypatch.setattr(common, "run_sweep", refuse)
    P.main(["--plan", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    a = P.parse_args(["--out", str(tmp_path / "o")])
    runs = sum(PA.plan(a), [])
    assert all(r.name in out for r in runs) and "11 runs, 11 to run" in out and not (tmp_path / "o").exists()
    hours = sum(P.estimate(r) for r in runs) / 3600
    assert 5 < hours < 12   # CPU hours of the default (a diagnostic run measured at ~45-75 min)


def toy_argv(out):
    return ["--out", str(out), "--jobs", "1", "--threads", "1", "--seeds", "2", "--cells",
            "haystack:none,haystack:dyck,haystack:set,haystack:dyck-shuffled,haystack:dyck:attn,haystack:dyck:mlp,"
            "haystack:attn-dyck+mlp-set",
            "--records", "2000", "--eval-records", "2000", "--pretrain-steps", "2", "--pretrain-rows", "4",
            "--task-test", "100"]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """One toy sweep shared by the tests below (module scope: it is the slow part)."""
    tmp = tmp_path_factory.mktemp("procedural")
    mp = pytest.MonkeyPatch()
    mp.setenv("PRELUDE_CACHE", str(tmp / "cache"))
    argv = toy_argv(tmp / "out")
    P.main(argv)
    yield argv, tmp / "out", json.loads((tmp / "out" / "report.json").read_text())
    mp.undo()


def test_a_toy_sweep_records_its_runs_own_numbers(done):
    argv, out, rep = done
    # pre-training (dyck, set, dyck-shuffled), shared by the seeds; 2 seeds x (none, dyck, set, dyck-shuffled,
    # dyck attn / mlp, the merge) on haystack
    assert rep["n_planned"] == len(rep["runs"]) == 3 + 2 * 7
    assert set(rep) >= {"source", "regime", "figures", "verdicts", "provenance", "settings", "runs"}
    assert all((out / f).stat().st_size > 0 for f in rep["figures"])
    assert len(list((out / "merges").glob("*.pt"))) == 1   # one per pre-training seed
    import math
    for r in rep["runs"]:
        s = json.loads((out / "runs" / r["name"] / "summary.json").read_text())["stages"][0]
        if r["part"] == "pretrain":
            assert r["unigram_loss"] == pytest.approx(math.log(s["unigram_val_ppl"])) and r["val_loss"] == s["val_loss"]
            assert r["stop_reason"] == "cap: 2 steps (a fixed budget)" and r["best_val_loss"] <= r["val_loss"]
            assert r["entropy"] == {"dyck": pytest.approx(1.9756, abs=1e-4), "set": 0.0,
                                    "dyck-shuffled": pytest.approx(3.2090, abs=1e-4)}[r["condition"]]
            continue
        assert r["records_seen"] == s["iters"] * 1000 == 2000 and r["exact"] == s["accuracy"]
        assert r["curve"] == [[2000, s["accuracy"]]]   # one evaluation: at the end
        assert r["exact_recomputed"] == pytest.approx(r["exact"], abs=0.02)
        assert r["token"] == pytest.approx(r["exact"], abs=0.02)    # haystack: one answer token
    recs = PC.records(rep)
    assert {r["condition"] for r in recs} == {"none", "dyck", "set", "dyck-shuffled", "dyck (attn)", "dyck (mlp)",
                                              "attn-dyck+mlp-set"}
    by = {v["claim"]: v for v in rep["verdicts"]}
    dyck = by["Dyck pre-training lifts HAYSTACK"]["cells"][0]
    tok = lambda c: [100 * r["token"] for r in sorted(rep["runs"], key=lambda r: r["seed"])  # noqa: E731
                     if r.get("condition") == c and r["part"] == "task" and r["transfer"] in ("none", "full")]
    assert dyck["test"] == "paired" and dyck["n"] == 2 and dyck["mean_treat"] == pytest.approx(statistics.mean(
        tok("dyck"))) and dyck["mean_base"] == pytest.approx(statistics.mean(tok("none")))
    measured = [c.claim for c in PC.CLAIMS if by[c.claim]["verdict"] != "not measured"]
    assert measured == [c.claim for c in PC.CLAIMS[:2]] + [PC.CLAIMS[4].claim, PC.CLAIMS[5].claim]
    assert all(v["verdict"] in ("no clear difference", "not measured", "check failed")  # n = 2; or a toy
               for v in rep["verdicts"])                                               # model short of its floor
    md = (out / "report.md").read_text()
    for head in ("## The paper's claims beside ours", "## Accuracy and loss per cell", "## Pre-training",
                 "## What differs from the authors, and why", "Provenance: commit", "| haystack | dyck (attn) | 2 |"):
        assert head in md, head


def test_a_runs_scores_are_cached_for_its_checkpoint_and_test_set(done):
    from evaluate import task_scores
    argv, out, rep = done
    r = next(r for r in rep["runs"] if r["part"] == "task")
    folder = out / "runs" / r["name"]
    first = task_scores(folder, "haystack", 0, 100)
    assert first["token"] == r["token"] and first["test_records"] == 100
    (folder / "scores.json").write_text(json.dumps(dict(first, token=-1.0)))   # the cache is what answers
    assert task_scores(folder, "haystack", 0, 100)["token"] == -1.0
    fewer = task_scores(folder, "haystack", 0, 50)   # another test set: scored again
    assert fewer["test_records"] == 50 and fewer["token"] >= 0
    assert task_scores(folder, "haystack", 0, 100) == first


def test_a_merge_is_made_again_when_a_source_model_is_newer(done):
    import os
    argv, out, rep = done
    a = P.parse_args(argv)
    merge = PA.merge_ckpt(a, ("dyck", "set"), "haystack", 0)
    source = PA.pre_ckpt(a, "set", "haystack", 0)
    before = merge.read_bytes()
    PA.make_merges(a)
    assert merge.stat().st_mtime >= source.stat().st_mtime and merge.read_bytes() == before   # current: kept
    stale = source.stat().st_mtime - 10
    os.utime(merge, (stale, stale))   # the set model trained again after the merge was made
    PA.make_merges(a)
    assert merge.stat().st_mtime > stale and merge.stat().st_mtime >= source.stat().st_mtime


def test_a_copy_without_run_folders_rebuilds_the_same_report(done, tmp_path):
    argv, out, rep = done
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("report.md", "report.json"):
        (copy / f).write_bytes((out / f).read_bytes())
    P.main(["--report-only", "--out", str(copy)])
    for f in ("report.md", "report.json"):
        assert (copy / f).read_bytes() == (out / f).read_bytes(), f


def test_reuse_takes_the_runs_a_report_holds_with_the_same_flags(done, tmp_path, monkeypatch):
    """--reuse DIR: a sweep in a new folder trains none of the runs DIR's report holds with the same flags and
    reports their records; a run whose pre-training flags changed is not reused (nor its pre-training)."""
    argv, out, rep = done
    import train

    def refuse(args):
        raise AssertionError("a reused run was trained again")
    monkeypatch.setattr(train, "run", refuse)
    monkeypatch.setenv("PRELUDE_CACHE", str(out.parent / "cache"))
    new = [*argv, "--out", str(tmp_path / "new"), "--reuse", str(out)]
    P.main(new)
    again = json.loads((tmp_path / "new" / "report.json").read_text())
    assert again["runs"] == rep["runs"] and again["verdicts"] == rep["verdicts"]
    assert again["provenance"]["invocations"] == rep["provenance"]["invocations"]
    a = P.parse_args([*new, "--pretrain-lr", "0.01"])
    kept = PA.reused(a, sum(PA.plan(a), []))
    assert sorted(kept) == sorted(r["name"] for r in rep["runs"] if r["condition"] == "none")


def test_reuse_starts_a_missing_diagnostic_from_the_kept_pre_trained_model(done, tmp_path, monkeypatch):
    """A report kept without its run folders (report.json and pretrained/) that lacks one diagnostic: --reuse
    trains that diagnostic alone, from the very model the report keeps (not a pre-training run again)."""
    argv, out, rep = done
    import train
    real, trained = train.run, []

    def run(args):
        trained.append(Path(args.out).name)
        return real(args)
    monkeypatch.setattr(train, "run", run)
    monkeypatch.setenv("PRELUDE_CACHE", str(out.parent / "cache"))
    kept = tmp_path / "kept"
    shutil.copytree(out / "pretrained", kept / "pretrained")
    assert sorted(p.stem for p in (kept / "pretrained").glob("*.pt")) == sorted(
        r["name"] for r in rep["runs"] if r["part"] == "pretrain")
    (kept / "report.json").write_text(json.dumps(dict(rep, runs=[r for r in rep["runs"]
                                                                 if r["name"] != "haystack-dyck-s1"])))
    P.main([*argv, "--out", str(tmp_path / "new"), "--reuse", str(kept)])
    assert trained == ["haystack-dyck-s1"]
    a = P.parse_args([*argv, "--out", str(tmp_path / "new")])
    for f in (Path(PA.pre_ckpt(a, "dyck", "haystack", 0)), tmp_path / "new" / "pretrained" / "pre-dyck-2_4_16-s0.pt"):
        assert f.read_bytes() == (out / "pretrained" / "pre-dyck-2_4_16-s0.pt").read_bytes()   # and kept again
    again = {r["name"]: r for r in json.loads((tmp_path / "new" / "report.json").read_text())["runs"]}
    old = next(r for r in rep["runs"] if r["name"] == "haystack-dyck-s1")
    assert again["haystack-dyck-s1"]["curve"] == old["curve"]   # the same model, the same seed: the same run
    # without the kept models the Dyck model is trained again: the record the reused runs rest on stays, the
    # new one beside it as `retrained` (here a kept val_loss altered by hand, so the two differ)
    shutil.rmtree(kept / "pretrained")
    runs = [dict(r, val_loss=r["val_loss"] + 0.5) if r["name"] == "pre-dyck-2_4_16-s0" else r for r in rep["runs"]]
    (kept / "report.json").write_text(json.dumps(dict(rep, runs=[r for r in runs if r["name"] != "haystack-dyck-s1"])))
    trained.clear()
    P.main([*argv, "--out", str(tmp_path / "new2"), "--reuse", str(kept)])
    assert sorted(trained) == ["haystack-dyck-s1", "pre-dyck-2_4_16-s0"]
    rep2 = json.loads((tmp_path / "new2" / "report.json").read_text())
    dyck = next(r for r in rep2["runs"] if r["name"] == "pre-dyck-2_4_16-s0")
    first = next(r for r in rep["runs"] if r["name"] == "pre-dyck-2_4_16-s0")
    assert dyck["val_loss"] == first["val_loss"] + 0.5 and dyck["retrained"]["val_loss"] == first["val_loss"]
    assert "trained again for the runs made after its model was lost" in rep2["regime"]


def test_rerun_skips_finished_runs_and_rebuilds_the_same_report(done, monkeypatch):
    argv, out, rep = done
    import train

    def refuse(args):
        raise AssertionError("a finished run was trained again")
    monkeypatch.setattr(train, "run", refuse)
    monkeypatch.setenv("PRELUDE_CACHE", str(out.parent / "cache"))
    before = (out / "report.md").read_text()
    P.main(argv)
    assert (out / "report.md").read_text() == before  # nothing trained: the same provenance, the same report


def test_checks_read_each_model_against_its_entropy_and_each_baseline_against_its_ceiling():
    """A pre-trained model that ended far above its data's entropy has not learnt its task, and a baseline at
    the ceiling leaves no room for a gain: a cell whose treated arm rests on either fails its check, and only there."""
    from experiments.lib import procedural_report as PR
    pre = [dict(part="pretrain", condition=k, val_loss=v, entropy=e) for k, v, e in (("dyck", 2.0, 1.95),
                                                                                    ("set", 2.9, 0.0), ("set", 0.05, 0.0))]
    task = [dict(part="task", task=t, condition=c, transfer="full", seed=s, token=tok, exact=ex, val_loss=1.0)
            for t, c, tok, ex in (("haystack", "none", 0.11, 0.11), ("haystack", "dyck", 0.07, 0.07),
                                  ("sorting", "none", 1.0, 0.4), ("sorting", "set", 0.6, 0.0)) for s in range(3)]
    checks, failed = PR.checks(pre + task, PC.records({"runs": pre + task}))
    assert [(c["holds"], c["detail"]) for c in checks] == [(False, "dyck +0.050, set +2.900"),  # a kind's worst model
                                                            (False, "haystack 11.0%, sorting 100.0%")]
    assert failed(PC.CLAIMS[3], {"condition": "set"}, "sorting") == (
        "set pre-trained +2.900 nats above its entropy; sorting's baseline at 100.0% token-level, no room for a gain")
    assert failed(PC.CLAIMS[5], {"condition": "attn-dyck+mlp-set"}, "haystack") == "set pre-trained +2.900 nats " \
        "above its entropy"  # a merge rests on both its kinds' models
    retrained = dict(pre[0], retrained=dict(val_loss=2.3))  # the model the later runs started from counts too
    assert PR.checks([retrained], [])[0][0]["detail"] == "dyck +0.350"
    assert failed(PC.CLAIMS[0], {"condition": "dyck"}, "haystack") == ""  # Dyck learnt; haystack has room
    assert failed(PC.CLAIMS[1], {"condition": "dyck"}, "haystack") == ""  # (a shuffled base's model is not read)
    assert PR.checks(pre[:1], [])[0] == [dict(checks[0], holds=True, detail="dyck +0.050"), dict(
        checks[1], holds=None, detail="")]


@pytest.mark.parametrize("name", ["procedural", "procedural-table"])
def test_the_committed_report_rebuilds_byte_identical_from_its_json(name, tmp_path):
    out = tmp_path / name
    shutil.copytree(RESULTS / name, out)
    P.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (RESULTS / name / f).read_bytes(), f
    assert not (out / "runs").exists() and not (out / "provenance.json").exists()


def test_the_table_measures_the_six_claims_from_models_read_against_their_entropy():
    """The committed report (--cells table): every diagnostic at the authors' 10,000,000 records; every
    pre-training record has its val loss, its data's entropy (as its generator's options give it) and its
    stopping reason, each stated in the regime line; the Dyck model within 0.1 nats of its entropy (and the one
    trained again for the merge); both checks recorded; the paper's six diagnostic claims measured, n >= 3 a
    side (their p-values: test_committed_reports); RESULTS.md gives the Dyck model's distance from its entropy,
    the README the HAYSTACK verdict."""
    import argparse
    rep = json.loads((RESULTS / "procedural" / "report.json").read_text())
    a = argparse.Namespace(**rep["settings"])
    runs = [r for r in rep["runs"] if r["part"] == "task"]
    assert runs and all(r["records_seen"] == 10_000_000 for r in runs)
    pre = {r["condition"]: r for r in rep["runs"] if r["part"] == "pretrain"}
    assert set(pre) == {k + s for k in ("dyck", "eca110", "set", "union") for s in ("", "-shuffled")}
    for cond, r in pre.items():
        assert r["entropy"] == pytest.approx(PA.entropy(a, cond, r["task"]), abs=0.01)  # SET's controls: sampled
        for x in (r, r.get("retrained", r)):
            assert x["stop_reason"].startswith(("stopping rule", "cap")) and x["val_loss"] < r["unigram_loss"]
        assert f"{cond} {r['val_loss']:.3f} nats against its entropy {r['entropy']:.3f}" in rep["regime"]
    dyck = pre["dyck"]
    assert all(x["val_loss"] - dyck["entropy"] <= 0.1 for x in (dyck, dyck.get("retrained", dyck)))
    assert [c["check"].split(" (")[0] for c in rep["checks"]] == [
        "every pre-trained model ends within 0.1 nats of its data's entropy", "every task's baseline leaves room for a gain"]
    six = {v["claim"]: v for v in rep["verdicts"]}
    six = [six[c.claim] for c in PC.CLAIMS[:6]]
    assert all(v["verdict"] != "not measured" and v["cells"] and all(
        (min(c["n"]) if isinstance(c["n"], list) else c["n"]) >= 3 for c in v["cells"]) for v in six)
    page, readme = (ROOT / "RESULTS.md").read_text(), (ROOT / "README.md").read_text()
    assert f"{dyck['val_loss']:.3f} nats against its entropy {dyck['entropy']:.3f}" in page
    assert f"**{six[0]['verdict']}** [at the authors' scale in our pipeline]" in readme


def test_the_table_cells_are_planned_each_with_its_baseline(tmp_path):
    """--cells table: the paper's six claims as (task, row, transfer) cells, not a cross product; every kind
    pre-trained on the d = 16 model by the stopping rule; a merge from the two kinds' models."""
    import train
    a = P.parse_args(["--cells", "table", "--out", str(tmp_path / "o")])
    pre, base, warm = PA.plan(a)
    cells = {(r.meta["task"], r.meta["condition"], r.meta["transfer"]) for r in base + warm}
    assert cells == set(PA.parse_cells(P.TABLE)) and len(base + warm) == 3 * len(cells)
    assert ("haystack", "set", "full") not in cells and ("sorting", "dyck", "full") not in cells
    assert {(t, r) for t, r, m in cells if r == "none"} == {(t, "none") for t in a.tasks}
    assert sorted(r.meta["condition"] for r in pre) == sorted(["dyck", "dyck-shuffled", "eca110", "eca110-shuffled",
                                                               "set", "set-shuffled", "union", "union-shuffled"])
    for r in pre:
        t = train.parse_args(r.argv + ["--out", str(tmp_path / "x")])
        assert (t.batch_size, t.iters, t.patience, t.min_delta, t.eval_interval) == (64, 20_000, 8, 0.001, 250)
    # SET and UNION as the authors' algorithmic.py for this model (V = 21, L = 20): a context of 40-41 positions,
    # shorter than sorting's 64, so full transfer leaves the positions fresh (theirs: a random WPE)
    from data import procedural_entropy
    flag = lambda r, f: r.argv[r.argv.index(f) + 1]  # noqa: E731
    by = {r.meta["condition"]: r for r in pre}
    assert [(flag(by[k], "--block-size"), flag(by[k], "--procedural-vocab")) for k in ("set", "union")] == [
        ("40", "21"), ("41", "21")] and "--procedural-vocab" not in by["dyck"].argv
    assert PA.entropy(a, "set-shuffled", "sorting") == procedural_entropy.entropy("set", True, L=20, V=21)
    tr = {(r.meta["task"], r.meta["condition"], r.meta["transfer"]): flag(r, "--transfer") for r in warm}
    assert tr[("sorting", "set", "full")] == tr[("sorting", "union-shuffled", "full")] == "attn,mlp,norm"
    assert tr[("haystack", "dyck", "full")] == tr[("sorting", "attn-dyck+mlp-set", "full")] == "full"
    merged = [r for r in warm if r.meta["condition"] == "attn-dyck+mlp-set"]
    assert merged and all(r.meta["pre"] == ["pre-dyck-2_4_16-s0", "pre-set-2_4_16-s0"] for r in merged)
    assert a.merges == [("dyck", "set")] and PA.merge_kinds(PA.merge_label(("set", "dyck"))) == ("set", "dyck")
    assert PA.merge_kinds("dyck-shuffled") is None
    a = P.parse_args(["--cells", "sorting:none,sorting:set:attn", "--out", str(tmp_path / "o")])
    assert [(r.meta["condition"], r.meta["transfer"]) for r in sum(PA.plan(a)[1:], [])] == [
        ("none", "none")] * 3 + [("set", "attn")] * 3


@pytest.mark.parametrize("flags, message", [
    (["--cells", "haystack:none,haystack:bogus"], "unknown procedural kind 'bogus'"),
    (["--cells", "poems:none"], "unknown task 'poems'"),
    (["--cells", "haystack:attn-dyck"], "a merge row is attn-KIND+mlp-KIND"),
    (["--cells", "haystack:attn-dyck+mlp-set:attn"], "a merge is trained with full transfer"),
    (["--cells", "haystack:dyck:embed"], "a kind's row with full, attn or mlp"),
    (["--dyck-length", "129"], "must be even"),
    (["--records", "0"], "must be positive"),
    (["--pretrain-lr", "0"], "must be a positive number, got '0'"),
    (["--pretrain-lr", "inf"], "must be a positive number, got 'inf'"),
    (["--reuse", "nowhere"], "no report.json there"),
    (["--cells", "haystack"], "is not TASK:ROW[:TRANSFER]"),
])
def test_user_errors_are_one_line(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        common.main_guard(lambda: P.main(["--quick", "--out", str(tmp_path / "o"), "--report-only", *flags]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_script_runs_as_a_command(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "procedural.py"), "--cells", "haystack:nope"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown procedural kind 'nope'")
