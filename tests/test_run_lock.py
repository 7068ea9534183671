"""One live run per folder (checkpoint.RunLock, OUT/.lock): a second process into a folder in use,
--resume included, is refused in one line naming the running PID; once the first run ends the
resume is accepted; the lock of a run killed with -9 is taken over, saying so."""
import os
import signal
import subprocess
import sys
import time

import pytest

import train
from conftest import ROOT

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "2",
        "--eval-iters", "1", "--eval-interval", "50", "--log-interval", "1", "--no-progress", "--no-plot",
        "--threads", "1", "--dtype", "float32", "--iters", "1000000"]  # runs until stopped


def start(argv, tmp_path, name):
    """train.py in a subprocess, its output to tmp_path/name.log (unbuffered)."""
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-u", str(ROOT / "train.py")] + argv, stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT)


def wait_for(what, p, log, timeout=120):
    """Wait until what() holds (the run is stepping), failing with the run's output if it ends or stalls."""
    deadline = time.time() + timeout
    while not what():
        assert p.poll() is None and time.time() < deadline, log.read_text()
        time.sleep(0.2)


def refused(capsys, argv):
    """(exit code, the non-empty stderr lines) of train.main(argv) in this process."""
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    return e.value.code, [l for l in capsys.readouterr().err.splitlines() if l.strip()]


def test_a_second_run_is_refused_while_the_first_runs_and_a_killed_runs_lock_is_taken_over(
        cache, text_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = ["--stages", f"text:{text_dir}", "--out", str(out)] + TINY
    stepping = lambda: (out / "metrics.jsonl").exists() and '"train"' in (out / "metrics.jsonl").read_text()
    first = start(argv, tmp_path, "first")
    procs = [first]
    try:
        wait_for(stepping, first, tmp_path / "first.log")
        lock = (out / ".lock").read_text()
        assert lock.split()[0] == str(first.pid)
        for extra in (["--resume"], []):  # a resume, and a new run, into the folder in use
            code, err = refused(capsys, argv + extra)
            assert code == 2 and len(err) == 1 and f"PID {first.pid}" in err[0] and "in use" in err[0], err
        assert (out / ".lock").read_text() == lock  # the refused ones left the running run's lock alone

        first.send_signal(signal.SIGINT)  # Ctrl-C: checkpoint, release the lock, exit 130
        assert first.wait(timeout=120) == 130, (tmp_path / "first.log").read_text()
        assert not (out / ".lock").exists() and (out / "ckpt.pt").exists()

        second = start(argv + ["--resume"], tmp_path, "second")  # the first has ended: accepted
        procs.append(second)
        second_log = tmp_path / "second.log"
        wait_for(lambda: "resumed at step" in second_log.read_text() and stepping(), second, second_log)
        assert (out / ".lock").read_text().split()[0] == str(second.pid)
        second.kill()  # kill -9: no finally runs, the lock stays behind
        second.wait(timeout=60)
        assert (out / ".lock").read_text().split()[0] == str(second.pid)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    real = train.train_step

    def one_step_then_ctrl_c(S, args, env, it):
        os.kill(os.getpid(), signal.SIGINT)  # the loop saves this step and stops
        return real(S, args, env, it)
    monkeypatch.setattr(train, "train_step", one_step_then_ctrl_c)
    with pytest.raises(SystemExit) as e:
        train.main(argv + ["--resume"])
    said = capsys.readouterr().out
    assert e.value.code == 130
    assert f"taking over the lock of run PID {second.pid}, which is no longer running" in said, said
    assert "resumed at step" in said
    assert not (out / ".lock").exists()  # released on the way out


def test_a_lock_is_released_however_the_run_ends(cache, text_dir, tmp_path, capsys, monkeypatch):
    """In one process (as experiments' workers call train.run): after a normal end, a UserError
    and an exception from inside the loop, the folder is free for the next run."""
    out = tmp_path / "run"
    argv = ["--stages", f"text:{text_dir}", "--out", str(out)] + TINY[:-1] + ["2"]
    train.run(train.parse_args(argv))
    assert not (out / ".lock").exists()
    with pytest.raises(train.UserError, match="other flags"):  # refused after the lock was taken
        train.run(train.parse_args(argv + ["--resume", "--iters", "3"]))
    assert not (out / ".lock").exists() and (out / "summary.json").exists()

    fresh = tmp_path / "fresh"

    def broken(*a, **k):
        assert (fresh / ".lock").read_text().split()[0] == str(os.getpid())  # held while the run trains
        raise RuntimeError("a bug in the loop")
    monkeypatch.setattr(train, "train_step", broken)
    with pytest.raises(RuntimeError):
        train.run(train.parse_args(argv + ["--out", str(fresh)]))
    assert not fresh.exists()  # made by the failed run, empty: removed with its lock


@pytest.mark.parametrize("content", ["999999999 1 " + os.uname().nodename + "\n", ""], ids=["dead pid", "empty"])
def test_a_stale_lock_file_is_taken_over_in_process(content, cache, text_dir, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(content)
    train.run(train.parse_args(["--stages", f"text:{text_dir}", "--out", str(out)] + TINY[:-1] + ["1"]))
    assert "taking over the lock of run PID" in capsys.readouterr().out
    assert not (out / ".lock").exists()
