"""What every experiment script shares: its flags and main(), a sweep of train.py runs (each in its own folder, skipped
when finished, resumed when interrupted, --jobs at a time, each a spawned process logging to <folder>/log.txt; `python
bench.py --jobs`: why two 1-thread runs beat one 2-thread run), reading their results back, the reports."""

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

INVOCATION_FLAGS = ("out", "jobs", "threads", "report_only", "plan", "reuse")  # how a report is made, not its results
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: train, model, data

import summary, train  # noqa: E402,E401 (summary: the run's plots, which reports reuse)
from checkpoint import read_summary  # noqa: E402,F401 (the experiments read it from here)
from data.common import (UserError, atomic_write_bytes, positive_float, positive_int, writable_folder,  # noqa: E402,F401
                         write_json)  # (the experiments take these from here)
from experiments.lib.provenance import Provenance, inherit_invocations, kept_provenance  # noqa: E402


@dataclass
class Run:
    """One train.py run of a sweep: a name, its folder and its train.py flags (without --out)."""
    name: str
    folder: Path
    argv: list
    meta: dict = field(default_factory=dict)  # the experiment's own labels (condition, width, seed...)


def sweep_parser(doc, default_out, flags=(), **preset):
    """An experiment script's parser: its docstring's first line, the flags every script has, --preset (preset: its
    options) and FLAGS, (flag, type, help[, default]): unset, the preset's value; no help: train.py's flag's."""
    from flags import ArgumentParser  # one-line errors, like train.py
    p = ArgumentParser(description=doc.strip().split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a minutes-long smoke version of the experiment")
    p.add_argument("--out", type=lambda v: own_out(writable_folder(v), Path(default_out).name), default=None,
                   help=f"output folder (default {default_out}; {default_out}-quick with --quick)")
    p.add_argument("--jobs", type=positive_int, default=2, help="runs at a time, --threads each (default 2)")
    p.add_argument("--threads", type=int, default=0, choices=range(257), metavar="N", help="per run (0: cores/jobs)")
    p.add_argument("--plan", action="store_true", help="print the runs and an estimate of their time; train nothing")
    p.add_argument("--reuse", metavar="DIR", help="take the runs DIR/report.json holds (same flags), not train them")
    p.add_argument("--report-only", action="store_true",
                   help="no training: the report from the finished runs in OUT/runs, else from OUT/report.json")
    if preset:
        p.add_argument("--preset", **preset)
    for flag, kind, what, *default in flags:
        p.add_argument(f"--{flag}", type=kind, default=(default + [None])[0], help=what or f"train.py --{flag}")
    return p


def own_out(out, name):
    """--out (a type) must not hold another experiment's report, its provenance's experiments/<other>.py."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, IndexError):  # no readable report: no owner
        script = Path(json.loads((Path(out) / "report.json").read_text())["provenance"]["command"].split()[1])
        if script.parent.name == "experiments" and script.stem != name:
            raise UserError(f"--out {out}: holds experiments/{script.name}'s report, which {name} would overwrite; "
                            "give another --out")
    return out


def reused_report(folder):
    """--reuse DIR's report.json, parsed; a one-line error where DIR holds none."""
    if not (path := Path(folder) / "report.json").exists():
        raise UserError(f"--reuse {folder}: no report.json there; give the folder of an earlier report")
    return json.loads(path.read_text())


def kept_records(out, keys, fix=None):
    """OUT/report.json's `keys` (None for one it lacks) for a rebuild; without it None, or with `fix` an error."""
    if (path := Path(out) / "report.json").exists():
        return {k: rep.get(k) for rep in [json.loads(path.read_text())] for k in keys}
    if fix:
        raise UserError(f"no finished runs in {Path(out) / 'runs'} and no {path}: {fix}")


def is_finished(folder):
    return (Path(folder) / "summary.json").exists() or (Path(folder) / "diverged.json").exists()


def pace_line(runs, estimate, todo_s, jobs):
    """The plan measured here: the finished runs' seconds / estimate(run), todo_s at that pace ('' before any)."""
    done = [r for r in runs if (Path(r.folder) / "summary.json").exists()]
    measured, est = sum(read_summary(r.folder)["seconds"] for r in done), sum(estimate(r) for r in done)
    if not done or est <= 0:
        return ""
    ratio = measured / est
    return (f"measured here: the {len(done)} finished run(s) took {measured / 60:.0f} min, {ratio:.2f}x their "
            f"estimate; the rest at that pace ~{ratio * todo_s / max(jobs, 1) / 60:.0f} min with --jobs {jobs}")


def read_events(folder, event=None):
    """The events of metrics.jsonl (optionally one kind), the last of each (stage, iter, event): resumed runs repeat."""
    path, last = Path(folder) / "metrics.jsonl", {}
    for e in map(json.loads, open(path) if path.exists() else []):
        if event is None or e.get("event") == event:
            last[(e.get("stage_index"), e.get("iter"), e.get("event"))] = e
    return list(last.values())


def _run_one(argv, folder, threads, quiet):
    """Train one run (in this process or a worker); a divergence is a finding, written down."""
    import torch
    torch.set_num_threads(threads)
    (folder := Path(folder)).mkdir(parents=True, exist_ok=True)
    full = list(argv) + ["--out", str(folder), "--resume", "--threads", str(threads), "--no-plot"] + \
        (["--no-progress"] if quiet else [])
    t0 = time.time()
    with open(folder / "log.txt", "a") if quiet else contextlib.nullcontext() as log, \
            contextlib.redirect_stdout(log or sys.stdout), contextlib.redirect_stderr(log or sys.stderr):
        try:
            train.run(train.parse_args(full))
            status = "done"
        except train.TrainingDiverged as e:
            atomic_write_bytes(folder / "diverged.json", json.dumps({"error": str(e), "argv": full}).encode())
            status = f"diverged: {e}"
    # for a resume only: a run that ended (done or diverged) drops it, an interrupted one (raised above) keeps it
    (folder / "ckpt.pt").unlink(missing_ok=True)
    return status, time.time() - t0


def _worker(argv, folder, threads):
    try:
        return _run_one(argv, folder, threads, quiet=True)
    except Exception:  # a bug, not a finding: report it with its traceback, keep the sweep going
        return "failed:\n" + traceback.format_exc(), 0.0


@contextlib.contextmanager
def term_as_ctrl_c():
    """`kill PID` stops a sweep as Ctrl-C does: SIGINT to every worker of the pool put in the yielded namespace (each
    saves a checkpoint) and to the sweep, which starts no queued run (else its workers would train on, orphaned)."""
    term = argparse.Namespace(pool=None)

    def handler(signum, frame):
        for pid in list(getattr(term.pool, "_processes", None) or {}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals stay as they are
        old = None
    try:
        yield term
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def run_sweep(runs, jobs=1, threads=0):
    """Train unfinished runs, --jobs at a time: {name: (status, seconds)}; `kill PID` checkpoints them as Ctrl-C."""
    from checkpoint import check_resume_args
    for r in runs:  # a finished run of other settings is not silently reused
        if (s := read_summary(r.folder)) is not None:
            check_resume_args(s["args"], train.parse_args(list(map(str, r.argv)) + ["--out", str(r.folder)]), r.folder)
    todo = [r for r in runs if not is_finished(r.folder)]
    if n_done := len(runs) - len(todo):
        print(f"{n_done} of {len(runs)} runs already finished (skipped)")
    threads = threads or max(1, (os.cpu_count() or 1) // max(jobs, 1))  # threads per run: cores / jobs
    results = {}
    if not todo:
        return results
    with term_as_ctrl_c() as term:
        if jobs <= 1:
            for k, r in enumerate(todo, 1):
                print(f"[{k}/{len(todo)}] {r.name}: python train.py {' '.join(map(str, r.argv))} --out {r.folder}",
                      flush=True)
                results[r.name] = _run_one(list(map(str, r.argv)), r.folder, threads, quiet=False)
                print(f"  {results[r.name][0]} ({results[r.name][1]:.0f} s)", flush=True)
            return results
        print(f"{len(todo)} runs, {jobs} at a time, {threads} thread(s) each; logs in <run>/log.txt", flush=True)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            term.pool = pool
            queued, running = list(todo), {}  # a run is handed to a worker only when one is free
            try:
                while queued or running:
                    while queued and len(running) < jobs:
                        r = queued.pop(0)
                        running[pool.submit(_worker, list(map(str, r.argv)), str(r.folder), threads)] = r
                    for f in wait(running, return_when=FIRST_COMPLETED).done:
                        r = running.pop(f)
                        status, s = results[r.name] = f.result()  # one stopped by Ctrl-C raises train.Interrupted
                        print(f"[{len(results)}/{len(todo)}] {r.name}: {status} ({s:.0f} s)", flush=True)
            except KeyboardInterrupt:  # Ctrl-C (a terminal's reaches the workers too): no queued run starts;
                print("\nCtrl-C: the runs in flight save a checkpoint; no queued run starts", file=sys.stderr)
                raise                  # leaving the pool waits for the runs in flight
    if failed := [n for n, (s, _) in results.items() if s.startswith("failed")]:
        raise UserError(f"{len(failed)} run(s) failed with an error (not a divergence): {failed}; "
                        f"see their log.txt; the first: {results[failed[0]][0][-1500:]}")
    return results


def group(items, key):
    """{key(x): [x, ...]}, the keys in the order they first come."""
    out = {}
    for x in items:
        out.setdefault(key(x), []).append(x)
    return out


def settings_json(a, leave_out=INVOCATION_FLAGS):
    """The flags report.json keeps (not how it was made: leave_out), JSON values as they are, others str, no _keys."""
    plain = (int, float, str, bool, list, tuple, dict, type(None))
    return {k: (v if isinstance(v, plain) else str(v)) for k, v in vars(a).items() if not k.startswith("_")
            and k not in leave_out}


def write_report(out, text, *, source, regime, figures, verdicts, provenance, **rest):
    """OUT/report.md (text, returned) and OUT/report.json: first the keys results.py reads, then the report's own."""
    atomic_write_bytes(Path(out) / "report.md", text.encode())  # a temporary name, then a rename
    write_json(Path(out) / "report.json", {"source": source, "regime": regime, "figures": figures,
                                            "verdicts": verdicts, "provenance": provenance, **rest})
    return text


def save_figure(fig, path):
    """Lay a matplotlib figure out, write it atomically and close it."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    plt.close(fig)


def finish(fig, axes, path, **grid):
    """Each panel (axes) with a grid (grid: its options) and a legend; the figure laid out and saved (save_figure)."""
    for ax in axes:
        ax.grid(alpha=0.3, **grid)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def experiment_main(a, argv, *, show_plan, train, render, wrote, plan=lambda a: None, rebuild=None, inherit=True):
    """An experiment script's main(): --plan is show_plan(a, plan(a)); --report-only with no run folders but a
    report.json, rebuild(OUT); else OUT made (--reuse DIR's invocations first: inherit), got = train(a, plan(a), sweep)
    recorded as this invocation (sweep(runs, run=run_sweep) trains by run(runs, jobs, threads) and counts what it
    returns; none with --report-only); render(a, got, provenance) printed: `wrote`."""
    t0, trained = time.time(), []
    if a.plan:
        return show_plan(a, plan(a))
    if rebuild and a.report_only and (a.out / "report.json").exists() and not (a.out / "runs").exists():
        print(f"no run folders in {a.out}: rebuilding from its report.json (the flags it was made with)")
        text = rebuild(a.out)
    else:
        runs = plan(a)
        a.out.mkdir(parents=True, exist_ok=True)
        if a.reuse and inherit:  # the invocations that made the runs DIR gives come first
            inherit_invocations(a.out, reused_report(a.reuse))
        prov = None if a.report_only else Provenance(a.out, argv)
        sweep = lambda rs, run=run_sweep: trained.append(0 if a.report_only else len(run(rs, a.jobs, a.threads)))  # noqa: E731
        got = train(a, runs, sweep)
        text = render(a, got, kept_provenance(a.out) if a.report_only else prov.finish(runs_trained=sum(trained)))
    print(wrote.format(text=text, out=a.out, s=time.time() - t0))


def main_guard(main):
    """Run an experiment's main(): a UserError is one line on stderr and exit 2; a stopped invocation is recorded."""
    Provenance.active = None  # only an invocation this main() starts
    try:
        main()
    except (UserError, KeyboardInterrupt) as e:
        error = isinstance(e, UserError)
        if Provenance.active:
            Provenance.active.finish(stopped=f"error: {e}" if error else "interrupted")
        print(f"error: {e}" if error else "\ninterrupted; rerun the same command to resume (finished runs are skipped)",
              file=sys.stderr)
        sys.exit(2 if error else 130)
