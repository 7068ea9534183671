"""
The ProRes experiment's conditions: which train.py runs a scan and a measurement are, their
names and their flags (experiments/prores.py trains them; lib/prores_report.py reads them).

    run_name("pre", True, 48, 2e-3, 200, 0)  -> "pre-prores-L48-lr0.002-i200-s0"
    prores_T(a, 48, 200)                     -> 2.0833 (the deepest layer is on at step 100)
    init_of(a, "deepnorm", False)            -> "deepnet" (the authors' DeepNorm baseline)
"""

from experiments.lib.common import Run


def fmt_lr(lr):
    return f"{lr:g}"


def prores_T(a, depth, iters):
    """Steps per layer of ProRes' linear ramp alpha(l, t) = min(t / (T l), 1): the deepest layer
    is fully on at step T L = ramp_frac x iters (T may be fractional; --prores-T fixes it).
    The authors' --prores_warmup_steps is that T L (their README, "warmup length T x L")."""
    if a.prores_T:
        return a.prores_T
    T = round(a.ramp_frac * iters / depth, 4)
    return int(T) if T == int(T) else T


def init_of(a, norm, pr):
    """The weight init of one arm. DeepNorm's baseline gets DeepNet's init (`--init deepnet`:
    Xavier-normal, gain (8L)^(-1/4) on v, attention-out and both MLP matrices, 1 on q and k);
    DeepNorm + ProRes gets the experiment's init (`--init plain` by default), as the authors:
    their layers are marked for the Xavier init only when NORM_TYPE is `deeppost`
    (peft_pretraining/modeling_llama.py:161-164 and 193-198 of dandingsky/ProRes), so
    `deeppost_prores` draws every Linear from N(0, initializer_range = 0.02) (_init_weights,
    modeling_llama.py:539-554). Every other arm: the experiment's --init."""
    return "deepnet" if norm == "deepnorm" and not pr else a.init


def run_name(norm, pr, depth, lr, iters, seed):
    return f"{norm}-{'prores' if pr else 'base'}-L{depth}-lr{fmt_lr(lr)}-i{iters}-s{seed}"


def train_argv(a, norm, pr, depth, lr, seed, iters):
    """train.py flags of one run (run_sweep adds --out, --resume, --threads)."""
    argv = ["--stages", a.stage, "--n-layer", depth, "--n-head", a.n_head, "--n-embd", a.n_embd,
            "--block-size", a.block_size, "--batch-size", a.batch_size, "--iters", iters, "--lr", lr,
            "--min-lr", a.min_lr, "--warmup-iters", max(1, round(a.warmup_frac * iters)),
            "--schedule", a.schedule, "--decay-frac", a.decay_frac, "--init", init_of(a, norm, pr), "--norm", norm,
            "--seed", seed, "--log-interval", 1, "--eval-interval", max(1, iters // a.evals),
            "--eval-iters", a.eval_iters, "--no-progress"]
    if pr:
        argv += ["--prores", "--prores-T", str(prores_T(a, depth, iters)), "--prores-schedule", a.prores_schedule]
    return [str(x) for x in argv] + a.train_args


def make_run(a, phase, norm, pr, depth, lr, seed, iters):
    name = run_name(norm, pr, depth, lr, iters, seed)
    return Run(name, a.out / "runs" / name, train_argv(a, norm, pr, depth, lr, seed, iters),
               dict(phase=phase, norm=norm, prores=pr, depth=depth, lr=lr, seed=seed, iters=iters,
                    T=prores_T(a, depth, iters) if pr else None, init=init_of(a, norm, pr)))


def scan_runs(a):
    """Phase 1: baselines, seed 0, deepest first (so the longest runs do not finish the sweep alone)."""
    return [make_run(a, "scan", norm, False, d, lr, 0, a.scan_iters)
            for d in reversed(a.scan_depths) for lr in a.scan_lrs for norm in a.scan_norms]


def measure_runs(a, lr, depths):
    """Phase 2: seed-major (a partial sweep covers every cell early), deepest first within a seed."""
    return [make_run(a, "measure", norm, pr, d, lr, seed, a.iters)
            for seed in range(a.seeds) for d in reversed(depths) for norm in a.norms for pr in (False, True)]
