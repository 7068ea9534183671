"""
Procedural pre-training: the diagnostic table, the additive and substitutive regimes, weight merging.
Jiang, Shinnick et al., arXiv 2601.21725: a warm-up on algorithmic data helps (Dyck lifts HAYSTACK 10% -> 98%).

Two presets, every run through train.run:
    python experiments/procedural.py --quick          # a few minutes: a smoke version of the default
    python experiments/procedural.py                  # the default: --preset authors (sized below)
    python experiments/procedural.py --preset table   # the earlier default (below), --quick too
    python experiments/procedural.py --report-only    # rebuild report.md/json and PNGs from finished runs
    python experiments/procedural.py --report-only --out experiments/results/procedural   # from report.json alone

--preset authors (default): the diagnostics as the authors run them (experiments/lib/procedural_authors.py
says each setting, its source line in their code and each difference): stream:NAME tasks (their token
layout and loss, a fresh stream of records per step that never yields one of the 4,000 test records),
their model per task (HAYSTACK: 2 layers, 4 heads, d = 16, untied head), batch 1,000, AdamW lr 1e-3,
500 warm-up steps, cosine, weight decay 0.001, their budget of 10,000 steps x 1,000 = 10,000,000
records seen; the pre-training (their yaml, on the same architecture) transferred whole with mean
embedding rows. The default is HAYSTACK with no pre-training / Dyck / shuffled Dyck (conditions none,
dyck, dyck-shuffled), 3 seeds, evaluated every 500,000 records (the accuracy curve), and the
records needed to reach 50% and 90%: 6 pre-training runs (501 steps x 512 rows of 128 tokens,
32.8M tokens, ~10 min each) and 9 diagnostic runs of 620M tokens each. The rest of the authors'
table is behind flags: e.g. --kinds dyck,eca110,set,union --controls dyck --tasks
haystack,reversed_addition,sorting --transfers full,attn,mlp --split-kinds dyck,set --merges dyck/set
(multiplication trains their 4-layer d = 512 model at batch 64, 156,250 steps: give --records to
shorten it). Time, measured 2026-12-01 on 2 quiet cores with --jobs 2 (1 thread a run): a
pre-training run 603-649 s, a diagnostic run 3.8 steps/s (44 min for 10,000 steps; GPT.forward
scores only the counted positions, bench.py --tiny), so the default is about 6 x 10.5 / 2 + 5 x 44
~ 4.2 h (experiments/results/procedural: 256 min wall, resumed over two sessions, partly --jobs 3,
which on 2 cores gave 13% fewer steps a second in all than --jobs 2): more than one 3-hour
session; a stopped sweep goes on from its finished runs and from each interrupted run's last
checkpoint (every 500 steps). --quick (30 steps a run, 1 seed, 5
runs) takes about a minute.

--preset table (the earlier default; its report is experiments/results/procedural-table):
(a) the diagnostic table: rows = no pre-training / each procedural kind / each kind shuffled,
    columns = exact-answer accuracy on each diagnostic task (data/tasks.py), for the transfer
    modes full / attention-only / MLP-only; the authors' diagnostic model (2 layers, 4 heads, d=16).
(b) semantic domains (prose, code, math): the additive regime (a fixed semantic budget, a growing
    procedural warm-up) and the substitutive regime (the share of the semantic budget at which the
    warmed-up model reaches the baseline's final loss; the paper: C4 55%, code 67%, math 86%), and
    attention-only against MLP-only transfer per domain.
(c) weight merging: attention from a model pre-trained on one kind + MLP from another
    (transfer.merge_checkpoints), against each alone.

Runs live in OUT/runs/<name>/ and are skipped when finished (an interrupted sweep resumes). Each
procedural pre-training run (one per kind x seed x size) is trained once and reused, through
--init-from, by every task, transfer mode and semantic domain; so the sweep goes in two waves of
experiments.lib.common.run_sweep: the pre-training runs and the baselines, then everything that starts
from a pre-trained (or merged) checkpoint.

Our choices (each a flag; the paper's where we could afford them):
- diagnostic model: 2 layers, 4 heads, d=16, context 130 (the longest procedural row, DELETE with
  the paper's input length 64, is 131 tokens; task records are 19-63 tokens and a batch holds one
  record per row, so the longer context costs the tasks nothing; it lets the position embeddings
  transfer).
- pre-training: 1500 steps of 32 rows of 118-131 tokens (~6M tokens seen; the loss covers only
  the answer spans of the sequence kinds, at most half of each row, and every Dyck token), lr 1e-2,
  cosine; --procedural-sequences = steps x batch, so a run sees each row about once. The paper
  trains its diagnostic models much longer; ours stay far from solving their task (Dyck val loss
  3.61 nats after 1500 steps, 3.54 after 4000: the closing brackets are far from predicted).
- diagnostics: 1500 steps of 32 records, lr 1e-2, cosine, accuracy on 1000 test records (the
  authors: 10,000 steps of 1000 records). 1500 steps is where our HAYSTACK baseline is
  non-trivial and not saturated (measured: 4% at 1000 steps lr 3e-3, 7% at 1500 and 9% at 3000
  steps with lr 1e-2; chance 0.8%); from scratch the arithmetic tasks and sorting stay at ~0%
  exact answers at this budget, so the report adds each answer token's teacher-forced accuracy and the answer
  loss, computed from each run's final checkpoint.
- transfer modes as the authors' code does them (downstream/utils.py): full = every weight but
  the token embedding ("everything": attention, MLP, norms and position embeddings), the
  embedding rows set to the mean of the pre-trained rows; attn / mlp = that group only, the rest
  (embeddings included) freshly initialised.
- semantic domains: the same 2-layer d=16 model (so the pre-training runs are shared) with the
  50,257-token GPT-2 head, context 64, batch 16; the 100% budget is --sem-steps 300 steps on
  --unique-tokens = 300 x 16 x 64 = 307,200 tokens (about one pass), lr 1e-2, a constant lr after
  warm-up so that the validation losses at 25/50/75/100% of one run are the losses of shorter
  budgets; transfer attn,mlp,norm (the authors' semantic setting), fresh embeddings.

Table sweep: kinds dyck, eca110, set, union, stack and their shuffled controls (+ none) x all 5
tasks x full transfer, attn/mlp for dyck and set, 2 seeds; merge dyck-attention + set-MLP; Dyck
at 500/1500/4500 steps for HAYSTACK and for the semantic warm-up of prose, code and math, with
attn/mlp at 1500: 24 pre-training runs, 164 diagnostic runs, 36 semantic runs.

Time (measured 2026-11-30 on the shared 2-core AMD EPYC while other users' jobs ran; CPU seconds of
single 1-thread runs, which is about the wall time of one of two jobs on 2 quiet cores): a 1500-step
Dyck pre-training run 75 s; the diagnostics 10-30 s each (addition 10.5, multiplication ~15,
reversed addition ~17, sorting 22, haystack 30: ~94 s for the five); a semantic run 52 s. So the
table sweep is ~1,940 s of pre-training + ~3,130 s of diagnostics + ~1,870 s of semantic runs + ~1.5
min of analysis (each task checkpoint re-scored) = ~6,950 CPU-s: about 58 minutes with --jobs 2
(wall times under the shared load were 2-3x longer; quiet cores may well beat the estimate).
--quick (32 runs) took 1.5-3 min here under load, 30 s on 2 quiet cores. Measured table sweep
(2026-11-30, 2 quiet cores): 224 runs, 106.4 min of training summed, 54 min wall.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root

from flags import ArgumentParser  # noqa: E402 (one-line errors, like train.py)

from experiments.lib import common  # noqa: E402
from data.common import UserError  # noqa: E402

TASKS = ("haystack", "addition", "reversed_addition", "multiplication", "sorting")
SHUFFLED = "-shuffled"


def csv(s):
    return [x.strip() for x in s.split(",") if x.strip() and x.strip() != "none"]


TABLE_ONLY = ("task_steps", "n_layer", "n_head", "n_embd", "context", "batch_size", "lr", "eval_iters", "task_train",
              "full_groups", "size_tasks", "domains", "prose_stage", "code_stage", "math_stage", "sem_kind",
              "additive_steps", "sem_transfers", "sem_steps", "sem_batch", "sem_block", "sem_lr", "sem_evals",
              "sem_eval_iters")
AUTHORS_ONLY = ("records", "eval_records", "pretrain_rows", "pretrain_lr", "dyck_length")


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_sweep_args(p, "out/procedural")
    p.add_argument("--preset", default="authors", choices=("authors", "table"),
                   help="authors (default): the diagnostics at the authors' settings and budget; table: the earlier "
                        "default, the whole table at 1,500 steps x 32, the semantic regimes and the merge")
    g = p.add_argument_group("(a) the diagnostic table (both presets; defaults: authors / table / quick)")
    g.add_argument("--kinds", default=None, help="procedural kinds pre-trained on, comma-separated "
                   "(default dyck / dyck,eca110,set,union,stack / dyck or dyck,set); 'none' for no pre-training rows")
    g.add_argument("--controls", default=None, help="kinds whose shuffled control is a row too (default: every "
                   "kind of --kinds; quick dyck; 'none' for no controls)")
    g.add_argument("--tasks", default=None,
                   help=f"diagnostic tasks (default haystack / all: {','.join(TASKS)}; quick haystack or haystack,sorting)")
    g.add_argument("--transfers", default=None, help="transfer modes: full, attn, mlp (default full / all three; "
                   "quick full or full,attn)")
    g.add_argument("--split-kinds", default=None, help="kinds that also get the attn/mlp rows (default dyck,set; "
                   "quick dyck); 'all' = every kind and control")
    g.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 of every run (default 3 / 2; quick 1)")
    g.add_argument("--pretrain-steps", type=int, default=None, help="procedural pre-training steps (default: the "
                   "authors' yaml per kind, Dyck 501, the sequence kinds 2,501 / 1500; quick 20 / 60)")
    g.add_argument("--task-test", type=int, default=None, help="test records per task (default 4000 / 1000; quick "
                   "1000 / 200)")
    g.add_argument("--data-seed", type=int, default=0, help="procedural and task data (fixed across --seeds)")
    g = p.add_argument_group("the authors' preset")
    g.add_argument("--records", type=int, default=None, help="records seen per diagnostic run (default 10,000,000: "
                   "their 250 x 40,000, i.e. 10,000 steps of 1,000; quick 30,000)")
    g.add_argument("--eval-records", type=int, default=None, help="records between evaluations, the points of the "
                   "accuracy curve (default 500,000: every 500 steps of 1,000; quick 10,000)")
    g.add_argument("--pretrain-rows", type=int, default=None, help="pre-training rows per step (default: the "
                   "authors' yaml, Dyck 32 x 2,048 tokens = 512 rows of --dyck-length 128; quick 32)")
    g.add_argument("--pretrain-lr", type=float, default=None, help="pre-training lr, constant (default 3e-3 for "
                   "the small model; the authors' yaml: 5e-4 for 12_12_768)")
    g.add_argument("--dyck-length", type=int, default=None, help="tokens per Dyck row (default 128; the authors' "
                   "yaml: 2,048); its context must hold the task's (haystack: 100 positions)")
    g = p.add_argument_group("the table preset")
    g.add_argument("--task-steps", type=int, default=None, help="steps per diagnostic run (default 1500; quick 60)")
    g.add_argument("--n-layer", type=int, default=2, help="layers of every model (default 2, the authors' diagnostic model)")
    g.add_argument("--n-head", type=int, default=4, help="attention heads (default 4)")
    g.add_argument("--n-embd", type=int, default=16, help="width d_model (default 16)")
    g.add_argument("--context", type=int, default=130, help="block size of pre-training and task runs (default 130: "
                   "every sequence kind keeps the paper's input length 64)")
    g.add_argument("--batch-size", type=int, default=None,
                   help="rows per step, pre-training and tasks (default 32; quick 16)")
    g.add_argument("--lr", type=float, default=1e-2, help="peak lr of pre-training and task runs (default 1e-2)")
    g.add_argument("--eval-iters", type=int, default=10, help="batches per loss evaluation of pre-training and task "
                   "runs (default 10; task accuracy always covers the whole test split)")
    g.add_argument("--task-train", type=int, default=40_000, help="training records per task (default 40,000, the authors')")
    g.add_argument("--full-groups", default="attn,mlp,norm,pos",
                   help="what 'full' transfer copies (default attn,mlp,norm,pos: the authors' 'everything')")
    g.add_argument("--size-tasks", default=None, help="tasks also trained from the --sem-kind model at every "
                   "--additive-steps size, full transfer (default haystack: does more Dyck pre-training lift it?; 'none')")
    g = p.add_argument_group("(c) weight merging (both presets)")
    g.add_argument("--merges", default=None, help="ATTN_KIND/MLP_KIND pairs, comma-separated: attention (and norms, "
                   "positions) from the first kind's model, MLP from the second's (default none / dyck/set; 'none')")
    g = p.add_argument_group("(b) semantic domains, the table preset: the additive and substitutive regimes")
    g.add_argument("--domains", default=None, help="semantic domains (default prose,code,math; 'none' to skip)")
    g.add_argument("--prose-stage", default="prose", help="the stage of the prose domain (default prose)")
    g.add_argument("--code-stage", default="code", help="the stage of the code domain (default code)")
    g.add_argument("--math-stage", default="math", help="the stage of the math domain (default math)")
    g.add_argument("--sem-kind", default="dyck", help="the procedural warm-up of the semantic runs (default dyck)")
    g.add_argument("--additive-steps", default=None, help="pre-training steps of the additive regime, comma-separated "
                   "(default 500,1500,4500; quick 30,60); --pretrain-steps is the size the substitutive regime and the "
                   "attn/mlp comparison use")
    g.add_argument("--sem-transfers", default=None,
                   help="semantic transfer modes at --pretrain-steps (default full,attn,mlp; full = attn,mlp,norm there)")
    g.add_argument("--sem-steps", type=int, default=None, help="steps of the 100%% semantic budget (default 300; quick 8)")
    g.add_argument("--sem-batch", type=int, default=None, help="semantic batch (default 16; quick 4)")
    g.add_argument("--sem-block", type=int, default=64, help="semantic context (default 64)")
    g.add_argument("--sem-lr", type=float, default=1e-2, help="semantic lr, constant after warm-up (default 1e-2: "
                   "measured 6.84 against 7.05 nats for 3e-3 on prose after 300 steps)")
    g.add_argument("--sem-evals", type=int, default=4, help="evaluations per semantic run, at k/N of its budget (default 4)")
    g.add_argument("--sem-eval-iters", type=int, default=None, help="batches per semantic evaluation (default 20; quick 4)")
    a = p.parse_args(argv)
    other, name = (TABLE_ONLY, "table") if a.preset == "authors" else (AUTHORS_ONLY, "authors")
    given = [k for k in other if getattr(a, k) != p.get_default(k)]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} is a flag of the {name} preset; add --preset {name} or "
                        "leave it out")
    return table_defaults(a) if a.preset == "table" else authors_defaults(a)


def authors_defaults(a):
    """The authors' preset: its defaults filled, the table preset's flags dropped, checked."""
    from experiments.lib import procedural_authors as pa
    q = a.quick
    d = lambda v, full, quick: v if v is not None else (quick if q else full)
    a.kinds = csv(d(a.kinds, "dyck", "dyck"))
    a.controls = csv(d(a.controls, ",".join(a.kinds), "dyck"))
    a.tasks = csv(d(a.tasks, "haystack", "haystack"))
    a.transfers = csv(d(a.transfers, "full", "full"))
    row_names = a.kinds + [k + SHUFFLED for k in a.controls]
    a.split_kinds = ([k for k in ("dyck", "set") if k in row_names] if a.split_kinds is None else
                     row_names if a.split_kinds == "all" else csv(a.split_kinds))
    a.seeds = d(a.seeds, 3, 1)
    a.records = d(a.records, pa.RECORDS, 30_000)
    a.eval_records = d(a.eval_records, 500_000, 10_000)
    a.task_test = d(a.task_test, 4000, 1000)
    a.pretrain_steps = d(a.pretrain_steps, None, 20)
    a.pretrain_rows = d(a.pretrain_rows, None, 32)
    a.dyck_length = d(a.dyck_length, pa.DYCK_LENGTH, pa.DYCK_LENGTH)
    a.merges = [tuple(m.split("/")) for m in csv(d(a.merges, "none", "none"))]
    a.out = Path(a.out or ("out/procedural-quick" if q else "out/procedural"))
    for k in TABLE_ONLY:
        delattr(a, k)
    check_authors(a)
    return a


def table_defaults(a):
    """The table preset (the earlier default): its defaults filled, the authors' flags dropped, checked."""
    q = a.quick
    d = lambda v, full, quick: v if v is not None else (quick if q else full)
    a.kinds = csv(d(a.kinds, "dyck,eca110,set,union,stack", "dyck,set"))
    a.controls = csv(d(a.controls, ",".join(a.kinds), "dyck"))
    a.tasks = csv(d(a.tasks, ",".join(TASKS), "haystack,sorting"))
    a.transfers = csv(d(a.transfers, "full,attn,mlp", "full,attn"))
    row_names = a.kinds + [k + SHUFFLED for k in a.controls]
    if a.split_kinds is None:  # the defaults keep only what the other flags made rows
        a.split_kinds = [k for k in csv("dyck" if q else "dyck,set") if k in row_names]
    else:
        a.split_kinds = row_names if a.split_kinds == "all" else csv(a.split_kinds)
    a.seeds = d(a.seeds, 2, 1)
    a.pretrain_steps = d(a.pretrain_steps, 1500, 60)
    a.task_steps = d(a.task_steps, 1500, 60)
    a.batch_size = d(a.batch_size, 32, 16)
    a.task_test = d(a.task_test, 1000, 200)
    default_merge = "dyck/set" if {"dyck", "set"} <= set(a.kinds) and "full" in a.transfers else "none"
    a.merges = [tuple(m.split("/")) for m in csv(d(a.merges, default_merge, default_merge))]
    a.domains = csv(d(a.domains, "prose,code,math", "prose,code,math"))
    a.additive_steps = sorted({int(x) for x in csv(d(a.additive_steps, "500,1500,4500", "30,60"))} | {a.pretrain_steps})
    a.sem_transfers = csv(d(a.sem_transfers, "full,attn,mlp", "full,attn,mlp"))
    a.sem_steps = d(a.sem_steps, 300, 8)
    a.sem_batch = d(a.sem_batch, 16, 4)
    a.sem_eval_iters = d(a.sem_eval_iters, 20, 4)
    a.size_tasks = [t for t in csv(d(a.size_tasks, "haystack", "haystack")) if t in a.tasks] if "full" in a.transfers else []
    a.out = Path(a.out or ("out/procedural-table-quick" if q else "out/procedural-table"))
    for k in AUTHORS_ONLY:
        delattr(a, k)
    check(a)
    return a


def check_authors(a):
    from data import procedural
    from experiments.lib import procedural_authors as pa
    for k in a.kinds + a.controls + [k for m in a.merges for k in m]:
        if k not in procedural.KINDS:
            raise UserError(f"unknown procedural kind {k!r}; valid kinds: {', '.join(procedural.KINDS)}")
    for t in a.tasks:
        if t not in pa.TASKS:
            raise UserError(f"unknown task {t!r}; valid tasks: {', '.join(pa.TASKS)}")
    check_rows(a)
    for name in ("seeds", "records", "eval_records", "task_test", "pretrain_steps", "pretrain_rows", "dyck_length"):
        v = getattr(a, name)
        if v is not None and v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {v}")
    if a.pretrain_lr is not None and a.pretrain_lr <= 0:
        raise UserError(f"--pretrain-lr must be positive, got {a.pretrain_lr}")
    dyck_rows = [k for k in pa.rows(a)[1:] if k.startswith("dyck")] + [k for m in a.merges for k in m if "dyck" in k]
    if dyck_rows and a.dyck_length % 2:
        raise UserError(f"--dyck-length must be even (a balanced Dyck row), got {a.dyck_length}")
    widest = max(pa.TASKS[t]["context"] for t in a.tasks)
    if dyck_rows and {"full"} & set(a.transfers) and a.dyck_length - 1 < widest:
        raise UserError(f"--dyck-length {a.dyck_length} gives a context of {a.dyck_length - 1} positions, fewer than "
                        f"the {widest} of the task model: full transfer copies the positions; give at least {widest + 1}")


def check_rows(a):
    """What both presets check of the table's rows, transfer modes and merges."""
    for t in a.transfers:
        if t not in ("full", "attn", "mlp"):
            raise UserError(f"unknown transfer mode {t!r}; choose from full, attn, mlp")
    for m in a.merges:
        if len(m) != 2:
            raise UserError(f"--merges takes ATTN_KIND/MLP_KIND pairs, e.g. dyck/set, not {'/'.join(m)!r}")
    if a.merges and "full" not in a.transfers:
        raise UserError("--merges are trained with full transfer: keep 'full' in --transfers or give --merges none")
    missing = [k for m in a.merges for k in m if k not in a.kinds]
    if missing:
        raise UserError(f"--merges uses kinds that are not pre-trained in --kinds: {', '.join(sorted(set(missing)))}")
    for k in a.split_kinds:
        if k not in a.kinds and k not in [c + SHUFFLED for c in a.controls]:
            raise UserError(f"--split-kinds {k!r} is not a row (--kinds, or a control of --controls)")


def check(a):
    from data import procedural
    for k in a.kinds + a.controls + [a.sem_kind] + [k for m in a.merges for k in m]:
        if k not in procedural.KINDS:
            raise UserError(f"unknown procedural kind {k!r}; valid kinds: {', '.join(procedural.KINDS)}")
    for t in a.tasks:
        if t not in TASKS:
            raise UserError(f"unknown task {t!r}; valid tasks: {', '.join(TASKS)}")
    for t in a.sem_transfers:
        if t not in ("full", "attn", "mlp"):
            raise UserError(f"unknown transfer mode {t!r}; choose from full, attn, mlp")
    check_rows(a)
    for d in a.domains:
        if d not in ("prose", "code", "math"):
            raise UserError(f"unknown domain {d!r}; choose from prose, code, math (their stages: --prose-stage ...)")
    if a.sem_steps % a.sem_evals:
        raise UserError(f"--sem-steps {a.sem_steps} must be a multiple of --sem-evals {a.sem_evals}")
    for name, v in (("seeds", a.seeds), ("pretrain-steps", a.pretrain_steps), ("task-steps", a.task_steps),
                    ("sem-steps", a.sem_steps), ("batch-size", a.batch_size), ("task-test", a.task_test),
                    ("task-train", a.task_train)):
        if v <= 0:
            raise UserError(f"--{name} must be positive, got {v}")


def main(argv=None):
    from experiments.lib import procedural_report as report
    from experiments.lib import procedural_authors_report as authors_report
    from experiments.lib import procedural_table as table
    a = parse_args(argv)
    t0 = time.time()
    if a.report_only and report.stored_only(a.out):  # a copy of a report without its run folders
        print(f"no run folders in {a.out}: rebuilding from its report.json (the flags it was made with)")
        preset = json.loads((a.out / "report.json").read_text())["settings"].get("preset", "table")
        text = (authors_report if preset == "authors" else report).rebuild(a.out)
    elif a.preset == "authors":
        text = authors_main(a, argv, authors_report)
    else:
        a.out.mkdir(parents=True, exist_ok=True)
        if a.report_only:
            provenance = common.kept_provenance(a.out)
        else:
            prov = common.Provenance(a.out, argv)
            provenance = prov.finish(runs_trained=table.run_all(a))
        pre, base, warm = table.all_runs(a)
        runs = pre + base + warm
        text = report.render(a, report.collect(a, runs), len(runs), a.out, provenance)
    print("\n" + text)
    print(f"\nwrote {a.out / 'report.md'}, report.json and the PNGs ({time.time() - t0:.0f} s in all)")


def authors_main(a, argv, authors_report):
    """The authors' preset: train what is not finished, then report.md/json and the PNGs."""
    from experiments.lib import procedural_authors as pa
    a.out.mkdir(parents=True, exist_ok=True)
    if a.report_only:
        provenance = common.kept_provenance(a.out)
    else:
        provenance = common.Provenance(a.out, argv).finish(runs_trained=pa.run_all(a))
    pre, base, warm = pa.plan(a)
    runs = pre + base + warm
    return authors_report.render(a, authors_report.collect(a, runs), len(runs), a.out, provenance)


if __name__ == "__main__":
    common.main_guard(main)
