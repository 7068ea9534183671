"""A run never mixes with another, and Ctrl-C never loses a step: train.main on a folder that
holds another run's files, and SIGINT delivered in the middle of training."""
import json
import os
import signal

import pytest

import train

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "2",
        "--eval-iters", "1", "--eval-interval", "4", "--log-interval", "1", "--no-progress", "--no-plot",
        "--threads", "1", "--dtype", "float32"]


def files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_new_run_into_a_folder_of_another_run_is_refused(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(["--stages", f"text:{text_dir}", "--iters", "2", "--out", str(out)] + TINY)
    before = files(out)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # another curriculum into the same folder
        train.main(["--stages", f"text:{text_dir},text:{text_dir}", "--iters", "2", "--out", str(out)] + TINY)
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert e.value.code == 2 and len(err) == 1, err
    assert "--resume" in err[0] and "fresh --out" in err[0] and "stage0-" in err[0]
    assert files(out) == before  # nothing of the old run was touched


def test_resume_without_a_checkpoint_beside_a_finished_run_is_refused(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--stages", f"text:{text_dir}", "--iters", "2", "--out", str(out)] + TINY
    train.main(argv)
    (out / "ckpt.pt").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main(argv + ["--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "no ckpt.pt" in err[0], err


def interrupt_at(monkeypatch, step):
    """Deliver SIGINT to this process while step `step` (0-based) of the first stage is computed."""
    real = train.train_step

    def step_then_ctrl_c(S, args, env, it):
        if it == step:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step: the handler only asks the loop to stop
        return real(S, args, env, it)
    monkeypatch.setattr(train, "train_step", step_then_ctrl_c)


def test_ctrl_c_saves_the_step_and_resume_continues_exactly(cache, text_dir, tmp_path, capsys, monkeypatch):
    argv = ["--stages", f"text:{text_dir},text:{text_dir}", "--iters", "6"] + TINY
    whole = train.run(train.parse_args(argv + ["--out", str(tmp_path / "whole")]))
    out = tmp_path / "cut"
    interrupt_at(monkeypatch, 2)  # step 3 of 6, between two evaluations (4 and 6)
    with pytest.raises(SystemExit) as e:
        train.main(argv + ["--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 130 and "step 3 of stage 1/2" in err and "saved" in err and "--resume" in err, err
    ck = train.read_checkpoint(out / "ckpt.pt", "test")
    assert (ck["stage_index"], ck["iter"]) == (0, 3)
    monkeypatch.undo()
    resumed = train.run(train.parse_args(argv + ["--out", str(out), "--resume"]))
    assert "resumed at step 3 of stage 1/2" in capsys.readouterr().out
    assert [s["val_loss"] for s in resumed["stages"]] == [s["val_loss"] for s in whole["stages"]]
    logged = [json.loads(l) for l in open(out / "metrics.jsonl")]
    steps = [(e["stage_index"], e["iter"]) for e in logged if e["event"] == "train"]
    assert steps == sorted(set(steps)) and len(steps) == 12  # every step once, none lost, none twice
    assert resumed["seconds"] >= ck["seconds"]  # summary's seconds count the interrupted part too


def test_ctrl_c_before_the_first_step_says_nothing_was_saved(cache, text_dir, tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(train, "setup_stage", interrupted)
    out = tmp_path / "early"
    with pytest.raises(SystemExit) as e:
        train.main(["--stages", f"text:{text_dir}", "--iters", "2", "--out", str(out)] + TINY)
    err = capsys.readouterr().err
    assert e.value.code == 130 and "nothing was saved" in err and "--resume" not in err
    assert not (out / "ckpt.pt").exists()


def test_each_evaluation_logs_the_residual_streams_rms_per_block(cache, text_dir, tmp_path):
    """The ProRes paper's activation norms over training: every eval event carries L + 1 values,
    the last evaluation's equal to the final model's on the same batch."""
    from batches import get_batch, load_corpus
    from checkpoint import load_model
    out = tmp_path / "rms"
    args = train.parse_args(["--stages", f"text:{text_dir}", "--iters", "8", "--n-layer", "3", "--out", str(out)]
                            + TINY[2:])
    train.run(args)
    evals = [json.loads(l) for l in open(out / "metrics.jsonl") if '"eval"' in l]
    assert [e["iter"] for e in evals] == [4, 8] and all(len(e["act_rms"]) == 4 for e in evals)
    model, _ = load_model(next(out.glob("stage0-*.pt")))
    import torch
    x = get_batch(load_corpus(f"text:{text_dir}", args), "val", 2, 16, [0, 1_000_003, 0, 0, True], 0, 1,
                  torch.device("cpu"))[0]
    h = model.transformer.drop(model.transformer.wte(x) + model.transformer.wpe(torch.arange(16)))
    by_hand = [h.pow(2).mean().sqrt().item()]
    for i, block in enumerate(model.transformer.h):
        h = block(h, model.residual_scale[i])
        by_hand.append(h.pow(2).mean().sqrt().item())
    assert evals[-1]["act_rms"] == pytest.approx(by_hand, rel=1e-5)


SWEEP = '''
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from experiments.lib import common, provenance

def main():
    out, argv = Path(sys.argv[2]), sys.argv[3:]
    prov = provenance.Provenance(out, argv=["--test"])
    runs = [common.Run(f"r{i}", out / "runs" / f"r{i}", argv + ["--iters", "2" if i == 0 else "100000"])
            for i in range(4)]
    prov.finish(runs_trained=len(common.run_sweep(runs, jobs=2, threads=1)))

if __name__ == "__main__":  # the workers are spawned: they import this file
    common.main_guard(main)
'''


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_ctrl_c_stops_a_sweep_its_runs_checkpoint_no_queued_run_starts_and_it_is_recorded(cache, text_dir,
                                                                                           tmp_path, how):
    """Ctrl-C in a terminal (SIGINT to the sweep and its workers), or `kill PID` (SIGTERM to the
    sweep alone), while 2 of 4 runs train: the finished run stays finished, both runs in flight
    save a checkpoint, the queued run never starts, no worker outlives the sweep, and
    provenance.json records the stopped invocation with the one run it finished."""
    import subprocess
    import sys
    import time
    from pathlib import Path
    root, out = Path(__file__).resolve().parents[1], tmp_path / "sweep"
    (tmp_path / "sweep.py").write_text(SWEEP)
    i = TINY.index("--threads")
    argv = ["--stages", f"text:{text_dir}"] + TINY[:i] + TINY[i + 2:]  # the sweep sets --threads
    p = subprocess.Popen([sys.executable, str(tmp_path / "sweep.py"), str(root), str(out)] + argv,
                         start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    def running():  # both runs past their first logged step (the Ctrl-C handler is in place, steps are going)
        paths = [out / "runs" / r / "metrics.jsonl" for r in ("r1", "r2")]
        return all(f.exists() and '"event": "train"' in f.read_text() for f in paths)
    try:
        deadline = time.time() + 120
        while not running() and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert running(), p.communicate()[0] if p.poll() is not None else "the runs did not start within 120 s"
        if how == "ctrl-c":
            os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        else:
            os.kill(p.pid, signal.SIGTERM)  # what `kill PID` does: the sweep alone, not its workers
        log = p.communicate(timeout=120)[0]
        deadline = time.time() + 30
        while time.time() < deadline:  # the workers leave with the pool; none may train on, orphaned
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"a worker outlived the sweep:\n{log}")
    finally:
        if p.poll() is None:  # a failed test leaves no sweep behind
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, log
    assert (out / "runs" / "r0" / "summary.json").exists()
    assert all((out / "runs" / r / "ckpt.pt").exists() and not (out / "runs" / r / "summary.json").exists()
               for r in ("r1", "r2")), log
    assert not (out / "runs" / "r3").exists(), log
    (entry,) = json.loads((out / "provenance.json").read_text())
    assert entry["stopped"] == "interrupted" and entry["runs_trained"] == 1 and entry["wall_seconds"] > 0
