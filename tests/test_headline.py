"""The headline command, `python train.py --stages music,poetry,prose --prores` (issue #38): --prores in a
curriculum never scales down blocks that arrive trained (--prores-scope fresh, the default), the old per-stage
ramp stays a choice (--prores-scope stage), --baseline trains the last stage alone from random init beside
the curriculum, and runs written before the default scope changed still resume."""
import json
from argparse import Namespace

import pytest
import torch

import train
from checkpoint import check_resume_args
from conftest import help_text, write_paragraphs
from data.common import UserError
from flags import parse_args
from test_train import TINY


def scales_per_step(monkeypatch):
    """[(stage index, step, residual_scale as the step's forward pass sees it)], filled as a run trains."""
    seen, step = [], train.train_step

    def spy(S, args, env, it):
        seen.append((S.index, it, S.model.residual_scale.clone()))
        return step(S, args, env, it)
    monkeypatch.setattr(train, "train_step", spy)
    return seen


@pytest.fixture
def two_texts(tmp_path):
    return write_paragraphs(tmp_path / "a", 40, seed=1), write_paragraphs(tmp_path / "b", 40, seed=2)


def run(out, *flags):
    return train.run(parse_args(TINY + ["--iters", "8", "--eval-interval", "8", "--n-layer", "3", "--no-plot",
                                        "--out", str(out)] + list(flags)))


def test_fresh_scope_ramps_the_stage_from_scratch_and_never_a_transferred_one(cache, two_texts, tmp_path,
                                                                               monkeypatch, capsys):
    a, b = two_texts
    seen = scales_per_step(monkeypatch)
    run(tmp_path / "fresh", "--stages", f"text:{a},text:{b}", "--prores")
    first = [s for si, _, s in seen if si == 0]
    assert len(first) == 8 and torch.equal(first[0], torch.zeros(3)) and torch.equal(first[-1], torch.ones(3))
    assert all((y >= x).all() for x, y in zip(first, first[1:]))       # stage 0: the warmup, shallow layers first
    second = [s for si, _, s in seen if si == 1]
    assert len(second) == 8 and all(torch.equal(s, torch.ones(3)) for s in second)  # trained blocks: alpha = 1
    assert "alpha = 1, the blocks arrive trained" in capsys.readouterr().out


def test_fresh_scope_ramps_a_stage_whose_blocks_are_not_transferred(cache, two_texts, tmp_path, monkeypatch):
    a, b = two_texts
    seen = scales_per_step(monkeypatch)
    run(tmp_path / "norm", "--stages", f"text:{a},text:{b}", "--prores", "--transfer", "norm")
    assert torch.equal(next(s for si, it, s in seen if si == 1 and it == 0), torch.zeros(3))


def test_fresh_scope_leaves_init_from_blocks_at_one(cache, two_texts, tmp_path, monkeypatch):
    a, b = two_texts
    run(tmp_path / "pre", "--stages", f"text:{a}")
    seen = scales_per_step(monkeypatch)
    run(tmp_path / "cont", "--stages", f"text:{b}", "--prores", "--init-from",
        str(next((tmp_path / "pre").glob("stage0-*.pt"))))
    assert len(seen) == 8 and all(torch.equal(s, torch.ones(3)) for _, _, s in seen)


def test_stage_scope_still_ramps_every_stage_from_zero(cache, two_texts, tmp_path, monkeypatch):
    a, b = two_texts
    seen = scales_per_step(monkeypatch)
    run(tmp_path / "stage", "--stages", f"text:{a},text:{b}", "--prores", "--prores-scope", "stage")
    for si in (0, 1):
        s = [x for i, _, x in seen if i == si]
        assert torch.equal(s[0], torch.zeros(3)) and torch.equal(s[-1], torch.ones(3))


def test_baseline_trains_the_last_stage_alone_and_records_the_change(cache, two_texts, tmp_path, capsys):
    a, b = two_texts
    s = run(tmp_path / "cur", "--stages", f"text:{a},text:{b}", "--baseline")
    alone = run(tmp_path / "alone", "--stages", f"text:{b}")  # what the same-budget arm stands for: this very command
    base = json.loads((tmp_path / "cur" / "baseline" / "summary.json").read_text())
    assert base["stages"][0]["val_ppl"] == alone["stages"][0]["val_ppl"]
    rec = json.loads((tmp_path / "cur" / "summary.json").read_text())["baseline"]
    assert rec == s["baseline"] and rec["stage"] == f"text:{b}"
    assert rec["curriculum"] == {"val_ppl": s["stages"][1]["val_ppl"], "steps": 16, "tokens": 16 * 4 * 16}
    same, matched = rec["arms"]  # no --prores: no plain arm
    assert same["arm"] == "same budget" and same["folder"] == "baseline" and same["steps"] == 8
    assert same["val_ppl"] == alone["stages"][0]["val_ppl"] and same["tokens"] == 8 * 4 * 16
    assert same["change"] == pytest.approx(rec["curriculum"]["val_ppl"] / same["val_ppl"] - 1)
    assert matched["arm"] == "compute-matched" and matched["folder"] == "baseline-matched"
    typed = run(tmp_path / "typed", "--stages", f"text:{b}", "--iters", "16")  # what a user types for the control
    assert matched["val_ppl"] == typed["stages"][0]["val_ppl"] and matched["steps"] == 16
    out = capsys.readouterr().out
    assert f"text:{b} alone, same budget (every flag)" in out and f"text:{b} alone, compute-matched" in out
    assert f"{100 * same['change']:+.1f}%" in out and "compute-matched: text:" in out
    again = run(tmp_path / "cur", "--stages", f"text:{a},text:{b}", "--baseline", "--resume")  # finished: resumes
    assert again["baseline"] == rec


def test_the_compute_matched_arm_trains_exactly_the_curriculums_steps(cache, two_texts, tmp_path, capsys):
    """Three stages of unequal budgets (--epochs at 8 steps at most; a --patience stop counts its real steps): the
    compute-matched arm is the last stage alone for their sum, --epochs dropped, with the same --unique-tokens;
    with --prores the plain arm and the compute-matched arm drop it, the same-budget arm keeps it."""
    a, b = two_texts
    s = run(tmp_path / "cur", "--stages", f"text:{a},text:{b},text:{b}", "--epochs", "0.5", "--unique-tokens", "200",
            "--prores", "--baseline")
    steps = [t["iters"] for t in s["stages"]]
    arms = {x["arm"]: x for x in s["baseline"]["arms"]}
    assert list(arms) == ["same budget", "plain", "compute-matched"]
    m = json.loads((tmp_path / "cur" / "baseline-matched" / "summary.json").read_text())
    assert arms["compute-matched"]["steps"] == m["stages"][0]["iters"] == sum(steps) == s["baseline"]["curriculum"]["steps"]
    assert m["args"]["epochs"] is None and m["args"]["iters"] == sum(steps) and m["args"]["unique_tokens"] == 200
    assert arms["compute-matched"]["tokens"] == sum(steps) * 4 * 16 == s["baseline"]["curriculum"]["tokens"]
    kept = {f: json.loads((tmp_path / "cur" / f / "summary.json").read_text())["args"]["prores"]
            for f in ("baseline", "baseline-plain", "baseline-matched")}
    assert kept == {"baseline": True, "baseline-plain": False, "baseline-matched": False}
    assert arms["plain"]["steps"] == arms["same budget"]["steps"] == steps[-1]
    assert "every flag but --prores, --iters " + str(sum(steps)) in capsys.readouterr().out


def test_a_baseline_from_init_from_says_it_has_no_compute_matched_arm(cache, two_texts, tmp_path, capsys):
    """One stage from --init-from: the checkpoint's own steps are not known, so no compute-matched arm, said."""
    a, b = two_texts
    run(tmp_path / "pre", "--stages", f"text:{a}")
    s = run(tmp_path / "cont", "--stages", f"text:{b}", "--baseline", "--init-from",
            str(next((tmp_path / "pre").glob("stage0-*.pt"))))
    assert [x["arm"] for x in s["baseline"]["arms"]] == ["same budget"]
    assert "no compute-matched arm: the steps that made --init-from's checkpoint" in capsys.readouterr().out


def test_baseline_of_a_single_stage_from_scratch_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--stages", "prose", "--baseline"])
    assert e.value.code == 2 and "--baseline compares a curriculum" in capsys.readouterr().err


def test_help_explains_the_scopes_and_the_baseline(capsys):
    out = help_text(train.main, capsys)
    assert "--prores-scope {fresh,stage,run}" in out and "fresh (default): only a stage whose blocks start" in out
    assert "scaling transferred blocks down to 0 again (the old default)" in out
    assert "--baseline" in out and "from random init with the same flags, budget and seed" in out
    assert parse_args([]).prores_scope == "fresh"


def test_runs_written_before_the_default_scope_changed_still_resume():
    def check(saved, *argv):
        check_resume_args(saved, parse_args(list(argv)), "ckpt.pt")
    old = lambda *argv, **kw: {**vars(parse_args(list(argv))), "prores_scope": "stage", **kw}  # noqa: E731
    check(old("--stages", "music"), "--stages", "music")                          # no ProRes: scope irrelevant
    check(old("--stages", "music,prose"), "--stages", "music,prose")
    check(old("--stages", "music", "--prores"), "--stages", "music", "--prores")  # one stage from scratch: same
    with pytest.raises(UserError, match="--prores-scope 'fresh'"):                # a curriculum: not the same
        check(old("--stages", "music,prose", "--prores"), "--stages", "music,prose", "--prores")
    with pytest.raises(UserError, match="--prores-scope 'fresh'"):
        check(old("--stages", "prose", "--prores", "--init-from", "x.pt"), "--stages", "prose", "--prores",
              "--init-from", "x.pt")
    with pytest.raises(UserError, match="--prores-T"):                            # other ProRes flags still count
        check(old("--stages", "music", "--prores"), "--stages", "music", "--prores", "--prores-T", "3")
    check(vars(Namespace(**vars(parse_args(["--stages", "music,prose"])))), "--stages", "music,prose", "--baseline")


def test_ctrl_c_in_the_baseline_names_its_checkpoint_and_resume_finishes_it(cache, two_texts, tmp_path, capsys,
                                                                          monkeypatch):
    import os
    import signal
    a, b = two_texts
    out, real = tmp_path / "cur", train.train_step
    argv = TINY + ["--iters", "8", "--eval-interval", "4", "--n-layer", "3", "--no-plot", "--out", str(out),
                   "--stages", f"text:{a},text:{b}", "--baseline"]

    def ctrl_c_in_the_baseline(S, args, env, it):
        if args.out.endswith("baseline") and it == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(S, args, env, it)
    monkeypatch.setattr(train, "train_step", ctrl_c_in_the_baseline)
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 130 and f"saved {out / 'baseline' / 'ckpt.pt'}" in err and "--resume" in err, err
    monkeypatch.undo()
    s = train.run(parse_args(argv + ["--resume"]))
    assert s["baseline"]["arms"][0]["val_ppl"] == run(tmp_path / "alone", "--stages", f"text:{b}")["stages"][0]["val_ppl"]
