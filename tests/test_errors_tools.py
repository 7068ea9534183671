"""The tools' bad inputs (sample.py, transfer.py, scaling.py, bench.py): each ends in ONE line on
stderr naming the input and the fix, exit status 2, no traceback, and nothing written; and
sample.py's music samples land beside their checkpoint (not in the current folder) by default."""
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import bench
import sample
import scaling
import transfer
from checkpoint import save_checkpoint
from model import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[1]


def one_line_error(capsys, main, argv):  # as tests/test_errors.py checks it
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    lines = [l for l in err.splitlines() if l.strip() and "it/s]" not in l and "doc/s]" not in l]
    return e.value.code, lines, out


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


SAMPLE_CASES = [  # (argv, words the one line must contain)
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


@pytest.mark.parametrize("argv,words", SAMPLE_CASES, ids=[" ".join(c[0][1:])[:40] for c in SAMPLE_CASES])
def test_sample_errors_are_one_line(argv, words, files, capsys, cache, monkeypatch):
    if "cuda:99" in argv and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 CUDA devices")
    monkeypatch.chdir(files["tmp"])
    before = sorted(files["tmp"].rglob("*"))
    code, lines, out = one_line_error(capsys, sample.main, [a.format(**files) for a in argv])
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
    code, lines, _ = one_line_error(capsys, transfer.main, ["merge", "--attn", str(a), "--mlp", str(wide),
                                                            "-o", str(out)])
    assert_one_line(code, lines, [f"--mlp {wide}", f"(--attn {a})", "8 mlp tensors",
                                  "transformer.h.0.mlp.c_fc.weight (128, 32) vs (64, 16)", "and 5 more",
                                  "--n-embd"])
    assert lines[0].count("transformer.") == transfer.SHOWN and len(lines[0]) < 450 + 2 * len(str(tmp_path))
    # a deeper source: its extra layer has no place in the base (once copied silently, the layer lost)
    code, lines, _ = one_line_error(capsys, transfer.main, ["merge", "--attn", str(a), "--mlp", str(deep),
                                                            "-o", str(out)])
    assert_one_line(code, lines, [f"--mlp {deep}", "4 mlp tensors", "transformer.h.2.mlp.c_fc.weight (64, 16) vs none",
                                  "and 1 more", "--n-layer"])
    code, lines, _ = one_line_error(capsys, transfer.main, ["merge", "--attn", str(deep), "--mlp", str(a),
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
    code, lines, _ = one_line_error(capsys, transfer.main, ["merge", "--attn", str(a)] +
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
    code, lines, out = one_line_error(capsys, scaling.main, [a.format(tmp=tmp_path, csv=tmp_path / "runs.csv")
                                                             for a in argv])
    assert_one_line(code, lines, words)
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "runs.csv"]


BENCH_CASES = [
    (["--device", "bogus"], ["--device 'bogus'", "cpu"]),
    (["--device", "meta"], ["--device meta", "cpu"]),
    (["--curve", "-1", "--shapes", "d999"], ["--curve", "positive"]),  # (d999: were it let through, no bench)
    (["--curve", "5", "--shapes", "d999"], ["--curve", "out", "writable folder"]),  # ./out is a file here
]


@pytest.mark.parametrize("argv,words", BENCH_CASES, ids=[" ".join(c[0]) for c in BENCH_CASES])
def test_bench_errors_are_one_line(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").write_text("a file where bench.py puts its plot folder")
    code, lines, out = one_line_error(capsys, bench.main, argv)
    assert_one_line(code, lines, words)
    assert out == ""
