"""The train.py runs of experiments/procedural.py: the procedural diagnostics as the authors run them.
Jiang, Shinnick et al., arXiv 2601.21725; their code, github.com/zlshinnick/procedural-pretraining:
downstream/algorithmic_tasks/experiment_stream.py and task_*.py (a diagnostic run: TASKS, TASK_OPT),
procedural_pretraining/configs/<kind>.yaml (a pre-training run: YAML), downstream/utils.py (the transfer)."""

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
# kind -> their yaml: steps, rows per step, lr, weight decay; eca110, no kind of theirs, takes the others'
YAML = {k: dict(steps=2501, rows=64, lr=5e-4, weight_decay=0.1)
        for k in ("identity", "reverse", "sort", "set", "union", "delete", "stack", "eca110")}
# Pre-training (`ruled`): until `patience` evaluations of `every` steps on `val_rows` rows without beating the best val
# loss by `delta`, or `cap` steps; theirs (DIFFERENCES): Dyck as procedural_pretraining/dyck.py:471-520 (k = 16,
# 128-token rows), the sequence kinds as algorithmic.py's CLI (:436-474), batch 64, lr 5e-5, decay 0.01
DYCK = dict(rows=64, lr=5e-5, weight_decay=0.01, every=250, patience=8, delta=0.001, cap=20_000, pool=500_000,
            val_rows=1280)
SMALL_LR = 3e-3          # ours for the d = 16 models (DIFFERENCES)
# the d = 16 sequence kinds: algorithmic.py's defaults (2_4_16 :404-406; V 21, L 20 :425, :433), not set.yaml's
SMALL_SEQ = dict(V=21, L=20)
DYCK_LENGTH = 128        # their script's for the diagnostic model
SHUFFLED = "-shuffled"

# each difference with the factor of the crossed design (reference/cross.py) that varies it, jointly with the others
CROSSED = {"start": "tested by its start factor (their Dyck model against ours)",
           "fine-tuning": "tested by its fine-tuning factor (their pipeline against ours)", "both": "tested by both",
           "same": "not tested: the cross runs both sides alike here"}
DIFFERENCES = (
    ("Pre-training lr 3e-3 for the d = 16 models (--pretrain-lr; theirs 5e-5 in dyck.py and algorithmic.py, 5e-4 in "
     "their yaml, which multiplication's d = 512 keeps): at 5e-5 dyck.py runs up to 1,000,000 steps. Constant, no "
     "warm-up, as dyck.py; algorithmic.py warms up 1,000 steps, then cosine to 0 at 20,000.", "start"),
    ("Pre-training on the d = 16 model stops by a rule on the validation loss (8 evaluations of 250 steps without "
     "beating the best by 0.001 nats, or 20,000 steps), the quantity compared with the data's entropy, and transfers "
     "its last checkpoint; theirs keeps the checkpoint of best validation accuracy (algorithmic.py: stopping after 50 "
     "checks of 10 steps without a better one). One pre-trained model per kind (seed 0) serves every diagnostic "
     "seed.", "start"),
    ("No dropout in pre-training (theirs 0.1): with dropout PyTorch's CPU attention leaves its fused kernel "
     "(6.6x slower at 128 tokens).", "start"),
    ("AdamW decays only the matrices of attention, MLP and an untied head; theirs every weight but biases and norms "
     "(every weight in pre-training, procedural_pretraining/dyck.py:321).", "both"),
    ("Pre-training batches are drawn with replacement from a pool of rows (Dyck: 500,000); theirs draws 64,000 fresh "
     "rows every 1,000 steps (procedural_pretraining/dyck.py:374-381).", "start"),
    ("The training stream is drawn from each step's seed (a resumed run sees the same records; every condition at "
     "one seed the same batches) and the test set from --data-seed alone; theirs draws both from the run's seed "
     "(experiment_stream.py:61, 77, 186-191).", "fine-tuning"),
    ("The curve is evaluated every --eval-records records (theirs every 50 steps) on the exact-answer accuracy, "
     "which on HAYSTACK is their token-level accuracy; the token-level accuracy of the other tasks is measured on "
     "the final weights.", "same"),
    ("The exact GELU (erf) in the MLP; their HF GPT-2 its tanh approximation ('gelu_new'): a tiny model converted to "
     "theirs gives logits ~2e-4 apart, equal with 'gelu' (tests/test_reference_procedural.py).", "both"),
)


def arch(task):
    return "{n_layer}_{n_head}_{n_embd}".format(**TASKS[task])


def base_kind(row):
    return row[:-len(SHUFFLED)] if row.endswith(SHUFFLED) else row


def ruled(row, task):
    """Pre-trained by the stopping rule (DYCK's protocol): Dyck for any model, every kind for the d = 16 model."""
    return base_kind(row).startswith("dyck") or TASKS[task]["n_embd"] <= 16


def pretrain_plan(a, row, task="haystack"):
    """(steps, rows per step, lr, block size) of a row's pre-training for a task's model (ruled: steps a cap)."""
    from data import procedural
    kind, small = base_kind(row), TASKS[task]["n_embd"] <= 16
    y = DYCK if ruled(row, task) else YAML[kind]
    steps = a.pretrain_steps or (DYCK["cap"] if ruled(row, task) else y["steps"])
    block = procedural.seq_len(kind, **data_options(a, row, task)) - 1
    return steps, a.pretrain_rows or y["rows"], a.pretrain_lr or (SMALL_LR if small else y["lr"]), block


def data_options(a, row, task):
    """The generator's options of a row's pre-training data for a task's model (none: data.procedural.DEFAULTS)."""
    from data.procedural import KINDS
    small = KINDS.get(base_kind(row)) == "seq" and TASKS[task]["n_embd"] <= 16
    return {"length": a.dyck_length} if base_kind(row).startswith("dyck") else dict(SMALL_SEQ) if small else {}


def entropy(a, row, task):
    """The entropy per loss token of a pre-training row's data (data.procedural_entropy: exact, or sampled), or None."""
    from data.procedural_entropy import entropy
    return entropy(base_kind(row), row.endswith(SHUFFLED), **data_options(a, row, task))


def model_flags(task):
    t = TASKS[task]
    return ["--n-layer", t["n_layer"], "--n-head", t["n_head"], "--n-embd", t["n_embd"]]


def Run(a, name, argv, meta):
    return common.Run(name, a.out / "runs" / name, [str(x) for x in argv], meta)


def pre_name(row, task, seed):
    return f"pre-{row}-{arch(task)}-s{seed}"


def pre_ckpt(a, row, task, seed):
    from checkpoint import stage_file
    return stage_file(a.out / "runs" / pre_name(row, task, seed), 0, f"procedural:{row}")


def rows(a):  # the table's: none, each kind, each control
    return ["none"] + a.kinds + [k + SHUFFLED for k in a.controls]


def pretrain_argv(a, row, task, seed):
    steps, n_rows, lr, block = pretrain_plan(a, row, task)
    y, rule = (DYCK, True) if ruled(row, task) else (YAML[base_kind(row)], False)
    every = min(DYCK["every"], steps) if rule else steps
    stop = ["--patience", DYCK["patience"], "--min-delta", DYCK["delta"]] if rule and every < steps else []
    pool = min(steps * n_rows, DYCK["pool"]) if rule else steps * n_rows
    vocab = data_options(a, row, task).get("V")  # the sequence kinds' V on the d = 16 model
    return ["--stages", f"procedural:{row}", *model_flags(task), "--block-size", block, "--batch-size", n_rows,
            *(["--procedural-vocab", vocab] if vocab else []), "--iters", steps, "--lr", lr, "--schedule", "constant",
            "--warmup-iters", 0, "--dropout", 0, "--weight-decay", y["weight_decay"], "--beta2", 0.999,
            "--procedural-sequences", pool, "--data-seed", a.data_seed, "--seed", seed, "--eval-interval", every, *stop,
            "--eval-iters", max(1, DYCK["val_rows"] // n_rows) if rule else 4, "--eval-splits", "val",
            "--log-interval", max(1, min(every, steps // 20))]


def stop_reason(argv, stopped_at, steps):
    """How a pre-training run ended: by its stopping rule (--patience, --min-delta), or at its steps."""
    return (f"stopping rule, at step {stopped_at:,}" if stopped_at else f"cap: {steps:,} steps"
            + (" (the stopping rule had not fired)" if "--patience" in argv else " (a fixed budget)"))


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


def transfer_flags(mode, short=False):
    """Their transfer modes (downstream/utils.py): everything (= full: all but the embeddings and the head)
    with every embedding row the pre-trained rows' mean; attn / ffn (= mlp) alone with fresh embeddings. A
    pre-trained context shorter than the task's (short) leaves the positions fresh (theirs: utils.py:247-264)."""
    groups = "attn,mlp,norm" if mode == "full" and short else mode
    return ["--transfer", groups, "--embed-init", "mean" if mode == "full" else "random"]


def merge_label(m):
    return f"attn-{m[0]}+mlp-{m[1]}"


def merge_kinds(row):
    """merge_label's inverse, 'attn-dyck+mlp-set' -> ('dyck', 'set') ('attn-dyck': ('dyck',)); None for another row."""
    return tuple(row[len("attn-"):].split("+mlp-")) if row.startswith("attn-") else None


def merge_ckpt(a, m, task, seed):
    return a.out / "merges" / f"{merge_label(m)}-{arch(task)}-s{seed}.pt"


def parse_cells(spec):
    """--cells, 'haystack:none,sorting:dyck:attn,...', as (task, row, transfer): full by default, none for 'none'."""
    from data.common import UserError
    out = []
    for c in [c.strip() for c in spec.split(",") if c.strip()]:
        if not 2 <= len(parts := c.split(":")) <= 3:
            raise UserError(f"--cells: {c!r} is not TASK:ROW[:TRANSFER], e.g. haystack:dyck:attn")
        out.append((parts[0], parts[1], parts[2] if len(parts) == 3 else "none" if parts[1] == "none" else "full"))
    return out


def plan(a):
    """(pre-training runs, baselines, runs from a pre-trained or merged model): every train.py run. A
    pre-training run is shared by every task of its architecture and, past --pretrain-seeds, by the seeds."""
    pre, base, warm = {}, [], []
    for seed in range(a.seeds):
        ps = seed % a.pretrain_seeds
        for task, row, mode in a.cells:
            name = f"{task}-{row}-s{seed}" if mode in ("none", "full") else f"{task}-{row}-{mode}-s{seed}"
            argv = task_argv(a, task, seed)
            meta = dict(part="task", task=task, condition=row, transfer=mode, seed=seed, batch=TASKS[task]["batch"])
            if row == "none":
                base.append(Run(a, name, argv, meta))
                continue
            merge = [m for m in a.merges if merge_label(m) == row]
            init = merge_ckpt(a, merge[0], task, ps) if merge else pre_ckpt(a, row, task, ps)
            kinds = merge[0] if merge else (row,)
            for r in kinds:
                pre.setdefault(n := pre_name(r, task, ps), Run(a, n, pretrain_argv(a, r, task, ps), dict(
                    part="pretrain", condition=r, arch=arch(task), seed=ps, steps=pretrain_plan(a, r, task)[0], task=task)))
            short = pretrain_plan(a, kinds[0], task)[3] < TASKS[task]["context"]  # a merge: positions from kinds[0]
            warm.append(Run(a, name, argv + ["--init-from", init, *transfer_flags(mode, short)],
                            dict(meta, init=str(init), pre=[pre_name(r, task, ps) for r in kinds])))
    return list(pre.values()), base, warm


def reused(a, runs):
    """{name: record} of the runs --reuse DIR's report.json holds finished with the same flags (and pre-training)."""
    if not getattr(a, "reuse", None):
        return {}
    old = {r["name"]: r for r in common.reused_report(a.reuse)["runs"] if not r.get("diverged")}
    def flags(argv):  # --init-from's folder and file name, not the OUT it lies in
        i = argv.index("--init-from") + 1 if "--init-from" in argv else None
        return argv if i is None else [*argv[:i], "/".join(Path(argv[i]).parts[-2:]), *argv[i + 1:]]
    same = {r.name for r in runs if r.name in old and flags(old[r.name]["argv"]) == flags(r.argv)}
    return {r.name: old[r.name] for r in runs if r.name in same and all(n in same for n in r.meta.get("pre", []))}


def kept_pretrained(a, pre, keep=True):
    """Copy each pre-training run's model (~50 KB) to OUT/pretrained/<name>.pt; keep=False (--reuse
    DIR): back from DIR/pretrained/ to its run folder, so the diagnostics left start from the very same model."""
    for r in pre:
        run, kept = Path(pre_ckpt(a, r.meta["condition"], r.meta["task"], r.meta["seed"])), \
            (a.out if keep else Path(a.reuse)) / "pretrained" / f"{r.name}.pt"
        src, dest = (run, kept) if keep else (kept, run)
        if src.exists() and (keep or not dest.exists()):
            dest.parent.mkdir(parents=True, exist_ok=True)
            common.atomic_write_bytes(dest, src.read_bytes())


def make_merges(a):
    """Attention, norms and positions from the first kind's model, MLP from the second's (transfer.merge_checkpoints),
    one per task architecture and pre-training seed; made again when a source model is newer (trained again)."""
    import itertools
    import transfer
    from checkpoint import save_checkpoint
    for seed, m, task in itertools.product(range(min(a.seeds, a.pretrain_seeds)), a.merges, a.tasks):
        path, sources = merge_ckpt(a, m, task, seed), [pre_ckpt(a, k, task, seed) for k in m]
        if all(Path(p).exists() for p in sources) and not (path.exists() and path.stat().st_mtime >= max(
                Path(p).stat().st_mtime for p in sources)):
            path.parent.mkdir(parents=True, exist_ok=True)
            save_checkpoint(path, transfer.merge_checkpoints({"attn": sources[0], "mlp": sources[1]}))


def run_all(a, sweep):
    """The pre-training runs a diagnostic still needs, and the baselines (to keep the cores busy); the merges;
    the other diagnostics not reused, seed by seed (a sweep stopped part-way leaves whole seeds), by sweep(runs)."""
    pre, base, warm = plan(a)
    done = reused(a, pre + base + warm)
    warm = [r for r in warm if r.name not in done]
    kept_pretrained(a, [r for r in pre if r.name in done], keep=False)
    need = {n for r in warm for n in r.meta["pre"]}
    first = [r for r in pre if r.name not in done or r.name in need and not pre_ckpt(a, r.meta["condition"], r.meta[
        "task"], r.meta["seed"]).exists()] + [r for r in base if r.name not in done]
    sweep(first)
    make_merges(a)
    ready = [r for r in warm if Path(r.meta["init"]).exists()]
    if len(ready) < len(warm):  # a pre-training run diverged (its diverged.json says why)
        print("skipped (no pre-trained checkpoint): " + ", ".join(r.name for r in warm if r not in ready))
    sweep(ready)
