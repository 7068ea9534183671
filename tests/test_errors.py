"""Every error a user can cause ends in ONE line on stderr that names the input and the fix, a
non-zero exit, and no traceback: a table of bad inputs through each entry point's main()."""
import pytest

import bench
import sample
import scaling
import train
import transfer


def one_line_error(capsys, main, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip() and "it/s]" not in l and "doc/s]" not in l]
    return e.value.code, lines


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "empty").mkdir()
    junk = tmp_path / "junk"
    junk.mkdir()
    for i in range(3):
        (junk / f"p{i}.mid").write_bytes(b"MThd" + bytes(range(40)) * 3)
    (tmp_path / "notckpt.pt").write_text("not a checkpoint")
    (tmp_path / "hello.pt").write_text("hello world\n")  # a text file renamed .pt: a KeyError inside unpickling
    (tmp_path / "afile").write_text("a file, not a folder")
    return tmp_path


TRAIN_CASES = [  # (argv, words the one line must contain)
    (["--stages", "text:/no/such/folder", "--iters", "1"], ["/no/such/folder", ".txt"]),
    (["--stages", "text:{tmp}/empty", "--iters", "1"], ["empty", ".txt"]),
    (["--iters", "-5"], ["--iters", "positive"]),
    (["--stages", "prosee"], ["prosee", "Valid stages", "wiki-leads"]),
    (["--stages", "music", "--music-dir", "{tmp}/junk", "--iters", "1"], ["3 MIDI files", "valid .mid"]),
    (["--stages", "text:{text}", "--iters", "1", "--init-from", "{tmp}/nope.pt"], ["--init-from", "nope.pt", "no such file"]),
    (["--stages", "text:{text}", "--iters", "1", "--init-from", "{tmp}/notckpt.pt"], ["notckpt.pt", "not a readable"]),
    (["--transfer", "attention"], ["--transfer", "attention", "attn"]),
    (["--n-embd", "30", "--n-head", "4"], ["--n-embd 30", "--n-head 4"]),
    (["--mir-ratio", "0.5,0.2"], ["--mir-ratio", "LO,HI"]),
    (["--objective", "mdlm", "--mir"], ["--mir", "mdlm"]),
    (["--prores-schedule", "cubic"], ["cubic", "linear"]),
    (["--stages", "procedural:dyk"], ["dyk", "dyck"]),
    (["--stages", "task:adition"], ["adition", "addition"]),
    (["--stages", "text:{text}", "--unique-tokens", "1e12", "--iters", "1"], ["--unique-tokens", "training tokens"]),
    (["--stages", "task:haystack", "--block-size", "16", "--iters", "1"], ["--block-size >= 62"]),
    (["--stages", "text:{text}", "--iters", "1", "--init-from", "{tmp}/hello.pt"], ["hello.pt", "not a readable"]),
    (["--mir", "--mir-lambda", "-1"], ["--mir-lambda", "zero or more"]),
    (["--mir", "--mir-keep-first", "-4"], ["--mir-keep-first", "zero or more"]),
    (["--mir", "--mir-keep-first", "16"], ["--mir-keep-first 16", "mask nothing"]),
    (["--stages", "text:{text}", "--iters", "1", "--out", "{tmp}/afile"], ["afile", "is a file"]),
    (["--lr", "-1"], ["--lr", "zero or more"]),
    (["--poetry-lines", "0"], ["--poetry-lines", "positive"]),
    (["--poetry-lines", "-5"], ["--poetry-lines", "positive"]),
    (["--dropout", "1.5"], ["--dropout", "between 0 and 1"]),
    (["--stages", "text:{text}", "--iters", "1", "--out", "/proc/x"], ["--out /proc/x", "cannot create", "write to"]),
    (["--stages", "text:{text}", "--iters", "1", "--cache-dir", "{tmp}/afile"], ["--cache-dir", "afile", "is a file"]),
    (["--stages", "text:{text}", "--iters", "1", "--cache-dir", "{tmp}/afile/cache"],
     ["--cache-dir", "afile/cache", "cannot create", "--cache-dir a folder you can write to"]),
    (["--prores", "--prores-T", "inf"], ["--prores-T inf", "finite"]),
    (["--prores", "--prores-T", "nan"], ["--prores-T nan", "positive"]),
    (["--prores", "--prores-T", "-3"], ["--prores-T -3", "positive"]),
    (["--stages", "text:{text}", "--iters", "1", "--init-from", "{tmp}/empty"],
     ["--init-from", "is a folder", "checkpoint file", "no .pt files"]),
    (["--stages", "text:{text}", "--iters", "1", "--init-from", "{tmp}"],
     ["--init-from", "is a folder", "checkpoint file", "hello.pt", "notckpt.pt"]),
    # a step that cannot fit in memory is refused before the model is built, not left to hang
    (["--stages", "text:{text}", "--iters", "1", "--block-size", "100000", "--batch-size", "64", "--n-embd", "512",
      "--n-head", "8", "--n-layer", "8"], ["GiB", "--block-size", "--batch-size"]),
]


@pytest.mark.parametrize("argv,words", TRAIN_CASES, ids=[" ".join(c[0])[:40] for c in TRAIN_CASES])
def test_train_errors_are_one_line(argv, words, capsys, cache, text_dir, bad_files, tmp_path):
    small = ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--batch-size", "2",
             "--no-progress", "--out", str(tmp_path / "out")]  # the case's own flags come later and win
    code, lines = one_line_error(capsys, train.main, small + [a.format(tmp=bad_files, text=text_dir) for a in argv])
    errors = [l for l in lines if "error" in l.lower()]
    assert code != 0 and len(errors) == 1, lines
    assert not any("Traceback" in l for l in lines)
    for w in words:
        assert w in errors[0], (w, errors[0])
    assert not (tmp_path / "out").exists()  # a refused run leaves nothing behind, not even its folder


def test_float16_on_a_cpu_warns_in_one_line_with_its_cost(capsys, cache, text_dir, tmp_path):
    train.main(["--stages", f"text:{text_dir}", "--iters", "1", "--n-layer", "1", "--n-embd", "16", "--n-head", "2",
                "--block-size", "16", "--batch-size", "2", "--eval-iters", "1", "--no-progress", "--no-plot",
                "--device", "cpu", "--dtype", "float16", "--out", str(tmp_path / "out")])
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip() and "doc/s]" not in l]
    assert len(err) == 1 and err[0].startswith("warning: --dtype float16 on a CPU"), err
    assert "slower than float32" in err[0] and "--dtype float32" in err[0]
    assert (tmp_path / "out" / "summary.json").exists()  # a warning: the run goes on


def test_train_help_lists_the_eval_splits_once(capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--eval-splits SPLITS" in out and "{train,val,val}" not in out


def test_resume_of_a_finished_run_with_other_flags_says_which(capsys, cache, text_dir, tmp_path):
    out = str(tmp_path / "r")
    small = ["--stages", f"text:{text_dir}", "--iters", "1", "--n-layer", "1", "--n-embd", "16", "--n-head", "2",
             "--block-size", "16", "--batch-size", "2", "--eval-iters", "1", "--no-progress", "--out", out]
    train.main(small)
    capsys.readouterr()
    code, lines = one_line_error(capsys, train.main, small + ["--resume", "--n-layer", "2"])
    assert code != 0 and len(lines) == 1 and "--n-layer 2" in lines[0] and "checkpoint's run: 1" in lines[0]


SAMPLE_CASES = [
    (["{tmp}/nope.pt"], ["nope.pt", "no such file"]),
    (["{tmp}/notckpt.pt"], ["notckpt.pt", "not a readable"]),
    (["{tmp}/notckpt.pt", "--tokens", "0"], ["--tokens", "positive"]),
    (["{tmp}/hello.pt"], ["hello.pt", "not a readable"]),
    (["{tmp}/notckpt.pt", "--midi", "/no/such/dir/x.mid"], ["--midi", "/no/such/dir", "no folder"]),
]


@pytest.mark.parametrize("argv,words", SAMPLE_CASES)
def test_sample_errors_are_one_line(argv, words, capsys, bad_files):
    code, lines = one_line_error(capsys, sample.main, [a.format(tmp=bad_files) for a in argv])
    assert code != 0 and len(lines) == 1 and all(w in lines[0] for w in words), lines


@pytest.mark.parametrize("argv,words", [(["--shapes", "d999"], ["d999", "d64"]), (["--rounds", "0"], ["--rounds"]),
                                        (["--device", "cuda:7"], ["cuda", "--device cpu"])])
def test_bench_errors_are_one_line(argv, words, capsys):
    import torch
    if "cuda:7" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA machine")
    code, lines = one_line_error(capsys, bench.main, argv)
    assert code != 0 and len(lines) == 1 and all(w in lines[0] for w in words), lines


def test_transfer_merge_errors_are_one_line(capsys, bad_files):
    code, lines = one_line_error(capsys, transfer.main, ["merge", "--attn", str(bad_files / "notckpt.pt"),
                                                         "-o", str(bad_files / "m.pt")])
    assert code != 0 and len(lines) == 1 and "notckpt.pt" in lines[0]


def test_transfer_merge_into_a_missing_folder_is_one_line(capsys, bad_files):
    code, lines = one_line_error(capsys, transfer.main, ["merge", "--attn", str(bad_files / "notckpt.pt"),
                                                         "-o", "/no/such/dir/m.pt"])
    assert code == 2 and len(lines) == 1 and "/no/such/dir" in lines[0], lines


@pytest.mark.parametrize("content", [None, b"\x00\x01junk\xff", b"N;U;D;loss\n1;2;3;4\n"],
                         ids=["missing", "binary", "semicolons"])
def test_scaling_fit_of_a_bad_csv_is_one_line(content, capsys, tmp_path):
    path = tmp_path / "runs.csv"
    if content is not None:
        path.write_bytes(content)
    code, lines = one_line_error(capsys, scaling.main, ["fit", str(path)])
    assert code == 2 and len(lines) == 1 and "runs.csv" in lines[0], lines


EXPERIMENT_CASES = [["--bogus"], ["--seeds", "-1"], ["--seeds", "x"], ["--jobs", "0"]]


@pytest.mark.parametrize("name", ["ladder", "procedural", "data_constrained", "prores"])
@pytest.mark.parametrize("argv", EXPERIMENT_CASES, ids=[" ".join(c) for c in EXPERIMENT_CASES])
def test_experiment_errors_are_one_line(name, argv, capsys, monkeypatch, tmp_path):
    import importlib
    from experiments.lib import common
    exp = importlib.import_module(f"experiments.{name}")

    def no_training(*a, **k):
        raise AssertionError("a bad flag got as far as training")
    monkeypatch.setattr(common, "run_sweep", no_training)
    monkeypatch.setattr(exp, "run_sweep", no_training, raising=False)
    code, lines = one_line_error(capsys, lambda a: common.main_guard(lambda: exp.main(a)),
                                 argv + ["--out", str(tmp_path / "out")])
    assert code != 0 and len(lines) == 1 and "Traceback" not in lines[0], lines


@pytest.mark.parametrize("name", ["ladder", "procedural", "data_constrained", "prores"])
@pytest.mark.parametrize("out", ["/proc/x", "{tmp}/afile/sub"], ids=["proc", "under-a-file"])
def test_experiment_out_that_cannot_be_written_is_one_line(name, out, capsys, bad_files):
    """An unusable --out is refused when the flags are parsed, before any run or folder is made."""
    import importlib
    from experiments.lib import common
    exp = importlib.import_module(f"experiments.{name}")
    code, lines = one_line_error(capsys, lambda a: common.main_guard(lambda: exp.main(a)),
                                 ["--plan", "--out", out.format(tmp=bad_files)])
    assert code == 2 and len(lines) == 1 and "--out" in lines[0] and "write" in lines[0], lines
    assert not (bad_files / "afile").is_dir()
