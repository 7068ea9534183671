"""A user's second day (issue #59): what a crash, a full disk or `kill PID` leaves behind never stops
`--resume`, which then continues to exactly the run an uninterrupted one is; flags that make a run
pointless are said before it trains (a warm-up longer than the stage, a --block-size longer than a
stage's data)."""
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import checkpoint
import train
from conftest import ROOT, write_paragraphs
from test_errors import one_line_error, refusal
from test_interrupt import TINY, interrupt_at

ARGV = TINY + ["--warmup-iters", "2", "--iters", "8"]  # evaluations and checkpoints at steps 4 and 8


def rows(out):
    """metrics.jsonl's events without their timing (tok_s), which no two runs share."""
    return [{k: v for k, v in json.loads(line).items() if k != "tok_s"} for line in open(out / "metrics.jsonl")]


def temp_files(out):
    return sorted(p.name for p in out.iterdir() if ".tmp" in p.name)


@pytest.fixture
def straight(cache, text_dir, tmp_path):
    """(argv without --out, the uninterrupted run's summary, its folder)."""
    argv = ["--stages", f"text:{text_dir}"] + ARGV
    out = tmp_path / "straight"
    return argv, train.run(train.parse_args(argv + ["--out", str(out)])), out


def same_run(result, out, straight_result, straight_out):
    assert result["stages"] == straight_result["stages"]
    assert rows(out) == rows(straight_out)


def stopped_at_step_5(argv, out):
    """A run Ctrl-C'd at step 5 (saved there). (Its own MonkeyPatch: undoing the test's would undo the cache
    fixture's $PRELUDE_CACHE too.)"""
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SystemExit):
        interrupt_at(mp, 4)
        train.main(argv + ["--out", str(out)])


def test_a_torn_last_line_of_the_metrics_log_is_dropped_and_the_resumed_run_is_the_straight_one(
        straight, tmp_path, capsys):
    argv, whole, whole_out = straight
    out = tmp_path / "cut"
    stopped_at_step_5(argv, out)  # then the process dies while it logs step 6
    line6 = next(ln for ln in open(whole_out / "metrics.jsonl") if '"iter": 6' in ln)
    with open(out / "metrics.jsonl", "a") as f:
        f.write(line6[:len(line6) // 2])
    capsys.readouterr()
    train.main(argv + ["--out", str(out), "--resume"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"warning: {out / 'metrics.jsonl'}: its last line is cut off"), err
    same_run(json.loads((out / "summary.json").read_text()), out, whole, whole_out)


def test_a_damaged_line_before_the_last_is_one_line_naming_it(straight, tmp_path, capsys, monkeypatch):
    argv, _, _ = straight
    out = tmp_path / "cut"
    stopped_at_step_5(argv, out)
    monkeypatch.setattr(train, "train_step", lambda *a: pytest.fail("a step was trained"))  # said before any step
    lines = (out / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1][:20] + "\n"
    (out / "metrics.jsonl").write_text("".join(lines))
    capsys.readouterr()
    code, err = one_line_error(capsys, train.main, argv + ["--out", str(out), "--resume"])
    assert code == 2 and len(err) == 1, err
    assert f"{out / 'metrics.jsonl'} line 2" in err[0] and "delete that line" in err[0] and "--out" in err[0]
    assert not (out / ".lock").exists() and "".join(lines) == (out / "metrics.jsonl").read_text()


class FullDisk(io.FileIO):
    """A file on a disk that fills after its first `room` bytes."""
    room = 1000

    def write(self, b):
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = super().write(bytes(b)[:self.room])
        self.room -= n
        return n


def fill_the_disk_at(monkeypatch, n, how):
    """The n-th write of OUT/ckpt.pt fails for lack of space: inside torch.save's own writes (which torch reports
    as RuntimeError '... unexpected pos ...'), or torch.save itself raising ENOSPC after writing a little."""
    seen = [0]
    real_open, real_save = open, torch.save

    def full_open(path, mode="r", *a, **k):
        if ".ckpt.pt.tmp-" in str(path) and "w" in mode:
            seen[0] += 1
            if seen[0] == n:
                return io.BufferedWriter(FullDisk(path, "w"), buffer_size=256)
        return real_open(path, mode, *a, **k)

    def full_save(obj, f, *a, **k):
        if "optimizer" in obj:  # (ckpt.pt, not a stage's weights)
            seen[0] += 1
            if seen[0] == n:
                f.write(b"PK\x03\x04" + bytes(1000))
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)
    if how == "file write":
        monkeypatch.setattr(checkpoint, "open", full_open, raising=False)
    else:
        monkeypatch.setattr(torch, "save", full_save)


@pytest.mark.parametrize("how", ["file write", "torch.save"])
def test_a_full_disk_at_a_checkpoint_is_one_line_and_resume_continues_once_space_is_freed(
        how, straight, tmp_path, capsys):
    argv, whole, whole_out = straight
    out = tmp_path / "full"
    with pytest.MonkeyPatch.context() as mp:
        fill_the_disk_at(mp, 2, how)  # the checkpoint of step 8; step 4's is on disk
        code, err = one_line_error(capsys, train.main, argv + ["--out", str(out)])
    assert code == 2 and len(err) == 1, err
    assert f"no space left on the disk of {out} (" in err[0] and re.search(r"free at least [\d.]+ [kMG]iB there", err[0])
    assert "--resume" in err[0] and f"the last checkpoint {out / 'ckpt.pt'} is kept" in err[0]
    assert temp_files(out) == [] and not (out / ".lock").exists()
    assert train.read_checkpoint(out / "ckpt.pt", "test")["iter"] == 4

    real_write = os.write  # still full: even the lock cannot be written

    def full_write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/.lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "write", full_write)
        code, err = one_line_error(capsys, train.main, argv + ["--out", str(out), "--resume"])
    assert code == 2 and len(err) == 1 and f"no space left on the disk of {out}" in err[0] and ".lock" in err[0], err
    assert "--resume" in err[0] and not (out / ".lock").exists()

    train.main(argv + ["--out", str(out), "--resume"])  # space freed: the same command continues
    same_run(json.loads((out / "summary.json").read_text()), out, whole, whole_out)


SLOW_STEPS = ("import sys, time, train\n"
              "real = train.train_step\n"
              "def slow(*a):\n"
              "    time.sleep(0.05)\n"
              "    return real(*a)\n"
              "train.train_step = slow\n"
              "train.main(sys.argv[1:])\n")


def test_sigterm_saves_the_step_says_how_to_resume_and_leaves_no_temporary_file(cache, text_dir, tmp_path):
    """`kill PID` mid-training: the step in flight is saved, the Ctrl-C line says how to resume, exit 143, nothing
    left behind; --resume removes the temporary files a killed run leaves and finishes as a straight run."""
    argv = ["--stages", f"text:{text_dir}"] + TINY + ["--warmup-iters", "2", "--iters", "60", "--eval-interval", "30"]
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-u", "-c", SLOW_STEPS] + argv + ["--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not ((out / "metrics.jsonl").exists() and '"train"' in (out / "metrics.jsonl").read_text()):
            assert p.poll() is None and time.time() < deadline, p.communicate()
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM, err
    said = [ln for ln in err.splitlines() if ln.strip() and "doc/s]" not in ln]
    assert said[0] == ("SIGTERM: finishing this step and saving a checkpoint (within --stop-grace 30 s, else the step "
                       "is abandoned and the last checkpoint kept; Ctrl-C again to stop at once)"), said
    assert said[1].startswith("interrupted after step ") and said[1].endswith(
        f"saved {out / 'ckpt.pt'}: continue with the same command and --resume"), said
    assert temp_files(out) == [] and not (out / ".lock").exists()

    for left in (".ckpt.pt.tmp-999999", ".summary.json.tmp-999999"):  # what a `kill -9` in a write leaves
        (out / left).write_bytes(b"half")
    resumed = train.run(train.parse_args(argv + ["--out", str(out), "--resume"]))
    assert temp_files(out) == []
    whole = train.run(train.parse_args(argv + ["--out", str(tmp_path / "straight")]))
    assert resumed["stages"] == whole["stages"]


def test_sigterm_outside_the_loop_stops_at_once_and_leaves_no_temporary_file(straight, tmp_path, capsys,
                                                                              monkeypatch):
    """SIGTERM while summary.json is written: its temporary file is removed, the lock released, the resume line."""
    argv, _, _ = straight
    out = tmp_path / "run"
    real = os.fsync

    def killed_while_writing(fd):  # (the temporary file is written, not yet synced and renamed)
        if ".summary.json.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # (the handler raises first)
        return real(fd)
    monkeypatch.setattr(os, "fsync", killed_while_writing)
    handler = signal.getsignal(signal.SIGTERM)
    code, err, _ = refusal(capsys, train.main, argv + ["--out", str(out)])
    assert code == 128 + signal.SIGTERM and err == [
        f"interrupted; the last checkpoint is {out / 'ckpt.pt'}: continue with the same command and --resume"], err
    assert temp_files(out) == [] and not (out / ".lock").exists() and not (out / "summary.json").exists()
    assert signal.getsignal(signal.SIGTERM) == handler  # main leaves the handler as it found it


def test_a_warmup_longer_than_the_stage_is_a_one_line_warning(cache, text_dir, tmp_path, capsys):
    argv = ["--stages", f"text:{text_dir}"] + TINY + ["--iters", "10", "--lr", "3e-3"]
    train.main(argv + ["--warmup-iters", "1000", "--out", str(tmp_path / "long")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and "doc/s]" not in ln]
    assert len(err) == 1 and err[0].startswith("warning: --warmup-iters 1000 is longer than stage "), err
    assert f"'text:{text_dir}' (10 steps)" in err[0] and "give --warmup-iters below" in err[0]
    lrs = [e["lr"] for e in map(json.loads, open(tmp_path / "long" / "metrics.jsonl")) if e["event"] == "train"]
    assert lrs == sorted(lrs) and lrs[-1] == pytest.approx(3e-3) and lrs[-2] < 2.8e-3  # --lr only at the last step
    train.main(argv + ["--warmup-iters", "5", "--out", str(tmp_path / "short")])
    assert "warmup" not in capsys.readouterr().err


@pytest.mark.parametrize("which", ["its val split", "the second stage"])
def test_a_block_size_longer_than_a_stages_data_is_refused_before_the_first_step(which, cache, text_dir, tmp_path,
                                                                                capsys, monkeypatch):
    """Today's get_batch error came at the first evaluation (val: 181 tokens, train 1,708) or at the stage
    that is too small, after the earlier stages trained; now before any step, nothing written."""
    small = write_paragraphs(tmp_path / "small", n_paragraphs=4)
    stages, block, says = {"its val split": (f"text:{text_dir}", "256", "val split has 181 tokens"),
                           "the second stage": (f"text:{text_dir},text:{small}", "64", "val split has 25 tokens")}[which]

    def no_step(*a, **k):
        raise AssertionError("a step was trained")
    monkeypatch.setattr(train, "train_step", no_step)
    out = tmp_path / "out"
    code, err = one_line_error(capsys, train.main, ["--stages", stages, "--out", str(out)] + TINY
                               + ["--warmup-iters", "2", "--iters", "10", "--block-size", block])
    assert code == 2 and len(err) == 1, err
    assert says in err[0] and f"--block-size {block}" in err[0] and "or less" in err[0], err
    assert not out.exists()  # no checkpoint, no log: the folder it made is gone again
