"""
School mathematics questions and answers in the GPT-2 BPE vocabulary, from DeepMind's generator.
The math domain of procedural pre-training (arXiv 2601.21725, the semantic domains): DeepMind
Mathematics (Saxton et al., arXiv 1904.01557), made here by its own generator from PyPI.

The generator, `mathematics-dataset==1.0.1`, needs sympy 1.5.1 (it imports
sympy.solvers.diophantine.base_solution_linear, gone from the sympy torch needs), so it runs
the way the music21 corpus is converted (data/music.py): its wheels and sympy's are fetched
with `pip download --no-deps` into the cache (sha256 pinned below) and put on the sys.path of
CHILD processes (pure-python wheels import from the zip); this process never imports them.
numpy comes from this environment. A copy of the generator is unpacked with small fixes
(SOURCE_FIXES: for numpy 2, for sympy 1.5's strict integers, and for a statement order that
followed memory addresses, so that the problems are deterministic by seed).

Problems: the 56 training modules of all 8 domains (algebra, arithmetic, calculus, comparison,
measurement, numbers, polynomials, probability), `modules.train(lambda r: r)`: the full
training difficulty range, what generate.py calls "train". `math_problems` problems in all
(default 33,600 = 600 per module; the total is spread evenly over the modules in sorted
order). Each module is seeded on its own (random and numpy from `seed` and its name, and
PYTHONHASHSEED=0) and drawn in a process forked from the freshly imported generator, so the
problems depend only on the seed and count, not on the number of worker processes (on systems
without fork, Windows, a module's problems also depend on the modules drawn before it). As generate.py does, a question over 160 characters or an answer over 30 is
dropped and drawn again; a problem whose generator raises (or runs past 20 s) is skipped and
counted; both counts go in the manifest. One problem = one document, "Question: ...\nAnswer:
...\n" then <|endoftext|>; it goes to validation iff split_is_val("module/index", 5%).
The raw problems are kept in cache/mathematics/*.jsonl (a header line of stats, then one
{"module", "index", "question", "answer"} per line) and reused if the corpus is rebuilt.
Its counts (problems, tokens per split, draws dropped) are in the prepared corpus's manifest.json.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from tqdm import tqdm

from .common import atomic_write_bytes, fetch_pypi_file
from .text import _prepared, gpt2_encoding, tokenize_documents

VAL_PERCENT = 5.0
DEFAULT_PROBLEMS = 33_600            # 600 per module: 1.33M GPT-2 tokens, ~2 min on 2 cores
SECONDS_PER_PROBLEM = 20             # a generator call running longer is skipped
GENERATOR_VERSION = 1                # bump when generation changes: part of the cache keys
# (package, version, sha256 of the wheel), all pure-python
WHEELS = (
    ("mathematics-dataset", "1.0.1", "8ebfe083ed65e07a9a555c9a51449c8e7c0ee097a96880a7183d2e8606081de6"),
    ("sympy", "1.5.1", "4880d3a351558063bd89febda302f220dc4b88de393bba81fa6539a3966f03fa"),
    ("mpmath", "1.3.0", "a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c"),
    ("absl-py", "2.5.1", "721200f2f0e9960f2ca9dc3a2a706b201f5f75d812c158f059cbbe29eeafbdb8"),
    ("six", "1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"),
)
SOURCE_FIXES = (  # (file under mathematics_dataset/, old, new, occurrences)
    # numpy 2 removed ndarray.itemset and the np.object alias (same meaning on numpy 1)
    ("sample/polynomials.py", "coeffs.itemset(index, value)", "coeffs[index] = value", 1),
    ("sample/polynomials.py", "expanded_coefficients.itemset(power, coeffs)",
     "expanded_coefficients[power] = coeffs", 1),
    ("sample/polynomials.py", "dtype=np.object)", "dtype=object)", 3),
    # sympy 1.5's strict as_int rejects numpy integers (older sympy took them): polynomial
    # addition, and every problem composed from it, raised on every call
    ("sample/polynomials.py", "diophantine_solve_linear_2d(c=coefficient,",
     "diophantine_solve_linear_2d(c=sympy.sympify(coefficient),", 1),
    # the "Let ... Suppose ..." statements of composed problems were listed from a set of
    # objects (ordered by memory address) before the seeded shuffle: an ordered set instead
    ("util/composition.py", "entities = set(context.child_entities)",
     "entities = dict.fromkeys(context.child_entities)", 1),
    ("util/composition.py", "entities.add(maybe_entity)", "entities[maybe_entity] = None", 1),
)

# The child: argv[1] = {"paths", "total", "seed", "worker", "workers", "out", "timeout"}.
# Imports the generator once, then draws each of its modules (every workers-th, from worker)
# in a process forked from that fresh state: sympy's caches and lazily built tables change
# how much randomness a call draws, so a module must not see what ran before it. Appends the
# problems (JSON lines) to out; prints "1" per problem and a {"stats": ...} line per module.
_CHILD = r"""
import json, os, random, signal, sys, traceback, warnings, zlib
args = json.loads(sys.argv[1])
sys.path[:0] = args["paths"]
reply, sys.stdout = sys.stdout, sys.stderr     # the generator may print: keep the protocol clean
warnings.simplefilter("ignore")
import numpy as np, sympy
assert sympy.__version__ == "1.5.1", "sympy %s imported, not the 1.5.1 wheel" % sympy.__version__
from mathematics_dataset.modules import modules
def flat(d, prefix=""):
    for k in sorted(d):
        if isinstance(d[k], dict):
            yield from flat(d[k], prefix + k + "__")
        else:
            yield prefix + k, d[k]
mods = list(flat(modules.train(lambda r: r)))
def on_alarm(*_):
    raise TimeoutError("generator ran past %s s" % args["timeout"])
alarm = hasattr(signal, "SIGALRM")          # no per-problem time limit where there is none
if alarm:
    signal.signal(signal.SIGALRM, on_alarm)
def draw(name, fn, want):
    random.seed("%d/%s" % (args["seed"], name))
    np.random.seed(zlib.crc32(("%d/%s" % (args["seed"], name)).encode()))
    st = {"module": name, "raised": 0, "timed_out": 0, "dropped": 0, "short": 0, "error": None}
    got, tries = 0, 0
    with open(args["out"], "a", encoding="utf-8") as out:
        while got < want and tries < 3 * want + 10:
            tries += 1
            alarm and signal.setitimer(signal.ITIMER_REAL, args["timeout"])
            try:
                p = fn()
                q, a = str(p.question), str(p.answer)
            except Exception as e:
                st["timed_out" if isinstance(e, TimeoutError) else "raised"] += 1
                st["error"] = st["error"] or "%s: %s" % (type(e).__name__, str(e)[:200])
                continue
            finally:
                alarm and signal.setitimer(signal.ITIMER_REAL, 0)
            if len(q) > 160 or len(a) > 30:     # generate.py's limits: drop and draw again
                st["dropped"] += 1
                continue
            out.write(json.dumps({"module": name, "index": got, "question": q, "answer": a}) + "\n")
            out.flush()
            got += 1
            reply.write("1\n"); reply.flush()
    st["short"] = want - got
    reply.write(json.dumps({"stats": st}) + "\n"); reply.flush()
for m, (name, fn) in enumerate(mods):
    if m % args["workers"] != args["worker"]:
        continue
    want = args["total"] // len(mods) + (m < args["total"] % len(mods))
    if not hasattr(os, "fork"):              # no fork (Windows): draw here, order-dependent
        draw(name, fn, want)
        continue
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            draw(name, fn, want)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    if os.waitpid(pid, 0)[1] != 0:
        sys.exit("module %s: its generator process failed" % name)
"""


def format_problem(question, answer):
    """The text of one document."""
    return f"Question: {question}\nAnswer: {answer}\n"


def read_problems(path):
    """(header stats, records) of a problems file written by generate_problems."""
    with open(path, encoding="utf-8") as f:
        header = json.loads(f.readline())["stats"]
        return header, [json.loads(line) for line in f if line.strip()]


def documents(records):
    """(key "module/index", text) of every record, in module and index order."""
    records = sorted(records, key=lambda r: (r["module"], r["index"]))
    return [(f"{r['module']}/{r['index']}", format_problem(r["question"], r["answer"])) for r in records]


def generator_paths(cache):
    """Folders and wheels for the child's sys.path: the wheels fetched into cache/carriers, the
    mathematics_dataset one unpacked once into cache/mathematics with SOURCE_FIXES applied."""
    carriers = Path(cache) / "carriers"
    try:
        wheels = [fetch_pypi_file(*w, carriers) for w in WHEELS]
    except RuntimeError as e:
        raise RuntimeError(f"the math stage needs the DeepMind Mathematics generator and sympy 1.5.1 from PyPI "
                           f"({', '.join(f'{p}=={v}' for p, v, _ in WHEELS)}): {e} Or put those wheels "
                           f"(`pip download --no-deps` them) into {carriers}.") from None
    # not next to the wheels: fetch_pypi_file takes any name there starting with "<package>-<version>"
    folder = Path(cache) / "mathematics" / f"generator-v{GENERATOR_VERSION}"
    if not (folder / "mathematics_dataset" / "__init__.py").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as z:
            z.extractall(tmp)
        for name, old, new, n in SOURCE_FIXES:
            path = tmp / "mathematics_dataset" / name
            src = path.read_text(encoding="utf-8")
            if src.count(old) != n:
                raise RuntimeError(f"{wheels[0]}: expected {n} x {old!r} in {name}; delete the wheel and retry")
            atomic_write_bytes(path, src.replace(old, new).encode())
        os.replace(tmp, folder)
    return [str(folder)] + [str(w) for w in wheels[1:]]


def generate_problems(cache, total, seed, out_path, workers=None):
    """Run the generator in `workers` child processes (default: up to 2) and write the problems
    to out_path (a stats header line, then records in module/index order)."""
    paths = generator_paths(cache)
    workers = max(1, min(workers or min(2, os.cpu_count() or 1), total))
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    lines = queue.Queue()
    with tempfile.TemporaryDirectory(dir=Path(out_path).parent) as tmp:
        procs = []
        for k in range(workers):
            args = {"paths": paths, "total": total, "seed": seed, "worker": k, "workers": workers,
                    "out": str(Path(tmp) / f"part{k}.jsonl"), "timeout": SECONDS_PER_PROBLEM}
            err = open(Path(tmp) / f"stderr{k}.txt", "w")
            p = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args)], stdout=subprocess.PIPE,
                                 stderr=err, text=True, env=env, start_new_session=True)
            err.close()
            threading.Thread(target=_pump, args=(p, lines), daemon=True).start()
            procs.append(p)
        stats, running = [], workers
        try:
            with tqdm(total=total, desc="math problems", unit="problem") as bar:
                while running:
                    line = lines.get()
                    if line is None:
                        running -= 1
                    elif line.startswith("{"):
                        stats.append(json.loads(line)["stats"])
                    else:
                        bar.update(1)
        finally:
            for p in procs:   # the worker and its forked module process, if still running
                os.killpg(p.pid, 9) if hasattr(os, "killpg") and p.poll() is None else p.kill()
                p.wait()
        failed = [k for k, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = (Path(tmp) / f"stderr{failed[0]}.txt").read_text(errors="replace").strip()[-800:]
            raise RuntimeError(f"the DeepMind Mathematics generator failed in its child process (exit "
                               f"{procs[failed[0]].returncode}):\n{tail}\nIf the wheels in {Path(cache) / 'carriers'} "
                               "are damaged, delete them (they are fetched again); see data/mathematics.py.")
        parts = [Path(tmp) / f"part{k}.jsonl" for k in range(workers)]
        records = [json.loads(line) for part in parts if part.is_file() for line in part.open(encoding="utf-8")]
    merged = {"modules": len(stats), "requested": total, "seed": seed, "workers": workers}
    for key in ("raised", "timed_out", "dropped", "short", "error"):
        merged[key] = {st["module"]: st[key] for st in sorted(stats, key=lambda st: st["module"]) if st[key]}
    body = "".join(json.dumps(r) + "\n" for r in sorted(records, key=lambda r: (r["module"], r["index"])))
    atomic_write_bytes(out_path, (json.dumps({"stats": merged}) + "\n" + body).encode())


def _pump(proc, lines):
    for line in proc.stdout:
        lines.put(line.strip())
    lines.put(None)


def load_math(cache, math_problems=None, seed=0, math_workers=None, generator=None, **_):
    """The `math` stage: `math_problems` (default DEFAULT_PROBLEMS) DeepMind Mathematics
    problems drawn with `seed`. generator(cache, total, seed, out_path, workers) writes the
    problems file (default generate_problems; tests pass a fake)."""
    total = int(math_problems or DEFAULT_PROBLEMS)
    if total < 2:
        raise ValueError(f"math_problems must be at least 2, not {total}")
    enc = gpt2_encoding(cache)
    key = f"math-deepmind-seed{seed}-n{total}-v{GENERATOR_VERSION}"

    def build():
        path = Path(cache) / "mathematics" / f"problems-{key}.jsonl"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            (generator or generate_problems)(cache, total, seed, path, math_workers)
        stats, records = read_problems(path)
        docs = documents(records)
        train, val = tokenize_documents(enc, docs, VAL_PERCENT, total=len(docs), desc="tokenize math")
        return train, val, {
            "source": "DeepMind Mathematics generator (PyPI " + ", ".join(f"{p}=={v}" for p, v, _ in WHEELS) + ")",
            "wheels_sha256": {p: s for p, _, s in WHEELS}, "problems_file": str(path), "seed": seed,
            "problems": len(docs), "generation": stats, "format": "Question: ...\\nAnswer: ...\\n per document",
            "split": f"by document key module/index, {VAL_PERCENT:g}% validation"}
    return _prepared(cache, key, "math", enc, build)
