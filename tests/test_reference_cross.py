"""reference/cross.py: the crossed design's runs (who pre-trains x who fine-tunes, the controls), what counts as
finished, and its report: read by the engine, rebuilt byte for byte from report.json. No run of theirs here."""

import argparse
import json
import random

import pytest

from data.common import UserError
from reference import cross
from reference.cross_claims import CELLS, CLAIMS, PIPELINES, records
from reference.procedural import parser as harness_parser


def args(tmp_path, *more):
    return cross.parse_args(["--authors-repo", "/their/checkout", "--venv", "/their/venv", "--out", str(tmp_path / "x"),
                             *more])


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def test_the_plan_crosses_every_start_with_both_fine_tunings_at_one_budget(tmp_path):
    a = args(tmp_path, "--steps", "300", "--seeds", "2")
    jobs = cross.plan(a)
    fine = [j for j in jobs.values() if j["kind"] != "pretrain"]
    assert len(jobs) == 2 + len(fine) and len(fine) == len(CELLS) * len(PIPELINES) * 2
    assert {(j["meta"]["finetune"], j["meta"]["condition"], j["meta"]["seed"]) for j in fine} == {
        (ft, c, s) for ft in PIPELINES for c in CELLS for s in range(2)}
    for j in fine:
        cmd, start = j["cmd"], j["meta"]["start"]
        if j["kind"] == "theirs":  # their harness, their config; the same steps and seed
            assert cmd[2] == "finetune" and flag(cmd, "--steps") == "300" and flag(cmd, "--seed") == str(j["meta"]["seed"])
            assert flag(cmd, "--config") == ("baseline" if start is None else "procedural")
            assert ("--pretrained" in cmd) == (start is not None)
        else:  # train.py at the same budget: 300 steps of 1,000 records, their schedule
            assert cmd[1].endswith("train.py") and flag(cmd, "--iters") == "300" and flag(cmd, "--batch-size") == "1000"
            assert flag(cmd, "--warmup-iters") == "500" and flag(cmd, "--seed") == str(j["meta"]["seed"])
            assert ("--init-from" in cmd) == (start is not None)
        if start is not None:  # the start each side reads, made by the pre-training it waits for
            path = flag(cmd, "--pretrained" if j["kind"] == "theirs" else "--init-from")
            assert path == str(cross.OUR_DYCK) if start == "ours" else path.endswith(
                "start-theirs.pth" if j["kind"] == "theirs" else "start-ours.pt")
            assert j["needs"] == ([] if start == "ours" else ["pre-dyck-theirs" if start == "theirs" else "pre-near-init"])
    own = {j["meta"]["finetune"]: j["meta"]["start"] for j in fine if j["meta"]["condition"] == "dyck-own (random rows)"}
    assert own == {"theirs": "theirs", "ours": "ours"}  # each pipeline's own Dyck model
    attn = [j["cmd"] for j in fine if j["meta"]["condition"].endswith("(attn)")]
    assert all(flag(c, "--transfer") == "attn" for c in attn)
    assert {flag(c, "--embed-init") for c in attn if "--embed-init" in c} == {"random"}


def test_running_needs_their_checkout_and_venv_and_their_flags_are_checked(tmp_path, capsys):
    with pytest.raises(UserError, match="--authors-repo and --venv"):
        cross.parse_args(["--out", str(tmp_path / "x")])
    cross.parse_args(["--out", str(tmp_path / "x"), "--plan"])  # a plan needs neither
    p = harness_parser()
    assert p.parse_args(["finetune", "--authors-repo", "a", "--venv", "v", "--out", "o", "--config", "procedural",
                         "--transfer", "attn, ffn"]).transfer == "attn,ffn"
    with pytest.raises(SystemExit):  # their config refuses 'ln' (experiment_config.py:85-93): so does ours, up front
        p.parse_args(["finetune", "--authors-repo", "a", "--venv", "v", "--out", "o", "--config", "procedural",
                      "--transfer", "attn,ln"])
    assert "attn, ffn, embed" in capsys.readouterr().err


def test_a_run_is_finished_only_at_its_own_budget_and_only_a_finished_one_is_read(tmp_path):
    a = args(tmp_path, "--steps", "300", "--pretrain-steps", "400")
    jobs = cross.plan(a)
    theirs, ours, pre = jobs["theirs-none-s0"], jobs["ours-none-s0"], jobs["pre-dyck-theirs"]
    for j in (theirs, ours, pre):
        j["folder"].mkdir(parents=True)
        assert not cross.finished(j) and cross.record(a, j) is None
    for rc, steps, done in ((0, 150, False), (1, 300, False), (0, 300, True)):  # theirs: exit 0 at its steps
        (theirs["folder"] / "summary.json").write_text(json.dumps({"returncode": rc, "steps": steps}))
        assert cross.finished(theirs) is done
        if not done:  # a run stopped part-way has a last evaluation, not the end's: no record
            assert cross.record(a, theirs) is None
    for iters, done in ((100, False), (300, True)):  # ours: a summary from another budget is not this run's
        (ours["folder"] / "summary.json").write_text(json.dumps({"stages": [{"iters": iters}]}))
        assert cross.finished(ours) is done
    (pre["folder"] / "summary.json").write_text(json.dumps({"returncode": 0, "steps": 400, "checkpoints": {}}))
    assert not cross.finished(pre)  # ended, but its start is not kept: ...
    assert cross.keep(pre) == 1 and "names no kept checkpoint" in (pre["folder"] / "log.txt").read_text()
    (pre["folder"] / "start-ours.pt").write_bytes(b"")
    assert cross.finished(pre)


def fake_runs(lift, at=("theirs", "dyck-theirs"), seeds=3):
    """Fine-tuning records as cross.record makes them: one cell (fine-tuning, start) `lift` points above the rest."""
    rng, runs = random.Random(0), [dict(name="pre-dyck-theirs", part="pretrain", steps=5000, entropy=1.9756,
                                        val=[[4900, 2.95, 0.41], [5000, 2.9, 0.4]], best_step=4900,
                                        best_val_accuracy=0.41, authors={"commit": "abc"}, cpu_seconds=1200.0),
                                   cross.our_dyck()]
    for seed in range(seeds):
        for ft in PIPELINES:
            for cond, (start, _, _) in CELLS.items():
                token = 8 + rng.gauss(0, 0.5) + (lift if (ft, cond) == at else 0)
                runs.append(dict(name=f"{ft}-{cross.slug(cond)}-s{seed}", part="finetune", finetune=ft, condition=cond,
                                 start=start, seed=seed, token=token, curve=[[50, 2.0], [100, token]], steps=100,
                                 cpu_seconds=60.0))
    return runs


def test_the_report_reads_the_claims_and_rebuilds_byte_identical(tmp_path):
    a = argparse.Namespace(out=tmp_path, steps=100, seeds=3, pretrain_steps=5000, task_test=4000, quick=False, plan=False,
                           jobs=2, threads=0, reuse=None, report_only=False, authors_repo="x", venv="y", authors_git=None)
    text = cross.render(a, fake_runs(lift=88), 44, None)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert "is step 4,900, validation 2.950 nats there" in rep["regime"] and "2.002 nats against 1.976" in rep["regime"]
    assert rep["claims"] == "reference.cross_claims" and rep["settings"]["steps"] == 100 and "venv" not in rep["settings"]
    first = rep["verdicts"][0]  # their Dyck, full transfer: +88 in their fine-tuning, nothing in ours
    by = {c["cell"]: c for c in first["cells"]}
    assert by["theirs"]["verdict"] == "reproduces" and by["theirs"]["word"] == "reproduces"
    assert by["ours"]["verdict"] == "no clear difference" and first["verdict"] == "partly"
    assert [v["claim"] for v in rep["verdicts"]] == [c.claim for c in CLAIMS]
    assert len(records(rep)) == 3 * len(CELLS) * len(PIPELINES)
    assert "| dyck-theirs | 8" not in text and "theirs - ours (Welch)" in text
    assert ("Outcome: their pipeline lifts HAYSTACK and ours does not (clearly above random init: their fine-tuning "
            "from dyck-theirs); the best cell, dyck-theirs by their fine-tuning, reaches 9") in rep["front_table"]["title"]
    before = {f: (tmp_path / f).read_bytes() for f in ("report.md", "report.json")}
    cross.rebuild(tmp_path)
    assert {f: (tmp_path / f).read_bytes() for f in before} == before


def test_their_kept_checkpoint_becomes_both_starts(tmp_path):
    """kept_start: their best checkpoint copied as theirs, and converted to ours with the model its weights say."""
    import torch
    from model import GPT, GPTConfig
    from reference.convert import ours_to_theirs
    a = args(tmp_path)
    pre = cross.plan(a)["pre-dyck-theirs"]
    pre["folder"].mkdir(parents=True)
    torch.manual_seed(0)
    cfg = dict(vocab_size=33, block_size=128, n_layer=2, n_head=cross.DYCK_HEADS, n_embd=16, bias=True, dropout=0.0,
               tie_weights=True)
    ours = GPT(GPTConfig(**cfg)).state_dict()
    best = pre["folder"] / "best_pytorch_model_1_step300.pth"
    torch.save({"model": ours_to_theirs(ours, cfg), "step": 300}, best)
    (pre["folder"] / "summary.json").write_text(json.dumps({"returncode": 0, "checkpoints": {"best": str(best)}}))
    assert cross.keep(pre) == 0
    back = torch.load(pre["folder"] / "start-ours.pt", weights_only=True)
    assert back["model_config"] == cfg and back["model"].keys() == ours.keys()
    assert all(torch.equal(back["model"][k], v) for k, v in ours.items())
    theirs = torch.load(pre["folder"] / "start-theirs.pth", weights_only=True)["model"]
    assert theirs.keys() == ours_to_theirs(ours, cfg).keys()


def said(runs, left="LEFT"):
    recs = records({"runs": runs})
    return cross.outcome(cross.read_all(CLAIMS, recs), recs, left)


@pytest.mark.parametrize("lift, at, says", [
    (-30, ("theirs", "dyck-theirs"), "neither pipeline lifts HAYSTACK"),  # clearly worse is no lift
    (30, ("ours", "dyck-ours (attn)"), "our pipeline lifts HAYSTACK and theirs does not (clearly above random init: "
                                       "our fine-tuning from dyck-ours (attn))"),
    (30, ("theirs", "dyck-ours"), "their pipeline lifts HAYSTACK and ours does not (clearly above random init: "
                                  "their fine-tuning from dyck-ours)"),
    (30, ("theirs", "near-init"), "neither pipeline lifts HAYSTACK"),  # a control is not a start against none
])
def test_the_outcome_names_the_starts_that_clearly_lift_it_and_what_is_left_where_theirs_lifts_none(lift, at, says):
    text = said(fake_runs(lift, at))
    assert text.startswith(f"Outcome: {says}")
    assert text.endswith("; left to try: LEFT") == (at[0] == "ours" or lift < 0 or at[1] == "near-init")
    short = said(fake_runs(lift, at, seeds=2))  # under 3 runs a side: no verdict either way, nothing left to try
    assert short.startswith("Outcome: too few runs to tell yet") and "left to try" not in short


def test_the_outcome_says_neither_lifts_it_when_no_start_beats_random_init():
    runs = fake_runs(lift=0)
    recs = records({"runs": runs})
    text = cross.outcome(cross.read_all(CLAIMS, recs), recs)
    assert text.startswith("Outcome: neither pipeline lifts HAYSTACK from a Dyck start")
    cells = {(r["finetune"], r["condition"]) for r in recs}  # the best cell by its mean over seeds, not one run
    mean = {c: sum(r["token"] for r in recs if (r["finetune"], r["condition"]) == c) / 3 for c in cells}
    (ft, cond), best = max(mean.items(), key=lambda kv: kv[1])
    assert f"the best cell, {cond} by {ft[:-1] if ft == 'theirs' else 'our'} fine-tuning, reaches {best:.1f}%" in text
    assert not text.endswith(".")  # the title it ends goes on with ". "
    a = argparse.Namespace(pretrain_steps=5000, steps=100)
    text = cross.outcome(cross.read_all(CLAIMS, recs), recs, cross.left_to_try(a, runs))
    assert "; left to try: their Dyck pre-training past 5,000 steps (theirs up to 1,000,000, where it ended 2.900 " \
        "nats against 1.976)" in text and "(here 100)" in text
    assert cross.outcome([], []) == "Outcome: not measured yet."


def test_the_committed_report_rebuilds_byte_identical_and_holds_the_issues_must_holds(tmp_path):
    """experiments/results/procedural-reference, rebuilt from its report.json alone, byte for byte; its provenance
    names their commit; every cell of both pipelines has n >= 3; the outcome is in the title RESULTS.md shows (#57)."""
    import shutil
    committed = cross.ROOT / "experiments/results/procedural-reference"
    out = tmp_path / "r"
    shutil.copytree(committed, out)
    cross.main(["--report-only", "--out", str(out)])
    for f in ("report.md", "report.json"):
        assert (out / f).read_bytes() == (committed / f).read_bytes(), f
    rep = json.loads((out / "report.json").read_text())
    assert rep["authors"]["commit"] == "5356d9e941632ec21d988b4c42e0f935c5ee785d" and rep["authors"]["files_identical"]
    assert rep["authors"]["commit"] in (out / "report.md").read_text()
    recs = records(rep)
    assert all(len({r["seed"] for r in recs if (r["finetune"], r["condition"]) == (ft, c)}) >= 3
               for ft in PIPELINES for c in CELLS)
    assert [v["claim"] for v in rep["verdicts"]] == [c.claim for c in CLAIMS] and all(
        len(v["cells"]) == len(PIPELINES) for v in rep["verdicts"])
    lifted = {(c["cell"], claim.treat["condition"]) for v, claim in zip(rep["verdicts"], CLAIMS)  # by p and sign alone
              if claim.base == {"condition": "none"} for c in v["cells"] if c["p"] < 0.05 and c["change"] > 0}
    title = rep["front_table"]["title"]
    for ft, who in (("theirs", "their"), ("ours", "our")):  # the outcome names exactly the starts that lift
        assert (f"{who} pipeline lifts HAYSTACK" in title or "both pipelines lift" in title) == any(
            f == ft for f, _ in lifted)
    assert all(f"{'their' if ft == 'theirs' else 'our'} fine-tuning from" in title and cond in title for ft, cond in lifted)
    mean = lambda ft, c: sum(r["token"] for r in recs if (r["finetune"], r["condition"]) == (ft, c)) / 3  # noqa: E731
    page = (cross.ROOT / "RESULTS.md").read_text()  # its front table (each cell's mean) beside the procedural report
    none = next(ln for ln in rep["front_table"]["lines"] if ln.startswith("| none"))
    assert all(f"{mean(ft, 'none'):.1f}" in none for ft in ("theirs", "ours")) and all(
        ln in page for ln in rep["front_table"]["lines"])
    assert title in (cross.ROOT / "RESULTS.md").read_text()  # the outcome beside the procedural report's HAYSTACK row
