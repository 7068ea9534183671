"""The ProRes experiment's runs: names (pre-prores-L48-lr0.002-i200-s0), flags and order (prores.py trains them)."""

from experiments.lib.common import Run

ARMS = {"base": False, "prores": True}  # a preset's `arms`: which of a seed's two runs it trains


def arm_flags(a):
    """The `--prores` flag of each arm a preset trains (reports made before `arms` existed trained both)."""
    return [ARMS[x] for x in getattr(a, "arms", ARMS)]


def warmup_iters(a, iters):
    return max(1, round(a.warmup_frac * iters))


def prores_T(a, depth, iters):
    """Steps per layer of ProRes' linear ramp alpha(l, t) = min(t / (T l), 1): the deepest layer is fully on
    at step T L = ramp_frac x iters (the authors' --prores_warmup_steps is that T L); prores_T fixes it."""
    if a.prores_T:
        return a.prores_T
    T = round(a.ramp_frac * iters / depth, 4)
    return int(T) if T == int(T) else T


def init_of(a, norm, pr):
    """DeepNorm's baseline takes DeepNet's init, DeepNorm + ProRes the experiment's, as the authors': only NORM_TYPE
    `deeppost`, not `deeppost_prores`, takes Xavier (dandingsky/ProRes modeling_llama.py:161-164, 193-198, 539-554)."""
    return "deepnet" if norm == "deepnorm" and not pr else a.init


def train_argv(a, norm, pr, depth, lr, seed, iters):
    """train.py flags of one run (run_sweep adds --out, --resume, --threads)."""
    argv = ["--stages", a.stage, "--n-layer", depth, "--n-head", a.n_head, "--n-embd", a.n_embd,
            "--block-size", a.block_size, "--batch-size", a.batch_size, "--iters", iters, "--lr", lr,
            "--min-lr", a.min_lr, "--warmup-iters", warmup_iters(a, iters), "--schedule", a.schedule,
            "--decay-frac", a.decay_frac, "--init", init_of(a, norm, pr), "--norm", norm, "--seed", seed,
            "--log-interval", 1, "--eval-interval", max(1, iters // a.evals), "--eval-iters", a.eval_iters, "--no-progress"]
    if pr:
        argv += ["--prores", "--prores-T", str(prores_T(a, depth, iters)), "--prores-schedule", a.prores_schedule]
    return [str(x) for x in argv] + a.train_args


def make_run(a, phase, norm, pr, depth, lr, seed, iters):
    name = f"{norm}-{'prores' if pr else 'base'}-L{depth}-lr{lr:g}-i{iters}-s{seed}"
    return Run(name, a.out / "runs" / name, train_argv(a, norm, pr, depth, lr, seed, iters),
               dict(phase=phase, norm=norm, prores=pr, depth=depth, lr=lr, seed=seed, iters=iters,
                    T=prores_T(a, depth, iters) if pr else None, init=init_of(a, norm, pr)))


def scan_runs(a):
    """The scan: baselines, seed 0, deepest first (so the longest runs do not finish the sweep alone)."""
    return [make_run(a, "scan", norm, False, d, lr, 0, a.scan_iters)
            for d in sorted(a.scan_depths, reverse=True) for lr in a.scan_lrs for norm in a.scan_norms]


def measure_runs(a, lr, depths):
    """The measurement: seed-major (a partial sweep covers every cell early), deepest first within a seed."""
    return [make_run(a, "measure", norm, pr, d, lr, seed, a.iters)
            for seed in range(a.seeds) for d in sorted(depths, reverse=True) for norm in a.norms for pr in arm_flags(a)]
