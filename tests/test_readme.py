"""The README is a learner's first page: no statistics (no p-value, no ±), every number on it written there by
results.py from a report, a reading order whose files and functions exist, and quick-start commands that .ci/run
runs as written (at a tiny budget)."""
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import results  # noqa: E402

README = (ROOT / "README.md").read_text()


def without_what_results_py_writes(text):
    """The README less results.py's blocks, its code (indented blocks and `inline`), arXiv ids and the numbers of
    its headings and lists: the prose a person wrote."""
    text = re.sub(r"<!-- results.py: (.+?) -->.*?<!-- end: \1 -->", "", text, flags=re.S)
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("    "))
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"arXiv \d{4}\.\d{5}", "", text)
    return re.sub(r"(?m)^(#+ |\s*)\d+\. ", "", text)


def test_no_statistics_on_the_readme():
    assert "±" not in README and not re.search(r"\bp [=<] ?[0-9.]", README)


def test_every_number_on_the_readme_is_written_by_results_py():
    """Outside results.py's blocks a number can only stand in code (a command, a flag) or an arXiv id; the blocks
    are what results.py makes from the reports (test_house: results.py --check)."""
    left = without_what_results_py_writes(README)
    assert not re.findall(r".{0,30}\d.{0,30}", left), re.findall(r".{0,30}\d.{0,30}", left)
    for key, text in results.readme_blocks().items():
        assert f"<!-- results.py: {key} -->\n{text}\n<!-- end: {key} -->" in README, key


def test_the_check_can_fail():
    assert without_what_results_py_writes("a 4-layer GPT") == "a 4-layer GPT"
    assert not re.search(r"\d", without_what_results_py_writes("## 1. The ladder\n`--iters 5` arXiv 2604.21265"))


def test_the_headline_table_gives_each_papers_headline_claim_in_every_regime():
    """Per paper, each headline claim's verdict in every report that reads it (its own, SHOWN, the earlier presets'),
    as the reports say, in one sentence."""
    table = results.headline_table()
    for name, _ in results.PAPERS:
        for what, texts, extra in results.HEADLINES[name]:
            row = next(ln for ln in table if f"| {what} (" in ln)
            for folder in results.reports_of(name) + list(extra):
                v = next((v for v in results.load(folder)["verdicts"] if v["claim"] in texts), None)
                if v and v["verdict"] != "not measured":
                    at = row.index(f"](experiments/results/{folder}/report.md)")
                    said = max((w for w in results.VERDICTS if f"**{w}**" in row[:at]), key=lambda w: row[:at].rindex(
                        f"**{w}**"))
                    assert said == v["verdict"], (what, folder, said, v["verdict"])


def test_the_reading_order_names_each_file_and_a_function_that_exists():
    section = README.split("## Read the code in this order", 1)[1].split("\n## ", 1)[0]
    named = {"model.py": "GPT.forward", "train.py": "train_step", "prores.py": "alpha", "mir.py": "masked_copy",
             "transfer.py": "transfer", "data/procedural.py": "generate", "scaling.py": "softq"}
    for path, func in named.items():
        assert f"`{path}`" in section and f"`{func}`" in section, (path, func)
        tree = ast.parse((ROOT / path).read_text())
        *owner, name = func.split(".")
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner[0]) if owner else tree
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in scope.body), (path, func)


def test_the_quick_start_commands_are_what_ci_runs():
    """Each command of the quick start stands in .ci/run as typed, a tiny budget after it; torch's pin is
    requirements.txt's."""
    block = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [ln.strip().split("  #")[0].strip() for ln in block.splitlines() if ln.startswith("    python")]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in commands and len(commands) >= 3
    for c in commands:
        if not c.startswith("python -m venv"):
            assert c.replace("out/run", '"$smoke/run"') in ci or c in ci, c
    pin = re.search(r"torch==[\d.]+", README).group()
    assert pin in (ROOT / "requirements.txt").read_text()
