"""The house rules that a refactor could silently break: imports run one way (experiment scripts
use experiments/lib, lib uses the core), the repository stands alone (it cites no file a clone
does not have), the README stays short, and RESULTS.md is what the reports say."""
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {p.stem for p in (ROOT / "experiments").glob("*.py")}


def imported_modules(path):
    """Every module name an `import` or `from ... import` in the file names (with the names
    imported from a package, so `from experiments import ladder` counts as experiments.ladder)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_experiments_lib_imports_no_experiment_script():
    for path in (ROOT / "experiments" / "lib").glob("*.py"):
        bad = {m for m in imported_modules(path) if m.split(".")[:2] in (["experiments", s] for s in SCRIPTS)}
        assert not bad, f"{path.name} imports the experiment script(s) {sorted(bad)}; move what it needs into lib"


def test_the_core_imports_neither_experiments_nor_the_loop():
    for name in ("model.py", "prores.py", "mir.py", "diffusion.py", "transfer.py", "lm_loss.py", "scaling.py"):
        mods = imported_modules(ROOT / name)
        assert not {m for m in mods if m.split(".")[0] in ("experiments", "train", "batches")}, (name, mods)
    for path in (ROOT / "data").glob("*.py"):
        mods = imported_modules(path)
        ours = {m.split(".")[0] for m in mods} & {p.stem for p in ROOT.glob("*.py")}
        assert not ours, f"data/{path.name} imports {sorted(ours)} from outside data/"


def test_no_tracked_file_cites_the_projects_private_notes():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        return  # not a git checkout (an sdist): nothing to check
    cites = [f for f in files if f != "tests/test_house.py" and (ROOT / f).is_file()
             and any(n in (ROOT / f).read_bytes() for n in (b"PAPERS.md", b"DESIGN.md"))]
    assert not cites, f"these files cite notes a clone does not have: {cites}"


MEASURED = re.compile(r"±|\bp [=<] ?0?\.\d|\bMeasured (here|on)\b|~\d+(\.\d+)? ?(ms|s|min|h)\b|"
                      r"\b\d+(\.\d+)?x (faster|slower)\b")


def test_no_module_docstring_quotes_a_measured_number():
    """A docstring says what a mechanism is, its equation and source, and where its measurement lives; a measured
    number (a mean ± spread, a p-value, a timing, a speed-up) in it drifts from the reports, so none is there."""
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    found = [(f, line.strip()) for f in out if not f.startswith("tests/") and (ROOT / f).is_file()
             for line in (ast.get_docstring(ast.parse((ROOT / f).read_text()), clean=False) or "").splitlines()
             if MEASURED.search(line)]
    assert not found, found


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 160, f"README.md has {n} lines; results belong in RESULTS.md (results.py)"


def test_results_page_is_what_the_reports_say():
    r = subprocess.run([sys.executable, "results.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout


def test_a_reports_front_table_is_on_the_results_page_not_on_the_readme():
    """results.py: a report's `front_table` (its statistics) goes on RESULTS.md beside its claims; the README has
    only the blocks results.py writes (headline table, quick start, verdicts), none of them a front table."""
    sys.path.insert(0, str(ROOT))
    import results
    page = (ROOT / "RESULTS.md").read_text()
    for name, _ in results.PAPERS:
        rep = results.load(name)
        if rep.get("front_table"):
            assert all(ln in page for ln in rep["front_table"]["lines"])
    readme = (ROOT / "README.md").read_text()
    assert not [ln for name in results.RESULTS.iterdir() if (name / "report.json").exists()
                for ln in (results.load(name.name).get("front_table") or {}).get("lines", [])[2:] if ln.strip() and ln in readme]


def experiment_files():
    """`git ls-files 'experiments/*.py'` (every .py below experiments/; outside a checkout: the files there)."""
    out = subprocess.run(["git", "ls-files", "experiments/*.py"], cwd=ROOT, capture_output=True, text=True).stdout
    return [ROOT / f for f in out.split() if (ROOT / f).is_file()] or sorted((ROOT / "experiments").rglob("*.py"))


def test_experiments_stay_small_and_their_docstrings_short():
    """The experiments are the papers' tables, not a lab notebook: at most 4,000 lines in all, no file over
    400, no script's docstring over 40 lines (times and history live in report.json and RESULTS.md)."""
    lines = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in experiment_files()}
    assert sum(lines.values()) <= 4000, sorted(lines.items(), key=lambda kv: -kv[1])
    assert not {f: n for f, n in lines.items() if n > 400}
    for p in (ROOT / "experiments").glob("*.py"):
        doc = ast.get_docstring(ast.parse(p.read_text()), clean=False) or ""
        assert len(doc.splitlines()) <= 40, f"{p.name}'s docstring has {len(doc.splitlines())} lines"


def test_each_papers_claim_table_reads_without_running_anything():
    """experiments/lib/<paper>_claims.py: data and a pure records(report); importing it loads no torch."""
    names = sorted(p.stem for p in (ROOT / "experiments" / "lib").glob("*_claims.py"))
    assert {"ladder_claims", "procedural_claims", "data_constrained_claims", "prores_claims"} <= set(names)
    code = ("import sys; sys.path.insert(0, '.'); import importlib; from experiments.lib.claims import Claim\n"
            f"for n in {names!r}:\n"
            "    m = importlib.import_module('experiments.lib.' + n)\n"
            "    assert m.CLAIMS and all(isinstance(c, Claim) for c in m.CLAIMS) and callable(m.records), n\n"
            "assert 'torch' not in sys.modules and 'train' not in sys.modules, 'a claim table ran something'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_one_training_step_reads_in_one_function_in_order():
    """train.py's step is one function a reader follows top to bottom, as nanoGPT's: the batch, the objective's
    loss, backward, clipping, the optimizer step, in that order; the module docstring names it and the loop that
    calls it; train.py stays under 450 lines, none over 120 characters."""
    import inspect
    sys.path.insert(0, str(ROOT))
    import train
    src = inspect.getsource(train.train_step)
    calls = ["get_batch(", "S.objective.loss(", ".backward()", "clip_grad_norm_(", "S.scaler.step(S.optimizer)"]
    where = [src.find(c) for c in calls]
    assert -1 not in where, dict(zip(calls, where))
    assert where == sorted(where), dict(zip(calls, where))
    assert len(src.splitlines()) <= 40, "the step should fit a screen"
    loop = inspect.getsource(train.train_stage)
    assert loop.find("lr_at(") < loop.find(".update(") < loop.find("train_step(") < loop.find("evaluate(") \
        < loop.find("save(")
    assert "`train_step`" in train.__doc__ and "`train_stage`" in train.__doc__
    text = (ROOT / "train.py").read_text().splitlines()
    assert len(text) < 450 and max(len(line) for line in text) <= 120
