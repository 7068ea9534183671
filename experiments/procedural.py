"""
Procedural pre-training: the diagnostic table, the additive and substitutive regimes, weight merging.
Jiang, Shinnick et al., arXiv 2601.21725: a warm-up on algorithmic data helps (Dyck lifts HAYSTACK 10% -> 98%).

The paper's experiments (its diagnostic table, semantic regimes and merges) at CPU scale, every run through train.run:
    python experiments/procedural.py --quick          # a few minutes: a smoke version of every part
    python experiments/procedural.py                  # the default sweep (sized below)
    python experiments/procedural.py --report-only    # rebuild report.md/json and PNGs from finished runs
    python experiments/procedural.py --report-only --out experiments/results/procedural   # from report.json alone

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

Default sweep: kinds dyck, eca110, set, union, stack and their shuffled controls (+ none) x all 5
tasks x full transfer, attn/mlp for dyck and set, 2 seeds; merge dyck-attention + set-MLP; Dyck
at 500/1500/4500 steps for HAYSTACK and for the semantic warm-up of prose, code and math, with
attn/mlp at 1500: 24 pre-training runs, 164 diagnostic runs, 36 semantic runs.

Time (measured 2026-11-30 on the shared 2-core AMD EPYC while other users' jobs ran; CPU seconds of
single 1-thread runs, which is about the wall time of one of two jobs on 2 quiet cores): a 1500-step
Dyck pre-training run 75 s; the diagnostics 10-30 s each (addition 10.5, multiplication ~15,
reversed addition ~17, sorting 22, haystack 30: ~94 s for the five); a semantic run 52 s. So the
default is ~1,940 s of pre-training + ~3,130 s of diagnostics + ~1,870 s of semantic runs + ~1.5
min of analysis (each task checkpoint re-scored) = ~6,950 CPU-s: about 58 minutes with --jobs 2
(wall times under the shared load were 2-3x longer; quiet cores may well beat the estimate).
--quick (32 runs) took 1.5-3 min here under load, 30 s on 2 quiet cores. Measured default
(2026-11-30, 2 quiet cores): 224 runs, 106.4 min of training summed, 54 min wall.
"""

import argparse
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


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_sweep_args(p, "out/procedural")
    g = p.add_argument_group("(a) the diagnostic table")
    g.add_argument("--kinds", default=None, help="procedural kinds pre-trained on, comma-separated "
                   "(default dyck,eca110,set,union,stack; quick dyck,set); 'none' for no pre-training rows")
    g.add_argument("--controls", default=None, help="kinds whose shuffled control is a row too (default: every "
                   "kind of --kinds; quick dyck; 'none' for no controls)")
    g.add_argument("--tasks", default=None,
                   help=f"diagnostic tasks (default all: {','.join(TASKS)}; quick haystack,sorting)")
    g.add_argument("--transfers", default=None, help="transfer modes: full, attn, mlp (default all three; quick full,attn)")
    g.add_argument("--split-kinds", default=None, help="kinds that also get the attn/mlp rows (default dyck,set; "
                   "quick dyck); 'all' = every kind and control")
    g.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 of every run (default 2; quick 1)")
    g.add_argument("--pretrain-steps", type=int, default=None, help="procedural pre-training steps (default 1500; quick 60)")
    g.add_argument("--task-steps", type=int, default=None, help="steps per diagnostic run (default 1500; quick 60)")
    g.add_argument("--n-layer", type=int, default=2, help="layers of every model (default 2, the authors' diagnostic model)")
    g.add_argument("--n-head", type=int, default=4, help="attention heads (default 4)")
    g.add_argument("--n-embd", type=int, default=16, help="width d_model (default 16)")
    g.add_argument("--context", type=int, default=130, help="block size of pre-training and task runs (default 130: "
                   "every sequence kind keeps the paper's input length 64)")
    g.add_argument("--batch-size", type=int, default=None,
                   help="rows per step, pre-training and tasks (default 32; quick 16)")
    g.add_argument("--lr", type=float, default=1e-2, help="peak lr of pre-training and task runs (default 1e-2)")
    g.add_argument("--task-test", type=int, default=None, help="test records per task (default 1000; quick 200)")
    g.add_argument("--eval-iters", type=int, default=10, help="batches per loss evaluation of pre-training and task "
                   "runs (default 10; task accuracy always covers the whole test split)")
    g.add_argument("--task-train", type=int, default=40_000, help="training records per task (default 40,000, the authors')")
    g.add_argument("--full-groups", default="attn,mlp,norm,pos",
                   help="what 'full' transfer copies (default attn,mlp,norm,pos: the authors' 'everything')")
    g.add_argument("--data-seed", type=int, default=0, help="procedural and task data (fixed across --seeds)")
    g.add_argument("--size-tasks", default=None, help="tasks also trained from the --sem-kind model at every "
                   "--additive-steps size, full transfer (default haystack: does more Dyck pre-training lift it?; 'none')")
    g = p.add_argument_group("(c) weight merging")
    g.add_argument("--merges", default=None, help="ATTN_KIND/MLP_KIND pairs, comma-separated: attention (and norms, "
                   "positions) from the first kind's model, MLP from the second's (default dyck/set; 'none')")
    g = p.add_argument_group("(b) semantic domains: the additive and substitutive regimes")
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
    a.out = Path(a.out or ("out/procedural-quick" if q else "out/procedural"))
    check(a)
    return a


def check(a):
    from data import procedural
    for k in a.kinds + a.controls + [a.sem_kind] + [k for m in a.merges for k in m]:
        if k not in procedural.KINDS:
            raise UserError(f"unknown procedural kind {k!r}; valid kinds: {', '.join(procedural.KINDS)}")
    for t in a.tasks:
        if t not in TASKS:
            raise UserError(f"unknown task {t!r}; valid tasks: {', '.join(TASKS)}")
    for t in a.transfers + a.sem_transfers:
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


# ---------------------------------------------------------------------------------------------
# the runs: names, folders and train.py flags

def Run(name, folder, argv, meta):
    """A common.Run whose flags are strings (train.parse_args takes nothing else)."""
    return common.Run(name, folder, [str(x) for x in argv], meta)


def model_flags(a):
    return ["--n-layer", a.n_layer, "--n-head", a.n_head, "--n-embd", a.n_embd]


def rows(a):
    """The diagnostic table's rows: none, each kind, each control."""
    return ["none"] + a.kinds + [k + SHUFFLED for k in a.controls]


def pre_name(row, steps, seed):
    return f"pre-{row}-P{steps}-s{seed}"


def pre_ckpt(a, row, steps, seed):
    from checkpoint import stage_file
    return stage_file(a.out / "runs" / pre_name(row, steps, seed), 0, f"procedural:{row}")


def merge_label(m):
    return f"attn-{m[0]}+mlp-{m[1]}"


def merge_ckpt(a, m, seed):
    return a.out / "merges" / f"{merge_label(m)}-P{a.pretrain_steps}-s{seed}.pt"


def pretrain_runs(a):
    """One procedural run per (row, size, seed): every row of the table at --pretrain-steps, the
    semantic kind also at each --additive-steps size."""
    wanted = [(r, a.pretrain_steps) for r in rows(a)[1:]]
    if a.domains or a.size_tasks:
        wanted += [(a.sem_kind, s) for s in a.additive_steps]
    runs = []
    for seed in range(a.seeds):
        for row, steps in dict.fromkeys(wanted):
            argv = ["--stages", f"procedural:{row}", *model_flags(a), "--block-size", a.context,
                    "--batch-size", a.batch_size, "--iters", steps, "--lr", a.lr,
                    "--procedural-sequences", max(1000, steps * a.batch_size), "--data-seed", a.data_seed,
                    "--seed", seed, "--eval-interval", steps, "--eval-iters", a.eval_iters,
                    "--log-interval", max(1, steps // 20)]
            runs.append(Run(pre_name(row, steps, seed), a.out / "runs" / pre_name(row, steps, seed), argv,
                            dict(part="pretrain", row=row, steps=steps, seed=seed)))
    return runs


def transfer_flags(a, mode):
    """The authors' transfer modes (downstream/utils.py): 'everything' copies all but the token
    embedding, whose rows become the mean of the pre-trained rows; attn / ffn copy that group only."""
    if mode == "full":
        return ["--transfer", a.full_groups, "--embed-init", "mean"]
    return ["--transfer", mode, "--embed-init", "random"]


def task_runs(a):
    """(baselines, transferred): every diagnostic run. Row 'none' has one run per task and seed;
    every other row one per transfer mode that applies to it; each merge is used with full
    transfer; the --size-tasks also start from the --sem-kind model of every --additive-steps size."""
    base, warm = [], []
    for seed in range(a.seeds):
        for task in a.tasks:
            def run(row, mode, init, steps):
                name = f"task-{task}-{row}-{mode}-s{seed}"
                argv = ["--stages", f"task:{task}", *model_flags(a), "--block-size", a.context,
                        "--batch-size", a.batch_size, "--iters", a.task_steps, "--lr", a.lr,
                        "--task-test", a.task_test, "--task-train", a.task_train, "--data-seed", a.data_seed,
                        "--seed", seed,
                        "--eval-interval", a.task_steps, "--eval-iters", a.eval_iters,
                        "--log-interval", max(1, a.task_steps // 20)]
                if init:
                    argv += ["--init-from", init, *transfer_flags(a, mode)]
                meta = dict(part="task", task=task, row=row, transfer=mode, seed=seed, steps=steps)
                return Run(name, a.out / "runs" / name, argv, meta)
            base.append(run("none", "none", None, 0))
            for row in rows(a)[1:]:
                for mode in a.transfers:
                    if mode == "full" or row in a.split_kinds:
                        warm.append(run(row, mode, pre_ckpt(a, row, a.pretrain_steps, seed), a.pretrain_steps))
            for m in a.merges:
                warm.append(run(merge_label(m), "full", merge_ckpt(a, m, seed), a.pretrain_steps))
            if task in a.size_tasks:
                for steps in a.additive_steps:
                    if steps != a.pretrain_steps or a.sem_kind not in a.kinds:  # else the table's row is it
                        warm.append(run(f"{a.sem_kind}-P{steps}", "full", pre_ckpt(a, a.sem_kind, steps, seed), steps))
    return base, warm


def sem_stage(a, domain):
    return {"prose": a.prose_stage, "code": a.code_stage, "math": a.math_stage}[domain]


def semantic_runs(a):
    """(baselines, warmed): per domain and seed, the baseline; the semantic kind's warm-up at every
    additive size with full transfer, and at --pretrain-steps with each --sem-transfers mode."""
    base, warm = [], []
    unique = a.sem_steps * a.sem_batch * a.sem_block
    for seed in range(a.seeds):
        for domain in a.domains:
            def run(cond, init, groups, **meta):
                name = f"sem-{domain}-{cond}-s{seed}"
                argv = ["--stages", sem_stage(a, domain), *model_flags(a), "--block-size", a.sem_block,
                        "--batch-size", a.sem_batch, "--iters", a.sem_steps, "--unique-tokens", unique,
                        "--lr", a.sem_lr, "--schedule", "constant", "--seed", seed,
                        "--eval-interval", a.sem_steps // a.sem_evals, "--eval-iters", a.sem_eval_iters,
                        "--log-interval", max(1, a.sem_steps // 20)]
                if init:
                    argv += ["--init-from", init, "--transfer", groups, "--embed-init", "random"]
                return Run(name, a.out / "runs" / name, argv, dict(part="semantic", domain=domain, seed=seed, **meta))
            base.append(run("base", None, None, kind="none", steps=0, transfer="none"))
            conds = {(s, "full") for s in a.additive_steps} | {(a.pretrain_steps, t) for t in a.sem_transfers}
            for steps, mode in sorted(conds):
                groups = "attn,mlp,norm" if mode == "full" else mode
                warm.append(run(f"{a.sem_kind}-P{steps}-{mode}", pre_ckpt(a, a.sem_kind, steps, seed), groups,
                                kind=a.sem_kind, steps=steps, transfer=mode))
    return base, warm


def all_runs(a):
    tb, tw = task_runs(a)
    sb, sw = semantic_runs(a)
    return pretrain_runs(a), sb + tb, sw + tw  # the longest runs first in each wave


def make_merges(a):
    """The merged checkpoints of (c): attention, norms and positions from the first kind's model
    (the base), MLP from the second's (transfer.merge_checkpoints), one per seed."""
    import transfer
    from checkpoint import save_checkpoint
    for m in a.merges:
        for seed in range(a.seeds):
            path = merge_ckpt(a, m, seed)
            sources = [pre_ckpt(a, k, a.pretrain_steps, seed) for k in m]
            if not path.exists() and all(p.exists() for p in sources):
                path.parent.mkdir(parents=True, exist_ok=True)
                ck = transfer.merge_checkpoints({"attn": sources[0], "mlp": sources[1]})
                save_checkpoint(path, ck)
                print(f"merged {path.name}: attention, norms, positions from {m[0]}, MLP from {m[1]}")


def run_all(a):
    pre, base, warm = all_runs(a)
    print(f"{len(pre)} pre-training runs, {len(base)} baselines, {len(warm)} runs from a pre-trained or merged model")
    # wave 1: the longest runs first, so the two workers finish together
    trained = len(common.run_sweep(sorted(pre, key=lambda r: -r.meta["steps"]) + base, jobs=a.jobs,
                                   threads=a.threads))
    make_merges(a)
    init = lambda r: Path(r.argv[r.argv.index("--init-from") + 1])
    missing = [r.name for r in warm if not init(r).exists()]
    if missing:  # a pre-training run diverged (its diverged.json says why): its dependants cannot run
        print(f"skipped {len(missing)} run(s) whose pre-trained checkpoint does not exist: {', '.join(missing)}")
    trained += len(common.run_sweep([r for r in warm if init(r).exists()], jobs=a.jobs, threads=a.threads))  # wave 2
    return trained


def main(argv=None):
    from experiments.lib import procedural_report as report
    a = parse_args(argv)
    t0 = time.time()
    if a.report_only and report.stored_only(a.out):  # a copy of a report without its run folders
        print(f"no run folders in {a.out}: rebuilding from its report.json (the flags it was made with)")
        text = report.rebuild(a.out)
    else:
        a.out.mkdir(parents=True, exist_ok=True)
        if a.report_only:
            provenance = common.kept_provenance(a.out)
        else:
            prov = common.Provenance(a.out, argv)
            provenance = prov.finish(runs_trained=run_all(a))
        pre, base, warm = all_runs(a)
        runs = pre + base + warm
        text = report.render(a, report.collect(a, runs), len(runs), a.out, provenance)
    print("\n" + text)
    print(f"\nwrote {a.out / 'report.md'}, report.json and the PNGs ({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    common.main_guard(main)
