import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import data
import summary
import train
from batches import get_batch
from checkpoint import save_checkpoint
from conftest import ROOT
from flags import parse_args
from model import GPT

TINY = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--batch-size", "4", "--eval-iters", "2", "--log-interval", "1", "--no-progress",
        "--warmup-iters", "2", "--threads", "1", "--dtype", "float32"]


def losses(out):
    """{(stage_index, iter): train loss}, the last record of each step (a resumed run re-logs)."""
    res = {}
    for line in open(out / "metrics.jsonl"):
        e = json.loads(line)
        if e["event"] == "train":
            res[(e["stage_index"], e["iter"])] = e["loss"]
    return res


def test_two_stages_write_summary_checkpoints_and_plot(cache, text_dir, tmp_path):
    out = tmp_path / "run"
    summary = train.run(parse_args(
        ["--stages", f"text:{text_dir},text:{text_dir}", "--iters", "6", "--eval-interval", "3",
         "--out", str(out)] + TINY + ["--lr", "1e-2"]))
    assert [s["iters"] for s in summary["stages"]] == [6, 6]
    on_disk = json.loads((out / "summary.json").read_text())
    assert len(on_disk["stages"]) == 2
    for s in on_disk["stages"]:
        assert s["vocab_size"] == 50257 and s["tokens"] == 6 * 4 * 16
        assert math.isclose(s["val_ppl"], math.exp(s["val_loss"]))
        assert s["val_loss"] < math.log(50257)
    corpus = data.load(f"text:{text_dir}")  # the data each stage read, fingerprinted from the arrays themselves
    assert on_disk["stages"][0]["data_sha256"] == {f: hashlib.sha256(np.asarray(a).tobytes()).hexdigest()
                                                   for f, a in (("train.bin", corpus.train), ("val.bin", corpus.val))}
    assert (out / "loss.png").stat().st_size > 1000
    stage_files = sorted(out.glob("stage*.pt"))
    assert len(stage_files) == 2
    ck = torch.load(stage_files[0], weights_only=True)
    assert ck["model_config"]["vocab_size"] == 50257
    # stage 2 started from stage 1's weights: its first loss is near stage 1's last, far below
    # a fresh model's first
    seen = losses(out)
    assert seen[(1, 1)] < seen[(0, 6)] + 0.05 < seen[(0, 1)] - 0.2


def test_budget_in_tokens_and_epochs(cache, text_dir, tmp_path):
    """--tokens and --epochs become steps of batch x block = 64 tokens: the fewest steps that
    cover the budget, with the epoch counted from the corpus itself (data.load, not the loop)."""
    step = 4 * 16
    s = train.run(parse_args(["--stages", f"text:{text_dir}", "--tokens", "200", "--out", str(tmp_path / "a")] + TINY))
    assert s["stages"][0]["iters"] == 4 and s["stages"][0]["tokens"] == 4 * step  # 3 steps = 192 < 200 <= 256
    n_train = len(data.load(f"text:{text_dir}").train)       # the training tokens of one epoch
    half = 0.5 * n_train
    s = train.run(parse_args(["--stages", f"text:{text_dir}", "--epochs", "0.5", "--out", str(tmp_path / "b")] + TINY))
    iters, tokens = s["stages"][0]["iters"], s["stages"][0]["tokens"]
    assert (iters - 1) * step < half <= iters * step, (iters, n_train)
    assert tokens == iters * step and iters > 4                # a budget of its own, not the --tokens one
    on_disk = json.loads((tmp_path / "b" / "summary.json").read_text())["stages"][0]
    assert (on_disk["iters"], on_disk["tokens"]) == (iters, tokens)


def test_unknown_stage_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--stages", "poetry,prosee"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "prosee" in err and "Valid stages" in err and "wiki-leads" in err


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(cache, text_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    forward = GPT.forward
    calls = {"n": 0}

    def poisoned(self, idx, targets=None, loss_mask=None):
        logits, loss = forward(self, idx, targets, loss_mask)
        if self.training:
            calls["n"] += 1
            if calls["n"] > 5:
                loss = loss * float("nan")
        return logits, loss
    monkeypatch.setattr(GPT, "forward", poisoned)
    args = parse_args(["--stages", f"text:{text_dir}", "--iters", "10", "--eval-interval", "2",
                             "--out", str(out)] + TINY)
    with pytest.raises(train.TrainingDiverged, match="nan.*step 5.*--resume"):
        train.run(args)
    ck = torch.load(out / "ckpt.pt", weights_only=True)
    assert ck["iter"] == 4 and all(torch.isfinite(v).all() for v in ck["model"].values())


def _cmd(*args):
    return [sys.executable, str(ROOT / "train.py"), *args]


def test_killed_run_resumes_exactly(cache, text_dir, tmp_path):
    """SIGKILL a run mid-way (in its second stage), resume it, and compare every step's loss
    with an uninterrupted run: same data order, same losses (CPU, bit-for-bit up to printing)."""
    killed_run_resumes_exactly(cache, text_dir, tmp_path, [])


def killed_run_resumes_exactly(cache, text_dir, tmp_path, flags):
    """The check of test_killed_run_resumes_exactly, for a run with TINY + flags (tests/test_gpu.py: on CUDA)."""
    env = dict(os.environ, PRELUDE_CACHE=str(cache))
    common = ["--stages", f"text:{text_dir},text:{text_dir}", "--iters", "8", "--eval-interval", "2"] + TINY + flags
    full, cut = tmp_path / "full", tmp_path / "cut"
    subprocess.run(_cmd(*common, "--out", str(full)), env=env, check=True, capture_output=True)
    proc = subprocess.Popen(_cmd(*common, "--out", str(cut)), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill once stage 2 has written a checkpoint
        if (cut / "metrics.jsonl").exists() and any(
                json.loads(l).get("event") == "eval" and json.loads(l)["stage_index"] == 1
                for l in open(cut / "metrics.jsonl")):
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "summary.json").exists(), "the run finished before it could be killed"
    subprocess.run(_cmd(*common, "--out", str(cut), "--resume"), env=env, check=True, capture_output=True)
    a, b = losses(full), losses(cut)
    assert a.keys() == b.keys() and len(a) == 16
    events = [json.loads(l) for l in open(cut / "metrics.jsonl")]
    steps = [(e["stage_index"], e["iter"]) for e in events if e["event"] == "train"]
    assert len(steps) == len(set(steps)), "the resumed run's metrics repeat steps logged before the kill"
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-7), k
    sa = json.loads((full / "summary.json").read_text())["stages"]
    sb = json.loads((cut / "summary.json").read_text())["stages"]
    assert [s["val_loss"] for s in sa] == pytest.approx([s["val_loss"] for s in sb], rel=1e-6)


def test_ddp_two_processes_match_one_at_the_same_global_batch(cache, text_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo), batch 2 each, against 1 process with batch 4: the
    same global batches, gradients averaged by DDP. Tolerance: 1e-4 relative on every step's
    loss (float32 all-reduce sums in a different order than one process does)."""
    env = dict(os.environ, PRELUDE_CACHE=str(cache), OMP_NUM_THREADS="1")
    common = ["--stages", f"text:{text_dir}", "--iters", "6", "--eval-interval", "3"] + TINY
    common = [a for a in common]  # batch size set below
    i = common.index("--batch-size")
    one, two = list(common), list(common)
    one[i + 1], two[i + 1] = "4", "2"
    data_first = subprocess.run(_cmd(*one, "--out", str(tmp_path / "one")), env=env, capture_output=True, text=True)
    assert data_first.returncode == 0, data_first.stderr[-2000:]
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(ROOT / "train.py"), *two, "--out", str(tmp_path / "two")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert a.keys() == b.keys() and len(a) == 6
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-4), k


def test_ddp_refusal_of_the_out_folder_stops_every_rank(cache, text_dir, tmp_path):
    """torchrun into an --out holding another run's files: rank 0 refuses it, and the other rank stops with
    the same error at once (before, it waited for rank 0 at the first collective until gloo's timeout)."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    env = dict(os.environ, PRELUDE_CACHE=str(cache), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(ROOT / "train.py"), "--stages", f"text:{text_dir}", "--iters", "2", *TINY,
                          "--out", str(out)], env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode != 0 and "holds another run's files" in res.stderr
    assert "rank 0 refused --out" in res.stderr and (out / "summary.json").read_text() == "{}"


def test_init_from_copies_vocabulary_independent_groups_into_a_new_vocabulary(cache, text_dir, tmp_path):
    """--init-from a 97-token model into a GPT-2-vocabulary stage (lr 0, so nothing moves):
    attention, MLP and norms arrive; embedding, head and positions stay fresh (the paper's list)."""
    from model import GPT, GPTConfig, group_of
    torch.manual_seed(5)
    src = GPT(GPTConfig(block_size=16, vocab_size=97, n_layer=2, n_head=2, n_embd=16))
    save_checkpoint(tmp_path / "src.pt", {"model": src.state_dict()})
    out = tmp_path / "run"
    train.run(parse_args(["--stages", f"text:{text_dir}", "--iters", "1", "--lr", "0", "--min-lr", "0",
                                "--init-from", str(tmp_path / "src.pt"), "--out", str(out)] + TINY))
    got = torch.load(next(out.glob("stage0-*.pt")), weights_only=True)["model"]
    for name, p in src.named_parameters():
        if group_of(name) in ("attn", "mlp", "norm"):
            assert torch.equal(got[name], p.detach()), name
    assert not torch.equal(got["transformer.wpe.weight"], src.transformer.wpe.weight.detach())
    assert got["transformer.wte.weight"].shape == (50257, 16)
    with pytest.raises(SystemExit):
        parse_args(["--transfer", "attention"])


def test_resuming_a_finished_run_changes_nothing(cache, text_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--stages", f"text:{text_dir},text:{text_dir}", "--iters", "2", "--eval-interval", "2",
              "--out", str(out)] + TINY
    first = train.run(parse_args(common))
    again = train.run(parse_args(common + ["--resume"]))
    assert len(again["stages"]) == 2
    assert [s["val_loss"] for s in again["stages"]] == [s["val_loss"] for s in first["stages"]]
    ends = [l for l in open(out / "metrics.jsonl") if '"stage_end"' in l]
    assert len(ends) == 2


def test_chunked_corpus_batches_are_whole_chunks():
    import numpy as np
    from data.common import Corpus
    chunk = 17
    stream = np.repeat(np.arange(50, dtype=np.uint16), chunk)  # chunk k is all k
    c = Corpus("c", 100, stream, stream, decode=str, info={"chunk_len": chunk})
    x, y, _ = get_batch(c, "train", 64, chunk - 1, [0], 0, 1, torch.device("cpu"))
    rows = torch.cat([x, y[:, -1:]], 1)
    assert all(len(set(r.tolist())) == 1 for r in rows)  # no window straddles two chunks


def test_a_run_refused_at_its_start_leaves_the_folder_so_the_corrected_command_runs(cache, text_dir, tmp_path,
                                                                                    capsys):
    """--batch-size 1000000 fails the memory check before the first step; it leaves no metrics.jsonl,
    no lock, no folder, so the same command with a sane batch size is not refused."""
    out = tmp_path / "run"
    argv = ["--stages", f"text:{text_dir}", "--iters", "2", "--out", str(out)] + TINY
    with pytest.raises(SystemExit) as e:
        train.main(argv + ["--batch-size", "1000000"])
    assert e.value.code == 2 and "GiB" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()  # a folder that was there before stays, empty as it was
    with pytest.raises(SystemExit):
        train.main(argv + ["--batch-size", "1000000"])
    assert list(out.iterdir()) == []
    train.main(argv)
    assert (out / "summary.json").exists() and not (out / ".lock").exists()


def test_the_run_says_prores_is_on_and_where_its_files_are(cache, text_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(["--stages", f"text:{text_dir}", "--iters", "4", "--out", str(out), "--no-plot", "--prores",
                "--prores-T", "1.5", "--prores-schedule", "linear"] + TINY)
    said = capsys.readouterr().out.strip().splitlines()
    header = next(l for l in said if l.startswith("== stage 1/1"))
    assert "ProRes on: T 1.5 steps per layer, linear" in header
    stage = next(out.glob("stage0-*.pt"))
    assert str(out) in said[-2] and said[-1].split() == ["python", "sample.py", str(stage), "--prompt", '"..."',
                                                         "--tokens", "100"]
    assert "--tokens 1000  # writes" in summary.where_things_are(out, ["music"], {"tokenizer": "midi-events-160"})
