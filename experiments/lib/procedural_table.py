"""
The train.py runs of experiments/procedural.py's table preset (the earlier default: the whole
diagnostic table at 1,500 steps x 32, the semantic regimes, the merge; that script's docstring
says the choices). Jiang, Shinnick et al., arXiv 2601.21725.

    pre, base, warm = all_runs(a)    # the planned runs (common.Run), in three lists
    run_all(a)                       # train the unfinished ones in two waves; returns how many
"""

from pathlib import Path

from experiments.lib import common

SHUFFLED = "-shuffled"


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
