"""Procedural pre-training: a warm-up on algorithmic data before an algorithmic task.
Jiang, Shinnick et al., arXiv 2601.21725 (Dyck pre-training lifts HAYSTACK from 10% to 98% accuracy).

    python experiments/procedural.py --quick          # a smoke version (5 tiny runs, a minute or two)
    python experiments/procedural.py                  # the default: HAYSTACK after no pre-training, Dyck, shuffled Dyck
    python experiments/procedural.py --report-only --out experiments/results/procedural   # from report.json

The diagnostics as the authors run them (lib/procedural_authors.py: each setting, its line in their code, each
difference): their stream:NAME tasks, model per task and budget (10,000,000 records seen); a pre-training run per kind
on the task's architecture, transferred whole or attention / MLP alone. --cells: any cells, `table` the paper's six
claims (TABLE); OUT/pretrained/ keeps the pre-trained models for --reuse; --report-only also rebuilds
experiments/results/procedural-table (a preset no longer run). Claims and report: lib/procedural_*.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root

from experiments.lib import common, procedural_authors as pa  # noqa: E402
from data.common import UserError, positive_int as POS  # noqa: E402

# the six claims of the paper's diagnostic table, each cell (task:row[:transfer]) with its own baseline
TABLE = ("haystack:none,haystack:dyck,haystack:dyck-shuffled,haystack:dyck:attn,haystack:dyck:mlp,"
         "reversed_addition:none,reversed_addition:eca110,reversed_addition:eca110-shuffled,sorting:none,sorting:set,"
         "sorting:union,sorting:set-shuffled,sorting:union-shuffled,sorting:attn-dyck+mlp-set")
HAYSTACK = "haystack:none,haystack:dyck,haystack:dyck-shuffled"
# preset -> flag defaults (the default; --quick)
PRESETS = {"default": dict(cells=HAYSTACK, seeds=3, records=pa.RECORDS, eval_records=500_000, task_test=4000),
           "quick": dict(cells=HAYSTACK, seeds=1, records=30_000, eval_records=10_000, task_test=1000,
                         pretrain_steps=20, pretrain_rows=32)}
# --plan's pace by part: row-positions (steps x rows x context) a second of a 1-thread 2_4_16 run, a 2-core EPYC
RATE = {"pretrain": 53_000, "task": 380_000}
FLAGS = [  # (flag, type, help[, default]); without a default, unset flags take the preset's (PRESETS)
    ("cells", str, "the runs, TASK:ROW[:TRANSFER],...: ROW none (the task's baseline), a kind, KIND-shuffled (its "
     "control) or attn-KIND+mlp-KIND (attention, norms, positions from one kind's model, MLP from the other's); "
     "TRANSFER full (default), attn or mlp; 'table': the paper's six claims (default: haystack: none, dyck, "
     "dyck-shuffled)"),
    ("seeds", POS, "seeds 0..N-1 (default 3)"), ("records", POS, "records seen a run (default 10,000,000)"),
    ("eval-records", POS, "records between evaluations (default 500,000)"),
    ("task-test", POS, "test records a task (default 4000)"),
    ("pretrain-steps", POS, "pre-training steps (default: the stopping rule's cap 20,000 on d = 16, else 2,501)"),
    ("pretrain-rows", POS, "pre-training rows a step (default 64)"), ("pretrain-lr", common.positive_float,
     "pre-training lr, constant (default 3e-3 on d = 16)"), ("dyck-length", POS, "tokens a Dyck row (theirs 2,048; "
     "shorter than the task's context: its positions fresh; default 128)", pa.DYCK_LENGTH),
    ("data-seed", int, "procedural and task data (fixed across --seeds)", 0),
    ("pretrain-seeds", POS, "pre-trained models a kind; seed s starts from model s mod N (default 1)", 1)]


def parse_args(argv=None):
    a = common.sweep_parser(__doc__, "out/procedural", FLAGS).parse_args(argv)
    vars(a).update({k: v for k, v in PRESETS["quick" if a.quick else "default"].items() if getattr(a, k) is None})
    a.cells = pa.parse_cells(TABLE if a.cells == "table" else a.cells)
    pick = lambda f: list(dict.fromkeys(x for c in a.cells for x in f(*c)))  # noqa: E731 (in the cells' order)
    a.tasks = pick(lambda t, r, m: [t])
    a.merges = pick(lambda t, r, m: [mg] if (mg := pa.merge_kinds(r)) else [])
    a.kinds = pick(lambda t, r, m: [] if r == "none" or pa.merge_kinds(r) or r.endswith(pa.SHUFFLED) else [r])
    a.kinds += [k for mg in a.merges for k in mg if k not in a.kinds]   # a merge's models are pre-trained too
    a.controls = pick(lambda t, r, m: [pa.base_kind(r)] if r.endswith(pa.SHUFFLED) else [])
    a.out = Path(a.out or ("out/procedural-quick" if a.quick else "out/procedural"))
    a.reuse and common.reused_report(a.reuse)  # a one-line error where DIR holds no report.json
    from data import procedural
    if m := next((m for m in a.merges if len(m) != 2), None):
        raise UserError(f"--cells: a merge row is attn-KIND+mlp-KIND, e.g. attn-dyck+mlp-set, not attn-{'+mlp-'.join(m)}")
    if k := next((k for k in a.kinds + a.controls if k not in procedural.KINDS), None):
        raise UserError(f"unknown procedural kind {k!r}; valid kinds: {', '.join(procedural.KINDS)}")
    if t := next((t for t in a.tasks if t not in pa.TASKS), None):
        raise UserError(f"unknown task {t!r}; valid tasks: {', '.join(pa.TASKS)}")
    for t, r, m in a.cells:
        if m not in (("none",) if r == "none" else ("full",) if pa.merge_kinds(r) else ("full", "attn", "mlp")):
            raise UserError(f"--cells {t}:{r}:{m}: a baseline takes no transfer, a merge is trained with full "
                            "transfer, a kind's row with full, attn or mlp")
    if a.dyck_length % 2 and any(k.startswith("dyck") for k in pa.rows(a)[1:]):
        raise UserError(f"--dyck-length must be even (a balanced Dyck row), got {a.dyck_length}")
    return a


def estimate(run):
    """A run's estimated CPU seconds: its row-positions at RATE."""
    v = lambda flag: float(run.argv[run.argv.index(flag) + 1])  # noqa: E731
    return v("--iters") * v("--batch-size") * (v("--block-size") + 1) / RATE[run.meta["part"]]


def print_plan(a, runs):
    kept = pa.reused(a, runs)
    todo = [r for r in runs if not common.is_finished(r.folder) and r.name not in kept]
    print(f"procedural plan: rows {', '.join(pa.rows(a))}; tasks {', '.join(a.tasks)}; seeds 0..{a.seeds - 1}; out {a.out}")
    for r in runs:
        state = "  (reused)" if r.name in kept else "  (done)" if r not in todo else ""
        print(f"  {r.name:<40} {r.argv[r.argv.index('--stages') + 1]:<26} {r.argv[r.argv.index('--iters') + 1]:>7} "
              f"steps  ~{estimate(r) / 60:>6.1f} min{state}")
    s = sum(estimate(r) for r in todo)
    print(f"{len(runs)} runs, {len(todo)} to run: ~{s / 60:.0f} CPU-min, ~{s / a.jobs / 60:.0f} min wall with --jobs "
          f"{a.jobs} (1 thread a run on quiet cores; the 2_4_16 models' pace)")
    print(common.pace_line(runs, estimate, s, a.jobs) or "no run finished yet: no measured pace")


def train(a, runs, sweep):
    """Without --report-only every run trained (pa.run_all); the pre-trained models kept in OUT/pretrained/."""
    a.report_only or pa.run_all(a, sweep)
    pa.kept_pretrained(a, [r for r in runs if r.meta["part"] == "pretrain"])
    return runs


def main(argv=None):
    from experiments.lib import procedural_report as report
    common.experiment_main(
        parse_args(argv), argv, plan=lambda a: sum(pa.plan(a), []), show_plan=print_plan, train=train,
        render=lambda a, runs, prov: report.render(a, report.collect(a, runs), len(runs), a.out, prov),
        rebuild=report.rebuild, wrote="\n{text}\n\nwrote {out}/report.md, report.json and the PNGs ({s:.0f} s in all)")


if __name__ == "__main__":
    common.main_guard(main)
