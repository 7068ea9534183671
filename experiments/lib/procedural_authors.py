"""
The train.py runs of experiments/procedural.py: the procedural diagnostics as the authors run them.
Jiang, Shinnick et al., arXiv 2601.21725; their code, github.com/zlshinnick/procedural-pretraining:
downstream/algorithmic_tasks/experiment_stream.py and task_*.py (a diagnostic run: TASKS, TASK_OPT),
procedural_pretraining/configs/<kind>.yaml (a pre-training run: YAML), downstream/utils.py (the transfer).

    pre, base, warm = plan(a)   # the pre-training runs, the baselines, the runs from a pre-trained model
    run_all(a)                  # pre-training, then the merges, then every diagnostic; returns runs trained
"""

from pathlib import Path

from experiments.lib import common

# task -> their model and batch (each task file's lines 1-16); multiplication alone uses a larger model
# (task_multiplication.py:2-5, 15); sorting has no task file of theirs
TASKS = {"haystack": dict(n_layer=2, n_head=4, n_embd=16, context=100, batch=1000),
         "addition": dict(n_layer=2, n_head=4, n_embd=16, context=40, batch=1000),
         "reversed_addition": dict(n_layer=2, n_head=4, n_embd=16, context=40, batch=1000),
         "multiplication": dict(n_layer=4, n_head=8, n_embd=512, context=40, batch=64),
         "sorting": dict(n_layer=2, n_head=4, n_embd=16, context=64, batch=1000)}
RECORDS = 250 * 40_000   # experiment_stream.py:283, train_steps * train_size records seen
# AdamW (:25-26), 500 linear warm-up steps then cosine to 0 (:27, :33), untied head (:39), no dropout (:44)
TASK_OPT = dict(lr=1e-3, warmup=500, weight_decay=0.001)
# kind -> their yaml: steps, rows per step, lr, weight decay (Dyck: rows of `length` tokens); eca110 has no
# yaml (their code has no such kind): the sequence kinds' budget
YAML = {**{k: dict(steps=501, rows=32, lr=5e-4, weight_decay=0.1, length=2048) for k in ("dyck", "dyck_shuffle")},
        **{k: dict(steps=2501, rows=64, lr=5e-4, weight_decay=0.1)
           for k in ("identity", "reverse", "sort", "set", "union", "delete", "stack", "eca110")}}
SMALL_LR = 3e-3          # ours for the d = 16 models (DIFFERENCES)
DYCK_LENGTH = 128        # ours, likewise
SHUFFLED = "-shuffled"

DIFFERENCES = (
    "Pre-training lr 3e-3 instead of their 5e-4 for the d = 16 models (--pretrain-lr; multiplication's d = 512 "
    "keeps 5e-4): their yaml is for 12_12_768. On Dyck (501 constant-lr steps, 512 rows of 128 tokens; unigram "
    "loss 4.85 nats, the process's entropy ~2.8) 3e-3 reaches 3.80 and 1e-2 3.76; with 32 rows 5e-4 reaches "
    "4.26: the small model would learn little beyond how often a bracket opens.",
    "Dyck rows of 128 tokens instead of 2,048 (--dyck-length), keeping their 501 steps and 32.8M tokens (512 rows "
    "a step): the diagnostic model has 100 positions and every distance a task can use occurs in 128 tokens; a "
    "2,048-token row costs 3x the time per token on a CPU.",
    "No dropout in pre-training (theirs 0.1): with dropout PyTorch's CPU attention leaves its fused kernel "
    "(6.6x slower at 128 tokens).",
    "AdamW decays only the matrices of attention, MLP and an untied head; theirs every weight but biases and norms "
    "(every weight in pre-training, procedural_pretraining/dyck.py:321).",
    "Pre-training batches are drawn with replacement from the steps x rows sequences; theirs is one shuffled epoch "
    "(procedural_data/dyck.py:179-185).",
    "The training stream is drawn from each step's seed (a resumed run sees the same records; every condition at "
    "one seed the same batches) and the test set from --data-seed alone; theirs draws both from the run's seed "
    "(experiment_stream.py:61, 77, 186-191).",
    "The curve is evaluated every --eval-records records (theirs every 50 steps) on the exact-answer accuracy, "
    "which on HAYSTACK is their token-level accuracy; the token-level accuracy of the other tasks is measured on "
    "the final weights.",
)


def arch(task):
    t = TASKS[task]
    return f"{t['n_layer']}_{t['n_head']}_{t['n_embd']}"


def base_kind(row):
    return row[:-len(SHUFFLED)] if row.endswith(SHUFFLED) else row


def pretrain_plan(a, row, task="haystack"):
    """(steps, rows per step, lr, block size) of a row's pre-training for a task's model."""
    from data import procedural
    kind = base_kind(row)
    y = YAML[kind]
    steps = a.pretrain_steps or y["steps"]
    rows = a.pretrain_rows or (y["rows"] * y["length"] // a.dyck_length if "length" in y else y["rows"])
    block = (a.dyck_length if kind.startswith("dyck") else procedural.seq_len(kind)) - 1
    return steps, rows, a.pretrain_lr or (SMALL_LR if TASKS[task]["n_embd"] <= 16 else y["lr"]), block


def model_flags(task):
    t = TASKS[task]
    return ["--n-layer", t["n_layer"], "--n-head", t["n_head"], "--n-embd", t["n_embd"]]


def Run(name, folder, argv, meta):
    return common.Run(name, folder, [str(x) for x in argv], meta)


def pre_name(row, task, seed):
    return f"pre-{row}-{arch(task)}-s{seed}"


def pre_ckpt(a, row, task, seed):
    from checkpoint import stage_file
    return stage_file(a.out / "runs" / pre_name(row, task, seed), 0, f"procedural:{row}")


def rows(a):
    """The table's rows: none, each kind, each control."""
    return ["none"] + a.kinds + [k + SHUFFLED for k in a.controls]


def pretrain_argv(a, row, task, seed):
    steps, n_rows, lr, block = pretrain_plan(a, row, task)
    return ["--stages", f"procedural:{row}", *model_flags(task), "--block-size", block, "--batch-size", n_rows,
            "--iters", steps, "--lr", lr, "--schedule", "constant", "--warmup-iters", 0, "--dropout", 0,
            "--weight-decay", YAML[base_kind(row)]["weight_decay"], "--beta2", 0.999,
            "--procedural-sequences", steps * n_rows, "--data-seed", a.data_seed, "--seed", seed,
            "--eval-interval", steps, "--eval-iters", 4, "--eval-splits", "val", "--log-interval", max(1, steps // 20)]


def task_steps(a, task):
    return max(1, -(-a.records // TASKS[task]["batch"]))


def task_argv(a, task, seed):
    t, steps = TASKS[task], task_steps(a, task)
    return ["--stages", f"stream:{task}", *model_flags(task), "--block-size", t["context"], "--no-tie",
            "--dropout", 0, "--batch-size", t["batch"], "--iters", steps, "--lr", TASK_OPT["lr"], "--min-lr", 0,
            "--warmup-iters", TASK_OPT["warmup"], "--schedule", "cosine", "--weight-decay", TASK_OPT["weight_decay"],
            "--beta2", 0.999, "--task-test", a.task_test, "--data-seed", a.data_seed, "--seed", seed,
            "--eval-interval", max(1, a.eval_records // t["batch"]), "--eval-iters", 4, "--eval-splits", "val",
            "--log-interval", max(1, min(100, steps // 10))]


def transfer_flags(mode):
    """Their transfer modes (downstream/utils.py): everything (= full: all but the embeddings and the head)
    with every embedding row the pre-trained rows' mean; attn / ffn (= mlp) alone with fresh embeddings."""
    return ["--transfer", mode, "--embed-init", "mean" if mode == "full" else "random"]


def merge_label(m):
    return f"attn-{m[0]}+mlp-{m[1]}"


def merge_ckpt(a, m, task, seed):
    return a.out / "merges" / f"{merge_label(m)}-{arch(task)}-s{seed}.pt"


def cells(a):
    """Every (task, row, transfer): none once, each row in full transfer, the --split-kinds rows also
    attention-only and MLP-only, each merge in full transfer."""
    out = []
    for task in a.tasks:
        out.append((task, "none", "none"))
        for row in rows(a)[1:]:
            out += [(task, row, mode) for mode in a.transfers if mode == "full" or row in a.split_kinds]
        out += [(task, merge_label(m), "full") for m in a.merges]
    return out


def plan(a):
    """(pre-training runs, baselines, runs from a pre-trained or merged model): every train.py run. A
    pre-training run is shared by every task of its architecture."""
    pre, base, warm = {}, [], []
    for seed in range(a.seeds):
        for task, row, mode in cells(a):
            name = f"{task}-{row}-s{seed}" if mode in ("none", "full") else f"{task}-{row}-{mode}-s{seed}"
            argv = task_argv(a, task, seed)
            meta = dict(part="task", task=task, condition=row, transfer=mode, seed=seed, batch=TASKS[task]["batch"])
            if row == "none":
                base.append(Run(name, a.out / "runs" / name, argv, meta))
                continue
            merge = [m for m in a.merges if merge_label(m) == row]
            init = merge_ckpt(a, merge[0], task, seed) if merge else pre_ckpt(a, row, task, seed)
            for r in (merge[0] if merge else (row,)):
                n = pre_name(r, task, seed)
                pre.setdefault(n, Run(n, a.out / "runs" / n, pretrain_argv(a, r, task, seed),
                                      dict(part="pretrain", condition=r, arch=arch(task), seed=seed,
                                           steps=pretrain_plan(a, r, task)[0], task=task)))
            warm.append(Run(name, a.out / "runs" / name, argv + ["--init-from", init, *transfer_flags(mode)],
                            dict(meta, init=str(init))))
    return list(pre.values()), base, warm


def make_merges(a):
    """Attention, norms and positions from the first kind's model, MLP from the second's
    (transfer.merge_checkpoints), one per task architecture and seed."""
    import transfer
    from checkpoint import save_checkpoint
    for seed in range(a.seeds):
        for m in a.merges:
            for task in a.tasks:
                path, sources = merge_ckpt(a, m, task, seed), [pre_ckpt(a, k, task, seed) for k in m]
                if not path.exists() and all(Path(p).exists() for p in sources):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    save_checkpoint(path, transfer.merge_checkpoints({"attn": sources[0], "mlp": sources[1]}))


def run_all(a):
    """The pre-training runs; the merges; then every diagnostic run, seed by seed (a sweep stopped part-way
    leaves whole seeds). Returns the runs trained."""
    pre, base, warm = plan(a)
    trained = len(common.run_sweep(pre, jobs=a.jobs, threads=a.threads))
    make_merges(a)
    ready = [r for r in warm if Path(r.meta["init"]).exists()]
    if len(ready) < len(warm):  # a pre-training run diverged (its diverged.json says why)
        print("skipped (no pre-trained checkpoint): " + ", ".join(r.name for r in warm if r not in ready))
    diagnostics = sorted(base + ready, key=lambda r: r.meta["seed"])
    return trained + len(common.run_sweep(diagnostics, jobs=a.jobs, threads=a.threads))
