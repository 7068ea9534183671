"""A user's third day (issue #68), the runs: a checkpoint of another shape is one short line naming what differs
and the flag; a stop request is honoured within --stop-grace even when the step in flight takes a minute, and
--resume then finishes as the uninterrupted run; a step predicted to take minutes is said before it starts; the
lock's take-over is said only by the run that takes it; --unique-tokens states its range; --baseline draws
OUT/baseline.png and loss.png has one titled axis per vocabulary."""
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

import baseline
import evaluate
import preflight
import run_folder
import sample
import summary
import train
import transfer
from conftest import ROOT
from test_errors import refusal, save
from test_interrupt import TINY


def init_from_refusal(capsys, tmp_path, text_dir, ckpt, *flags):
    code, lines, _ = refusal(capsys, train.main, ["--stages", f"text:{text_dir}", "--iters", "1", "--out",
                                                  str(tmp_path / "out")] + TINY + ["--init-from", str(ckpt), *flags])
    return code, [ln for ln in lines if not ln.startswith("warning:")]


@pytest.mark.parametrize("kind,shape,words", [
    ("wider", dict(n_embd=32), ["n_embd 32 vs 16", "give --n-embd 32"]),
    ("deeper", dict(n_layer=2), ["n_layer 2 vs 1", "give --n-layer 2"]),
    ("shallower", dict(n_layer=1), ["n_layer 1 vs 3", "give --n-layer 1"]),
])
def test_init_from_a_checkpoint_of_another_shape_is_one_short_line(kind, shape, words, cache, text_dir, tmp_path,
                                                                   capsys):
    ckpt = save(tmp_path / f"{kind}.pt", 50257, "gpt2", **shape)
    flags = ["--n-layer", "3"] if kind == "shallower" else []
    code, lines = init_from_refusal(capsys, tmp_path, text_dir, ckpt, *flags)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: --init-from {ckpt} does not fit this run's model: ") and len(lines[0]) < 300
    assert "vocabularies" not in lines[0] and "transformer." not in lines[0]  # no wrong hint, no tensor list
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "out").exists()
    code, lines = init_from_refusal(capsys, tmp_path, text_dir, ckpt, *flags, "--verbose")  # the tensors, below it
    assert code == 2 and lines[0].startswith("error: --init-from") and any(ln.startswith("transformer.") for ln in lines)


def inconsistent(tmp_path):
    """A checkpoint whose weights are of width 32 while its model_config says 16."""
    path = save(tmp_path / "wide.pt", 160, n_embd=32)
    ck = torch.load(path, weights_only=True)
    ck["model_config"]["n_embd"] = 16
    torch.save(ck, path)
    return path


def test_sample_of_a_checkpoint_that_does_not_fit_is_one_short_line(tmp_path, capsys):
    path = inconsistent(tmp_path)
    code, lines, _ = refusal(capsys, sample.main, [str(path), "--prompt", "1 2"])
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, lines
    assert f"{path}: checkpoint does not fit this model: n_embd 32 vs 16" in lines[0]
    code, lines, _ = refusal(capsys, sample.main, [str(path), "--prompt", "1 2", "--verbose"])
    assert len(lines) > 1 and lines[1].startswith("transformer.")


def test_evaluate_of_a_checkpoint_that_does_not_fit_is_one_line(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(["--stages", f"text:{text_dir}", "--iters", "1", "--out", str(out)] + TINY)
    (stage,) = out.glob("stage0-*.pt")
    stage.write_bytes(inconsistent(tmp_path).read_bytes())
    capsys.readouterr()
    code, lines, _ = refusal(capsys, evaluate.main, [str(out)])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"evaluate.py: error: {stage}: ") and "n_embd 32" in lines[0]


def test_a_merge_of_another_width_says_the_width_not_the_vocabulary(tmp_path, capsys):
    a, wide = save(tmp_path / "a.pt", 160, tie_weights=False), save(tmp_path / "wide.pt", 160, n_embd=32, tie_weights=False)
    code, lines, _ = refusal(capsys, transfer.main, ["merge", "--base", str(a), "--embed", str(wide), "--head",
                                                     str(wide), "-o", str(tmp_path / "m.pt")])
    assert code == 2 and len(lines) == 1, lines
    assert "vocabularies" not in lines[0] and "n_embd 32 vs 16" in lines[0] and "--n-embd" in lines[0], lines[0]


# a step that takes a minute: the sixth (steps 1-4 are checkpointed at step 4); `native`: as one long native call,
# during which no Python signal handler runs (the signals blocked in the main thread, so another thread takes them)
SLOW_STEP = ("import pathlib, signal, sys, time, interrupts, train\n"
             "interrupts.FORCE_AFTER = 1\n"
             "real = train.train_step\n"
             "def slow(S, args, env, it):\n"
             "    if it == 5:\n"
             "        pathlib.Path(args.out, 'slow-step').write_text('started')\n"
             "        if sys.argv[1] == 'native':\n"
             "            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})\n"
             "        time.sleep(60)\n"
             "    return real(S, args, env, it)\n"
             "train.train_step = slow\n"
             "train.main(sys.argv[2:])\n")


@pytest.mark.parametrize("step", ["python", "native"])
def test_sigterm_during_a_minute_long_step_stops_within_the_grace_and_resume_finishes_the_run(step, cache, text_dir,
                                                                                            tmp_path, capsys):
    argv = ["--stages", f"text:{text_dir}"] + TINY + ["--warmup-iters", "2", "--iters", "8"]
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-u", "-c", SLOW_STEP, step] + argv + ["--out", str(out), "--stop-grace", "2"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "slow-step").exists():
            assert p.poll() is None and time.time() < deadline, p.communicate()
            time.sleep(0.05)
        asked = time.time()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        took = time.time() - asked
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM and took < 2 + 5, (took, err)
    said = [ln for ln in err.splitlines() if ln.strip() and "doc/s]" not in ln]
    assert said[-1] == ("the step in flight had not finished 2 s after the SIGTERM (--stop-grace), so it was abandoned; "
                        f"the last checkpoint is {out / 'ckpt.pt'} (as it was): continue with the same command and "
                        "--resume"), said
    assert train.read_checkpoint(out / "ckpt.pt", "test")["iter"] == 4  # the last checkpoint, intact
    assert not [f for f in os.listdir(out) if ".tmp" in f]
    assert (out / ".lock").exists() == (step == "native")  # (no `finally` runs there: --resume takes the lock over)
    (out / "slow-step").unlink()
    resumed = train.run(train.parse_args(argv + ["--out", str(out), "--resume"]))
    assert ("taking over the lock" in capsys.readouterr().out) == (step == "native")
    whole = train.run(train.parse_args(argv + ["--out", str(tmp_path / "straight")]))
    assert resumed["stages"] == whole["stages"]


def test_a_step_predicted_to_take_minutes_is_said_before_it_starts(monkeypatch, capsys):
    args = train.parse_args(["--stages", "poetry", "--block-size", "100000", "--iters", "1"])
    corpus = SimpleNamespace(name="poetry", vocab_size=50257)
    monkeypatch.setattr(preflight, "matmul_flops", lambda device: 100e9)
    preflight.warn_slow_step(args, corpus, 100000, torch.device("cpu"))
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: stage 'poetry': one step (--batch-size 16 x --block-size 100,000: 1.3e+14 FLOPs) "
                           "is predicted to take at least 22 minutes on this cpu (100 GFLOP/s measured)"), line
    assert "--stop-grace 30 s" in line
    monkeypatch.setattr(preflight, "matmul_flops", lambda device: pytest.fail("a small step needs no measurement"))
    preflight.warn_slow_step(train.parse_args([]), corpus, 128, torch.device("cpu"))
    assert capsys.readouterr().err == ""


def test_only_the_run_that_takes_over_a_stale_lock_says_so(tmp_path, capsys, monkeypatch):
    """Two --resume after a kill -9: both find the stale lock; the one that loses the race is refused, silently
    about the take-over it did not make."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(f"999999999 1 {os.uname().nodename}\n")
    real = run_folder.RunLock._remove_stale
    other = f"{os.getpid()} {run_folder._start_time(os.getpid())} {os.uname().nodename}\n"

    def then_the_other_run_takes_it(self, holder):
        removed = real(self, holder)
        self.path.write_text(other)  # the other --resume, a live process, creates the lock first
        return removed
    monkeypatch.setattr(run_folder.RunLock, "_remove_stale", then_the_other_run_takes_it)
    with pytest.raises(train.UserError, match="in use by a run still going"):
        run_folder.RunLock(out).acquire()
    assert "taking over" not in capsys.readouterr().out


def test_unique_tokens_above_the_corpus_states_the_range(cache, text_dir, tmp_path, capsys):
    code, lines, _ = refusal(capsys, train.main, ["--stages", f"text:{text_dir}", "--iters", "1", "--unique-tokens",
                                                  "1e9", "--out", str(tmp_path / "o")] + TINY)
    assert code == 2 and len(lines) == 1 and "has 1,708 training tokens; give a value from 1 to 1,708" in lines[0], lines


def test_baseline_draws_the_curriculum_beside_each_arm(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "cur"
    flags = [f for f in TINY if f != "--no-plot"] + ["--iters", "4", "--warmup-iters", "1", "--eval-interval", "2"]
    result = train.run(train.parse_args(["--stages", f"text:{text_dir},text:{text_dir}", "--baseline", "--out",
                                         str(out)] + flags))
    assert (out / "baseline.png").read_bytes()[:4] == b"\x89PNG"
    assert f"{out / 'baseline.png'}: text:{text_dir}'s validation loss against the tokens" in capsys.readouterr().out
    labels = baseline.plot_baseline(out, result, train.parse_args(["--stages", f"text:{text_dir},text:{text_dir}"]))
    arms = result["baseline"]["arms"]
    assert len(labels) == 1 + len(arms) == 3 and labels[0].startswith("the curriculum (")
    assert [f"text:{text_dir} alone, {a['arm']}: ppl {a['val_ppl']:.1f}" for a in arms] == labels[1:]
    curves = baseline.baseline_curves(out, result)
    assert [x[-1] for x, _ in curves.values()] == [8 * 32, 4 * 32, 8 * 32]  # tokens seen: the curriculum's two stages


def test_loss_png_has_one_axis_per_vocabulary(tmp_path):
    events = [dict(event="train", stage="music", stage_index=0, iter=2, loss=5.0),
              dict(event="eval", stage="music", stage_index=0, iter=2, val_loss=4.9),
              dict(event="stage_end", stage_index=0, vocab_size=160, unigram_val_ppl=90.0),
              dict(event="eval", stage="prose", stage_index=1, iter=2, val_loss=10.0),
              dict(event="stage_end", stage_index=1, vocab_size=50257, unigram_val_ppl=900.0)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert summary.plot_losses(tmp_path, train.parse_args(["--stages", "music,prose"])) == [160, 50257]
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
