"""Every error a user can cause ends in ONE line on stderr that names the input and the fix, a
non-zero exit, and no traceback: a table of bad inputs through each entry point's main(). The tools
(sample.py, transfer.py, scaling.py, bench.py) also write nothing when they refuse, and sample.py's
music samples land beside their checkpoint (not in the current folder) by default."""
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import bench
import sample
import scaling
import train
import transfer
from checkpoint import save_checkpoint
from model import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[1]


def refusal(capsys, main, argv):
    """(exit status, the stderr lines but progress bars, stdout) of a main() that must exit."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    lines = [l for l in err.splitlines() if l.strip() and "it/s]" not in l and "doc/s]" not in l]
    return e.value.code, lines, out


def one_line_error(capsys, main, argv):
    return refusal(capsys, main, argv)[:2]


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


# ---------------------------------------------------------------------------------------------
# the tools: sample.py, transfer.py merge, scaling.py, bench.py

def assert_one_line(code, lines, words):
    assert code == 2 and len(lines) == 1, lines
    assert "Traceback" not in lines[0] and "error" in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])


def save(path, vocab, tokenizer=None, **kw):
    torch.manual_seed(0)
    cfg = GPTConfig(**{**dict(block_size=32, vocab_size=vocab, n_layer=1, n_head=2, n_embd=16), **kw})
    save_checkpoint(path, {"model": GPT(cfg).state_dict(), "model_config": cfg.__dict__, "tokenizer": tokenizer})
    return path


@pytest.fixture(scope="module")
def music_ckpt(tmp_path_factory):
    """A music stage checkpoint of a tiny train.py run (2 steps on synthetic music)."""
    import train
    root = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRELUDE_CACHE", str(root / "cache"))
        train.main(["--stages", "music-synthetic", "--synthetic-tokens", "5000", "--iters", "2", "--n-layer", "1",
                    "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--batch-size", "2",
                    "--eval-iters", "1", "--threads", "1", "--no-progress", "--out", str(root / "out")])
    path = root / "out" / "stage0-music-synthetic.pt"
    assert path.is_file()
    return path


@pytest.fixture
def files(tmp_path, music_ckpt):
    """{name: path}: checkpoints of each kind and a few unusable paths."""
    (tmp_path / "afile").write_text("a file, not a folder")
    (tmp_path / "junk.mid").write_bytes(b"MThd" + bytes(range(40)))
    return dict(tmp=tmp_path, music=shutil.copy(music_ckpt, tmp_path / "music.pt"),
                text=save(tmp_path / "text.pt", 50257, "gpt2"),
                proc=save(tmp_path / "proc.pt", 20, "procedural-20"),
                task=save(tmp_path / "task.pt", 174, "tasks-174"),
                mdlm=save(tmp_path / "mdlm.pt", 21, "procedural-20", causal=False))


SAMPLE_INPUTS = [  # (argv, words the one line must contain)
    (["{music}", "--tokens", "-5"], ["--tokens", "positive"]),
    (["{music}", "--temperature", "nan"], ["--temperature", "finite", "nan"]),
    (["{music}", "--temperature", "inf"], ["--temperature", "finite", "inf"]),
    (["{music}", "--temperature", "-1"], ["--temperature", "zero or more", "0 = greedy"]),
    (["{music}", "--top-k", "-1"], ["--top-k", "zero", "positive"]),
    (["{music}", "--seed", str(2 ** 64)], ["--seed", "out of range"]),
    (["{music}", "--device", "bogus"], ["--device 'bogus'", "cpu"]),
    (["{music}", "--device", "cuda:99"], ["--device cuda:99", "cpu"]),
    (["{music}", "--prompt", "The river"], ["'The river'", "music checkpoint cannot encode text", ".mid"]),
    (["{music}", "--prompt", "{tmp}/none.mid"], ["none.mid", "no such file", ".mid file"]),
    (["{music}", "--prompt", "{tmp}/junk.mid"], ["junk.mid", "not a readable MIDI file"]),
    (["{music}", "--midi", "{tmp}/afile/x.mid"], ["--midi", "afile is a file, not a folder"]),
    (["{music}", "--midi", "{tmp}/nowhere/x.mid"], ["--midi", "no folder", "nowhere"]),
    (["{music}", "--midi", ""], ["--midi", "empty path"]),
    (["{music}", "--steps", "4"], ["--steps", "autoregressive", "MDLM"]),
    (["{text}", "--cache-dir", "{tmp}/afile"], ["--cache-dir", "afile", "writable folder"]),
    (["{text}", "--cache-dir", "{tmp}/afile/cache"], ["--cache-dir", "afile/cache", "writable folder"]),
    (["{text}", "--midi", "{tmp}/x.mid"], ["--midi", "not a music checkpoint"]),
    (["{proc}", "--prompt", "hello"], ["'hello'", "token ids", "0 to 19"]),
    (["{proc}", "--prompt", "3 25"], ["'25'", "0 to 19"]),
    (["{task}", "--prompt", "12a+3="], ["'a'", "k0..k29", "v1..v127"]),
    (["{task}", "--prompt", "k30 v1"], ["'k30'", "k0..k29"]),
    (["{mdlm}", "--prompt", "1 2"], ["--prompt", "MDLM", "leave out --prompt"]),
    (["{mdlm}", "--top-k", "5"], ["--top-k", "MDLM"]),
    (["{mdlm}", "--tokens", "100"], ["--tokens 100", "32 or fewer"]),
]


@pytest.mark.parametrize("argv,words", SAMPLE_INPUTS, ids=[" ".join(c[0][1:])[:40] for c in SAMPLE_INPUTS])
def test_sample_refuses_bad_input_and_writes_nothing(argv, words, files, capsys, cache, monkeypatch):
    if "cuda:99" in argv and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 CUDA devices")
    monkeypatch.chdir(files["tmp"])
    before = sorted(files["tmp"].rglob("*"))
    code, lines, out = refusal(capsys, sample.main, [a.format(**files) for a in argv])
    assert_one_line(code, lines, [w.format(**files) for w in words])
    assert out == "" and sorted(files["tmp"].rglob("*")) == before  # refused before sampling or writing


def test_sample_temperature_zero_is_greedy_as_documented(files, capsys):
    """--temperature 0 is allowed and said to be greedy: every seed draws the argmax path."""
    runs = []
    for seed in ("0", "1"):
        sample.main([str(files["proc"]), "--prompt", "3 5", "--tokens", "6", "--temperature", "0", "--seed", seed])
        runs.append(capsys.readouterr().out.split())
    model, _ = sample.load_model(files["proc"])
    x = torch.tensor([[3, 5]])
    with torch.no_grad():
        for _ in range(6):
            x = torch.cat([x, model(x)[0][:, -1].argmax(-1, keepdim=True)], 1)
    assert runs[0] == runs[1] == [str(t) for t in x[0].tolist()]


def test_sample_help_says_zero_temperature_is_greedy(capsys):
    with pytest.raises(SystemExit):
        sample.main(["--help"])
    assert "0 = greedy" in " ".join(capsys.readouterr().out.split())


def test_sample_music_goes_beside_the_checkpoint_by_default(files, tmp_path, capsys, monkeypatch):
    """Not into the current folder: <checkpoint>-sample.mid and .png beside the checkpoint; several
    samples are numbered; --midi with a folder puts the default name in it; git ignores them all."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ckpt = files["music"]
    sample.main([str(ckpt), "--tokens", "40", "--temperature", "1"])
    mid, png = ckpt.with_name("music-sample.mid"), ckpt.with_name("music-sample.png")
    assert mid.read_bytes()[:4] == b"MThd" and png.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.startswith(f"wrote {mid}: ")
    sample.main([str(ckpt), "--tokens", "40", "--samples", "2"])
    assert all(ckpt.with_name(f"music-sample-{i}{s}").is_file() for i in (0, 1) for s in (".mid", ".png"))
    (tmp_path / "elsewhere").mkdir()
    sample.main([str(ckpt), "--tokens", "40", "--midi", str(tmp_path / "elsewhere")])
    assert (tmp_path / "elsewhere" / "music-sample.mid").is_file()
    assert list(work.iterdir()) == []                                   # nothing in the current folder
    assert not [p for p in tmp_path.rglob(".*") if ".tmp" in p.name or ".probe" in p.name]  # no leftovers
    if (ROOT / ".git").exists():  # the repository's .gitignore covers what sample.py writes by default
        names = ["out/run/stage0-music-sample.mid", "out/run/stage0-music-sample.png", "x/stage0-music-sample-1.mid",
                 "y/z-sample-0.png", "sample.mid", "sample.png", ".merged.pt.tmp-123"]
        r = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
        assert r.stdout.split() == names, r.stdout


def test_sample_music_continues_a_midi_prompt(files, tmp_path, capsys):
    """--prompt piece.mid: the sample starts with the prompt's notes, where they were."""
    from data import midi
    piece = tmp_path / "piece.mid"
    notes = [midi.Note(0.0, 0.5, 60, 80), midi.Note(0.5, 1.0, 64, 80), midi.Note(1.0, 1.5, 67, 80)]
    midi.notes_to_midi(notes).save(piece)
    sample.main([str(files["music"]), "--prompt", str(piece), "--tokens", "20", "--midi", str(tmp_path / "c.mid")])
    got = {(round(n.start, 2), n.pitch) for n in midi.midi_to_notes(tmp_path / "c.mid")}
    assert {(round(n.start, 2), n.pitch) for n in notes} <= got


def mismatched(tmp_path):
    a = save(tmp_path / "a.pt", 160, n_layer=2)
    wide = save(tmp_path / "wide.pt", 160, n_layer=2, n_embd=32)
    deep = save(tmp_path / "deep.pt", 160, n_layer=3)
    return a, wide, deep


def test_transfer_merge_of_mismatched_checkpoints_is_one_short_line(tmp_path, capsys):
    """A few tensors with their shapes, the count of the rest, the fix: not every tensor."""
    a, wide, deep = mismatched(tmp_path)
    out = tmp_path / "m.pt"
    code, lines, _ = refusal(capsys, transfer.main, ["merge", "--attn", str(a), "--mlp", str(wide),
                                                            "-o", str(out)])
    assert_one_line(code, lines, [f"--mlp {wide}", f"(--attn {a})", "8 mlp tensors",
                                  "transformer.h.0.mlp.c_fc.weight (128, 32) vs (64, 16)", "and 5 more",
                                  "--n-embd"])
    assert lines[0].count("transformer.") == transfer.SHOWN and len(lines[0]) < 450 + 2 * len(str(tmp_path))
    # a deeper source: its extra layer has no place in the base (once copied silently, the layer lost)
    code, lines, _ = refusal(capsys, transfer.main, ["merge", "--attn", str(a), "--mlp", str(deep),
                                                            "-o", str(out)])
    assert_one_line(code, lines, [f"--mlp {deep}", "4 mlp tensors", "transformer.h.2.mlp.c_fc.weight (64, 16) vs none",
                                  "and 1 more", "--n-layer"])
    code, lines, _ = refusal(capsys, transfer.main, ["merge", "--attn", str(deep), "--mlp", str(a),
                                                            "-o", str(out)])
    assert_one_line(code, lines, ["transformer.h.2.mlp.c_fc.weight missing vs (64, 16)", "--n-layer"])
    assert not out.exists()


TRANSFER_CASES = [
    (["-o", "{tmp}/afile/m.pt"], ["-o", "afile is a file, not a folder"]),
    (["-o", "{tmp}/nowhere/m.pt"], ["-o", "no folder", "nowhere"]),
    (["-o", "{tmp}"], ["-o", "is a folder", "merged.pt"]),
    (["-o", ""], ["-o", "empty path"]),
]


@pytest.mark.parametrize("argv,words", TRANSFER_CASES, ids=[" ".join(c[0]) for c in TRANSFER_CASES])
def test_transfer_merge_output_errors_are_one_line(argv, words, tmp_path, capsys):
    (tmp_path / "afile").write_text("a file")
    a = save(tmp_path / "a.pt", 160)
    before = sorted(tmp_path.rglob("*"))
    code, lines, _ = refusal(capsys, transfer.main, ["merge", "--attn", str(a)] +
                                    [x.format(tmp=tmp_path) for x in argv])
    assert_one_line(code, lines, [w.format(tmp=tmp_path) for w in words])
    assert sorted(tmp_path.rglob("*")) == before


RUNS = "N,U,D,loss\n" + "".join(f"{n:g},{u:g},{u:g},{4 - 0.1 * i - (0.1 if u > 1e8 else 0):.3f}\n"
                                for u in (1e8, 1e9) for i, n in enumerate((1e6, 2e6, 4e6, 8e6)))

SCALING_CASES = [
    (["compare", "{csv}", "--png", "{tmp}"], ["--png", "is a folder", "laws.png"]),
    (["compare", "{csv}", "--png", "{tmp}/laws"], ["--png", "no image suffix", ".png"]),
    (["compare", "{csv}", "--png", "{tmp}/laws.svgx"], ["--png", "unknown image suffix", ".png"]),
    (["compare", "{csv}", "--png", ""], ["--png", "empty path"]),
    (["compare", "{csv}", "--png", "{tmp}/afile/laws.png"], ["--png", "afile is a file, not a folder"]),
    (["fit", "/proc/self/mem"], ["/proc/self/mem", "cannot read it"]),
]


@pytest.mark.parametrize("argv,words", SCALING_CASES, ids=[" ".join(c[0][2:]) or c[0][1] for c in SCALING_CASES])
def test_scaling_errors_are_one_line_before_any_fit(argv, words, tmp_path, capsys):
    if "/proc/self/mem" in argv and not Path("/proc/self/mem").exists():
        pytest.skip("no /proc")
    (tmp_path / "afile").write_text("a file")
    (tmp_path / "runs.csv").write_text(RUNS)
    code, lines, out = refusal(capsys, scaling.main, [a.format(tmp=tmp_path, csv=tmp_path / "runs.csv")
                                                             for a in argv])
    assert_one_line(code, lines, words)
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "runs.csv"]


BENCH_INPUTS = [
    (["--device", "bogus"], ["--device 'bogus'", "cpu"]),
    (["--device", "meta"], ["--device meta", "cpu"]),
    (["--curve", "-1", "--shapes", "d999"], ["--curve", "positive"]),  # (d999: were it let through, no bench)
    (["--curve", "5", "--shapes", "d999"], ["--curve", "out", "writable folder"]),  # ./out is a file here
]


@pytest.mark.parametrize("argv,words", BENCH_INPUTS, ids=[" ".join(c[0]) for c in BENCH_INPUTS])
def test_bench_refuses_bad_input_and_writes_nothing(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").write_text("a file where bench.py puts its plot folder")
    code, lines, out = refusal(capsys, bench.main, argv)
    assert_one_line(code, lines, words)
    assert out == ""
