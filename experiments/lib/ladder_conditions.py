"""
The ladder experiment's conditions and prose budget, shared by experiments/ladder.py (which plans
and trains the runs) and experiments/lib/ladder_report.py (which reads them): what each condition
pre-trains on, which baseline it is compared with, and how many prose steps an epoch is.
arXiv 2604.21265 ("Listen and Chant Before You Read"), the controls of its section on experiments.
"""

from data.common import UserError

# condition -> (pre-training run key or None, prose run key, --transfer for the prose run, budget kind)
CONDITIONS = {
    "random": (None, "random", None, "epochs"),
    "music": ("musicL", "musicL", None, "epochs"),
    "ladder": ("ladder", "ladder", None, "epochs"),
    "poetry": ("poetry", "poetry", None, "epochs"),
    "synthetic": ("synth-ladder", "synth-ladder", None, "epochs"),
    "compute-matched": (None, "matched", None, "matched"),
    "volume-small": ("musicS", "musicS", None, "epochs"),
    "volume-large": ("musicL", "musicL", None, "epochs"),
    "volume-small-synthetic": ("synthS", "synthS", None, "epochs"),
    "volume-large-synthetic": ("synthL", "synthL", None, "epochs"),
    "ablation-attn": ("musicL", "musicL-attn", "attn", "epochs"),
    "ablation-mlp": ("musicL", "musicL-mlp", "mlp", "epochs"),
    "ablation-norm": ("musicL", "musicL-norm", "norm", "epochs"),
    "ablation-embed": ("ladder", "ladder-fresh-embed", "attn,mlp,norm,pos", "epochs"),
    "long-random": (None, "long-random", None, "long"),
    "long-ladder": ("ladder", "long-ladder", None, "long"),
}
BASELINE = {"long-random": "long-random", "long-ladder": "long-random"}  # else "random"
APPROX_TRAIN_TOKENS = {"wikitext103": 124_000_000, "wikitext2": 2_400_000, "wiki-leads": 990_088}


def baseline(condition):
    """The condition a result is compared with: long-random for the long-run pair, else random."""
    return BASELINE.get(condition, "random")


def is_long(condition):
    return CONDITIONS[condition][3] == "long"


def steps_per_epoch(a):
    """(prose steps per epoch, the unique prose tokens U or None for the whole corpus)."""
    per_step = a.batch_size * a.block_size
    if a.prose_tokens:
        spe = max(1, round(a.prose_tokens / per_step))
        return spe, spe * per_step
    if getattr(a, "_prose_train_tokens", None) is None:
        a._prose_train_tokens = prose_train_tokens(a)
    return -(-a._prose_train_tokens // per_step), None


def prose_train_tokens(a):
    """Training tokens of the whole prose corpus: loaded (prepared first if need be, as train.py would) when
    training; --plan only approximates it (WikiText-103 is a download), unless the stage is text:PATH."""
    if getattr(a, "plan", False) and a.prose_stage == "prose":
        n = APPROX_TRAIN_TOKENS.get(a.prose, APPROX_TRAIN_TOKENS["wiki-leads"])
        print(f"note: --plan assumes ~{n:,} training tokens in {a.prose} (the whole corpus is used)")
        return n
    import data
    try:
        return len(data.load(a.prose_stage, prose=a.prose, block_size=a.block_size).train)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"prose stage {a.prose_stage!r}: {e}") from None


def ladder_steps(a):
    """Optimizer steps of the whole ladder (music + poetry + prose): the compute-matched budget."""
    return a.music_steps + a.poetry_steps + a.prose_epochs * steps_per_epoch(a)[0]
