"""A user's second day (issue #59): the tools refuse what would lose work, in one line naming the input and the
fix, exit status 2, nothing written: transfer.py merge over an existing file or its own input, results.py over a
missing or torn report.json, sample.py past its --tokens cap, an experiment's --out holding another experiment's
report; sample.py's long samples show a progress bar, Ctrl-C keeps what was drawn (one line, exit 130), and a
prompt longer than the model's context is said in one line."""
import json
import shutil
from pathlib import Path

import pytest
import torch

import results
import sample
import transfer
from model import GPT
from test_errors import assert_one_line, one_line_error, refusal, save
from test_sample import save_tiny

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ["ladder", "procedural", "data_constrained", "prores"]


def files_in(folder):
    return {p: p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------
# transfer.py merge -o: never over one of its inputs; over another existing file only with --force

@pytest.mark.parametrize("flag", ["--attn", "--mlp", "--base"])
def test_merge_refuses_to_write_over_one_of_its_inputs(flag, tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    a, b = save(tmp_path / "a.pt", 160), save(tmp_path / "b.pt", 160)
    argv = ["merge", "--attn", str(a), "--mlp", str(b)] + (["--base", str(b)] if flag == "--base" else [])
    target = {"--attn": a, "--mlp": b, "--base": b}[flag]
    before = files_in(tmp_path)
    for spelling in (str(target), str(tmp_path / "sub" / ".." / target.name)):  # compared as resolved paths
        code, lines, out = refusal(capsys, transfer.main, argv + ["-o", spelling, "--force"])
        assert_one_line(code, lines, [f"-o {spelling}", flag, "would replace", "another path"])
        assert out == "" and files_in(tmp_path) == before


def test_merge_refuses_an_existing_file_unless_force(tmp_path, capsys):
    a = save(tmp_path / "a.pt", 160)
    out = tmp_path / "m.pt"
    out.write_bytes(b"an earlier merge")
    code, lines, printed = refusal(capsys, transfer.main, ["merge", "--attn", str(a), "-o", str(out)])
    assert_one_line(code, lines, [f"-o {out}", "exists", "--force"])
    assert printed == "" and out.read_bytes() == b"an earlier merge"
    transfer.main(["merge", "--attn", str(a), "-o", str(out), "--force"])
    assert capsys.readouterr().out.startswith(f"wrote {out}: ")
    assert torch.load(out, weights_only=True)["stage"] == "merge"


# ---------------------------------------------------------------------------------------------
# results.py: a missing or torn report.json is one line (exit 2); out of date stays exit 1

@pytest.fixture
def results_copy(tmp_path, monkeypatch):
    """results.py reading a copy of the reports, README.md and RESULTS.md in tmp_path (the committed ones untouched)."""
    for f in [ROOT / "README.md", ROOT / "RESULTS.md", *(ROOT / "experiments" / "results").glob("*/report.*")]:
        if f.suffix in (".md", ".json"):
            (tmp_path / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, tmp_path / f.relative_to(ROOT))
    monkeypatch.setattr(results, "ROOT", tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path / "experiments" / "results")
    return tmp_path


# a paper's report; one shown beside it; one another script makes (the fix names that script)
@pytest.mark.parametrize("name", ["procedural", "ladder-headline", "procedural-reference"])
@pytest.mark.parametrize("damage", ["missing", "torn", "binary", "not-an-object"])
@pytest.mark.parametrize("check", [[], ["--check"]], ids=["write", "check"])
def test_results_with_a_missing_or_torn_report_is_one_line(name, damage, check, results_copy, capsys):
    path = results_copy / "experiments" / "results" / name / "report.json"
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes({"torn": path.read_bytes()[:500], "binary": b"\xff\xfe\x00junk",
                          "not-an-object": b"[1, 2]"}[damage])
    before = files_in(results_copy)
    code, lines, out = refusal(capsys, results.main, check)
    assert_one_line(code, lines, [f"experiments/results/{name}/report.json", "git checkout --",
                                  {"procedural": "experiments/procedural.py", "ladder-headline": "experiments/ladder.py",
                                   "procedural-reference": "reference/cross.py"}[name] + " --report-only"])
    assert ("missing" in lines[0]) == (damage == "missing")
    assert out == "" and files_in(results_copy) == before  # neither README.md nor RESULTS.md rewritten


def test_results_check_out_of_date_is_still_exit_1(results_copy, capsys):
    results.main(["--check"])
    assert "match the reports" in capsys.readouterr().out
    (results_copy / "RESULTS.md").write_text("# Results\n\nedited by hand\n")
    code, lines, _ = refusal(capsys, results.main, ["--check"])
    assert code == 1 and len(lines) == 1 and "out of date: RESULTS.md" in lines[0], lines


# ---------------------------------------------------------------------------------------------
# sample.py: a cap on --tokens, a progress bar, Ctrl-C, a prompt longer than the context

def test_sample_refuses_tokens_over_the_cap_and_says_it_in_help(tmp_path, capsys, monkeypatch):
    save_tiny(tmp_path / "music.pt", 160)
    monkeypatch.chdir(tmp_path)
    before = files_in(tmp_path)
    code, lines, out = refusal(capsys, sample.main, [str(tmp_path / "music.pt"), "--tokens", "100000000"])
    assert_one_line(code, lines, ["--tokens 100,000,000", "cap of 1,000,000", "one pass of the model",
                                  "--tokens 1000000 or fewer"])
    assert out == "" and files_in(tmp_path) == before
    with pytest.raises(SystemExit):
        sample.main(["--help"])
    assert "at most 1,000,000" in " ".join(capsys.readouterr().out.split())
    assert sample.MAX_TOKENS == 1_000_000 and 100 <= sample.PROGRESS_FROM <= 1000  # a few hundred tokens


def test_sample_shows_a_progress_bar_for_long_samples_only(tmp_path, capsys, monkeypatch):
    proc = save(tmp_path / "proc.pt", 20, "procedural-20")
    monkeypatch.setattr(sample, "PROGRESS_FROM", 5)
    sample.main([str(proc), "--tokens", "5"])
    assert capsys.readouterr().err == ""
    sample.main([str(proc), "--tokens", "6"])
    out, err = capsys.readouterr()
    assert "6/6" in err and "token" in err and len(out.split()) == 7


def test_sample_generate_draws_what_gpt_generate_draws(tmp_path):
    """generate() fills its sample a token at a time: the same tokens as GPT.generate, past the context too."""
    model, ck = sample.load_model(save(tmp_path / "proc.pt", 20, "procedural-20"))
    prompt = [3, 5] * 20  # 40 tokens, longer than the context of 32
    got = sample.generate(model, ck, prompt, 30, 2, 1.0, 7, torch.Generator().manual_seed(4), None)
    want = model.generate(torch.tensor([prompt] * 2), 30, 1.0, 7, generator=torch.Generator().manual_seed(4),
                          vocab_limit=20)
    assert torch.equal(got, want)


def interrupt_after(monkeypatch, steps):
    """Ctrl-C as GPT.generate is called for the (steps + 1)-th token."""
    calls, real = [], GPT.generate

    def gen(self, *a, **k):
        calls.append(1)
        if len(calls) > steps:
            raise KeyboardInterrupt
        return real(self, *a, **k)
    monkeypatch.setattr(GPT, "generate", gen)


def test_sample_ctrl_c_prints_the_tokens_drawn_so_far_in_one_line(tmp_path, capsys, monkeypatch):
    proc = save(tmp_path / "proc.pt", 20, "procedural-20")
    interrupt_after(monkeypatch, 3)
    code, lines, out = refusal(capsys, sample.main, [str(proc), "--prompt", "3 5", "--tokens", "50"])
    assert code == 130 and len(lines) == 1, lines
    assert "Traceback" not in lines[0] and "interrupted (Ctrl-C) after 3 of 50 tokens" in lines[0]
    assert "printed" in lines[0] and out.split()[:2] == ["3", "5"] and len(out.split()) == 5


def test_sample_ctrl_c_writes_the_music_drawn_so_far(tmp_path, capsys, monkeypatch):
    save_tiny(tmp_path / "music.pt", 160)
    interrupt_after(monkeypatch, 4)
    code, lines, out = refusal(capsys, sample.main, [str(tmp_path / "music.pt"), "--tokens", "60",
                                                     "--midi", str(tmp_path / "piece.mid")])
    assert code == 130 and len(lines) == 1 and "after 4 of 60 tokens" in lines[0] and "wrote" in lines[0], lines
    assert out.startswith(f"wrote {tmp_path / 'piece.mid'}: ")
    assert (tmp_path / "piece.mid").read_bytes()[:4] == b"MThd"
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_sample_ctrl_c_before_any_token_is_one_line(tmp_path, capsys, monkeypatch):
    proc = save(tmp_path / "proc.pt", 20, "procedural-20")

    def stopped(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(sample, "load_model", stopped)
    code, lines, out = refusal(capsys, sample.main, [str(proc)])
    assert code == 130 and lines == ["sample.py: interrupted (Ctrl-C); nothing more printed or written"], lines
    assert out == ""


def test_sample_says_when_the_prompt_is_longer_than_the_context(tmp_path, capsys):
    proc = save(tmp_path / "proc.pt", 20, "procedural-20")  # context 32
    sample.main([str(proc), "--prompt", " ".join(["3"] * 32), "--tokens", "2"])
    assert capsys.readouterr().err == ""
    sample.main([str(proc), "--prompt", " ".join(["3"] * 40), "--tokens", "2"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and "the prompt is 40 tokens" in lines[0] and "the last 32" in lines[0], lines
    assert "shorter --prompt" in lines[0] and len(out.split()) == 42


# ---------------------------------------------------------------------------------------------
# experiments: an --out holding another experiment's report is refused

def fake_report(folder, script):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps({"verdicts": [], "provenance": {
        "command": f"python experiments/{script}.py --jobs 2", "wall_seconds": 1.0}}))
    return folder


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_refuses_an_out_holding_another_experiments_report(name, tmp_path, capsys):
    import importlib
    from experiments.lib import common
    exp = importlib.import_module(f"experiments.{name}")
    other = EXPERIMENTS[(EXPERIMENTS.index(name) + 1) % len(EXPERIMENTS)]
    folder = fake_report(tmp_path / "shared", other)
    before = files_in(tmp_path)
    code, lines = one_line_error(capsys, lambda a: common.main_guard(lambda: exp.main(a)),
                                 ["--plan", "--out", str(folder)])
    assert_one_line(code, lines, [f"--out {folder}", f"experiments/{other}.py", "another --out"])
    assert files_in(tmp_path) == before
    for own in (fake_report(tmp_path / "own", name), tmp_path / "new", tmp_path / "torn"):  # these are its to use
        (tmp_path / "torn").mkdir(exist_ok=True)
        (tmp_path / "torn" / "report.json").write_text('{"provenance": {"comm')
        assert Path(exp.parse_args(["--out", str(own)]).out) == own
